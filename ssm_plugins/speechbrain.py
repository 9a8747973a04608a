"""SpeechBrain adapter: Dual_Path_Model intra/inter blocks and sequence classifiers built from ssm_plugins layers.

Recipes reference it from their hparams (``!new:ssm_plugins.speechbrain.<Block>``). It is the only module of the
package that imports speechbrain; ``import ssm_plugins`` never does. The blocks arrive with the SpeechBrain issue.
"""
import speechbrain  # noqa: F401  (fail here, with the toolbox's own error, when SpeechBrain is missing)

__all__: list = []
