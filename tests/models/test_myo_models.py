"""Myosotis family as timm models (Myosotis, arXiv 2509.20503; docs/myosotis.md: 'Edge weights' and 'Readout'
for the layer, 'Block and GLU' for the block, 'Backbones' for the mixer and models).

The timm contract of every registered model is tests/models/test_contract.py; here: the paper's configs, the
models' structure, weight-decay groups, unpooled heads. The layer: MyoSSM equals a dense solve of T x = v built from the
edge-weight formula of docs/myosotis.md ('Edge weights'), and the reference ops. The paper reports no parameter
counts (Sec. 4); the count test checks the S5-identical per-layer count instead (docs/myosotis.md, 'Edge weights'
and 'S5 settings').
"""
import functools
import math
import re

import pytest
import timm
import torch
import torch.nn as nn

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins import ops
from ssm_plugins.layers import MyoBlock, MyoMixer2d, MyoSSM
from ssm_plugins.layers.myo import hippo_n_init
from ssm_plugins.models.myo import MyoNet, MyoPix
from ssm_plugins.ops import reference

MODELS = timm.list_models(module='myo')
REQUIRED = {'myopix_zcifar', 'myonet_tiny', 'myonet_small', 'myonet_base'}
# tiny configs of the same classes for the slower checks; forward/backward runs the registered defaults
SMALL = {
    'myopix_zcifar': dict(embed_dim=32, depth=2, state_size=16, blocks=1),
    'myonet_tiny': dict(dims=(16, 32, 48, 64), depths=(1, 1, 2, 1)),
    'myonet_small': dict(dims=(16, 32, 48, 64), depths=(1, 1, 2, 1)),
    'myonet_base': dict(dims=(16, 32, 48, 64), depths=(1, 1, 2, 1)),
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _sizes(name):
    """Two small input sizes, the second one non-square (any size works: ceil quadtrees, padded strides)."""
    return ((32, 32), (20, 28)) if name.startswith('myopix') else ((64, 64), (40, 72))


@functools.lru_cache(maxsize=None)
def _built(name, small=True):
    torch.manual_seed(0)
    return timm.create_model(name, **(SMALL[name] if small else {}))


def test_family_is_registered():
    assert REQUIRED <= set(MODELS), MODELS


def test_myopix_rejects_a_quadtree_deeper_than_its_level_embeddings():
    model = _built('myopix_zcifar')
    with pytest.raises(ValueError, match=re.escape('input size (33, 32)') + '.*7-level quadtree'):
        model(torch.randn(1, 3, 33, 32))
    zero = timm.create_model('myopix_zcifar', virtual_init='zero', **SMALL['myopix_zcifar'])
    assert zero(torch.randn(1, 3, 33, 32)).shape == (1, 10)  # no per-level parameters: any size


@pytest.mark.parametrize('name', ['myopix_zcifar', 'myonet_tiny'])
def test_no_weight_decay_is_s5s_ssm_group(name):
    model = _built(name)
    no_decay = model.no_weight_decay()
    assert not any(n.endswith(('.ssm.B', '.ssm.C')) for n in no_decay)  # B̃, C̃ decay (S5 BfastandCdecay)
    from timm.optim import create_optimizer_v2

    optimizer = create_optimizer_v2(model, 'adamw', lr=1e-3, weight_decay=0.05)
    decayed = {id(p) for g in optimizer.param_groups if g['weight_decay'] > 0 for p in g['params']}
    assert not any(id(p) in decayed for n, p in model.named_parameters() if n in no_decay)


@pytest.mark.parametrize('name', ['myopix_zcifar', 'myonet_tiny'])
def test_reset_classifier_without_pooling(name):
    torch.manual_seed(0)
    model = timm.create_model(name, **SMALL[name]).eval()
    x = torch.randn(2, 3, *_sizes(name)[1])
    model.reset_classifier(0, '')
    out = model.forward_head(model.forward_features(x))
    assert out.shape == ((2, 20 * 28 + 10 * 14 + 5 * 7 + 3 * 4 + 2 * 2 + 1, 32) if name.startswith('myopix') else
                         (2, 64, 2, 3))  # all quadtree nodes / the NCHW last-stage map (timm's default layout)


# ---- myopix: the paper's S5 architecture --------------------------------------------------------------------


def test_myopix_zcifar_is_the_s5_cifar_config():
    model = timm.create_model('myopix_zcifar', device='meta')
    assert len(model.blocks) == 6 and model.embed_dim == 512 and model.num_classes == 10
    ssm = model.blocks[0].ssm
    assert (ssm.state_size, ssm.num_heads, ssm.blocks, ssm.C_init) == (384, 192, 3, 'lecun_normal')
    block = model.blocks[0]
    assert isinstance(block.norm, nn.BatchNorm1d) and block.norm.momentum == 0.05 and block.glu == 'half_glu1'
    assert block.drop.p == 0.1 and isinstance(block.drop, nn.Dropout1d)
    assert model.level_embed.shape == (5, 512)  # 32x32 quadtree: 6 levels, 5 virtual


def test_myopix_virtual_inputs_and_readout():
    torch.manual_seed(0)
    model = timm.create_model('myopix_zcifar', virtual_init='mean', readout_levels=1, **SMALL['myopix_zcifar'])
    x = torch.randn(1, 3, 5, 6)
    nodes, layout = model._embed(x)
    leaves = model.encoder(x.flatten(2).transpose(1, 2))
    # the root (last node) is the mean of all leaves; a level-2 node the mean of its (up to) 2x2 block
    torch.testing.assert_close(nodes[:, -1], leaves.mean(1))
    grid = leaves.reshape(1, 5, 6, -1)
    torch.testing.assert_close(nodes[:, 30], grid[:, 0:2, 0:2].mean((1, 2)))
    torch.testing.assert_close(nodes[:, 30 + 3 * 2 + 2], grid[:, 4:5, 4:6].mean((1, 2)))  # ragged corner
    features = model.forward_features(x)
    torch.testing.assert_close(model.forward_head(features, pre_logits=True), features[:, -1])  # root only
    model.readout_levels = None
    torch.testing.assert_close(model.forward_head(features, pre_logits=True), features.mean(1))
    embed = timm.create_model('myopix_zcifar', **SMALL['myopix_zcifar'])
    assert torch.count_nonzero(embed.level_embed) == 0  # learned per-level inputs, zero init (docs/myosotis.md)


def test_myopix_block_sequence_matches_manual_composition():
    torch.manual_seed(0)
    model = timm.create_model('myopix_zcifar', **SMALL['myopix_zcifar']).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        nodes, layout = model._embed(x)
        tree = layout.tree
        for block in model.blocks:
            z = block.norm(nodes.transpose(1, 2)).transpose(1, 2)
            y = nn.functional.silu(block.ssm(z, tree))
            nodes = nodes + y * torch.sigmoid(block.gate(y))  # half_glu1, dropout off in eval
        torch.testing.assert_close(model(x), model.head(nodes.mean(1)))


# ---- MyoNet ------------------------------------------------------------------------------------------------


def test_myonet_configs_and_parameter_counts():
    expected = {'myonet_tiny': ((96, 192, 384, 768), (2, 2, 6, 2), 0.2),
                'myonet_small': ((96, 192, 384, 768), (2, 2, 18, 2), 0.3),
                'myonet_base': ((128, 256, 512, 1024), (2, 2, 18, 2), 0.5)}
    for name, (dims, depths, drop_path) in expected.items():
        model = timm.create_model(name, device='meta')
        assert [len(s.blocks) for s in model.stages] == list(depths)
        assert [s.blocks[0].mixer.dim for s in model.stages] == list(dims)
        assert [i['reduction'] for i in model.feature_info] == [4, 8, 16, 32]
        last = model.stages[-1].blocks[-1].drop_path2
        assert math.isclose(last.drop_prob, drop_path, rel_tol=1e-6)
        mixer = model.stages[0].blocks[0].mixer
        assert mixer.ssm.num_heads == dims[0] // 2 and isinstance(mixer.dwconv, nn.Conv2d)
    # no paper numbers (docs/myosotis.md 'Backbones', [X]); the tiny model is in the Swin-T / ConvNeXt-T range by design
    count = sum(p.numel() for p in timm.create_model('myonet_tiny', device='meta').parameters())
    assert 25e6 < count < 32e6, count


def test_myonet_mixer_sees_a_channels_last_stage_map():
    torch.manual_seed(0)
    model = timm.create_model('myonet_tiny', **SMALL['myonet_tiny']).eval()
    shapes = []
    for stage in model.stages:
        for block in stage.blocks:
            block.mixer.register_forward_hook(lambda m, args, out: shapes.append(tuple(args[0].shape)))
    with torch.no_grad():
        model(torch.randn(1, 3, 50, 70))
    assert shapes == [(1, 13, 18, 16), (1, 7, 9, 32), (1, 4, 5, 48), (1, 4, 5, 48), (1, 2, 3, 64)]


# ---- the layer -------------------------------------------------------------------------------------------


def _dense_edge_weights(layer, depth, arity):
    """docs/myosotis.md, 'Edge weights', literally: b_{n,ℓ} = -exp(λ_n Δ_n k^(ℓ-1)) / (k_max + 1),
    λ = min(Λre, -1e-4) + iΛim."""
    lam = torch.complex(torch.minimum(layer.Lambda_re, torch.tensor(-1e-4, dtype=torch.float64)), layer.Lambda_im)
    step = layer.log_step.exp()
    rows = []
    for level in range(depth - 1):
        span = arity ** level if layer.level_step == 'span' else 1
        rho = torch.exp(lam * step * span)
        rows.append(-(rho.abs() if layer.real else rho) / (arity + 1))
    return torch.stack(rows, dim=1)  # (P_c, D-1)


def _dense_myo_ssm(layer, u, tree):
    """y = 2 Re(C̃ T⁻¹ B̃ u) + D u with T built densely (1 on the diagonal, b at (v, par v), conj b at (par v, v))."""
    B = torch.view_as_complex(layer.B.detach().contiguous())
    C = torch.view_as_complex(layer.C.detach().contiguous())
    v = u.to(torch.complex128) @ B.T  # (batch, N, P_c)
    b = _dense_edge_weights(layer, len(tree.level_sizes), tree.arity).detach().to(torch.complex128)
    coupling = -1 if layer.coupling == 'skew' else 1
    xs = []
    for head in range(layer.num_heads):
        T = torch.eye(tree.parent.numel(), dtype=torch.complex128)
        for node, par in enumerate(tree.parent.tolist()):
            if par >= 0:
                w = b[head, tree.level[node]]
                T[node, par] = w
                T[par, node] = coupling * w.conj()
        xs.append(torch.linalg.solve(T, v[..., head].T).T)
    x = torch.stack(xs, dim=-1)
    y = (x @ C.T).real
    return (2 * y if layer.conj_sym else y) + layer.D.detach() * u


@pytest.mark.parametrize('options', [
    dict(), dict(level_step='none'), dict(real=True), dict(coupling='skew'), dict(conj_sym=False, state_size=6),
    dict(C_init='complex_normal', blocks=2), dict(C_init='lecun_normal')])
@pytest.mark.parametrize('tree_kind', ['quad', 'kary'])
def test_myo_ssm_equals_dense_solve(options, tree_kind):
    torch.manual_seed(0)
    kwargs = dict(dim=5, state_size=8, blocks=1)
    kwargs.update(options)
    layer = MyoSSM(**kwargs).double()
    with torch.no_grad():
        layer.Lambda_re[0] = 0.3  # the clip Re λ <= -1e-4 must act
    tree = ops.myo_quadtree(3, 5) if tree_kind == 'quad' else ops.myo_tree(11, 3)
    u = torch.randn(2, tree.parent.numel(), 5, dtype=torch.float64)
    torch.testing.assert_close(layer(u, tree), _dense_myo_ssm(layer, u, tree), rtol=1e-10, atol=1e-10)


def test_myo_ssm_equals_reference_ops_and_gradients_flow():
    torch.manual_seed(0)
    layer = MyoSSM(6, 8, 2).double()
    tree = ops.myo_quadtree(4, 6)
    u = torch.randn(2, tree.parent.numel(), 6, dtype=torch.float64)
    B = torch.view_as_complex(layer.B.contiguous())
    C = torch.view_as_complex(layer.C.contiguous())
    b = layer.edge_weights(len(tree.level_sizes), 4)
    x = reference.myo_solve_pyramid2d(u.to(torch.complex128) @ B.T, b, tree.grid_sizes)
    expected = 2 * (x @ C.T).real + layer.D * u
    out = layer(u, tree)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)
    # the same level-shared system through the general per-node reference
    rows = torch.cat([b.T, b.new_zeros(1, b.shape[0])]).unsqueeze(0)
    x_general = reference.myo_solve(u.to(torch.complex128) @ B.T, rows, tree.parent, tree.level)
    torch.testing.assert_close(x_general, x, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(out.square().sum(), list(layer.parameters()))
    grads_ref = torch.autograd.grad(expected.square().sum(), list(layer.parameters()))
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref, rtol=1e-8, atol=1e-8)


def test_myo_ssm_init_is_hippo_n_and_diagonally_dominant():
    torch.manual_seed(0)
    layer = MyoSSM(16, 32, 2)
    assert torch.allclose(layer.Lambda_re, torch.full((16,), -0.5))
    # HiPPO-N: the kept eigenvalues are eigenvalues of S = A_LegS + p pᵀ (block size 16)
    lam, V, Vinv = hippo_n_init(16, 2)
    n = torch.arange(16, dtype=torch.float64)
    S = torch.tril(-torch.sqrt(torch.outer(2 * n + 1, 2 * n + 1)), -1) - torch.diag(n + 1) + torch.outer(
        torch.sqrt(n + .5), torch.sqrt(n + .5))
    eig = torch.linalg.eigvals(S)
    for value in lam[:8]:
        assert (eig - value).abs().min() < 1e-8
    torch.testing.assert_close(layer.Lambda_im.double(), lam.imag, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(Vinv @ V, torch.eye(16, dtype=torch.complex128), rtol=1e-10, atol=1e-10)
    step = layer.log_step.exp()
    assert step.min() >= 1e-3 and step.max() <= 1e-1
    with torch.no_grad():
        layer.Lambda_re.uniform_(-1, 1)  # any parameters: |b| < 1/(k+1)
    b = layer.edge_weights(6, 4)
    assert b.shape == (16, 5) and b.abs().max() < 1 / 5
    # S5-identical parameter count: Λre, Λim, log Δ (P_c each), B̃, C̃ (complex P_c x H), D (H)
    assert sum(p.numel() for p in layer.parameters()) == 3 * 16 + 4 * 16 * 16 + 16


def test_myo_ssm_runs_in_float32_under_low_precision():
    torch.manual_seed(0)
    layer = MyoSSM(4, 4)
    tree = ops.myo_tree(9, 2)
    u = torch.randn(1, tree.parent.numel(), 4)
    out = layer(u.to(torch.bfloat16), tree)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), layer(u.to(torch.bfloat16).float(), tree), rtol=1e-2, atol=1e-2)


def test_myo_block_and_mixer():
    torch.manual_seed(0)
    tree = ops.myo_quadtree(3, 4)
    block = MyoBlock(6, 4, norm='layer', glu='half_glu2').eval()
    x = torch.randn(2, tree.parent.numel(), 6)
    y_pre = block.ssm(block.norm(x), tree)
    torch.testing.assert_close(block(x, tree), x + y_pre * torch.sigmoid(block.gate(nn.functional.silu(y_pre))))
    assert block(x, tree, node_mask=torch.ones(2, 12, dtype=torch.bool)).shape == x.shape

    mixer = MyoMixer2d(6, dwconv=False).double()
    img = torch.randn(2, 3, 5, 6, dtype=torch.float64)
    # transient virtual nodes == persistent solve with zero virtual inputs, read at the leaves
    tree = ops.myo_quadtree(3, 5)
    leaves = img.reshape(2, 15, 6)
    nodes = torch.cat([leaves, leaves.new_zeros(2, tree.parent.numel() - 15, 6)], dim=1)
    ssm_out = mixer.ssm(nodes, tree)[:, :15] - mixer.ssm.D * nodes[:, :15] + mixer.ssm.D * leaves
    expected = mixer.proj(ssm_out.reshape(2, 3, 5, 6) * nn.functional.silu(mixer.in_gate(img)))
    torch.testing.assert_close(mixer(img), expected, rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match=re.escape('x must have shape (B, H, W, dim) with dim=6')):
        mixer(torch.randn(1, 6, 3, 5))


def test_layer_bad_arguments():
    with pytest.raises(ValueError, match='state_size must be a multiple of 4'):
        MyoSSM(4, 6, blocks=2)
    with pytest.raises(ValueError, match='C_init'):
        MyoSSM(4, 4, C_init='zeros')
    with pytest.raises(ValueError, match='level_step'):
        MyoSSM(4, 4, level_step='depth')
    with pytest.raises(ValueError, match='glu'):
        MyoBlock(4, 4, glu='full')
    with pytest.raises(ValueError, match=re.escape('u must have shape (B, N, dim) with dim=4')):
        MyoSSM(4, 4)(torch.randn(1, 7, 3), ops.myo_tree(4, 2))
    with pytest.raises(ValueError, match='virtual_init'):
        MyoPix(virtual_init='ones')
    with pytest.raises(ValueError, match='dims and depths'):
        MyoNet(dims=(8, 16), depths=(1,))


def test_mixer_shift_rolls_the_map_around_the_solve():
    torch.manual_seed(0)
    plain = MyoMixer2d(4, dwconv=False).double()
    shifted = MyoMixer2d(4, dwconv=False, shift=True).double()
    shifted.load_state_dict(plain.state_dict())
    img = torch.randn(1, 8, 8, 4, dtype=torch.float64)  # 4-level quadtree: roll by 2^(4-3) = 2
    gate = nn.functional.silu(plain.in_gate(img))
    rolled = torch.roll(img, (2, 2), dims=(1, 2))
    y = plain.ssm(rolled.reshape(1, 64, 4), ops.myo_quadtree(8, 8), virtual='transient').reshape(1, 8, 8, 4)
    expected = plain.proj(torch.roll(y, (-2, -2), dims=(1, 2)) * gate)
    torch.testing.assert_close(shifted(img), expected, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(shifted(img), plain(img))
    model = timm.create_model('myonet_tiny', shift=True, **SMALL['myonet_tiny'])
    assert [b.mixer.shift for b in model.stages[2].blocks] == [False, True]
    assert model(torch.randn(1, 3, 40, 72)).shape == (1, 1000)


def test_compiles_with_torch_compile_fullgraph():
    """The tree builders read no tensor values, so the whole model traces as one graph (fullgraph=True): no
    graph break (issue #13). aot_eager also traces the backward through the solve op."""
    torch.manual_seed(0)
    mixer = MyoMixer2d(8).eval()
    x = torch.randn(1, 5, 6, 8)
    model = timm.create_model('myopix_zcifar', embed_dim=16, depth=1, state_size=8, blocks=1).eval()
    img = torch.randn(1, 3, 8, 8)
    torch._dynamo.reset()
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(mixer, backend='eager', fullgraph=True)(x), mixer(x))
        torch.testing.assert_close(torch.compile(model, backend='eager', fullgraph=True)(img), model(img))


def test_myo_ssm_projection_init_scales_follow_s5():
    """S5 (jax lecun_normal): B₀ (P, H) std 1/sqrt(P); complex C (H, P) per part 1/sqrt(P H) (lecun_normal) or
    1/sqrt(P) (trunc_standard_normal, row by row); V has orthonormal columns, so the rms survives V⁻¹ / V."""
    torch.manual_seed(0)
    P, H = 128, 64
    expected_c = {'lecun_normal': math.sqrt(2 / (P * H)), 'trunc_standard_normal': math.sqrt(2 / P),
                  'complex_normal': 1.0}
    for C_init, c_rms in expected_c.items():
        layer = MyoSSM(H, P, 1, C_init=C_init)
        B = torch.view_as_complex(layer.B.contiguous())
        C = torch.view_as_complex(layer.C.contiguous())
        assert math.isclose(B.abs().pow(2).mean().sqrt().item(), 1 / math.sqrt(P), rel_tol=0.1)
        assert math.isclose(C.abs().pow(2).mean().sqrt().item(), c_rms, rel_tol=0.1), C_init


@pytest.mark.parametrize('name', ['myopix_zcifar', 'myonet_tiny'])
def test_group_matcher_supports_layer_decay(name):
    from timm.optim import create_optimizer_v2

    model = timm.create_model(name, **SMALL[name])
    optimizer = create_optimizer_v2(model, 'adamw', lr=1e-3, weight_decay=0.05, layer_decay=0.7)
    assert sum(len(g['params']) for g in optimizer.param_groups) == len(list(model.parameters()))
    assert len({g['lr_scale'] for g in optimizer.param_groups}) > 2


def test_myo_block_without_glu_is_plain_silu():
    torch.manual_seed(0)
    tree = ops.myo_tree(7, 2)
    block = MyoBlock(4, 4, glu='none', dropout=0.5).eval()
    x = torch.randn(1, tree.parent.numel(), 4)
    z = block.norm(x.transpose(1, 2)).transpose(1, 2)
    torch.testing.assert_close(block(x, tree), x + nn.functional.silu(block.ssm(z, tree)))
    assert block.gate is None


def test_myopix_zcifar_parameter_count_equals_s5_cifar_network():
    """The paper reports no parameter counts (Sec. 4); Myo's heads carry exactly S5's parameters (docs/myosotis.md,
    'Edge weights'), so myopix_zcifar = the S5 sCIFAR network ('S5 settings') + 5 learned virtual-level inputs of
    width 512."""
    depth, dim, heads = 6, 512, 192
    s5_layer = (3 * heads + 4 * heads * dim + dim) + 2 * dim + (dim * dim + dim)  # SSM, BatchNorm, GLU dense
    s5 = (3 * dim + dim) + depth * s5_layer + (dim * 10 + 10)  # encoder, layers, decoder
    model = timm.create_model('myopix_zcifar', device='meta')
    count = sum(p.numel() for p in model.parameters())
    assert count == s5 + 5 * dim
    assert abs(count - 3.955e6) / 3.955e6 < 0.01
