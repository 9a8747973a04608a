"""Moved to :mod:`ssm_plugins.openmmlab_tiny` (run options, not data); this name stays importable for a release."""
from ..openmmlab_tiny import *  # noqa: F401,F403
