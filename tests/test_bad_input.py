"""Bad input over the public surface, one table (issue #13): ops, layers, timm models, the OpenMMLab and SpeechBrain
adapters and the recipes' data readers. Each row must raise an error whose message names the argument (or file)
and what was expected; never a silent wrong answer.

Decisions per kind of input:
* wrong rank / channels / dtype, mismatched B/C groups, an empty sequence or image: an error naming the argument
  the caller passed. (An empty *batch* is not in the table: ops return empty outputs for it, as torch ops do.)
* H/W not divisible by the patch: ViM2/ViQS and the ViT-based 2-D SSM models raise (their token grids are fixed by
  the patch); the hierarchical eSSM/Myo models and the OpenMMLab backbones accept any size by padding, as timm's
  CNNs and mmdet's backbones do (``ACCEPTED`` below checks the output sizes).
* NaN input: propagated, never masked or replaced: the outputs that depend on the NaN are NaN and the others
  (other batch items; for the causal scan, earlier steps) stay finite (``NAN`` below). Rejecting NaN would cost a
  device synchronisation in every call; a NaN loss is then visible to the training loop.
* data: a missing folder, a corrupt audio file, a corrupt annotation file: an error naming the file or folder.

Rows that fail today in code owned elsewhere are ``xfail(strict=True)`` with the fix in the reason.
"""
from __future__ import annotations

import functools
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
G = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=G)


def rand(*shape):
    return torch.rand(*shape, generator=G)


def xfail(reason):
    return pytest.mark.xfail(strict=True, reason=reason)


# ---- ops ----------------------------------------------------------------------------------------------------------

def _scan(L=6, **change):
    from ssm_plugins.ops import selective_scan

    b, d, n = 2, 4, 3
    args = dict(u=randn(b, d, L), delta=rand(b, d, L), A=-rand(d, n), B=randn(b, n, L), C=randn(b, n, L))
    args.update(change)
    return selective_scan(**args)


def _qs(L=6, **change):
    from ssm_plugins.ops import qs_mix

    b, d, n = 2, 4, 3
    args = dict(x=randn(b, d, L), dt=rand(b, d, L), A=-rand(d, n), B=randn(b, n, L), C=randn(b, n, L),
                dt_rev=rand(b, d, L), A_rev=-rand(d, n), B_rev=randn(b, n, L), C_rev=randn(b, n, L),
                gamma=rand(b, d, L))
    args.update(change)
    return qs_mix(**args)


def _essm(u=None, L=6):
    from ssm_plugins.ops import essm_conv

    heads, n, h = 2, 3, 2
    u = randn(2, heads * h, L) if u is None else u
    return essm_conv(u, -rand(heads, n), randn(heads, n), torch.zeros(heads, n), randn(heads, n, h),
                     randn(heads, h, n))


def _myo(u=None, nodes=7):
    from ssm_plugins.ops import myo_solve, myo_tree

    u = randn(2, nodes, 3) if u is None else u
    return myo_solve(u, rand(2, 7, 3) * 0.5, myo_tree(4, 2))


# An empty sequence is not bad input for the scans: L = 0 is well defined (an empty output, a zero last state, zero
# gradients; tests/ops/test_selective_scan.py::test_empty_shapes), so they are not rows here; eSSM's FFT length and
# Myo's tree need L >= 1 and raise.
OPS = [
    ("selective_scan-rank", lambda: _scan(u=randn(4, 6)), r"^u must have shape \(batch, dim, L\)"),
    ("selective_scan-dtype", lambda: _scan(u=randn(2, 4, 6).int()), r"^u must be float32, float64, float16 or bf"),
    ("selective_scan-groups", lambda: _scan(B=randn(2, 2, 3, 6), C=randn(2, 4, 3, 6)),
     r"^B and C must have the same number of groups, got 2 and 4"),
    ("selective_scan-groups-divide", lambda: _scan(B=randn(2, 3, 3, 6), C=randn(2, 3, 3, 6)),
     r"^B: groups \(3\) must divide dim \(4\)"),
    ("qs_mix-rank", lambda: _qs(x=randn(4, 6)), r"^x must have shape"),
    ("qs_mix-dtype", lambda: _qs(x=randn(2, 4, 6).long()), r"^x must be float32"),
    ("essm_conv-rank", lambda: _essm(randn(4, 6)), r"^u must have shape \(batch, H, L\)"),
    ("essm_conv-dtype", lambda: _essm(randn(2, 4, 6).long()), r"^u must be float32"),
    ("essm_conv-empty", lambda: _essm(L=0), r"^u must have shape \(batch, H, L\) with L >= 1"),
    ("essm_conv-heads", lambda: _essm(randn(2, 5, 6)), r"^B must have shape \(S, n, h\) .*S\*h = H = 5"),
    ("myo_solve-rank", lambda: _myo(randn(7, 3)), r"^u must have shape \(batch, N, channels\)"),
    ("myo_solve-dtype", lambda: _myo(randn(2, 7, 3).long()), r"^u "),
    ("myo_solve-empty", lambda: _myo(randn(2, 0, 3)), r"^u must hold at least one node"),
    ("myo_solve-nodes", lambda: _myo(randn(2, 6, 3)), r"^u must have the tree's 7 nodes"),
    ("ssm2d_kernel-empty", lambda: __import__("ssm_plugins.ops", fromlist=["x"]).ssm2d_kernel(
        rand(2, 4, 3), rand(2, 4, 3), rand(2, 4, 3), 0, 4), r"^height must be a positive int, got 0"),
    ("fft_conv2d-dtype", lambda: __import__("ssm_plugins.ops", fromlist=["x"]).fft_conv2d(
        randn(1, 2, 4, 4).long(), randn(2, 3, 3)), r"^x must be float32"),
    ("fft_conv2d-empty", lambda: __import__("ssm_plugins.ops", fromlist=["x"]).fft_conv2d(
        randn(1, 2, 0, 4), randn(2, 3, 3)), r"^x and kernel must have non-empty grids"),
]


# ---- layers -------------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def layer(name):
    from ssm_plugins import layers

    torch.manual_seed(0)
    return {"SSM2D": lambda: layers.SSM2D(8, d_state=4, n_ssm=2),
            "ESSM": lambda: layers.ESSM(8, d_state=4),
            "MambaMixerBlock": lambda: layers.MambaMixerBlock(16, num_tokens=6, d_state=4),
            "S4ND": lambda: layers.S4ND(8, d_state=4, n_ssm=2)}[name]().eval()


LAYERS = [
    ("SSM2D-rank", lambda: layer("SSM2D")(randn(8, 5, 5)), r"^x must have shape \(B, dim, H, W\) with dim=8"),
    ("SSM2D-channels", lambda: layer("SSM2D")(randn(2, 6, 5, 5)), r"^x must have shape \(B, dim, H, W\) with dim=8"),
    ("SSM2D-dtype", lambda: layer("SSM2D")(torch.ones(2, 8, 5, 5, dtype=torch.long)), r"^x must be float32"),
    ("SSM2D-empty", lambda: layer("SSM2D")(randn(2, 8, 0, 5)), r"^x must have shape .*H, W >= 1"),
    ("ESSM-rank", lambda: layer("ESSM")(randn(6, 8)), r"^x must have shape \(B, L, H\) with H=8"),
    ("ESSM-channels", lambda: layer("ESSM")(randn(2, 6, 5)), r"^x must have shape \(B, L, H\) with H=8"),
    ("ESSM-empty", lambda: layer("ESSM")(randn(2, 0, 8)), r"^x must have shape \(B, L, H\).*L >= 1"),
    ("MambaMixerBlock-rank", lambda: layer("MambaMixerBlock")(randn(6, 16)),
     r"^x must have shape \(batch, L, dim=16\)"),
    ("MambaMixerBlock-tokens", lambda: layer("MambaMixerBlock")(randn(2, 5, 16)), r"L = 6 tokens = num_tokens"),
    ("MambaMixerBlock-empty", lambda: layer("MambaMixerBlock")(randn(2, 0, 16)),
     r"^x must have shape \(batch, L, dim=16\) with L >= 1"),
    ("S4ND-rank", lambda: layer("S4ND")(randn(5, 5, 8)), r"^x must have shape \(B, H, W, dim\) with dim=8"),
]


# ---- timm models --------------------------------------------------------------------------------------------------

TINY_MODELS = {  # one model per family, at a test size
    "vim2_t": dict(img_size=32, embed_dim=32, depth=2, n_interactions=1, spm_inplanes=16),
    "vit_cifar_patch4_32_ssm2d": {},
    "essm_2d_tiny": {},
    "myonet_tiny": {},
}


@functools.lru_cache(maxsize=None)
def model(name):
    import timm

    import ssm_plugins  # noqa: F401  (registers the models)

    torch.manual_seed(0)
    return timm.create_model(name, num_classes=3, **TINY_MODELS[name]).eval()


def _forward(name, x):
    with torch.no_grad():
        return model(name)(x)


MODELS = [
    ("vim2-rank", lambda: _forward("vim2_t", randn(3, 32, 32)), r"^img must have shape \(batch, 3, H, W\)"),
    ("vim2-channels", lambda: _forward("vim2_t", randn(2, 1, 32, 32)), r"^img must have shape \(batch, 3, H, W\)"),
    ("vim2-patch", lambda: _forward("vim2_t", randn(2, 3, 30, 30)), r"^img height and width must be positive multiples of 32"),
    ("vim2-empty", lambda: _forward("vim2_t", randn(2, 3, 0, 32)), r"^img height and width must be positive mult"),
    ("vim2-dtype", lambda: _forward("vim2_t", torch.zeros(2, 3, 32, 32, dtype=torch.uint8)),
     r"^img must be a floating-point"),
    ("vit_ssm2d-patch", lambda: _forward("vit_cifar_patch4_32_ssm2d", randn(2, 3, 30, 30)),
     r"input size \(30, 30\) must be a positive multiple of the patch size \(4, 4\)"),
    ("essm_2d-rank", lambda: _forward("essm_2d_tiny", randn(3, 32, 32)), r"^x must have shape \(B, 3, H, W\)"),
    ("essm_2d-empty", lambda: _forward("essm_2d_tiny", randn(2, 3, 0, 32)), r"^x must have shape \(B, 3, H, W\)"),
    ("essm_2d-dtype", lambda: _forward("essm_2d_tiny", torch.zeros(2, 3, 32, 32, dtype=torch.uint8)),
     r"^x must be a float"),
    ("myonet-channels", lambda: _forward("myonet_tiny", randn(2, 1, 32, 32)), r"^x must have shape \(B, 3, H, W\)"),
    ("myonet-empty", lambda: _forward("myonet_tiny", randn(2, 3, 0, 32)), r"^input size \(0, 32\) must be at least"),
    ("myonet-dtype", lambda: _forward("myonet_tiny", torch.zeros(2, 3, 32, 32, dtype=torch.uint8)),
     r"^x must be a floating-point"),
]


# ---- adapters -----------------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def backbone():
    from ssm_plugins.openmmlab import ViM2

    torch.manual_seed(0)
    return ViM2(img_size=64, embed_dim=32, depth=2, n_interactions=1, spm_inplanes=16).eval()


@functools.lru_cache(maxsize=None)
def sb_block(kind):
    import ssm_plugins.speechbrain as sbp

    torch.manual_seed(0)
    if kind == "mambamixer":
        return sbp.SBMambaMixerBlock(num_layers=1, d_model=16, num_tokens=6, d_state=4).eval()
    return sbp.SBESSMBlock(num_layers=1, d_model=16, d_state=4).eval()


def _cpu_runner(method, *args):
    """A CPUDistributedRunner method on a stand-in for a runner of 2 CPU processes (the checks run before anything
    distributed starts)."""
    from types import SimpleNamespace

    from ssm_plugins.openmmlab import CPUDistributedRunner

    runner = SimpleNamespace(distributed=True, cfg={"sync_bn": "mmcv"}, world_size=2)
    return getattr(CPUDistributedRunner, method)(runner, *args)


def _backbone(x):
    with torch.no_grad():
        return backbone()(x)


ADAPTERS = [
    ("ViM2_backbone-rank", lambda: _backbone(randn(3, 64, 64)), r"^x must have shape \(B, 3, H, W\)"),
    ("ViM2_backbone-empty", lambda: _backbone(randn(1, 3, 0, 64)), r"^x must have shape \(B, 3, H, W\) with H, W >= 1"),
    ("ViM2_backbone-dtype", lambda: _backbone(torch.zeros(1, 3, 64, 64, dtype=torch.uint8)),
     r"^x must be a floating-point image batch"),
    ("ViM2_backbone-arch", lambda: __import__("ssm_plugins.openmmlab", fromlist=["x"]).ViM2(arch="huge"),
     r"^arch must be one of"),
    pytest.param("CPUDistributedRunner-backend", lambda: _cpu_runner("setup_env", {"dist_cfg": {"backend": "nccl"}}),
                 r"^env_cfg.dist_cfg.backend must be 'gloo' for processes without a GPU .*got 'nccl'",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CPU processes only")),
    pytest.param("CPUDistributedRunner-sync_bn", lambda: _cpu_runner("wrap_model", None, torch.nn.BatchNorm2d(2)),
                 r"^sync_bn must be None or 'torch' for CPU processes .*got 'mmcv'",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CPU processes only")),
    ("SBMambaMixerBlock-rank", lambda: sb_block("mambamixer")(randn(6, 16)), r"^x must have shape \[B\*S, K, N\]"),
    ("SBMambaMixerBlock-empty", lambda: sb_block("mambamixer")(randn(2, 0, 16)), r"^x must have shape \[B\*S, K, N\]"),
    ("SBESSMBlock-dtype", lambda: sb_block("essm")(torch.ones(2, 5, 16, dtype=torch.long)),
     r"^x must be a floating-point"),
]


# ---- recipe data readers ------------------------------------------------------------------------------------------

CORRUPTED = []  # the file each data case spoiled: its error message must name it


def _corrupt(path: Path, content: bytes = b"RIFF\x00\x00 not audio") -> Path:
    path.write_bytes(content)
    CORRUPTED.append(path)
    return path


def _copy(source, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def _mixtures(tmp: Path) -> Path:
    from ssm_plugins.data.mixtures import generate_mixtures

    root = tmp / "mixtures"
    generate_mixtures(root, n_train=2, n_valid=1, n_test=1, min_seconds=0.2, max_seconds=0.3)
    return root


def _first(folder: Path) -> Path:
    return sorted(folder.iterdir())[0]


def _wsj_missing(tmp):
    from ssm_plugins.data.mixtures import prepare_wsjmix_csv

    prepare_wsjmix_csv(tmp / "absent", tmp / "save")


def _wsj_corrupt_mix(tmp):
    from ssm_plugins.data.mixtures import prepare_wsjmix_csv

    root = _mixtures(tmp)
    _corrupt(_first(root / "wav8k/min/tr/mix"))
    prepare_wsjmix_csv(root, tmp / "save")


def _recipe_reads_corrupt_source(tmp):
    """The separation recipe reads every source through SpeechBrain's read_audio (train.py dataio_prep)."""
    import speechbrain as sb

    root = _mixtures(tmp)
    sb.dataio.dataio.read_audio(str(_corrupt(_first(root / "wav8k/min/tr/s1"))))


def _gsc():
    sys.path.insert(0, str(REPO / "recipes_speech" / "Google-speech-commands"))
    try:
        from prepare_GSC import prepare_GSC
    finally:
        sys.path.pop(0)
    return prepare_GSC


def _gsc_missing(tmp):
    _gsc()(str(tmp / "absent"), str(tmp / "save"))


def _gsc_corrupt(tmp):
    from ssm_plugins.data.keywords import write_keyword_set

    root = tmp / "keywords"
    write_keyword_set(str(root), speakers=4, repeats=1, valid_speakers=1, test_speakers=1, sample_rate=4000,
                      duration=0.2)
    _corrupt(_first(root / "yes"))
    _gsc()(str(root), str(tmp / "save"))


def _cifar(tmp, corrupt: bool):
    from ssm_plugins.data.cifar_digits import cifar_digits
    from ssm_plugins.mmpretrain import LocalCIFAR100

    root = _copy(cifar_digits(), tmp / "cifar") if corrupt else tmp / "absent"
    if corrupt:
        _corrupt(root / "cifar-100-python" / "train", b"not a pickle")
    LocalCIFAR100(data_root=str(root), split="train", pipeline=[])


def _tiny_imagenet(tmp, corrupt: bool):
    from ssm_plugins.data.tiny_imagenet_digits import tiny_imagenet_digits
    from ssm_plugins.mmpretrain import TinyImageNet

    root = _copy(tiny_imagenet_digits(), tmp / "tin") if corrupt else tmp / "absent"
    if corrupt:
        _corrupt(root / "val" / "val_annotations.txt", b"n01443537_0.JPEG only-one-field\n")
    TinyImageNet(data_root=str(root), split="val", pipeline=[])


def _celeba(tmp):
    from ssm_plugins.data.celeba_digits import celeba_digits
    from ssm_plugins.mmpretrain import CelebA

    root = _copy(celeba_digits(), tmp / "celeba")
    with open(root / "list_attr_celeba.txt", "a") as f:
        f.write("broken.jpg 1 2\n")
    CelebA(data_root=str(root), split="train", pipeline=[])


def _coco(tmp):
    from mmengine.config import Config
    from mmengine.registry import DefaultScope
    from mmdet.registry import DATASETS

    import ssm_plugins.mmdet  # noqa: F401  (NamedCocoDataset)
    from ssm_plugins.data.coco_digits import coco_digits

    root = _copy(coco_digits(), tmp / "coco")
    _corrupt(root / "annotations" / "instances_val2017.json", b'{"images": [')
    config = Config.fromfile(str(REPO / "configs_mmdet" / "vim2" / "mask-rcnn_vim2-t_fpn_1x_coco.py"))
    dataset = dict(config.val_dataloader.dataset, data_root=str(root), pipeline=[])  # the configs' dataset type
    with DefaultScope.overwrite_default_scope("mmdet"):
        DATASETS.build(dataset)


DATA = [
    ("wsj0mix-missing-folder", _wsj_missing, r"^data_folder must hold wav8k/min/tr/mix .*absent"),
    ("wsj0mix-corrupt-audio", _wsj_corrupt_mix, r"Error opening '.*/tr/mix/[^/]+\.wav': Format not recognised"),
    ("separation-recipe-corrupt-source", _recipe_reads_corrupt_source,
     r"Failed to load audio from .*/tr/s1/[^/]+\.wav"),
    ("speech-commands-missing-folder", _gsc_missing, r"^data_folder .*absent lacks the word folders"),
    ("speech-commands-corrupt-audio", _gsc_corrupt, r"Error opening '.*/keywords/yes/.*\.wav': Format not recognised"),
    ("cifar100-missing-folder", lambda tmp: _cifar(tmp, False), r"^CIFAR-100 file .*absent/cifar-100-python/train not"),
    ("cifar100-corrupt-file", lambda tmp: _cifar(tmp, True), r"^CIFAR-100 file .*/cifar/cifar-100-python/train is not"),
    ("tiny-imagenet-missing-folder", lambda tmp: _tiny_imagenet(tmp, False), r"absent/wnids.txt not found"),
    ("tiny-imagenet-corrupt-annotations", lambda tmp: _tiny_imagenet(tmp, True),
     r"/tin/val/val_annotations.txt line 1: expected"),
    ("celeba-corrupt-annotations", _celeba, r"/celeba/list_attr_celeba.txt line \d+: expected .* 40 values"),
    ("coco-corrupt-annotations", _coco, r"^ann_file .*/coco/annotations/instances_val2017.json: not a COCO"),
    ("mixtures-generator-arguments", lambda tmp: __import__("ssm_plugins.data.mixtures", fromlist=["x"])
     .generate_mixtures(tmp, n_train=0), r"^n_train must be a positive int, got 0"),
]


def _id(row):
    return row.values[0] if hasattr(row, "values") else row[0]


@pytest.mark.parametrize("case, call, match", OPS + LAYERS + MODELS + ADAPTERS,
                         ids=[_id(r) for r in OPS + LAYERS + MODELS + ADAPTERS])
def test_bad_tensor_input_raises_naming_the_argument(case, call, match):
    with pytest.raises(Exception) as error:
        call()
    assert error.type in (ValueError, TypeError), f"{case}: {error.type.__name__}: {error.value}"
    assert re.search(match, str(error.value)), f"{case}: {error.type.__name__}: {error.value}"


@pytest.mark.parametrize("case, call, match", DATA, ids=[_id(r) for r in DATA])
def test_bad_data_raises_naming_the_file(case, call, match, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    CORRUPTED.clear()
    with pytest.raises(Exception) as error:
        call(tmp_path)
    assert re.search(match, str(error.value)), f"{case}: {error.type.__name__}: {error.value}"
    if CORRUPTED:  # the spoiled file itself, by its full path
        assert str(CORRUPTED[-1]) in str(error.value), (CORRUPTED, str(error.value))


# ---- accepted on purpose: any image size through padding -----------------------------------------------------------

def test_hierarchical_models_and_backbones_pad_any_image_size():
    """essm_2d/myonet and the OpenMMLab backbones take H/W that are no multiple of the stride (padding, as timm's
    CNNs and mmdet's backbones do): outputs are ceil(H / stride) for the backbone, a full classification else."""
    outs = _backbone(randn(1, 3, 50, 70))
    assert [tuple(o.shape[-2:]) for o in outs] == [(-(-50 // s), -(-70 // s)) for s in (4, 8, 16, 32)]
    for name in ("essm_2d_tiny", "myonet_tiny"):
        logits = _forward(name, randn(2, 3, 30, 30))
        assert logits.shape == (2, 3) and torch.isfinite(logits).all(), name


# ---- NaN input: propagated where it reaches, nowhere else ----------------------------------------------------------

def _with_nan(x, index):
    x = x.clone()
    x[index] = float("nan")
    return x


def test_nan_in_the_causal_scan_reaches_exactly_the_later_steps_of_its_channel():
    u = _with_nan(randn(2, 4, 6), (0, 1, 2))
    out = _scan(u=u)
    nan = torch.isnan(out)
    expected = torch.zeros_like(nan)
    expected[0, 1, 2:] = True
    assert torch.equal(nan, expected)


@pytest.mark.parametrize("op", ["qs_mix", "essm_conv", "myo_solve"])
def test_nan_in_an_op_stays_in_its_batch_item(op):
    if op == "qs_mix":
        out = _qs(x=_with_nan(randn(2, 4, 6), (0, 1, 2)))
    elif op == "essm_conv":
        out = _essm(_with_nan(randn(2, 4, 6), (0, 1, 2)))
    else:
        out = _myo(_with_nan(randn(2, 7, 3), (0, 3, 1)))
    assert torch.isnan(out[0]).any(), "the NaN input was masked: a silent wrong answer"
    assert torch.isfinite(out[1]).all()


@pytest.mark.parametrize("name, size", [("vim2_t", 32), ("vit_cifar_patch4_32_ssm2d", 32), ("essm_2d_tiny", 32),
                                        ("myonet_tiny", 32)])
def test_nan_in_an_image_gives_nan_logits_for_that_image_only(name, size):
    logits = _forward(name, _with_nan(randn(2, 3, size, size), (0, 0, 5, 7)))
    assert torch.isnan(logits[0]).all(), logits
    assert torch.isfinite(logits[1]).all(), logits
