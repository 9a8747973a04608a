"""Keeps torch.compile's on-disk caches from replaying graphs traced with an older ssm_plugins.

Inductor's FX-graph cache and AOTAutograd's cache (both on by default, shared by every process of a user) key a
graph by the graph's own code and inputs. Our ops appear in it as calls, so what the graph holds below those calls
-- the fake kernels' shapes and strides, the autograd formulas traced into the backward -- is not in the key: after
an upgrade (or an edit of a checkout) a warm cache would run a graph traced with the old ones, failing on a stride
assertion or, worse, running the old backward. torch's own answer is ``torch.compiler.config.cache_key_tag``
("a tag to be included in the cache key ... to break caches"): it gets a digest of the sources those parts come from.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch

_PREFIX = "ssm_plugins.ops:"


def sources_digest(root: Path | str = Path(__file__).resolve().parent) -> str:
    """A digest of the Python sources under ``root`` (default: ssm_plugins/ops, where every fake kernel, autograd
    formula and reference used by a backward lives), by relative path and content."""
    root = Path(root)
    digest = hashlib.sha1()
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def tag_compile_caches(digest: str | None = None) -> str:
    """Add ``ssm_plugins.ops:<digest>`` to torch.compile's cache key tag, keeping a tag the user set (a reload or a
    second call replaces our part instead of adding another). Returns the tag."""
    config = torch.compiler.config
    ours = _PREFIX + (digest or sources_digest())
    parts = [p for p in config.cache_key_tag.split(";") if p and not p.startswith(_PREFIX)]
    config.cache_key_tag = ";".join([*parts, ours])
    return config.cache_key_tag
