"""eSSM family as timm models (Liang & Li, "Efficient State Space Model via Fast Tensor Convolution and Block
Diagonalization", arXiv 2402.15290): init (App. B.3-B.4), layer, block and model (Sec. 4.3-4.6), configs (Table 10),
counts (Tables 4 and 8); our readings of the gaps are in docs/essm.md.

The timm contract of every registered model is tests/models/test_contract.py; here: training checkpoints,
bfloat16 autocast, pruning, torch.compile, the paper's configs and counts, the models' structure.
The layer: its forward pass as docs/essm.md 'Layer forward pass' states it, written out in float64, the causal
recurrence ('Recurrent mode'), HiPPO init ('Initialisation'), head independence ('Test oracles'), the parameter
formula of 'Parameter counts' with the Table 4 and SC35 checks, the block ('Block and model').
"""
import math

import pytest
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.layers import ESSM, ESSMBlock
from ssm_plugins.layers.essm import (BatchNormNLC, essm_layer_param_count, hippo_diagonal_init,
                                     hippo_legs_normal)
from ssm_plugins.models.essm import PAPER_RECIPES, ESSMRetrieval, ESSMSequence, essm_param_groups
from ssm_plugins.ops import reference
from _contract import assert_checkpoint_round_trip

MODELS = timm.list_models(module='essm')
REQUIRED = {'essm_scifar', 'essm_scifar_tiny', 'essm_lra_image', 'essm_smnist', 'essm_psmnist', 'essm_2d_tiny',
            'essm_listops', 'essm_text', 'essm_retrieval', 'essm_pathfinder', 'essm_pathx'}  # every Table 10 row


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_family_is_registered():
    assert REQUIRED <= set(MODELS), MODELS


def test_training_checkpoint_loads_through_pretrained_file(tmp_path):
    """A {'state_dict': ...} training checkpoint is unwrapped by the models' checkpoint filter."""
    assert_checkpoint_round_trip('essm_scifar_tiny', {}, (2, 3, 5, 7), tmp_path, wrap_in_state_dict=True)


@pytest.mark.parametrize('name', ['essm_scifar_tiny', 'essm_2d_tiny'])
def test_bfloat16_autocast_forward_backward(name):
    """The SSM core runs in float32 under autocast (docs/essm.md, 'State kernel'); the Linear layers in bfloat16."""
    torch.manual_seed(0)
    kwargs = dict(depths=(1, 1, 1, 1)) if name == 'essm_2d_tiny' else {}
    model = timm.create_model(name, **kwargs).train()
    x = torch.randn(2, 3, 32, 32)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = model(x)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    out.float().sum().backward()
    assert all(p.grad is not None and p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all()
               for p in model.parameters())
    with torch.no_grad():
        model.eval()
        with torch.autocast('cpu', dtype=torch.bfloat16):
            low = model(x).float()
        torch.testing.assert_close(low, model(x), rtol=0.1, atol=0.1)


@pytest.mark.parametrize('name', ['essm_scifar_tiny', 'essm_2d_tiny'])
def test_prune_intermediate_layers(name):
    torch.manual_seed(0)
    small = dict(depths=(1, 2, 1, 1), embed_dim=(16, 32, 64, 128)) if name == 'essm_2d_tiny' else {}
    model = timm.create_model(name, drop_rate=0., **small).eval()
    x = torch.randn(2, 3, 16, 24)
    with torch.no_grad():
        full = model.forward_intermediates(x, indices=[0], intermediates_only=True)
        model.prune_intermediate_layers([0], prune_head=True)
        pruned = model.forward_intermediates(x, indices=[0], intermediates_only=True)
    torch.testing.assert_close(pruned[0], full[0])


def test_traces_with_torch_compile_fullgraph():
    torch.manual_seed(0)
    for name, size in (('essm_scifar_tiny', (6, 5)), ('essm_2d_tiny', (40, 24))):
        kwargs = dict(depths=(1, 1, 1, 1)) if name == 'essm_2d_tiny' else {}
        model = timm.create_model(name, **kwargs).eval()
        x = torch.randn(1, 3, *size)
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(model, backend='eager', fullgraph=True)(x), model(x))


# ---- the paper's configurations (Table 10) and parameter counts (docs/essm.md, 'Parameter counts') ---------------

# name: (depth, H, S, N, dropout, prenorm, in_chans, glu) from Table 10 / docs/essm.md, 'Released configs'
CONFIGS = {
    'essm_scifar': (6, 256, 64, 512, 0.1, True, 3, 'half_glu1'),
    'essm_lra_image': (6, 256, 64, 512, 0.1, False, 1, 'half_glu1'),
    'essm_smnist': (4, 128, 16, 96, 0.1, True, 1, 'half_glu1'),
    'essm_smnist_official': (4, 128, 64, 128, 0.1, True, 1, 'half_glu1'),
    'essm_psmnist': (4, 128, 8, 128, 0.15, True, 1, 'half_glu1'),
    'essm_psmnist_official': (4, 128, 8, 128, 0.15, True, 1, 'full_glu'),
    'essm_pathfinder': (6, 192, 8, 256, 0.05, True, 1, 'half_glu1'),
    'essm_pathfinder_official': (6, 256, 32, 256, 0.05, True, 1, 'half_glu1'),
    'essm_pathx': (6, 192, 8, 256, 0.0, True, 1, 'half_glu1'),
}
# token tasks: (depth, H, S, N, dropout, prenorm, vocab, classes, glu, bidirectional, conj_sym)
# (Table 10 / 'Released configs')
TOKEN_CONFIGS = {
    'essm_listops': (6, 256, 4, 256, 0.0, False, 17, 10, 'half_glu1', False, True),
    'essm_listops_official': (8, 128, 64, 256, 0.0, True, 17, 10, 'half_glu1', True, True),
    'essm_text': (6, 256, 256, 256, 0.1, True, 257, 2, 'half_glu1', True, True),
    'essm_text_official': (6, 128, 128, 128, 0.1, True, 257, 2, 'half_glu2', True, False),
    'essm_retrieval': (6, 128, 64, 128, 0.0, True, 257, 2, 'half_glu1', True, True),
    'essm_retrieval_official': (6, 64, 64, 128, 0.0, True, 257, 2, 'half_glu1', True, True),
}


def _sequence_param_count(depth, H, S, N, prenorm, in_chans, glu, num_classes=10):
    """'Parameter counts': depth x P_layer + Linear(d_in, H) encoder + Linear(H, classes) decoder + final norm
    if prenorm."""
    return (depth * essm_layer_param_count(H, N, S, glu) + in_chans * H + H + H * num_classes + num_classes
            + (2 * H if prenorm else 0))


@pytest.mark.parametrize('name', sorted(CONFIGS))
def test_registered_config_and_exact_parameter_count(name):
    depth, H, S, N, drop, prenorm, in_chans, glu = CONFIGS[name]
    model = timm.create_model(name, device='meta')
    assert len(model.blocks) == depth and model.in_chans == in_chans and model.prenorm == prenorm
    layer = model.blocks[0].ssm
    assert (layer.d_model, layer.n_heads, layer.d_state, layer.glu) == (H, S, N, glu)
    assert layer.bidirectional and layer.conj_sym and layer.drop.p == drop and model.blocks[0].drop.p == drop
    assert isinstance(model.blocks[0].norm, BatchNormNLC)
    count = sum(p.numel() for p in model.parameters())
    assert count == _sequence_param_count(depth, H, S, N, prenorm, in_chans, glu, model.num_classes)
    recipe = PAPER_RECIPES[name]
    assert set(recipe['lr_other_params']) <= {'B', 'C'} and recipe['lr_ssm'] > 0


@pytest.mark.parametrize('name', sorted(TOKEN_CONFIGS))
def test_token_task_configs_and_exact_parameter_count(name):
    """'Parameter counts' with an Embedding(vocab, H) encoder; Retrieval adds the Eq. 37 head Linear(4H, H)
    + Linear(H, 2) instead of the Linear(H, classes) decoder."""
    depth, H, S, N, drop, prenorm, vocab, classes, glu, bidirectional, conj_sym = TOKEN_CONFIGS[name]
    model = timm.create_model(name, device='meta')
    backbone = model.backbone if isinstance(model, ESSMRetrieval) else model
    layer = backbone.blocks[0].ssm
    assert len(backbone.blocks) == depth and backbone.prenorm == prenorm and backbone.vocab_size == vocab
    assert isinstance(backbone.encoder, nn.Embedding) and backbone.encoder.num_embeddings == vocab
    assert (layer.d_model, layer.n_heads, layer.d_state, layer.glu) == (H, S, N, glu)
    assert (layer.bidirectional, layer.conj_sym, layer.drop.p) == (bidirectional, conj_sym, drop)
    body = depth * essm_layer_param_count(H, N, S, glu) + vocab * H + (2 * H if prenorm else 0)
    head = (4 * H * H + H + H * classes + classes) if isinstance(model, ESSMRetrieval) else H * classes + classes
    assert sum(p.numel() for p in model.parameters()) == body + head
    assert model.num_classes == classes and PAPER_RECIPES[name]['lr_ssm'] > 0
    if name == 'essm_listops':  # the paper-text preset ('ListOps presets'): LeakyReLU before the mixer, C from HiPPO
        assert layer.pre_act == 'leakyrelu' and layer.C_init == 'hippo'


def test_token_encoder_one_hot_view_equals_embedding():
    torch.manual_seed(0)
    model = timm.create_model('essm_listops', d_model=16, depth=2, d_state=16, n_heads=4).eval()
    ids = torch.randint(0, 17, (2, 9))
    one_hot = F.one_hot(ids, 17).float()  # (B, L, vocab)
    with torch.no_grad():
        torch.testing.assert_close(model(ids), model(one_hot))
    assert model.in_chans == 17
    with pytest.raises(ValueError, match=r'token ids\) must lie in \[0, 17\)'):
        model(torch.tensor([[3, 17]]))
    with pytest.raises(ValueError, match=r'\(B, L\)'):
        model(torch.zeros(2, 3, 4, dtype=torch.long))


def test_retrieval_head_is_eq37_on_length_aware_pools():
    """Eq. 37: shared encoder, mean pool over each document's valid steps, [u1, u2, u1*u2, u1-u2] -> MLP."""
    torch.manual_seed(0)
    model = timm.create_model('essm_retrieval', d_model=16, depth=2, d_state=16, n_heads=4).eval()
    x1, x2 = torch.randint(1, 257, (2, 12)), torch.randint(1, 257, (2, 7))
    with torch.no_grad():
        u1 = model.backbone.forward_features(x1).mean(1)
        u2 = model.backbone.forward_features(x2).mean(1)
        z = model.pre_logits[1](model.pre_logits[0](torch.cat([u1, u2, u1 * u2, u1 - u2], -1)))
        torch.testing.assert_close(model(x1, x2), model.head(z))
        # padding x2 to 12 steps with a mask gives the unpadded result (the mask reaches the blocks and pools)
        padded = torch.cat([x2, torch.zeros(2, 5, dtype=torch.long)], 1)
        mask = torch.arange(12)[None].expand(2, -1) >= 7
        torch.testing.assert_close(model(x1, padded, padding_mask2=mask), model(x1, x2), rtol=1e-4, atol=1e-5)
        stacked = torch.stack([x1, padded], 1)  # the pair in dim 1: one tensor
        torch.testing.assert_close(model(stacked), model(x1, padded))
    assert model.in_chans == 2 * 257 and isinstance(model.pre_logits[1], nn.GELU)
    assert model.pre_logits[0].in_features == 4 * 16 and model.head.out_features == 2


def test_sc35_parameter_count_within_3_percent_of_paper():
    """'Parameter counts': 6 layers, H = N = 128, S = 32, Linear(1 -> 128), Linear(128 -> 35): 213.7K vs 220K."""
    counts = {}
    for heads in (32, 16):
        model = ESSMSequence(in_chans=1, num_classes=35, d_model=128, depth=6, d_state=128, n_heads=heads,
                             device='meta')
        counts[heads] = sum(p.numel() for p in model.parameters())
    assert counts[32] == 213_667 and abs(counts[32] - 220e3) / 220e3 < 0.03
    assert counts[16] == 219_811  # our 16-head guess (docs/essm.md, 'Parameter counts')


def test_table4_head_parameter_differences():
    """'Parameter counts': one layer, H = N = 128: S = 4 -> 16 saves 6,144 and 16 -> 64 saves 1,536
    (Table 4: 6.2k, 1.5k)."""
    counts = {S: sum(p.numel() for p in ESSMBlock(128, d_state=128, n_heads=S, prenorm=True).parameters())
              for S in (4, 16, 64)}
    assert counts[4] - counts[16] == 6_144 and counts[16] - counts[64] == 1_536
    for S, count in counts.items():
        assert count == essm_layer_param_count(128, 128, S)


@pytest.mark.parametrize('d_model,d_state,heads,glu', [(16, 16, 1, 'half_glu1'), (24, 48, 4, 'full_glu'),
                                                       (32, 8, 8, 'gelu'), (12, 6, 3, 'half_glu2')])
def test_layer_parameter_formula(d_model, d_state, heads, glu):
    layer = ESSM(d_model, d_state, heads, glu=glu)
    assert sum(p.numel() for p in layer.parameters()) == essm_layer_param_count(d_model, d_state, heads, glu, False)
    assert (layer.head_mixer is None) == (heads == 1)  # the mixer only when S > 1 ('Head mixer')


def test_param_groups_two_learning_rates():
    model = timm.create_model('essm_scifar_tiny')
    groups = {g['name']: g for g in essm_param_groups(model, lr=5e-3, lr_ssm=1e-3, weight_decay=0.05,
                                                      lr_other_params=('B', 'C'))}
    names = {id(p): n for n, p in model.named_parameters()}
    ssm = {names[id(p)].rsplit('.', 1)[1] for p in groups['ssm']['params']}
    other = {names[id(p)].rsplit('.', 1)[1] for p in groups['ssm_other_lr']['params']}
    assert ssm == {'Lambda_re', 'Lambda_im', 'log_dt', 'D'} and other == {'B', 'C'}
    assert groups['ssm']['lr'] == 1e-3 and groups['ssm']['weight_decay'] == 0
    assert groups['ssm_other_lr']['lr'] == 5e-3 and groups['ssm_other_lr']['weight_decay'] == 0
    assert groups['decay']['weight_decay'] == 0.05
    assert sum(len(g['params']) for g in groups.values()) == len(list(model.parameters()))
    torch.optim.AdamW(list(groups.values()))  # usable as is
    with pytest.raises(ValueError, match='lr_other_params'):
        essm_param_groups(model, 1e-3, 1e-3, lr_other_params=('head',))


# ---- the sequence model -------------------------------------------------------------------------------------------


def test_sequence_model_flattens_images_row_major():
    torch.manual_seed(0)
    model = timm.create_model('essm_scifar_tiny').eval()
    image = torch.randn(2, 3, 5, 7)
    sequence = image.permute(0, 2, 3, 1).reshape(2, 35, 3)  # step r * W + c holds pixel (r, c)
    with torch.no_grad():
        torch.testing.assert_close(model(image), model(sequence))
        assert model.forward_features(sequence).shape == (2, 35, 32)
        nlc = model.forward_intermediates(sequence, indices=1, output_fmt='NLC', intermediates_only=True)
        nchw = model.forward_intermediates(image, indices=1, intermediates_only=True)
    torch.testing.assert_close(nlc[0].transpose(1, 2).reshape(2, 32, 5, 7), nchw[0])
    with pytest.raises(ValueError, match='NLC'):
        model.forward_intermediates(sequence, output_fmt='NCHW')


def test_sequence_model_structure_matches_spec():
    """Sec. 4.6: encoder -> blocks -> final norm (prenorm) -> mean over time -> Linear."""
    torch.manual_seed(0)
    model = timm.create_model('essm_scifar_tiny').eval()
    x = torch.randn(2, 3, 4, 6)
    with torch.no_grad():
        h = model.encoder(x.flatten(2).transpose(1, 2))
        for block in model.blocks:
            h = block(h)
        logits = model.head(model.norm(h).mean(1))
        torch.testing.assert_close(model(x), logits)
    post = timm.create_model('essm_lra_image', depth=1)
    assert isinstance(post.norm, nn.Identity) and not post.blocks[0].prenorm


def test_sequence_model_dt_scale_reaches_every_layer():
    torch.manual_seed(0)
    model = timm.create_model('essm_scifar_tiny').eval()
    x = torch.randn(1, 3, 4, 4)
    with torch.no_grad():
        scaled = model(x, dt_scale=2.0)
        for m in model.modules():
            if isinstance(m, ESSM):
                m.dt_scale = 2.0
        torch.testing.assert_close(model(x), scaled)
        assert not torch.allclose(model(x, dt_scale=1.0), scaled)


# ---- the 2-D backbone -----------------------------------------------------------------------------------------


@pytest.mark.parametrize('scan', ['row', 'alternate'])
def test_2d_blocks_scan_the_flattened_patch_grid(scan):
    torch.manual_seed(0)
    model = timm.create_model('essm_2d_tiny', depths=(2, 1, 1, 1), embed_dim=(16, 32, 64, 128), scan=scan).eval()
    seen = []
    for block in model.stages[0].blocks:
        block.register_forward_hook(lambda m, args, out: seen.append((args[0], out)))
    x = torch.randn(1, 3, 20, 36)
    with torch.no_grad():
        stem = model.patch_embed(x)  # (1, 5, 9, 16)
        model(x)
    assert stem.shape == (1, 5, 9, 16)
    (in0, out0), (in1, _) = seen
    torch.testing.assert_close(in0, stem.reshape(1, 45, 16))  # row-major
    grid = out0.reshape(1, 5, 9, 16)
    expected = grid.transpose(1, 2) if scan == 'alternate' else grid  # odd block column-major
    torch.testing.assert_close(in1, expected.reshape(1, 45, 16))
    layer = model.stages[0].blocks[0].ssm
    assert layer.bidirectional and layer.n_heads == 4 and layer.d_state == 32  # h = 4, n = 8


def test_2d_backbone_defaults_and_stage_widths():
    model = timm.create_model('essm_2d_tiny', device='meta')
    assert [len(s.blocks) for s in model.stages] == [2, 2, 6, 2]
    assert [i['num_chs'] for i in model.feature_info] == [96, 192, 384, 768]
    assert [i['reduction'] for i in model.feature_info] == [4, 8, 16, 32]
    block = model.stages[2].blocks[0]
    assert block.prenorm and isinstance(block.norm, nn.LayerNorm)
    assert (block.ssm.n_heads, block.ssm.d_state) == (96, 768)
    bn = timm.create_model('essm_2d_tiny', norm='batch', prenorm=False, depths=(1, 1, 1, 1)).eval()
    with torch.no_grad():
        assert bn(torch.randn(2, 3, 32, 32)).shape == (2, 1000)
    with pytest.raises(ValueError, match='scan'):
        timm.create_model('essm_2d_tiny', scan='diagonal')


def test_2d_drop_path_and_dropout_only_in_training():
    torch.manual_seed(0)
    model = timm.create_model('essm_2d_tiny', depths=(1, 1, 1, 1), embed_dim=(16, 32, 64, 128),
                              drop_path_rate=0.5, drop_rate=0.2)
    x = torch.randn(2, 3, 32, 32)
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


# ---- the layer (Sec. 4.5-4.6; docs/essm.md, 'Initialisation', 'Layer forward pass') -------------------------------


def _spec_layer(layer, x):
    """docs/essm.md 'Layer forward pass' (paper Listing 1, gain inside Re), literally, float64, eval mode;
    x (B, L, H) channels-last."""
    u = x.transpose(1, 2)
    batch, H, L = u.shape
    S, n, h = layer.B.shape
    u4 = u.reshape(batch, S, h, L)
    lam = torch.complex(layer.Lambda_re.clamp(max=-layer.real_clip), layer.Lambda_im)
    dt = torch.exp(layer.log_dt) * layer.dt_scale
    z = lam * dt
    g = (torch.exp(z) - 1) / lam
    K = torch.real(g[..., None] * torch.exp(z[..., None] * torch.arange(L, dtype=torch.float64)))
    if layer.bidirectional:
        K = F.pad(K, (0, L)) + F.pad(torch.flip(K, (-1,)), (L, 0))
    v = torch.einsum('snh,bshl->bsnl', layer.B, u4)
    xs = torch.fft.irfft(torch.fft.rfft(v, n=2 * L) * torch.fft.rfft(K, n=2 * L)[None], n=2 * L)[..., :L]
    gamma = 2.0 if layer.conj_sym else 1.0
    y = gamma * torch.einsum('smn,bsnl->bsml', layer.C, xs) + layer.D[None, :, :, None] * u4
    y = y.reshape(batch, H, L).transpose(1, 2)
    if S > 1:
        y = layer.head_mixer(y)
    a = F.gelu(y)
    if layer.glu == 'half_glu1':
        return a * torch.sigmoid(layer.gate(a))
    if layer.glu == 'half_glu2':
        return y * torch.sigmoid(layer.gate(a))
    if layer.glu == 'full_glu':
        return layer.out(a) * torch.sigmoid(layer.gate(a))
    return a


@pytest.mark.parametrize('heads', [1, 3])
@pytest.mark.parametrize('bidirectional', [True, False])
@pytest.mark.parametrize('conj_sym', [True, False])
@pytest.mark.parametrize('glu', ['half_glu1', 'half_glu2', 'full_glu', 'gelu'])
def test_layer_equals_spec_pseudo_code(heads, bidirectional, conj_sym, glu):
    torch.manual_seed(0)
    layer = ESSM(6, 12, heads, bidirectional=bidirectional, conj_sym=conj_sym, glu=glu, dropout=0.3).double()
    layer.eval()
    with torch.no_grad():
        layer.Lambda_re[0, 0] = 0.7  # clipped to -ε in the forward
        layer.Lambda_im.normal_(0, 3)
    x = torch.randn(2, 11, 6, dtype=torch.float64)
    torch.testing.assert_close(layer(x), _spec_layer(layer, x), rtol=1e-10, atol=1e-10)
    first = ESSM(6, 12, heads, bidirectional=bidirectional, conj_sym=conj_sym, glu=glu,
                 channels_last=False).double().eval()
    first.load_state_dict(layer.state_dict())
    torch.testing.assert_close(first(x.transpose(1, 2)), layer(x).transpose(1, 2))


def test_layer_core_equals_dense_operator_and_passes_bidirectional_explicitly():
    """The SSM core is the 'Bidirectional kernel' double sum (bidirectional by default, although essm_conv
    defaults to causal)."""
    torch.manual_seed(0)
    layer = ESSM(8, 8, 2).double()
    assert layer.bidirectional
    u = torch.randn(3, 8, 9, dtype=torch.float64)
    args = (layer.lambda_re, layer.Lambda_im, layer.log_dt, layer.B, layer.C, layer.D)
    torch.testing.assert_close(layer.ssm(u), reference.essm_dense(u, *args, bidirectional=True))
    causal = reference.essm_dense(u, *args, bidirectional=False)
    assert not torch.allclose(layer.ssm(u), causal)
    layer.bidirectional = False
    torch.testing.assert_close(layer.ssm(u), causal)


def test_real_part_clip_and_its_gradient():
    layer = ESSM(4, 4, 1, real_clip=1e-3)
    with torch.no_grad():
        layer.Lambda_re[0, :2] = 0.5
    assert torch.all(layer.lambda_re[0, :2] == -1e-3)
    layer(torch.randn(1, 6, 4)).sum().backward()
    assert torch.all(layer.Lambda_re.grad[0, :2] == 0) and torch.all(layer.Lambda_re.grad[0, 2:] != 0)


def test_causal_step_equals_forward():
    """'Recurrent mode': the complex-diagonal recurrence equals the causal convolution, mixing included."""
    torch.manual_seed(0)
    layer = ESSM(8, 16, 4, bidirectional=False, glu='full_glu').double().eval()
    with torch.no_grad():
        layer.Lambda_im.normal_(0, 5)
    x = torch.randn(2, 25, 8, dtype=torch.float64)
    state, outs = layer.init_state(2), []
    for t in range(25):
        y, state = layer.step(x[:, t], state)
        outs.append(y)
    torch.testing.assert_close(torch.stack(outs, 1), layer(x), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match='causal'):
        ESSM(8).step(x[:, 0].float(), ESSM(8).init_state(2))


def test_heads_are_independent_before_the_mixer():
    """'Test oracles': changing the input channels of head s changes only head s's pre-mixer output."""
    torch.manual_seed(0)
    layer = ESSM(12, 12, 3).double()
    u = torch.randn(2, 12, 10, dtype=torch.float64)
    u2 = u.clone()
    u2[:, 4:8] += torch.randn(2, 4, 10, dtype=torch.float64)  # head 1
    diff = (layer.ssm(u2) - layer.ssm(u)).abs().amax(dim=(0, 2))
    assert torch.all(diff[:4] == 0) and torch.all(diff[8:] == 0) and torch.all(diff[4:8] > 0)


def test_padding_mask_stops_leaks_and_dt_scale_kwarg():
    torch.manual_seed(0)
    layer = ESSM(4, 4, 2).eval()
    x = torch.randn(2, 10, 4)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[:, 7:] = True
    noisy = x.clone()
    noisy[:, 7:] = 100 * torch.randn(2, 3, 4)
    with torch.no_grad():
        torch.testing.assert_close(layer(noisy, padding_mask=mask)[:, :7], layer(x, padding_mask=mask)[:, :7])
        assert not torch.allclose(layer(noisy)[:, :7], layer(x)[:, :7])  # the faithful layer leaks ('Padding mask')
        scaled = layer(x, dt_scale=2.0)
        layer.dt_scale = 2.0
        torch.testing.assert_close(layer(x), scaled)
    with pytest.raises(ValueError, match='dt_scale'):
        layer(x, dt_scale=0.0)


def test_sequence_model_padding_mask_pools_valid_steps_only():
    """Length-aware decoder + 'Padding mask': with a padding mask, a padded sequence gives the result of the
    unpadded one (eval mode), through every block and the mean pool; pool-only masking (the official code) still
    leaks."""
    torch.manual_seed(0)
    model = ESSMSequence(in_chans=2, num_classes=3, d_model=8, depth=2, d_state=8, n_heads=2).eval()
    x = torch.randn(1, 12, 2)
    padded = torch.cat([x, 50 * torch.randn(1, 5, 2)], dim=1)
    mask = torch.zeros(1, 17, dtype=torch.bool)
    mask[:, 12:] = True
    with torch.no_grad():
        torch.testing.assert_close(model(padded, padding_mask=mask), model(x), atol=1e-5, rtol=1e-5)
        pool_only = model.forward_head(model.forward_features(padded), padding_mask=mask)
        assert (pool_only - model(x)).abs().max() > 1e-3
    with pytest.raises(ValueError, match='padding_mask must have shape'):
        model(padded, padding_mask=mask[:, :12])
    with pytest.raises(ValueError, match='at least one valid'):
        model(padded, padding_mask=torch.ones(1, 17, dtype=torch.bool))


def test_hippo_init_paper_semantics():
    """'Initialisation': Λ = -1/2 + iω (ω > 0, one per pair), the same in every head; B = Re(V* B0), one draw for
    all heads; C trunc-normal in [-2, 2]; D = 1; log Δ in [log dt_min, log dt_max]."""
    torch.manual_seed(0)
    layer = ESSM(32, 64, 4, dt_min=1e-3, dt_max=1e-1)  # h = 8, n = 16, HiPPO size 32
    lam, V = hippo_diagonal_init(16)
    normal = hippo_legs_normal(32).to(torch.complex128)
    torch.testing.assert_close(normal @ V, V * lam)  # eigenpairs of A^N
    assert torch.all(lam.real == -0.5) and torch.all(lam.imag > 0)
    torch.testing.assert_close(V.conj().T @ V, torch.eye(16, dtype=torch.complex128))
    for s in range(4):
        torch.testing.assert_close(layer.Lambda_re[s], lam.real.float())
        torch.testing.assert_close(layer.Lambda_im[s], lam.imag.float())
        torch.testing.assert_close(layer.B[s], layer.B[0])
    assert not torch.allclose(layer.C[0], layer.C[1]) and layer.C.abs().max() <= 2
    assert torch.all(layer.D == 1)
    assert layer.log_dt.min() >= math.log(1e-3) and layer.log_dt.max() <= math.log(1e-1)
    assert not torch.allclose(layer.log_dt[0], layer.log_dt[1])  # independent per head and mode
    # A^N = -I/2 + skew (the paper's Eq. 17 sign typo fixed)
    AN = hippo_legs_normal(5)
    torch.testing.assert_close(AN + AN.T, -torch.eye(5, dtype=torch.float64))


def test_hippo_init_official_and_single_real_mode():
    lam, _ = hippo_diagonal_init(4, init='official')
    assert torch.allclose(lam.real, torch.full((4,), -1.0, dtype=torch.float64))  # Re λ = -1 ('Initialisation')
    assert torch.all(lam.imag <= 0)
    paper, _ = hippo_diagonal_init(1, conj_sym=False)
    official, _ = hippo_diagonal_init(1, conj_sym=False, init='official')
    assert paper.tolist() == [complex(-0.5, 0)] and official.tolist() == [complex(-1, 0)]
    text = ESSM(8, 8, 8, conj_sym=False)  # the official Text layer: h = n = 1
    assert torch.all(text.Lambda_re == -0.5) and torch.all(text.Lambda_im == 0)
    hippo_c = ESSM(8, 8, 2, C_init='hippo')
    assert hippo_c.C.shape == (2, 4, 4)


def test_layer_default_init_trains_every_parameter():
    layer = ESSM(8, 8, 2)
    layer(torch.randn(2, 5, 8)).square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in layer.parameters())


def test_layer_gradcheck_float64():
    torch.manual_seed(0)
    layer = ESSM(4, 4, 2, glu='half_glu2').double()
    names = ['Lambda_re', 'Lambda_im', 'log_dt', 'B', 'C']
    x = torch.randn(1, 5, 4, dtype=torch.float64, requires_grad=True)
    inputs = (x, *[getattr(layer, n).detach().clone().requires_grad_() for n in names])

    def fn(x, *params):
        return torch.func.functional_call(layer, dict(zip(names, params)), (x,))

    assert torch.autograd.gradcheck(fn, inputs)


def test_layer_bad_arguments():
    with pytest.raises(ValueError, match='must divide'):
        ESSM(10, 10, 4)
    with pytest.raises(ValueError, match='must divide'):
        ESSM(8, 6, 4)
    with pytest.raises(ValueError, match='glu'):
        ESSM(8, glu='relu')
    with pytest.raises(ValueError, match='init'):
        ESSM(8, init='s4')
    with pytest.raises(ValueError, match='norm'):
        ESSMBlock(8, norm='group')
    with pytest.raises(ValueError, match=r'x must have shape \(B, L, H\) with H=8'):
        ESSM(8)(torch.randn(1, 5, 7))
    with pytest.raises(ValueError, match='padding_mask'):
        ESSM(8)(torch.randn(1, 5, 8), padding_mask=torch.zeros(1, 4, dtype=torch.bool))


# ---- the block (docs/essm.md, 'Block and model') ---------------------------------------------------------------


@pytest.mark.parametrize('prenorm', [True, False])
@pytest.mark.parametrize('norm', ['batch', 'layer'])
def test_block_structure(prenorm, norm):
    torch.manual_seed(0)
    block = ESSMBlock(8, norm=norm, prenorm=prenorm, d_state=8, n_heads=2, dropout=0.2).eval()
    x = torch.randn(3, 7, 8)
    with torch.no_grad():
        block.norm.weight.normal_()  # distinguish the norm from an identity
        if norm == 'batch':
            block.norm.running_mean.normal_()
        expected = x + block.ssm(block.norm(x)) if prenorm else block.norm(x + block.ssm(x))
        torch.testing.assert_close(block(x), expected)
        first = ESSMBlock(8, norm=norm, prenorm=prenorm, d_state=8, n_heads=2, channels_last=False).eval()
        first.load_state_dict(block.state_dict())
        torch.testing.assert_close(first(x.transpose(1, 2)), block(x).transpose(1, 2))


def test_block_batch_norm_is_over_channels_with_batch_and_time_statistics():
    block = ESSMBlock(4, norm='batch', prenorm=True, n_heads=2).train()
    x = 3 + 2 * torch.randn(5, 20, 4)
    normed = block.norm(x)
    torch.testing.assert_close(normed.mean(dim=(0, 1)), torch.zeros(4), atol=1e-5, rtol=0)
    reference_bn = nn.BatchNorm1d(4).train()
    torch.testing.assert_close(normed, reference_bn(x.transpose(1, 2)).transpose(1, 2))


def test_block_dropout_is_channel_tied():
    """'Layer forward pass': Dropout1d on the layer output drops whole channels across time."""
    torch.manual_seed(0)
    block = ESSMBlock(16, prenorm=True, d_state=16, n_heads=4, dropout=0.5).train()
    block.ssm.drop.p = 0.0  # keep only the block's tied dropout
    x = torch.randn(4, 12, 16)
    z = block(x) - x
    dropped = (z == 0).all(dim=1)  # (batch, channel): zero at every time step
    assert dropped.any() and (~dropped).any()
    assert ((z == 0) == dropped[:, None, :]).all()
