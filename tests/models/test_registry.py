"""Every model ssm_plugins registers in timm: found by timm, and never pointing at a download."""
import timm

import ssm_plugins  # noqa: F401


def _ours():
    return [n for n in timm.list_models() if timm.models.model_entrypoint(n).__module__.startswith("ssm_plugins.")]


def test_every_family_registers_models():
    modules = {timm.models.model_entrypoint(n).__module__ for n in _ours()}
    assert {"ssm_plugins.models.ssm2d", "ssm_plugins.models.essm", "ssm_plugins.models.myo"} <= modules, modules


def test_no_pretrained_cfg_points_at_a_download():
    for name in _ours():
        cfg = timm.models.get_pretrained_cfg(name)
        assert not cfg.url and cfg.hf_hub_id is None, f"{name} must not point at a download"
