"""MambaMixer / QSMixer layers (MambaMixer, arXiv:2403.19888 v2, Sec. 2; docs/mambamixer.md): shapes, gradients,
equality with direct computations."""

import pytest
import torch
import torch.nn.functional as F

from ssm_plugins.layers.mambamixer import (MambaMixerBlock, MixerStack, QSMixerBlock, SelectiveChannelMixer,
                                           SelectiveTokenMixer, TimeVariateMixerBlock, resample_token_axis)
from ssm_plugins.layers.multires_conv import ConvTokenInteraction, MultiResolutionConvGate, SpatialPriorModule
from ssm_plugins.layers.switch_of_scans import SCAN_NAMES, SwitchOfScans, gather_tokens, scan_orders
from ssm_plugins.ops import reference

DIM, TOKENS, BATCH = 8, 7, 2  # odd token count on purpose


def _input(batch=BATCH, tokens=TOKENS, dim=DIM, dtype=torch.float64, grad=False):
    return torch.randn(batch, tokens, dim, dtype=dtype, requires_grad=grad)


def _conv(conv_module, x):
    """Direct depthwise conv of (batch, L, C) with the module's padding."""
    return F.conv1d(F.pad(x.transpose(1, 2), conv_module.pad), conv_module.conv.weight, conv_module.conv.bias,
                    groups=conv_module.conv.groups).transpose(1, 2)


@pytest.mark.parametrize("token_mixer", ["s6", "s6_bi", "qs"])
@pytest.mark.parametrize("selection_input", ["block_input", "conv_output"])
def test_token_mixer_shapes_and_backward(token_mixer, selection_input):
    torch.manual_seed(0)
    layer = SelectiveTokenMixer(DIM, d_state=4, token_mixer=token_mixer, selection_input=selection_input,
                                headdim=4).double()
    u = _input(grad=True)
    y = layer(u)
    assert y.shape == u.shape and torch.isfinite(y).all()
    y.square().sum().backward()
    assert u.grad is not None and torch.isfinite(u.grad).all()
    for name, p in layer.named_parameters():
        if name == "gamma_proj.weight":
            continue  # zero init: gets a gradient, but it is checked to exist only
        assert p.grad is not None, name


def test_token_mixer_mamba_init():
    torch.manual_seed(0)
    layer = SelectiveTokenMixer(32, d_state=16)
    assert layer.fwd.dt_rank == 2  # ⌈32/16⌉
    assert torch.allclose(-torch.exp(layer.fwd.A_log[5]), -torch.arange(1, 17, dtype=torch.float32))
    assert torch.equal(layer.D, torch.ones(64))
    dt = F.softplus(layer.fwd.dt_bias)
    assert dt.min() >= 1e-4 - 1e-9 and dt.max() <= 0.1 + 1e-6
    assert layer.in_proj.bias is None and layer.out_proj.bias is None and layer.gate_proj.bias is None
    assert layer.conv.conv.bias is not None
    assert set(layer.no_weight_decay_names) == {"D", "fwd.A_log", "fwd.dt_bias"}
    qs = SelectiveTokenMixer(32, token_mixer="qs", headdim=16)
    a = torch.exp(qs.fwd.A_log)
    assert a.shape == (4,) and (a >= 1).all() and (a <= 16).all()
    assert set(qs.no_weight_decay_names) == {"gamma_bias", "fwd.A_log", "fwd.dt_bias", "bwd.A_log", "bwd.dt_bias"}


def test_s6_token_mixer_equals_direct_computation():
    torch.manual_seed(1)
    layer = SelectiveTokenMixer(DIM, d_state=4, token_mixer="s6_bi").double()
    u = _input()
    xbar = F.silu(_conv(layer.conv, u @ layer.in_proj.weight.T))
    gate = torch.cat([_conv(c, u) for c in layer.gate_convs], -1) @ layer.gate_proj.weight.T

    def scan(direction, x, sel, D):
        proj = sel @ direction.x_proj.weight.T
        r, n = direction.dt_rank, direction.d_state
        dt = proj[..., :r] @ direction.dt_proj.weight.T
        return reference.selective_scan(x.transpose(1, 2), dt.transpose(1, 2), -torch.exp(direction.A_log),
                                        proj[..., r:r + n].transpose(1, 2), proj[..., r + n:].transpose(1, 2),
                                        D, delta_bias=direction.dt_bias, delta_softplus=True).transpose(1, 2)

    mixed = scan(layer.fwd, xbar, u, layer.D) + scan(layer.bwd, xbar.flip(1), u.flip(1), None).flip(1)
    expected = (mixed * F.silu(gate)) @ layer.out_proj.weight.T
    torch.testing.assert_close(layer(u), expected, rtol=1e-9, atol=1e-9)


def test_causal_s6_token_mixer_is_causal():
    torch.manual_seed(2)
    layer = SelectiveTokenMixer(DIM, d_state=4).double()
    u = _input()
    u2 = u.clone()
    u2[:, 4:] += 1.0
    torch.testing.assert_close(layer(u)[:, :4], layer(u2)[:, :4])


def test_qs_token_mixer_equals_dense_matrix():
    torch.manual_seed(3)
    layer = SelectiveTokenMixer(DIM, d_state=4, token_mixer="qs", headdim=4).double()
    with torch.no_grad():
        layer.gamma_proj.weight.normal_()  # exercise the data-dependent diagonal
    u = _input()
    xbar = F.silu(_conv(layer.conv, u @ layer.in_proj.weight.T))
    gate = torch.cat([_conv(c, u) for c in layer.gate_convs], -1) @ layer.gate_proj.weight.T
    heads, n = 4, 4

    def sel(direction):
        proj = u @ direction.x_proj.weight.T
        return proj[..., :heads], proj[..., heads:heads + n].unsqueeze(2), proj[..., heads + n:].unsqueeze(2)

    (dt, B, C), (dt_r, B_r, C_r) = sel(layer.fwd), sel(layer.bwd)
    gamma = layer.gamma_bias + xbar @ layer.gamma_proj.weight.T
    Q = reference.qs_matrix(dt, -torch.exp(layer.fwd.A_log)[:, None], B, C, dt_r, -torch.exp(layer.bwd.A_log)[:, None],
                            B_r, C_r, gamma, dt_bias=layer.fwd.dt_bias, dt_bias_rev=layer.bwd.dt_bias,
                            dt_softplus=True)  # (batch, H, L, L)
    xh = xbar.reshape(BATCH, TOKENS, heads, 4)
    mixed = torch.einsum("bhtk,bkhp->bthp", Q, xh).reshape(BATCH, TOKENS, -1)
    expected = (mixed * F.silu(gate)) @ layer.out_proj.weight.T
    torch.testing.assert_close(layer(u), expected, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("qs_shift", ["exact", "hydra"])
def test_channel_mixer_equals_dense_qs_along_channels(qs_shift):
    torch.manual_seed(4)
    layer = SelectiveChannelMixer(DIM, TOKENS, d_state=3, qs_shift=qs_shift).double()
    with torch.no_grad():
        layer.gamma.normal_()
    u = _input()
    z = u.transpose(1, 2)  # (batch, D, L)

    def sel(direction):
        proj = z @ direction.x_proj.weight.T  # (batch, D, 1 + 2N)
        return proj[..., :1], proj[..., 1:4].unsqueeze(2), proj[..., 4:].unsqueeze(2)

    (dt, B, C), (dt_r, B_r, C_r) = sel(layer.fwd), sel(layer.bwd)
    Q = reference.qs_matrix(dt, -torch.exp(layer.fwd.A_log)[:, None], B, C, dt_r, -torch.exp(layer.bwd.A_log)[:, None],
                            B_r, C_r, layer.gamma[None, :, None].expand(BATCH, DIM, 1), dt_bias=layer.fwd.dt_bias,
                            dt_bias_rev=layer.bwd.dt_bias, dt_softplus=True, qs_shift=qs_shift)[:, 0]  # (batch, D, D)
    mixed = torch.einsum("bck,blk->blc", Q, u)  # Q applied along channels, for every token
    expected = mixed * F.silu(u @ layer.gate_proj.weight.T)
    torch.testing.assert_close(layer(u), expected, rtol=1e-9, atol=1e-9)


def test_channel_mixer_diag_shapes_backward_and_noncausal():
    torch.manual_seed(5)
    layer = SelectiveChannelMixer(DIM, TOKENS, d_state=3, channel_qs_param="diag").double()
    assert layer.fwd.A_log.shape == (TOKENS, 3)
    u = _input(grad=True)
    y = layer(u)
    assert y.shape == u.shape
    y.sum().backward()
    assert all(p.grad is not None for p in layer.parameters())
    # non-causal along channels: changing the last channel changes the output at channel 0
    u2 = u.detach().clone()
    u2[..., -1] += 1.0
    assert not torch.allclose(layer(u.detach())[..., 0], layer(u2)[..., 0])


@pytest.mark.parametrize("block_cls", [MambaMixerBlock, QSMixerBlock])
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_blocks_shapes_backward_drop_path(block_cls, norm):
    torch.manual_seed(6)
    kwargs = dict(d_state=4, headdim=4) if block_cls is QSMixerBlock else dict(d_state=4)
    block = block_cls(DIM, TOKENS, drop_path=0.5, norm=norm, **kwargs)
    x = _input(batch=4, dtype=torch.float32, grad=True)
    block.train()
    y = block(x)
    assert y.shape == x.shape
    y.sum().backward()
    assert torch.isfinite(x.grad).all()
    block.eval()
    torch.testing.assert_close(block(x), block(x))
    names = set(block.no_weight_decay_names)
    assert "channel_mixer.gamma" in names and "token_mixer.fwd.A_log" in names
    params = dict(block.named_parameters())
    assert all(n in params for n in names)


def test_block_without_channel_mixer():
    block = MambaMixerBlock(DIM, TOKENS, channel_mixer=False, d_state=4)
    assert block.channel_mixer is None
    assert block(_input(dtype=torch.float32)).shape == (BATCH, TOKENS, DIM)


def test_float32_matches_float64():
    torch.manual_seed(7)
    block = QSMixerBlock(DIM, TOKENS, d_state=4, headdim=4)
    x = _input(dtype=torch.float32)
    y32 = block(x)
    y64 = block.double()(x.double())
    torch.testing.assert_close(y32.double(), y64, rtol=1e-4, atol=1e-5)


def test_value_errors():
    with pytest.raises(ValueError, match="token_mixer"):
        SelectiveTokenMixer(DIM, token_mixer="attention")
    with pytest.raises(ValueError, match="headdim"):
        SelectiveTokenMixer(DIM, token_mixer="qs", headdim=5)
    with pytest.raises(ValueError, match="causal"):
        SelectiveTokenMixer(DIM, token_mixer="qs", headdim=4, causal=True)
    with pytest.raises(ValueError, match="gate_kernels"):
        SelectiveTokenMixer(DIM, gate_kernels=())
    with pytest.raises(ValueError, match="selection_input"):
        SelectiveTokenMixer(DIM, selection_input="x")
    with pytest.raises(ValueError, match="channel_qs_param"):
        SelectiveChannelMixer(DIM, TOKENS, channel_qs_param="full")
    with pytest.raises(ValueError, match="num_tokens"):
        SelectiveChannelMixer(DIM, 0)
    with pytest.raises(ValueError, match=r"L = 7 tokens = num_tokens"):
        SelectiveChannelMixer(DIM, TOKENS)(torch.randn(1, 9, DIM))
    with pytest.raises(ValueError, match=r"\(batch, L, dim=8\)"):
        SelectiveTokenMixer(DIM)(torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="drop_path"):
        MambaMixerBlock(DIM, TOKENS, drop_path=1.0)
    with pytest.raises(ValueError, match="norm"):
        MambaMixerBlock(DIM, TOKENS, norm="batchnorm")
    with pytest.raises(ValueError, match="token_mixer"):
        QSMixerBlock(DIM, TOKENS, token_mixer="s6")


# ---- Switch of Scans ----------------------------------------------------------------------------------------------

def test_scan_orders_are_permutations_with_inverses():
    orders, inverses = scan_orders(9, 8)
    assert orders.shape == (16, 72) == inverses.shape
    for order, inverse in zip(orders, inverses):
        assert torch.equal(order.sort().values, torch.arange(72))
        assert torch.equal(order[inverse], torch.arange(72))
    assert len({tuple(o.tolist()) for o in orders}) == 16  # all distinct once the grid exceeds the 7x7 window
    assert scan_orders(9, 8)[0] is orders  # cached


def test_scan_order_definitions():
    orders, _ = dict(zip(SCAN_NAMES, scan_orders(3, 4)[0])), None
    assert orders["C1"].tolist() == list(range(12))
    assert orders["C2"].tolist() == [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]
    assert orders["C3"].tolist() == list(range(11, -1, -1))
    assert orders["Z1"].tolist() == [0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11]  # row snake
    assert orders["Z2"].tolist() == [3, 2, 1, 0, 4, 5, 6, 7, 11, 10, 9, 8]  # row snake, horizontal flip
    assert orders["Z5"].tolist() == [0, 4, 8, 9, 5, 1, 2, 6, 10, 11, 7, 3]  # column snake
    assert orders["L1"].tolist() == [0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 10, 11]  # 2x2 windows, partial last row
    assert orders["L2"].tolist() == orders["L1"].flip(0).tolist()
    assert orders["L3"].tolist() == list(range(12))  # 7x7 window covers the 3x4 grid


def test_gather_scatter_round_trip_per_sample():
    torch.manual_seed(8)
    sos = SwitchOfScans(DIM)
    x = torch.randn(3, 20, DIM)
    order, inverse = sos.scan_index(torch.tensor([[0], [7], [13]]), (4, 5))
    scanned = gather_tokens(x, order[:, 0])
    assert torch.equal(scanned[1], x[1, scan_orders(4, 5)[0][7]])
    assert torch.equal(gather_tokens(scanned, inverse[:, 0]), x)


def test_router_picks_top_n_scans():
    torch.manual_seed(9)
    sos = SwitchOfScans(DIM, top_n=3)
    with torch.no_grad():
        sos.router.weight.zero_()
        sos.router.bias.copy_(torch.tensor([0., 1, 2, 9, 0, 0, 0, 0, 0, 7, 0, 0, 0, 8, 0, 0]))
    e = torch.randn(2, 16, DIM)
    out, scan_ids, gates, probs = sos(e, (4, 4))
    assert scan_ids.tolist() == [[3, 13, 9]] * 2
    torch.testing.assert_close(gates, torch.ones(2, 3))  # straight-through: value 1
    torch.testing.assert_close(probs.sum(-1), torch.ones(2))
    torch.testing.assert_close(out, e)  # W_lst = [I, 0] at init


def test_sos_every_parameter_gets_a_gradient():
    torch.manual_seed(10)
    sos = SwitchOfScans(DIM, top_n=16)  # every scan selected at once, cross-scan attention
    e = torch.randn(2, 16, DIM)
    out, scan_ids, gates, _ = sos(e, (4, 4))
    order, inverse = sos.scan_index(scan_ids, (4, 4))
    # a toy order-dependent mixer: causal cumulative sum along each scan
    ys = torch.stack([gather_tokens(gather_tokens(out, order[:, j]).cumsum(1), inverse[:, j]) for j in range(16)], 1)
    sos.combine(out, ys, gates).square().sum().backward()
    for name, p in sos.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_sos_top1_router_gradient_and_vmoe_gate():
    torch.manual_seed(11)
    sos = SwitchOfScans(DIM)
    out, scan_ids, gates, _ = sos(torch.randn(2, 16, DIM), (4, 4))
    y = sos.combine(out, out[:, None], gates)
    torch.testing.assert_close(y, out)  # forward value unscaled
    y.sum().backward()
    assert sos.router.weight.grad.abs().sum() > 0
    vmoe = SwitchOfScans(DIM, sos_gate="vmoe")
    _, _, g, probs = vmoe(torch.randn(2, 16, DIM), (4, 4))
    torch.testing.assert_close(g[:, 0], probs.max(-1).values)


@pytest.mark.parametrize("top_n,attn", [(1, True), (3, True), (3, False)])
def test_sos_combine_takes_the_outputs_as_a_sequence(top_n, attn):
    """combine(u, [y_1 .. y_n], gates) = combine(u, stack(y, 1), gates), values and gradients (the model passes the
    list: one selected scan then needs no stacked copy)."""
    torch.manual_seed(12)
    sos = SwitchOfScans(DIM, top_n=top_n, cross_scan_attn=attn, sos_gate="vmoe")
    out, _, gates, _ = sos(torch.randn(2, 16, DIM), (4, 4))
    ys = [torch.randn(2, 16, DIM, requires_grad=True) for _ in range(top_n)]
    got, want = sos.combine(out, ys, gates), sos.combine(out, torch.stack(ys, 1), gates)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    g = torch.randn_like(got)
    torch.testing.assert_close(torch.autograd.grad(got, ys, g), torch.autograd.grad(want, ys, g), rtol=0, atol=0)


def test_sos_with_fixed_scans_builds_no_router():
    """fixed_scans ("w/o SoS"): no router parameters, the cross-scans C1-C4 for every image, gate 1."""
    sos = SwitchOfScans(DIM, top_n=4, cross_scan_attn=False, fixed_scans=(0, 1, 2, 3))
    assert sos.router is None and not any(n.startswith("router") for n, _ in sos.named_parameters())
    e = torch.randn(2, 16, DIM)
    out, scan_ids, gates, probs = sos(e, (4, 4))
    assert scan_ids.tolist() == [[0, 1, 2, 3]] * 2 and probs is None
    torch.testing.assert_close(gates, torch.ones(2, 4))
    torch.testing.assert_close(out, e)  # the LSTs are still concatenated (W_lst = [I, 0] at init)


def test_sos_value_errors():
    with pytest.raises(ValueError, match="num_windows"):
        SwitchOfScans(DIM, num_windows=5)
    with pytest.raises(ValueError, match="top_n"):
        SwitchOfScans(DIM, top_n=17)
    with pytest.raises(ValueError, match="sos_gate"):
        SwitchOfScans(DIM, sos_gate="soft")
    with pytest.raises(ValueError, match="local_windows"):
        scan_orders(4, 4, (2,))
    with pytest.raises(ValueError, match="grid_size"):
        SwitchOfScans(DIM)(torch.randn(1, 12, DIM), (4, 4))


# ---- Multi-resolution branch ----------------------------------------------------------------------------------------

def test_spatial_prior_module_levels():
    torch.manual_seed(12)
    spm = SpatialPriorModule(DIM, inplanes=4)
    c1, tokens, sizes = spm(torch.randn(2, 3, 64, 96))
    assert c1.shape == (2, DIM, 16, 24)
    assert sizes == [(8, 12), (4, 6), (2, 3)]
    assert tokens.shape == (2, 96 + 24 + 6, DIM)
    with pytest.raises(ValueError, match=r"img must have shape \(batch, 3, H, W\)"):
        spm(torch.randn(2, 1, 64, 64))


def test_mrfp_shapes_and_per_resolution_convs():
    torch.manual_seed(13)
    mrfp = MultiResolutionConvGate(DIM, kernels=(3, 5)).eval()
    sizes = [(8, 8), (4, 4), (2, 2)]
    F_tokens = torch.randn(2, 84, DIM)
    out = mrfp(F_tokens, sizes)
    assert out.shape == F_tokens.shape
    changed = F_tokens.clone()
    changed[:, :64] += 1.0  # perturb the 1/8 level only: the depthwise convs never cross levels
    torch.testing.assert_close(mrfp(changed, sizes)[:, 64:], out[:, 64:])
    assert len(mrfp.dwconvs) == 3 and [c.kernel_size for c in mrfp.dwconvs[0]] == [(3, 3), (5, 5)]
    with pytest.raises(ValueError, match="kernels"):
        MultiResolutionConvGate(DIM, kernels=(4,))
    with pytest.raises(ValueError, match="sizes"):
        mrfp(F_tokens, [(8, 8), (4, 4)])


def test_interaction_identity_at_init_and_gradients():
    torch.manual_seed(14)
    sizes = [(8, 8), (4, 4), (2, 2)]
    mrfp = MultiResolutionConvGate(DIM)
    inter = ConvTokenInteraction(DIM)
    F_tokens = torch.randn(2, 84, DIM)
    x_grid = torch.randn(2, 16, DIM)
    F_conv = mrfp(F_tokens, sizes)
    torch.testing.assert_close(inter.to_tokens(x_grid, F_conv, sizes), x_grid)  # λ_v = 0 at init
    with torch.no_grad():
        inter.lambda_v.fill_(0.1)
    x_new = inter.to_tokens(x_grid, F_conv, sizes)
    F_new = inter.to_conv(F_conv, x_new, sizes)
    assert F_new.shape == F_tokens.shape
    (x_new.square().sum() + F_new.square().sum()).backward()
    for module in (mrfp, inter):
        for name, p in module.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    with pytest.raises(ValueError, match="x_grid"):
        inter.to_tokens(torch.randn(2, 15, DIM), F_conv, sizes)


def test_channel_mixer_weight_resampling():
    torch.manual_seed(15)
    layer = SelectiveChannelMixer(DIM, 1 + 12, d_state=3, token_grid=(3, 4), num_prefix_tokens=1).double()
    u = _input(tokens=13)
    torch.testing.assert_close(layer(u, grid_size=(3, 4)), layer(u))  # identical at the training grid
    y = layer(_input(tokens=1 + 30), grid_size=(5, 6))
    assert y.shape == (BATCH, 31, DIM) and torch.isfinite(y).all()
    with pytest.raises(ValueError, match="grid_size"):
        layer(_input(tokens=1 + 30), grid_size=(5, 5))
    with pytest.raises(ValueError, match="token_grid"):
        SelectiveChannelMixer(DIM, 13, token_grid=(3, 3), num_prefix_tokens=1)


def test_token_axis_resampling_keeps_dot_products_on_coarser_grids():
    """On a coarser grid the rescaled weight keeps w·z for a slowly varying z, and an untrained (white-noise)
    weight keeps its selections' scale: bilinear sampling alone kept 4 of the 196 columns of a 14 x 14 map at
    2 x 2 and multiplied them by 49 (selections ~40x too large, an untrained channel mixer returning 60-560x its
    input)."""
    torch.manual_seed(17)
    weight = torch.randn(6, 1 + 14 * 14, dtype=torch.float64)

    def smooth(h, w):  # a slowly varying z on an h x w grid (cell centres), class token 1 first
        y, x = torch.meshgrid((torch.arange(h) + 0.5) / h, (torch.arange(w) + 0.5) / w, indexing="ij")
        return torch.cat([torch.ones(1), (1 + 0.3 * x + 0.2 * y).flatten()]).double()

    resampled = resample_token_axis(weight, (14, 14), 1, (2, 7))
    assert resampled.shape == (6, 15)
    exact = weight @ smooth(14, 14)
    torch.testing.assert_close(resampled @ smooth(2, 7), exact, rtol=0, atol=0.15 * exact.abs().max().item())
    assert resample_token_axis(weight, (14, 14), 1, (14, 14)) is weight
    white = torch.randn(1000, 1 + 196, dtype=torch.float64)
    z_fine, z_coarse = torch.randn(1 + 196, dtype=torch.float64), torch.randn(1 + 4, dtype=torch.float64)
    ratio = (resample_token_axis(white, (14, 14), 1, (2, 2)) @ z_coarse).std() / (white @ z_fine).std()
    assert 0.3 < ratio < 1.5, ratio


def test_vim2_channel_mixer_keeps_its_scale_at_a_smaller_input():
    """vim2_t built at 224 px and run at 32 px (a 2 x 2 grid) starts as it does built at 32 px: each untrained
    channel mixer returns about a third of its input, not tens to hundreds of times it."""
    import timm

    import ssm_plugins  # noqa: F401  (registers the models)

    ratios = {}
    for built in (32, 224):
        torch.manual_seed(0)
        model = timm.create_model("vim2_t", num_classes=10, img_size=built, embed_dim=32, depth=2,
                                  n_interactions=1, spm_inplanes=16).eval()
        ratios[built] = []
        for block in model.blocks:
            block.channel_mixer.register_forward_hook(
                lambda module, args, out, r=ratios[built]: r.append((out.norm() / args[0].norm()).item()))
        with torch.no_grad():
            model(torch.randn(2, 3, 32, 32))
    assert all(r < 1.5 for r in ratios[32]), ratios
    assert all(r < 3 * max(ratios[32]) for r in ratios[224]), ratios


def test_remark1_k1_gate_is_a_mamba_block():
    """Remark 1: T = 1, k = 1 gate (unit conv) with selection from the conv output is exactly a Mamba mixer."""
    torch.manual_seed(16)
    layer = SelectiveTokenMixer(DIM, d_state=4, gate_kernels=(1,), selection_input="conv_output").double()
    with torch.no_grad():
        layer.gate_convs[0].conv.weight.fill_(1.0)
        layer.gate_convs[0].conv.bias.zero_()
    u = _input()
    x = F.silu(_conv(layer.conv, u @ layer.in_proj.weight.T))  # Mamba: in_proj -> causal conv -> SiLU
    z = u @ layer.gate_proj.weight.T  # Mamba's gate half of in_proj
    proj = x @ layer.fwd.x_proj.weight.T
    r = layer.fwd.dt_rank
    dt = proj[..., :r] @ layer.fwd.dt_proj.weight.T
    y = reference.selective_scan(x.transpose(1, 2), dt.transpose(1, 2), -torch.exp(layer.fwd.A_log),
                                 proj[..., r:r + 4].transpose(1, 2), proj[..., r + 4:].transpose(1, 2), layer.D,
                                 z=z.transpose(1, 2), delta_bias=layer.fwd.dt_bias, delta_softplus=True)
    torch.testing.assert_close(layer(u), y.transpose(1, 2) @ layer.out_proj.weight.T, rtol=1e-9, atol=1e-9)


def test_importance_loss_zero_when_balanced():
    assert SwitchOfScans.importance_loss(torch.full((4, 16), 1 / 16)).item() == pytest.approx(0.0)
    assert SwitchOfScans.importance_loss(torch.eye(16)[:4]).item() > 0


# ---- v1 weighted averaging of earlier features (v1 Sec. 3.2) and the time-series block (App. H.3) ----------------


def _blocks(depth, kind="mamba"):
    torch.manual_seed(20)
    if kind == "mamba":
        return [MambaMixerBlock(DIM, TOKENS, d_state=4).double() for _ in range(depth)]
    return [TimeVariateMixerBlock(3, 5, DIM, d_state=4, token_mixer=kind, headdim=4).double() for _ in range(depth)]


@pytest.mark.parametrize("kind", ["mamba", "s6", "qs"])
def test_dense_stack_at_init_is_the_plain_residual_stack(kind):
    blocks = _blocks(3, kind)
    plain, dense = MixerStack(blocks), MixerStack(blocks, dense_wavg=True)
    x = _input() if kind == "mamba" else torch.randn(BATCH, 3, 5, DIM, dtype=torch.float64)
    expected = x
    for block in blocks:
        expected = block(expected)
    torch.testing.assert_close(plain(x), expected, rtol=0, atol=0)
    torch.testing.assert_close(dense(x), expected, rtol=1e-12, atol=1e-12)
    assert sum(p.numel() for p in plain.parameters()) == sum(p.numel() for b in blocks for p in b.parameters())


def test_dense_stack_weights_count_and_formula():
    depth = 2
    blocks = _blocks(depth)
    stack = MixerStack(blocks, dense_wavg=True)
    extra = sum(p.numel() for n, p in stack.named_parameters() if n.startswith("dense_"))
    assert extra == depth * (2 * depth + 3)  # the paper's L(2L+3) scalars
    assert {"dense_tok.0", "dense_ch.1"} <= set(stack.no_weight_decay_names)
    assert "blocks.0.token_mixer.fwd.A_log" in stack.no_weight_decay_names
    torch.manual_seed(21)
    with torch.no_grad():
        for p in list(stack.dense_tok) + list(stack.dense_ch):
            p.copy_(torch.randn_like(p))
    a1, b1 = stack.dense_tok[0]  # layer 1: α_{1,0}, β_{1,0}
    t10, t11, g10 = stack.dense_ch[0]
    a20, a21, b20, b21 = stack.dense_tok[1]
    t20, t21, t22, g20, g21 = stack.dense_ch[1]
    x = _input()
    tok1 = blocks[0].token_branch(a1 * x + b1 * x)
    ch1 = blocks[0].channel_branch(t10 * x + t11 * tok1 + g10 * x)
    tok2 = blocks[1].token_branch(a20 * x + a21 * tok1 + b20 * x + b21 * ch1)
    ch2 = blocks[1].channel_branch(t20 * x + t21 * tok1 + t22 * tok2 + g20 * x + g21 * ch1)
    torch.testing.assert_close(stack(x), ch2, rtol=1e-10, atol=1e-10)
    stack(x).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in list(stack.dense_tok) + list(stack.dense_ch))


def test_dense_stack_grad_checkpointing_is_exact():
    stack = MixerStack(_blocks(2), dense_wavg=True)
    x = _input()
    stack(x).square().sum().backward()
    grads = [p.grad.clone() for p in stack.parameters()]
    stack.zero_grad()
    stack.grad_checkpointing = True
    stack(x).square().sum().backward()
    for p, g in zip(stack.parameters(), grads):
        torch.testing.assert_close(p.grad, g)
    with pytest.raises(ValueError, match=r"blocks\[0\].*token_branch"):
        MixerStack([torch.nn.Linear(2, 2)])


def test_time_variate_block_mixes_variates_and_keeps_time_causal():
    torch.manual_seed(22)
    block = TimeVariateMixerBlock(4, 6, DIM, d_state=4).double().eval()
    x = torch.randn(BATCH, 4, 6, DIM, dtype=torch.float64)
    moved = x.clone()
    moved[:, 1] += torch.randn_like(x[:, 1])  # change variate 1 only
    out, out_moved = block(x), block(moved)
    assert (out_moved[:, 0] - out[:, 0]).abs().max() > 1e-6  # the variate mixer carries it to variate 0
    alone = TimeVariateMixerBlock(4, 6, DIM, d_state=4, variate_mixer=False).double().eval()
    torch.testing.assert_close(alone(moved)[:, 0], alone(x)[:, 0], rtol=0, atol=0)
    later = x.clone()
    later[:, :, 4:] += torch.randn_like(x[:, :, 4:])  # change patches 4-5: the causal S6 time mixer leaves patches 0-3 alone
    torch.testing.assert_close(block.token_branch(later)[:, :, :4], block.token_branch(x)[:, :, :4])
    # the time mixer is one module shared by the variates: variate v's output is the mixer on variate v alone
    one = block.token_mixer(block.norm1(x[:, 2]))
    torch.testing.assert_close(block.token_branch(x)[:, 2], x[:, 2] + one)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, n_vars=4, num_patches=6, dim=8\)"):
        block(torch.randn(BATCH, 5, 6, DIM, dtype=torch.float64))
    with pytest.raises(ValueError, match="n_vars"):
        TimeVariateMixerBlock(0, 6, DIM)


def test_variate_mixer_pooled_selection_is_the_history_selection_with_tied_weights():
    """variate_selection='pooled' reads Δ, B, C from each variate's history averaged over the patches: the same
    mixer as 'history' whose selection weights repeat the pooled ones over the patches (divided by their count)."""
    torch.manual_seed(23)
    patches = 6
    pooled = TimeVariateMixerBlock(4, patches, DIM, d_state=4, variate_selection="pooled").double().eval()
    history = TimeVariateMixerBlock(4, patches, DIM, d_state=4).double().eval()
    state = pooled.state_dict()
    for key in [k for k in state if k.endswith("x_proj.weight") and k.startswith("channel_mixer.")]:
        assert state[key].shape[1] == DIM  # dim features, not patches * dim
        state[key] = state[key].repeat(1, patches) / patches
    history.load_state_dict(state)
    x = torch.randn(BATCH, 4, patches, DIM, dtype=torch.float64)
    torch.testing.assert_close(pooled(x), history(x))
    assert (pooled.channel_branch(x)[:, 0] - x[:, 0]).abs().max() > 1e-6
    with pytest.raises(ValueError, match="variate_selection"):
        TimeVariateMixerBlock(4, patches, DIM, variate_selection="mean")
    with pytest.raises(ValueError, match=r"selection_features \(5\) must divide num_tokens \(48\)"):
        SelectiveChannelMixer(4, patches * DIM, selection_features=5)


def test_scan_order_cache_holds_real_cpu_tensors_whoever_fills_it():
    """The cache outlives traces: a first call under a meta default device or a fake-tensor trace (torch.export,
    torch.compile) must not leave tensors there that break the next eager call."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ssm_plugins.layers.switch_of_scans import scan_orders

    with torch.device("meta"):
        orders, inverses = scan_orders(3, 13, (2, 7))
    with FakeTensorMode():
        fake_filled = scan_orders(5, 11, (2, 7))
    for tensor in (orders, inverses, *fake_filled):
        assert type(tensor) is torch.Tensor and tensor.device.type == "cpu"
    assert orders[0].tolist() == list(range(39))  # C1, row-major: real values


@pytest.mark.parametrize("fixed_scans", [None, "cross4"])
def test_switch_of_scans_compiles_in_one_graph_at_a_grid_never_run_eagerly(fixed_scans):
    """SoS's window ids, scan orders and fixed scan ids come from a per-device cache that a torch.compile trace
    calls eagerly (as constants): on a cache miss inside the trace the build must not break the graph."""
    torch.manual_seed(0)
    sos = SwitchOfScans(DIM, fixed_scans=fixed_scans)
    grid = (7, 5)  # a grid no other test builds, so the trace meets empty caches
    e = torch.randn(2, 35, DIM)

    def route(e):
        e, scan_ids, gates, _ = sos(e, grid)
        orders, inverses = sos.scan_index(scan_ids, grid)
        return e, orders, inverses, gates

    torch._dynamo.reset()
    compiled = torch.compile(route, backend="aot_eager", fullgraph=True)(e)
    for got, want in zip(compiled, route(e), strict=True):
        torch.testing.assert_close(got, want)
