"""The timm model contract, checked for every model ssm_plugins registers (issue 4, "Tests").

Parametrised over timm's registry filtered to our own modules, so a newly registered model is checked without
editing this file; it only needs a family row in ``FAMILIES`` (a missing row fails ``test_every_model_has_a_family``).
Each family row gives the kwargs that shrink the model's width/depth (same classes and code paths, seconds on
one CPU thread), two input sizes (the second non-square) and an input size the family cannot take.

Per model: forward + backward at both sizes (every parameter gets a finite gradient), features_only shapes and
strides, forward_intermediates, checkpoint round trip (state_dict and pretrained_cfg_overlay file), eval-mode
determinism with no batch coupling, ValueErrors for bad input, reset_classifier, set_grad_checkpointing (exact,
and really recomputing), no_weight_decay covering the SSM parameters; at the registered (full) size: a meta-device
build whose pretrained_cfg matches the model and never points at a download.
"""
import functools
import re
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import pytest
import timm
import torch

import ssm_plugins  # noqa: F401  (registers the models)
from _contract import assert_checkpoint_round_trip, assert_grad_checkpointing_is_exact

# Not image classifiers, each with its own contract tests: the TSM2/TSQS forecasters ((B, L, M) -> (B, H, M);
# tests/models/test_tsm2_models.py) and Myo's token-id ListOps model (tests/models/test_myo_sequence.py).
NOT_IMAGE_MODELS = {'tsm2', 'tsqs', 'myo_listops'}
# every model ssm_plugins registers; the image classifiers among them are the contract's MODELS
REGISTERED = sorted(n for n in timm.list_models()
                    if timm.models.model_entrypoint(n).__module__.startswith('ssm_plugins.'))
MODELS = [n for n in REGISTERED if n not in NOT_IMAGE_MODELS]
FAMILY_MODULES = {'ssm_plugins.models.vim2', 'ssm_plugins.models.ssm2d', 'ssm_plugins.models.essm',
                  'ssm_plugins.models.myo', 'ssm_plugins.models.mega', 'ssm_plugins.models.svim2',
                  'ssm_plugins.models.s5'}


@dataclass(frozen=True)
class Family:
    pattern: str  # regex on the model name
    small: Dict = field(default_factory=dict)  # width/depth reductions
    sizes: Tuple[Tuple[int, int], Tuple[int, int]] = ((32, 32), (24, 40))
    bad_size: Optional[Tuple[Tuple[int, int], str]] = None  # (size, regex of the ValueError); None: derived below
    intermediates: Dict = field(default_factory=dict)  # extra kwargs forward_intermediates needs
    no_feature_maps: str = ''  # the model has none by design: regex of the ValueError features_only must raise


_SSM2D_SMALL = dict(ssm_d_state=4, ssm_n_ssm=2)
_VIM2_SMALL = dict(img_size=64, embed_dim=32, depth=4, n_interactions=2, spm_inplanes=8, headdim=16, d_state=4)
_VIM2_BAD = ((48, 64), r'multiples of 32.*\(48, 64\)')
_SVIM2_SMALL = dict(embed_dim=32, depth=2, headdim=16, d_state=4, expand=2)
FAMILIES = [
    Family(r'^svi(m2|qs)_b16$', dict(_SVIM2_SMALL, img_size=32), ((32, 32), (32, 48)),
           ((40, 32), r'multiples of patch_size 16.*\(40, 32\)')),
    Family(r'^svi(m2|qs)_scifar$', dict(_SVIM2_SMALL, img_size=8), ((8, 8), (6, 10)),
           ((0, 8), r'positive multiples of patch_size 1.*\(0, 8\)')),
    # ViM2/ViQS features_only: the conv branch's 4-level pyramid; the *_noconv ablations (no conv branch): blocks
    Family(r'^s?vi(m2|qs)_', _VIM2_SMALL, ((64, 64), (64, 96)), _VIM2_BAD),
    Family(r'^(deit|vit)_.*patch(8|16).*_ssm2d$', dict(embed_dim=32, depth=2, num_heads=2, **_SSM2D_SMALL),
           ((64, 64), (48, 80))),
    Family(r'^(deit|vit)_.*_ssm2d$', dict(embed_dim=32, depth=2, num_heads=2, **_SSM2D_SMALL)),
    Family(r'^swin_tiny_.*_ssm2d$', dict(embed_dim=16, depths=(2, 1, 1, 1), num_heads=(1, 2, 2, 4), **_SSM2D_SMALL)),
    Family(r'^swin_.*_ssm2d$', dict(embed_dim=16, depths=(2, 1, 1), num_heads=(1, 2, 4), **_SSM2D_SMALL)),
    Family(r'^mega_iso_', dict(embed_dim=16, depth=2, hidden_dim=16, ffn_hidden_dim=24, zdim=8, head_hidden_dim=12,
                               **_SSM2D_SMALL), ((8, 8), (6, 10)), ((0, 8), r'input size \(0, 8\) must be a positive')),
    Family(r'^mega_', dict(embed_dim=16, depth=2, hidden_dim=16, ffn_hidden_dim=24, zdim=8, **_SSM2D_SMALL),
           ((64, 64), (48, 80))),
    Family(r'^essm_2d_', dict(embed_dim=(8, 16, 24, 32), depths=(1, 1, 1, 1)),
           bad_size=((0, 8), r'must have shape .*\(1, 3, 0, 8\)')),
    Family(r'^essm_', dict(d_model=16, depth=2, d_state=16, n_heads=4), ((8, 8), (5, 7)),
           ((0, 8), r'at least one step')),
    Family(r'^myopix_', dict(embed_dim=32, depth=2, state_size=16, blocks=1), ((8, 8), (5, 7)),
           ((0, 8), r'input size \(0, 8\) must be at least')),
    Family(r'^myo_(s|z)(mnist|cifar)$|^myo_path', dict(embed_dim=16, depth=2, state_size=8, blocks=1),
           ((8, 8), (5, 7)), ((0, 8), r'input size \(0, 8\) must be at least')),
    # S5: 16 complex states (state_size 32); with fewer, inductor's vectorised CPU backward of the chunked scan
    # writes out of bounds (torch 2.11, AVX-512: fine with cpp.simdlen = 1), tests/test_compile.py
    Family(r'^s5_', dict(embed_dim=16, depth=2, state_size=32, blocks=1), ((8, 8), (5, 7)),
           ((0, 8), r'input size \(0, 8\) must be at least')),
    Family(r'^myonet_', dict(dims=(16, 32, 48, 64), depths=(1, 1, 2, 1)),
           bad_size=((0, 8), r'input size \(0, 8\) must be at least')),
]


def family(name: str) -> Family:
    for fam in FAMILIES:
        if re.search(fam.pattern, name):
            return fam
    raise LookupError(f'{name} has no row in FAMILIES: add its reduced kwargs and input sizes')


def has_family(name: str) -> bool:
    try:
        family(name)
        return True
    except LookupError:
        return False


# the models with a FAMILIES row (image inputs at reduced sizes): what the per-model deployment tests run over
IMAGE_MODELS = [n for n in MODELS if has_family(n)]


# One model per FAMILIES row (a row's models share their classes and code paths, at the row's reduced sizes), and a
# second where a row holds two code paths: ViM2's row has the S6 and the QS mixer (vim2_t, viqs_t), eSSM's the
# two-document retrieval model. The per-model sweeps (this file, export, compile, autocast, meta-device builds,
# timm's own suite) run on these in `make test`; on the other models they are marked ``exhaustive``, which
# `make test-all` runs (tests/README.md).
REPRESENTATIVES = ('vim2_t', 'viqs_t', 'svim2_b16', 'sviqs_scifar',
                   'deit_tiny_patch16_224_ssm2d', 'vit_cifar_patch4_32_ssm2d',
                   'swin_tiny_patch4_window7_224_ssm2d', 'swin_cifar_patch2_window4_32_ssm2d',
                   'mega_cifar_patch4_32_ssm2d', 'mega_iso_lra_cifar10_ssm2d',
                   'essm_2d_tiny', 'essm_scifar', 'essm_retrieval',
                   'myopix_zcifar', 'myo_zcifar', 'myonet_tiny', 's5_zcifar')


def sweep(names):
    """``names`` as the parameters of a per-model sweep: the REPRESENTATIVES as they are, the others ``exhaustive``
    (`make test-all` runs them, `make test` leaves them out)."""
    return [n if n in REPRESENTATIVES else pytest.param(n, marks=pytest.mark.exhaustive) for n in names]


def _create(name, **kwargs):
    torch.manual_seed(0)
    return timm.create_model(name, **dict(family(name).small, **kwargs))


@functools.lru_cache(maxsize=None)
def _built(name):
    """The reduced model, shared by the tests that do not change it (they set train/eval themselves)."""
    return _create(name)


def _input(model, size, batch=1):
    return torch.randn(batch, model.in_chans, *size)


def _bad_size(name, model):
    fam = family(name)
    if fam.bad_size is not None:
        return fam.bad_size
    patch = tuple(model.patch_embed.patch_size)  # 2-D SSM: any size the patch size does not divide
    size = (fam.sizes[0][0] + 1, fam.sizes[0][1])
    return size, re.escape(str(size)) + '.*' + re.escape(str(patch))


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_every_family_registers_models():
    assert FAMILY_MODULES <= {timm.models.model_entrypoint(n).__module__ for n in MODELS}


def test_every_model_is_defined_by_name_in_its_module():
    # timm style: each model is a @register_model function a grep for its name finds (no registration loops)
    import inspect
    import sys

    for name in MODELS + sorted(NOT_IMAGE_MODELS):
        source = inspect.getsource(sys.modules[timm.models.model_entrypoint(name).__module__])
        assert f"@register_model\ndef {name}(" in source, name


@pytest.mark.parametrize('name', MODELS)
def test_every_model_has_a_family(name):
    family(name)


def test_every_family_has_a_representative():
    assert set(REPRESENTATIVES) <= set(IMAGE_MODELS)
    rows = {family(n).pattern for n in IMAGE_MODELS}
    assert rows == {family(n).pattern for n in REPRESENTATIVES}, 'a FAMILIES row without a model in REPRESENTATIVES'


# ---- at the registered size: meta device only ------------------------------------------------------------


@pytest.mark.parametrize('name', sweep(MODELS))
def test_full_size_builds_and_pretrained_cfg_never_downloads(name, monkeypatch):
    cfg = timm.models.get_pretrained_cfg(name)
    assert not cfg.url and cfg.hf_hub_id is None, f'{name} must not point at a download'
    model = timm.create_model(name, device='meta')
    assert all(p.is_meta for p in model.parameters()) and sum(p.numel() for p in model.parameters()) > 0
    assert model.num_classes == cfg.num_classes and model.in_chans == cfg.input_size[0]
    assert model.get_classifier().out_features == cfg.num_classes
    assert len(model.feature_info) >= 1 and model.no_weight_decay()

    import timm.models._builder as builder

    def no_network(*args, **kwargs):
        raise AssertionError('attempted a download')

    monkeypatch.setattr(builder, 'download_cached_file', no_network)
    monkeypatch.setattr(builder, 'load_state_dict_from_hf', no_network)
    with pytest.raises(RuntimeError, match='No pretrained weights exist'):  # timm's clear error, no fetch
        timm.create_model(name, pretrained=True, device='meta')


# ---- reduced models -------------------------------------------------------------------------------------


@pytest.mark.parametrize('name', sweep(MODELS))
def test_forward_backward_two_sizes(name):
    model = _built(name).train()
    for size in family(name).sizes:
        model.zero_grad(set_to_none=True)
        out = model(_input(model, size, batch=2))
        assert out.shape == (2, model.num_classes) and torch.isfinite(out).all()
        out.logsumexp(-1).sum().backward()
        for n, p in model.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), (name, size, n)


@pytest.mark.parametrize('name', sweep(MODELS))
def test_features_only_shapes_and_strides(name):
    if family(name).no_feature_maps:
        with pytest.raises(ValueError, match=family(name).no_feature_maps):
            _create(name, features_only=True)
        return
    info = _create(name, features_only=True, out_indices=(0,)).feature_info.info  # every level the backbone has
    size = family(name).sizes[1]
    every = tuple(range(len(info)))  # every level, so no weight may go unused (DistributedDataParallel)
    for out_indices in (every, every[-1:]):
        features = _create(name, features_only=True, out_indices=out_indices).eval()
        assert features.feature_info.reduction() == [info[i]['reduction'] for i in out_indices]
        assert features.feature_info.channels() == [info[i]['num_chs'] for i in out_indices]
        outs = features(_input(features.model, size))
        assert len(outs) == len(out_indices)
        for out, channels, stride in zip(outs, features.feature_info.channels(), features.feature_info.reduction()):
            assert out.shape == (1, channels, -(-size[0] // stride), -(-size[1] // stride)), (name, stride)
        if out_indices == every:
            sum(out.square().mean() for out in outs).backward()
            assert [n for n, p in features.named_parameters() if p.grad is None] == []


@pytest.mark.parametrize('name', sweep(MODELS))
def test_forward_intermediates_match_forward_features_and_head(name):
    extra = family(name).intermediates
    if family(name).no_feature_maps:
        with pytest.raises(ValueError, match='dense_outputs'):
            _built(name).forward_intermediates(_input(_built(name), family(name).sizes[0]))
        return
    model = _create(name, **extra).eval() if extra else _built(name).eval()
    size = family(name).sizes[1]
    x = _input(model, size)
    with torch.no_grad():
        final, intermediates = model.forward_intermediates(x, indices=2)
        features = model.forward_features(x)
        only = model.forward_intermediates(x, indices=[0], intermediates_only=True, stop_early=True)
        logits = model(x)
    torch.testing.assert_close(final, features)
    torch.testing.assert_close(model.forward_head(features), logits)
    assert model.forward_head(features, pre_logits=True).shape == (1, model.head_hidden_size)  # timm's pre-logits width
    for out, info in zip(intermediates + only, model.feature_info[-2:] + model.feature_info[:1]):
        stride = info['reduction']
        assert out.shape == (1, info['num_chs'], -(-size[0] // stride), -(-size[1] // stride)), (name, stride)
    assert len(intermediates) == 2 and len(only) == 1


@pytest.mark.parametrize('name', sweep(MODELS))
def test_checkpoint_round_trip(name, tmp_path):
    model = _built(name)
    assert_checkpoint_round_trip(name, family(name).small, (1, model.in_chans, *family(name).sizes[0]), tmp_path)


@pytest.mark.parametrize('name', sweep(MODELS))
def test_eval_is_deterministic_without_batch_coupling(name):
    model = _built(name).eval()
    x = _input(model, family(name).sizes[1], batch=2)
    with torch.no_grad():
        first, second, single = model(x), model(x), model(x[1:])
    assert torch.equal(first, second)
    torch.testing.assert_close(single, first[1:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('name', sweep(MODELS))
def test_bad_input_raises_value_error(name):
    model = _built(name)
    size, message = _bad_size(name, model)
    with pytest.raises(ValueError, match=message):
        model(_input(model, size))
    with pytest.raises(ValueError, match='must have shape'):
        model(torch.randn(1, model.in_chans + 1, *family(name).sizes[0]))
    with pytest.raises(ValueError, match='must have shape'):
        model(torch.randn(model.in_chans, *family(name).sizes[0]))


@pytest.mark.parametrize('name', sweep(MODELS))
def test_training_after_an_inference_mode_forward(name):
    """Nothing an inference_mode forward caches (trees, scan orders, kernels) may hold inference tensors: a later
    forward at the same size under autograd would fail to save them for backward (timm's FX tests do this)."""
    from ssm_plugins.layers import switch_of_scans
    from ssm_plugins.ops import myo as myo_ops

    # empty, so this test's inference_mode call fills them (an earlier test's normal tensors would hide the bug)
    for cache in (myo_ops._kary_tree, myo_ops._quadtree):
        cache.cache_clear()
    switch_of_scans._INDEX_CACHE.clear()
    model = _create(name)
    x = _input(model, family(name).sizes[0], batch=2)
    with torch.inference_mode():
        model.eval()(x)
    model.train()(x).square().mean().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    if not x.is_floating_point():
        return
    # a frozen model in eval mode, asked for its input's gradient (saliency): served from the eval-mode caches
    # (the 2-D SSM's kernels) that the inference_mode forward filled
    with torch.inference_mode():
        model.eval()(x)
    x = x.clone().requires_grad_()
    model.requires_grad_(False)(x).square().mean().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize('name', sweep(MODELS))
def test_reset_classifier(name):
    model = _create(name).eval()
    x = _input(model, family(name).sizes[0], batch=2)
    model.reset_classifier(7)
    assert model.get_classifier().out_features == 7
    with torch.no_grad():
        assert model(x).shape == (2, 7)
        model.reset_classifier(0)
        assert model(x).shape == (2, model.head_hidden_size)  # pooled pre-logits (timm)
    # the new head lives on the model's device and dtype, in its train/eval mode
    model.to(torch.float64).reset_classifier(3)
    head = model.get_classifier()
    assert head.weight.dtype == torch.float64 and not any(m.training for m in model.modules())
    model.train().reset_classifier(2)
    assert model.get_classifier().training


@pytest.mark.parametrize('name', sweep(MODELS))
def test_grad_checkpointing_is_exact_and_recomputes(name):
    model = _create(name).train()
    assert_grad_checkpointing_is_exact(model, _input(model, family(name).sizes[1], batch=2))


@pytest.mark.parametrize('name', sweep(MODELS))
def test_no_weight_decay_covers_ssm_parameters(name):
    model = _built(name)
    params = dict(model.named_parameters())
    ssm_names = {f'{prefix}.{n}' if prefix else n for prefix, module in model.named_modules()
                 for n in getattr(module, 'no_weight_decay_names', ())}
    ssm_names &= set(params)
    if name.endswith('_ablate'):  # Mega-ablate (2-D SSM Table 1): no spatial layer, so no SSM parameters at all
        assert not ssm_names and not any('ssm' in n or 'ema' in n.split('.') for n in params), sorted(ssm_names)
        return
    assert ssm_names, f'{name}: no SSM layer lists its no_weight_decay_names'
    assert ssm_names <= model.no_weight_decay()
    from timm.optim import create_optimizer_v2

    optimizer = create_optimizer_v2(model, 'adamw', lr=1e-3, weight_decay=0.05)
    decayed = {id(p) for g in optimizer.param_groups if g['weight_decay'] > 0 for p in g['params']}
    assert decayed and not any(id(params[n]) in decayed for n in ssm_names)


# torch.fx (timm's FX feature extraction, torchvision's create_feature_extractor): the model files register their
# shape-dependent steps (input checks included) with timm's notrace registry, so the traced module runs them on
# the real input.
def _fx_traced(model):
    from timm.models import create_feature_extractor, get_graph_node_names

    _, eval_nodes = get_graph_node_names(model)
    traced = create_feature_extractor(model, return_nodes=[eval_nodes[-1]]).eval()
    return lambda *args, **kwargs: next(iter(traced(*args, **kwargs).values()))


@pytest.mark.parametrize('name', sweep(MODELS))
def test_fx_trace_equals_eager_and_keeps_input_checks(name):
    model = _built(name).eval()
    traced = _fx_traced(model)
    x = _input(model, family(name).sizes[1], batch=2)
    with torch.no_grad():
        torch.testing.assert_close(traced(x), model(x), rtol=1e-4, atol=1e-5)
    size, message = _bad_size(name, model)
    with pytest.raises(ValueError, match=message):
        traced(_input(model, size))
    with pytest.raises(ValueError, match='must have shape'):
        traced(torch.randn(1, model.in_chans + 1, *family(name).sizes[0]))


def _fx_and_getter_features(name):
    """timm's features_only=True models with feature_cls='fx' and 'getter', and their outputs on one input:
    (fx model, getter model, traced outputs, getter's maps, the input)."""
    fx = _create(name, features_only=True, feature_cls='fx').eval()
    getter = _create(name, features_only=True).eval()
    x = _input(getter, family(name).sizes[1], batch=2)
    with torch.no_grad():
        return fx, getter, fx(x), getter(x), x


# timm's features_only=True, feature_cls='fx': the traced block / stage outputs, in the layout forward gives them
# (channels last: NHWC maps, NLC tokens); the getter's maps are NCHW. Not essm_retrieval: one shared backbone runs
# once per document, so a block has no single output (its features_only gives both documents' maps, getter only).
FX_FEATURE_MODELS = [n for n in IMAGE_MODELS if re.search(r'^(essm|myo|mega)', n) and 'retrieval' not in n]


# the other families' fx features are the blocks' token outputs (B, L, C) (timm's ViT convention), with as many
# levels and channels as feature_info; small configs with fewer blocks than the default 3 / 4 levels included
FX_TOKEN_FEATURE_MODELS = [n for n in IMAGE_MODELS if re.search(r'^(svim2|sviqs|vit_|deit_)', n)]


@pytest.mark.parametrize('name', sweep(FX_TOKEN_FEATURE_MODELS))
def test_fx_features_only_give_every_feature_level(name):
    fx, getter, traced, maps, x = _fx_and_getter_features(name)
    assert len(traced) == len(maps) == len(fx.feature_info) >= 1
    for out, expected in zip(traced, maps):
        assert out.shape[-1] == expected.shape[1] and out.shape[0] == expected.shape[0]
        grid = expected.shape[2] * expected.shape[3]  # the map's tokens: the last grid positions of the sequence
        torch.testing.assert_close(out[:, -grid:].transpose(1, 2).reshape(expected.shape), expected)


@pytest.mark.parametrize('name', sweep(FX_FEATURE_MODELS))
def test_fx_features_only_equal_the_getters(name):
    fx, getter, traced, maps, x = _fx_and_getter_features(name)
    assert [t.shape[-1] for t in traced] == fx.feature_info.channels() == getter.feature_info.channels()
    for out, expected in zip(traced, maps):
        if out.dim() == 4:  # NHWC map
            torch.testing.assert_close(out.permute(0, 3, 1, 2), expected)
        elif name.startswith('essm'):  # row-major pixel tokens
            torch.testing.assert_close(out.transpose(1, 2).reshape(expected.shape), expected)
        else:  # Myo: all tree nodes, mapped back to the image by the model's own leaf_map
            model = _built(name)
            torch.testing.assert_close(model.leaf_map(out, model._embed(x)[1]), expected)


# ViM2 / ViQS with the conv branch: features_only builds the dense-output pyramid (docs/mambamixer.md, 'Dense
# outputs': ViT-CoMer style; the MambaMixer paper, arXiv 2403.19888 v2, does not describe it), whose 4 levels the
# traced graph computes under FX tracing only (pyramid_norms.<i> nodes); without it (noconv) the blocks' tokens,
# class token first.
FX_PYRAMID_MODELS = [n for n in IMAGE_MODELS if re.fullmatch(r'(vim2|viqs)_t(_noconv)?', n)]


@pytest.mark.parametrize('name', FX_PYRAMID_MODELS)
def test_fx_features_only_of_vim2_equal_the_getters(name):
    fx, getter, traced, maps, x = _fx_and_getter_features(name)
    assert len(traced) == len(maps) == len(fx.feature_info) == (4 if 'noconv' not in name else len(maps))
    assert fx.feature_info.channels() == getter.feature_info.channels()
    for out, expected in zip(traced, maps):
        if out.dim() == 3:  # tokens, class token first
            out = out[:, 1:].transpose(1, 2).reshape(expected.shape)
        torch.testing.assert_close(out, expected)


# Optional forward arguments become placeholders of the traced graph: they must act at run time as in eager mode.
@pytest.mark.parametrize('name', ['essm_retrieval', 'essm_scifar_tiny', 'myo_smnist'])
def test_fx_traced_optional_inputs_act_at_run_time(name):
    model = _built(name).eval()
    traced = _fx_traced(model)
    padding_mask = (torch.arange(10) >= 7).expand(2, -1)  # the last 3 of 10 steps padded
    if name == 'essm_retrieval':  # two one-hot documents
        x = torch.randn(2, 10, model.vocab_size)
        required, optional = dict(x2=x.flip(1)), dict(padding_mask=padding_mask, mask_blocks=False)
    else:
        x = torch.randn(2, 10, model.in_chans)
        required, optional = {}, dict(padding_mask=padding_mask)
        if name.startswith('essm'):
            optional['dt_scale'] = 0.5
    with torch.no_grad():
        expected = model(x, **required, **optional)
        assert not torch.allclose(expected, model(x, **required), rtol=1e-4, atol=1e-5)  # the arguments act
        torch.testing.assert_close(traced(x, **required, **optional), expected, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(traced(x, **required), model(x, **required), rtol=1e-4, atol=1e-5)
