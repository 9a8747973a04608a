"""2-D SSM family as timm models ("2-D SSM: A General Spatial Layer for Visual Transformers", arXiv:2306.06635:
Sec. 5 placement, Tables 1-2 parameter counts, App. D-F; docs/2d-ssm.md for the layer, placement and configs).

The timm contract of every registered model is tests/models/test_contract.py; here: the eval-mode kernel cache,
options and placement, parameter counts vs the paper, and the layer (SSM2D equals the per-direction sum of
docs/2d-ssm.md, 'Directions and channel sharing', computed with the reference ops).
"""
import functools
import re

import pytest
import timm
import torch
import torch.nn as nn
from timm.models.swin_transformer import SwinTransformer
from timm.models.vision_transformer import VisionTransformer

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.layers import SSM2D
from ssm_plugins.models.ssm2d import SwinTransformerSSM2D, VisionTransformerSSM2D
from ssm_plugins.ops import reference
from ssm_plugins.ops.ssm2d import _constrain
from _contract import assert_grad_checkpointing_is_exact

MODELS = timm.list_models(module='ssm2d')
REQUIRED = {'deit_tiny_patch16_224_ssm2d', 'deit_small_patch16_224_ssm2d', 'swin_tiny_patch4_window7_224_ssm2d',
            'vit_cifar_patch4_32_ssm2d'}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _sizes(model):
    """Two small input sizes the model's patch size divides, the second one non-square."""
    patch = model.patch_embed.patch_size[0]
    if patch >= 8:
        return (64, 64), (48, 80)
    return (32, 32), (24, 40)


@functools.lru_cache(maxsize=None)
def _built(name):
    torch.manual_seed(0)
    return timm.create_model(name, **({'depth': 2} if name.startswith('deit') else {'depths': (2, 1, 1)}))


def _ssm_modules(model):
    return [m for m in model.modules() if isinstance(m, SSM2D)]


def test_family_is_registered():
    assert REQUIRED <= set(MODELS), MODELS


@pytest.mark.parametrize('name', ['deit_tiny_patch16_224_ssm2d', 'swin_cifar_patch2_window4_32_ssm2d'])
def test_eval_kernel_cache_matches_fresh_kernels(name):
    model = _built(name).eval()
    x = torch.randn(1, 3, *_sizes(model)[1])
    with torch.no_grad():
        first, second = model(x), model(x)
    assert torch.equal(first, second)
    ssm = _ssm_modules(model)[0]
    assert len(ssm._kernel_cache) == 1
    model.train()
    assert not ssm._kernel_cache
    model.eval()
    fresh = model(x)  # gradients recorded: kernels computed afresh, not cached
    assert not ssm._kernel_cache
    torch.testing.assert_close(fresh.detach(), first, rtol=0, atol=0)


# ---- options, placement, timm API -------------------------------------------------------------------------


@pytest.mark.parametrize('name', ['vit_cifar_patch4_32_ssm2d', 'swin_cifar_patch2_window4_32_ssm2d'])
def test_options_complex_no_pos_embed_and_grad_checkpointing(name):
    torch.manual_seed(0)
    model = timm.create_model(name, ssm_complex=True, no_pos_embed=True, ssm_directions=2, ssm_n_ssm=2,
                              ssm_d_state=4, ssm_layernorm=True)
    ssm = _ssm_modules(model)[0]
    assert ssm.complex and ssm.A_logit.shape == (4, 4, 4, 2) and isinstance(ssm.norm, nn.LayerNorm)
    pos = model.pos_embed if isinstance(model, VisionTransformer) else model.absolute_pos_embed
    assert pos is None
    x = torch.randn(2, 3, 32, 32)
    model.train()
    assert_grad_checkpointing_is_exact(model, x)
    model.reset_classifier(7)
    assert model(x).shape == (2, 7)


@pytest.mark.parametrize('name', ['vit_cifar_patch4_32_ssm2d', 'swin_cifar_patch2_window4_32_ssm2d'])
def test_position_embedding_is_in_the_stem_group(name):
    model = timm.create_model(name, device='meta')
    groups = timm.models.group_parameters(model, model.group_matcher())
    stem = groups[min(groups)]
    assert {'pos_embed', 'absolute_pos_embed'} & set(stem), stem
    assert not any('.ssm.' in n for n in stem)


def test_vit_without_class_token_and_with_registers():
    model = timm.create_model('vit_cifar_patch4_32_ssm2d', class_token=False, global_pool='avg', reg_tokens=2)
    assert model(torch.randn(1, 3, 24, 40)).shape == (1, 100)
    with pytest.raises(ValueError, match='patch_drop_rate'):
        timm.create_model('vit_cifar_patch4_32_ssm2d', patch_drop_rate=0.1)


def test_vit_ssm_sees_only_the_patch_tokens_after_norm1():
    torch.manual_seed(0)
    model = timm.create_model('deit_tiny_patch16_224_ssm2d', depth=2).eval()
    seen = {}
    block = model.blocks[0]
    block.ssm.register_forward_hook(lambda m, args, out: seen.update(inp=args[0]))
    block.attn.register_forward_hook(lambda m, args, out: seen.update(attn_in=args[0]))
    x = torch.randn(1, 3, 48, 80)
    with torch.no_grad():
        model(x)
        tokens = model._embed(x)[0]
        normed = block.norm1(tokens)
    assert seen['inp'].shape == (1, 3, 5, 192)
    torch.testing.assert_close(seen['inp'].reshape(1, 15, 192), normed[:, 1:])
    torch.testing.assert_close(seen['attn_in'][:, :1], normed[:, :1])  # class token bypasses
    torch.testing.assert_close(seen['attn_in'][:, 1:], block.ssm(seen['inp']).reshape(1, 15, 192))


@pytest.mark.parametrize('variant', ['vit', 'swin'])
def test_identity_ssm_reduces_to_timm_backbone(variant):
    """With the SSM replaced by identity the model is exactly timm's own backbone with the same weights."""
    torch.manual_seed(0)
    if variant == 'vit':
        args = dict(img_size=32, patch_size=4, embed_dim=48, depth=2, num_heads=3, num_classes=5)
        ours, theirs = VisionTransformerSSM2D(**args), VisionTransformer(**args, dynamic_img_size=True)
    else:
        args = dict(img_size=32, patch_size=2, embed_dim=24, depths=(1, 2), num_heads=(2, 4), window_size=4,
                    num_classes=5, strict_img_size=False)
        ours, theirs = SwinTransformerSSM2D(**args), SwinTransformer(**args)
    missing = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not missing.missing_keys and all('.ssm.' in k for k in missing.unexpected_keys)
    for module in ours.modules():
        if hasattr(module, 'ssm'):
            module.ssm = nn.Identity()
    ours.eval(), theirs.eval()
    x = torch.randn(2, 3, 24, 40)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x))


def test_swin_ssm_runs_on_the_whole_stage_map_before_windows():
    torch.manual_seed(0)
    model = timm.create_model('swin_tiny_patch4_window7_224_ssm2d', depths=(1, 2, 1, 1)).eval()
    shapes = []
    for stage in model.layers:
        for block in stage.blocks:
            block.ssm.register_forward_hook(lambda m, args, out: shapes.append(tuple(args[0].shape)))
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 96))
    assert shapes == [(1, 16, 24, 96), (1, 8, 12, 192), (1, 8, 12, 192), (1, 4, 6, 384), (1, 2, 3, 768)]


def test_native_resolution_and_set_input_size():
    torch.manual_seed(0)
    model = timm.create_model('deit_tiny_patch16_224_ssm2d', depth=1).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 224, 224)).shape == (1, 1000)
        model.set_input_size(img_size=(160, 160))
        assert model.pos_embed.shape == (1, 101, 192)
        assert model(torch.randn(1, 3, 160, 160)).shape == (1, 1000)
        swin = timm.create_model('swin_tiny_patch4_window7_224_ssm2d', depths=(1, 1, 1, 1)).eval()
        assert swin(torch.randn(1, 3, 224, 224)).shape == (1, 1000)
        assert swin(torch.randn(1, 3, 160, 160)).shape == (1, 1000)


def test_fixed_size_vit_rejects_other_sizes():
    model = timm.create_model('vit_cifar_patch4_32_ssm2d', dynamic_img_size=False)
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 100)
    with pytest.raises(ValueError, match=re.escape('input size (24, 40) must equal img_size (32, 32)')):
        model(torch.randn(1, 3, 24, 40))


def test_plain_timm_checkpoint_loads_with_fresh_ssm(tmp_path):
    torch.manual_seed(0)
    plain = timm.create_model('deit_tiny_patch16_224', depth=2, pretrained=False)
    path = tmp_path / 'deit.pth'
    torch.save(plain.state_dict(), path)
    model = timm.create_model('deit_tiny_patch16_224_ssm2d', depth=2, pretrained=True,
                              pretrained_cfg_overlay=dict(file=str(path)))
    torch.testing.assert_close(model.blocks[1].attn.qkv.weight, plain.blocks[1].attn.qkv.weight)


# ---- parameter counts vs the paper (Tables 1-2) -------------------------------------------------------------

# (model, kwargs, paper's # params with SSM-r, with SSM-c); CelebA has 40 classes (Table 2), Table 1 is CIFAR-100
PAPER_PARAMS = [
    ('deit_tiny_patch16_224_ssm2d', dict(num_classes=40), 5.537e6, 5.541e6),
    ('deit_small_patch16_224_ssm2d', dict(num_classes=40), 21.688e6, 21.691e6),
    ('deit_base_patch16_224_ssm2d', dict(num_classes=40), 85.841e6, 85.845e6),
    ('swin_tiny_patch4_window7_224_ssm2d', dict(num_classes=40), 27.556e6, 27.558e6),
    ('vit_cifar_patch4_32_ssm2d', {}, 2.72e6, 2.73e6),
    ('swin_cifar_patch2_window4_32_ssm2d', {}, 7.25e6, 7.26e6),
]


@pytest.mark.parametrize('name,kwargs,real,cplx', PAPER_PARAMS, ids=[p[0] for p in PAPER_PARAMS])
def test_parameter_count_within_10_percent_of_paper(name, kwargs, real, cplx):
    for complex_ssm, paper in ((False, real), (True, cplx)):
        model = timm.create_model(name, device='meta', ssm_complex=complex_ssm, **kwargs)
        count = sum(p.numel() for p in model.parameters())
        assert abs(count - paper) / paper < 0.10, (name, complex_ssm, count, paper)


# ---- the layer ---------------------------------------------------------------------------------------------


def _per_direction_reference(layer, x):
    """docs/2d-ssm.md, 'Directions and channel sharing', literally: y = Σ_d F_d(K_d (*)causal F_d(x)) + D x, with the
    reference kernel and conv."""
    A, B, C = _constrain(layer.A_logit, layer.B_logit, layer.C, layer.parameterisation)
    height, width = x.shape[-2:]
    kernels = reference.ssm2d_kernel(A, B, C, height, width).view(layer.directions, layer.n_ssm, height, width)
    flips = [(), (-2,), (-1,), (-2, -1)] if layer.directions == 4 else [(), (-2, -1)]
    y = layer.D[:, None, None] * x
    channel_kernel = torch.arange(x.shape[1]) % layer.n_ssm
    for d, f in enumerate(flips):
        xf = x.flip(f) if f else x
        yf = reference.fft_conv2d(xf, kernels[d][channel_kernel])
        y = y + (yf.flip(f) if f else yf)
    return y


@pytest.mark.parametrize('directions', [2, 4])
@pytest.mark.parametrize('complex_param', [None, 'cartesian', 'polar'])
@pytest.mark.parametrize('fused', [True, False])
@pytest.mark.parametrize('dim', [6, 5])
def test_ssm2d_equals_per_direction_reference(directions, complex_param, fused, dim):
    torch.manual_seed(0)
    layer = SSM2D(dim, d_state=3, n_ssm=2, directions=directions, complex=complex_param is not None,
                  complex_param=complex_param or 'cartesian', fused=fused).double()
    x = torch.randn(2, dim, 5, 7, dtype=torch.float64)
    torch.testing.assert_close(layer(x), _per_direction_reference(layer, x), rtol=1e-10, atol=1e-10)
    nhwc = SSM2D(dim, d_state=3, n_ssm=2, directions=directions, complex=complex_param is not None,
                 complex_param=complex_param or 'cartesian', fused=fused, input_fmt='NHWC').double()
    nhwc.load_state_dict(layer.state_dict())
    torch.testing.assert_close(nhwc(x.permute(0, 2, 3, 1)), layer(x).permute(0, 2, 3, 1))


def test_ssm2d_defaults_init_and_parameter_count():
    layer = SSM2D(192)
    assert (layer.d_state, layer.n_ssm, layer.directions, layer.complex, layer.fused) == (16, 8, 4, False, True)
    assert isinstance(layer.norm, nn.Identity)
    # 8 N S + dim, real; 16 N S + dim, complex (docs/2d-ssm.md, 'Parameterisation')
    assert sum(p.numel() for p in layer.parameters()) == 8 * 16 * 32 + 192
    assert sum(p.numel() for p in SSM2D(192, complex=True).parameters()) == 16 * 16 * 32 + 192
    assert abs(torch.sigmoid(layer.A_logit).mean().item() - 0.5) < 0.02  # A ≈ 0.5 (docs/2d-ssm.md, 'Initialisation')
    cplx = SSM2D(8, complex=True)
    assert cplx.A_logit.min() >= 0.5 and cplx.A_logit.max() <= 3.0


def test_ssm2d_cache_is_invalidated():
    torch.manual_seed(0)
    layer = SSM2D(4, d_state=2, n_ssm=2).eval()
    x = torch.randn(1, 4, 3, 5)
    with torch.no_grad():
        before = layer(x)
        layer.A_logit.add_(0.5)  # e.g. an optimiser step while in eval mode
        after = layer(x)
        assert not torch.allclose(before, after)
        fresh = SSM2D(4, d_state=2, n_ssm=2).eval()
        fresh.load_state_dict(layer.state_dict())
        torch.testing.assert_close(fresh(x), after)
        layer.load_state_dict(SSM2D(4, d_state=2, n_ssm=2).state_dict())
        assert not layer._kernel_cache
    # eval with gradients: fresh kernel, gradients reach the SSM parameters
    layer(x).sum().backward()
    assert layer.A_logit.grad is not None


def test_ssm2d_bad_arguments():
    with pytest.raises(ValueError, match='directions'):
        SSM2D(4, directions=3)
    with pytest.raises(ValueError, match='complex_param'):
        SSM2D(4, complex=True, complex_param='euler')
    with pytest.raises(ValueError, match=r'x must have shape \(B, dim, H, W\) with dim=4'):
        SSM2D(4)(torch.randn(1, 3, 5, 5))


def test_traces_with_torch_compile_fullgraph():
    """The eval-mode cache is bypassed under torch.compile, so layer and models trace as one graph."""
    torch.manual_seed(0)
    layer = SSM2D(8, d_state=4, n_ssm=2)
    x = torch.randn(2, 8, 5, 6)
    for mode in (True, False):
        layer.train(mode)
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(layer, backend='eager', fullgraph=True)(x), layer(x))
    model = timm.create_model('vit_cifar_patch4_32_ssm2d', depth=1).eval()
    images = torch.randn(1, 3, 24, 40)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model, backend='eager', fullgraph=True)(images), model(images))


@pytest.mark.parametrize("grid,window,shift", [((7, 7), (7, 7), (3, 3)), ((14, 21), (7, 7), (3, 3)),
                                               ((5, 9), (4, 4), (2, 2)), ((8, 8), (4, 7), (0, 3)),
                                               ((8, 12), (4, 4), (3, 0)), ((4, 4), (4, 4), (1, 2))])
def test_swin_block_attention_mask_equals_timms(grid, window, shift):
    """Our block's shifted-window mask (index comparisons, compiles with inductor) equals timm's (slice assignments),
    from the padded input (dynamic mask) and from input_resolution (buffer)."""
    from timm.models.swin_transformer import SwinTransformerBlock

    from ssm_plugins.models.ssm2d import SwinTransformerSSM2DBlock

    block = SwinTransformerBlock(dim=8, input_resolution=grid, num_heads=1, window_size=window, shift_size=0,
                                 dynamic_mask=True)
    block.window_size, block.shift_size, block.window_area = window, shift, window[0] * window[1]
    padded = torch.zeros(1, -(-grid[0] // window[0]) * window[0], -(-grid[1] // window[1]) * window[1], 8)
    expected = SwinTransformerBlock.get_attn_mask(block, padded)
    assert (expected != 0).any() and (expected == 0).any()
    assert torch.equal(SwinTransformerSSM2DBlock.get_attn_mask(block, padded), expected)
    from_size = dict(device=torch.device("cpu"), dtype=torch.float32)
    assert torch.equal(SwinTransformerSSM2DBlock.get_attn_mask(block, **from_size),
                       SwinTransformerBlock.get_attn_mask(block, **from_size))
