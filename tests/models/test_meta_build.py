"""Every registered model builds under ``with torch.device('meta')`` (timm's low-memory construction, issue #13).

Under a meta default device every factory call without an explicit device makes a meta tensor, so
``__init__`` may not read tensor values (``.item()`` / ``.tolist()`` of a ``torch.linspace`` of drop-path
rates, ``bincount(...).tolist()`` of a Myo tree's levels): those are built on the CPU explicitly. Per model:
the reduced configuration of the contract suite (tests/models/test_contract.py FAMILIES) built on the meta
device has the CPU build's parameters and buffers (names, shapes, dtypes), and the registered full size builds
with every parameter on the meta device and the same parameters as timm's own ``create_model(device='meta')``.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import timm
import torch

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.ops import myo as myo_ops
from ssm_plugins.ops import myo_quadtree, myo_tree
from test_contract import MODELS, REGISTERED, family, sweep


def _layout(model):
    return ({n: (tuple(p.shape), p.dtype) for n, p in model.named_parameters()},
            {n: (tuple(b.shape), b.dtype) for n, b in model.named_buffers()})


def test_registry_is_covered():
    assert len(MODELS) >= 50 and {timm.models.model_entrypoint(n).__module__ for n in MODELS} >= {
        "ssm_plugins.models.vim2", "ssm_plugins.models.svim2", "ssm_plugins.models.essm", "ssm_plugins.models.myo",
        "ssm_plugins.models.mega", "ssm_plugins.models.ssm2d"}


@pytest.mark.parametrize("name", sweep(MODELS))
def test_meta_build_matches_cpu_build(name):
    small = family(name).small
    with torch.device("meta"):
        meta = timm.create_model(name, **small)
    assert all(p.is_meta for p in meta.parameters())
    torch.manual_seed(0)
    cpu = timm.create_model(name, **small)
    assert not any(p.is_meta for p in cpu.parameters())
    meta_params, meta_buffers = _layout(meta)
    cpu_params, cpu_buffers = _layout(cpu)
    assert meta_params == cpu_params and len(cpu_params) > 0
    assert meta_buffers == cpu_buffers
    assert sum(p.numel() for p in meta.parameters()) == sum(p.numel() for p in cpu.parameters())


@pytest.mark.parametrize("name", sweep(MODELS))
def test_full_size_meta_build(name):
    with torch.device("meta"):
        model = timm.create_model(name)
    assert all(p.is_meta for p in model.parameters()) and sum(p.numel() for p in model.parameters()) > 0
    assert _layout(model)[0] == _layout(timm.create_model(name, device="meta"))[0]


def test_tree_builders_under_a_meta_default_device():
    """The Myo tree index structures are integer metadata: built on the CPU (or the device asked for), with
    real level sizes, whatever the default device."""
    expected = [myo_tree(10, 3), myo_quadtree(5, 3)]
    myo_ops._kary_tree.cache_clear()  # build afresh, not from the cache
    myo_ops._quadtree.cache_clear()
    with torch.device("meta"):
        built = [myo_tree(10, 3), myo_quadtree(5, 3), myo_tree(10, 3, device="meta")]
    for tree, reference in zip(built, expected + expected[:1]):
        assert tree.level_sizes == reference.level_sizes
    for tree, reference in zip(built[:2], expected):
        assert tree.parent.device.type == "cpu" and torch.equal(tree.parent, reference.parent)
        assert torch.equal(tree.level, reference.level)
    assert built[2].parent.is_meta and built[2].level.is_meta


# ---- checkpoints written before load after -----------------------------------------------------------------------

LAYOUTS = Path(__file__).with_name("state_dict_layouts.json")


def state_dict_digest(model) -> str:
    """sha256 of the model's state_dict layout (every key with its shape and dtype, sorted): equal digests mean a
    checkpoint of one loads into the other with strict=True."""
    rows = sorted(f"{key} {tuple(value.shape)} {value.dtype}" for key, value in model.state_dict().items())
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def test_every_model_has_a_recorded_state_dict_layout():
    assert sorted(json.loads(LAYOUTS.read_text())) == REGISTERED


@pytest.mark.parametrize("name", sweep(REGISTERED))
def test_state_dict_layout_is_the_recorded_one(name):
    """The registered full-size model has the state_dict keys, shapes and dtypes recorded in state_dict_layouts.json
    (written by ``python tests/models/test_meta_build.py``, checked against the code before the refactor of
    2026-12-02): a checkpoint written by an earlier version loads. A model that changes its layout on purpose
    records the new digest and says so in its README (old checkpoints then need a checkpoint filter)."""
    with torch.device("meta"):
        model = timm.create_model(name)
    assert state_dict_digest(model) == json.loads(LAYOUTS.read_text())[name]


if __name__ == "__main__":  # record the layouts of the models as they are now
    with torch.device("meta"):
        layouts = {name: state_dict_digest(timm.create_model(name)) for name in REGISTERED}
    LAYOUTS.write_text(json.dumps(layouts, indent=1, sort_keys=True) + "\n")
    print(f"{LAYOUTS}: {len(layouts)} models")
