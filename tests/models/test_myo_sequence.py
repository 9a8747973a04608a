"""Myo sequence classifiers (Myosotis, arXiv 2509.20503, Sec. 4; docs/myosotis.md, 'S5 settings'; issue #11): the
S5 network with Myo blocks on perfect (or ceil) trees for sMNIST / zMNIST / sCIFAR / zCIFAR / ListOps / Pathfinder /
Path-X.

Checked here: the registered configs are S5's per-task settings; every model runs forward + backward at a small
size with perfect and ceil trees (node counts of both); the input orders are those of docs/myosotis.md, 'Input
orders' (snake = S4/S5 ``snake_permutation``; Morton = the quadtree, equal to a 4-ary tree over Morton-ordered
pixels); the perfect-tree padding is masked in the readout; token input and its errors; the S5 optimizer groups
of ``myo_param_groups``.
"""
import math

import pytest
import timm
import torch

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.models.myo import PAPER_RECIPES, MyoSequence, myo_param_groups

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

SEQUENCE_MODELS = ['myo_smnist', 'myo_zmnist', 'myo_scifar', 'myo_zcifar', 'myo_listops', 'myo_pathfinder',
                   'myo_pathx']
SMALL = dict(embed_dim=16, depth=2, state_size=8, blocks=1)

# S5 configs (docs/myosotis.md, 'S5 settings'): depth, H, P, J, dropout, C_init, GLU, PyTorch BN momentum
# (1 - flax), dt_min, arity, order
S5_CONFIGS = {
    'myo_smnist': (4, 96, 128, 1, 0.1, 'trunc_standard_normal', 'half_glu1', 0.05, 1e-3, 4, 'snake'),
    'myo_zmnist': (4, 96, 128, 1, 0.1, 'trunc_standard_normal', 'half_glu1', 0.05, 1e-3, 4, 'morton'),
    'myo_scifar': (6, 512, 384, 3, 0.1, 'lecun_normal', 'half_glu1', 0.05, 1e-3, 4, 'snake'),
    'myo_zcifar': (6, 512, 384, 3, 0.1, 'lecun_normal', 'half_glu1', 0.05, 1e-3, 4, 'morton'),
    'myo_listops': (8, 128, 16, 8, 0.0, 'lecun_normal', 'half_glu2', 0.05, 1e-3, 2, 'raster'),
    'myo_pathfinder': (6, 192, 256, 8, 0.05, 'trunc_standard_normal', 'half_glu1', 0.1, 1e-3, 2, 'raster'),
    'myo_pathx': (6, 128, 256, 16, 0.0, 'complex_normal', 'half_glu1', 0.1, 1e-4, 2, 'raster'),
}
# parameters of the registered sizes (the paper reports none, Sec. 4), and the tree of the paper's input:
# (params, leaves after padding, all nodes with the perfect tree, all nodes with the ceil tree)
SIZES = {
    'myo_smnist': (139_114, 1024, 1365, 1047),  # 784 snake pixels -> 1024
    'myo_zmnist': (139_114, 1024, 1365, 1050),  # 28x28 -> 32x32 quadtree; ceil quadtree of 28x28
    'myo_scifar': (3_957_642, 1024, 1365, 1365),
    'myo_zcifar': (3_957_642, 1024, 1365, 1365),
    'myo_listops': (173_386, 2048, 4095, 4001),  # 2000 tokens -> 2048, binary
    'myo_pathfinder': (820_610, 1024, 2047, 2047),
    'myo_pathx': (499_202, 16384, 32767, 32767),
}


def _paper_input(name, length=None):
    if name == 'myo_listops':
        return torch.randint(0, 20, (1, length or 2000))
    side = {'myo_smnist': 28, 'myo_zmnist': 28, 'myo_pathfinder': 32, 'myo_pathx': 128}.get(name, 32)
    side = length or side
    return torch.rand(1, 3 if 'cifar' in name else 1, side, side)


def test_every_sequence_model_is_registered_with_a_recipe():
    assert set(SEQUENCE_MODELS) <= set(timm.list_models('myo_*'))
    assert set(PAPER_RECIPES) == set(SEQUENCE_MODELS)
    for name, recipe in PAPER_RECIPES.items():
        assert recipe['opt_config'] in ('standard', 'BandCdecay', 'BfastandCdecay') and recipe['lr'] > recipe['lr_ssm']


@pytest.mark.parametrize('name', SEQUENCE_MODELS)
def test_registered_config_is_s5s(name):
    depth, dim, state, blocks, dropout, c_init, glu, momentum, dt_min, arity, order = S5_CONFIGS[name]
    model = timm.create_model(name, device='meta')
    assert (len(model.blocks), model.embed_dim, model.arity, model.order, model.tree) == (depth, dim, arity, order,
                                                                                          'perfect')
    block = model.blocks[0]
    ssm = block.ssm
    assert (ssm.state_size, ssm.num_heads, ssm.blocks, ssm.C_init, ssm.dt_min) == (state, state // 2, blocks, c_init,
                                                                                    dt_min)
    assert (block.glu, block.drop.p, block.norm.momentum) == (glu, dropout, momentum)
    params, leaves, perfect_nodes, _ = SIZES[name]
    assert sum(p.numel() for p in model.parameters()) == params
    assert model.level_embed.shape == (round(math.log(leaves, arity)), dim)  # D - 1 virtual levels


@pytest.mark.parametrize('name', SEQUENCE_MODELS)
def test_perfect_and_ceil_trees_at_the_paper_size(name):
    """The node count of the paper's input with both tree options (forward_features of a narrow model)."""
    _, leaves, perfect_nodes, ceil_nodes = SIZES[name]
    x = _paper_input(name)
    for tree, nodes in (('perfect', perfect_nodes), ('ceil', ceil_nodes)):
        model = timm.create_model(name, tree=tree, embed_dim=4, depth=1, state_size=2, blocks=1).eval()
        with torch.no_grad():
            out = model.forward_features(x)
        assert out.shape == (1, nodes, 4), (name, tree)
        real = x.shape[1] if name == 'myo_listops' else x.shape[-1] * x.shape[-2]
        assert model._layout.tree.level_sizes[0] == (leaves if tree == 'perfect' else real)


@pytest.mark.parametrize('tree', ['perfect', 'ceil'])
@pytest.mark.parametrize('name', SEQUENCE_MODELS)
def test_forward_backward_small(name, tree):
    torch.manual_seed(0)
    model = timm.create_model(name, tree=tree, **SMALL).train()
    x = torch.randint(0, 20, (2, 37)) if name == 'myo_listops' else torch.rand(
        2, model.in_chans, 10, 10)
    out = model(x)
    assert out.shape == (2, model.num_classes) and torch.isfinite(out).all()
    out.logsumexp(-1).sum().backward()
    for n, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), n


def _snake_sequence(img):
    """S4/S5 snake_permutation, written out: row r left to right if r is even, right to left if odd."""
    rows = [img[:, :, r] if r % 2 == 0 else img[:, :, r].flip(-1) for r in range(img.shape[2])]
    return torch.cat(rows, dim=-1).transpose(1, 2)  # (B, H*W, C)


def _morton_sequence(img):
    """Pixels of a 2^n x 2^n image in Morton (Z) order: index bits interleave (row, col)."""
    side = img.shape[-1]
    bits = side.bit_length() - 1
    order = []
    for z in range(side * side):
        row = sum(((z >> (2 * b + 1)) & 1) << b for b in range(bits))
        col = sum(((z >> (2 * b)) & 1) << b for b in range(bits))
        order.append(row * side + col)
    return img.flatten(2)[:, :, order].transpose(1, 2)


def test_snake_order_is_s5s_snake_permutation():
    torch.manual_seed(0)
    model = timm.create_model('myo_smnist', **SMALL).eval()
    img = torch.rand(2, 1, 7, 7)
    with torch.no_grad():
        torch.testing.assert_close(model(img), model(_snake_sequence(img)))  # images are flattened in snake order
        maps = model.forward_intermediates(img, indices=1, intermediates_only=True)
        nodes = model.forward_features(_snake_sequence(img))
    # the leaf maps go back to the image layout: pixel (r, c) holds the leaf of its position on the snake path
    torch.testing.assert_close(_snake_sequence(maps[0]), nodes[:, :49])


def test_morton_quadtree_equals_a_4ary_tree_over_morton_ordered_pixels():
    """zMNIST/zCIFAR: the quadtree over the raster grid is the 4-ary tree over Morton-ordered leaves
    (docs/myosotis.md, 'Level-shared fast path'), and the perfect tree pads the image on every side (28 -> 32: 2 px),
    masked in the readout."""
    torch.manual_seed(0)
    model = timm.create_model('myo_zmnist', **SMALL).eval()
    img = torch.rand(2, 1, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(model(img), model(_morton_sequence(img)), rtol=1e-5, atol=1e-5)
        small = torch.rand(2, 1, 6, 6)  # padded to 8 x 8 with 1 px a side
        padded = torch.nn.functional.pad(small, (1, 1, 1, 1))
        mask = torch.nn.functional.pad(torch.zeros(1, 1, 6, 6), (1, 1, 1, 1), value=1.).bool()
        padding_mask = _morton_sequence(mask.float())[..., 0].bool().expand(2, -1)
        torch.testing.assert_close(model(small), model(_morton_sequence(padded), padding_mask=padding_mask),
                                   rtol=1e-5, atol=1e-5)
        maps = model.forward_intermediates(small, indices=1, intermediates_only=True)
        # a recipe's row-major pixel sequence, read as the image (unflatten_sequences): the same function
        raster = timm.create_model('myo_zmnist', img_size=6, unflatten_sequences=True, **SMALL).eval()
        state = model.state_dict()
        raster.load_state_dict(dict(state, level_embed=state['level_embed'][:3]))  # 6 -> 8 px: 4 levels
        torch.testing.assert_close(raster(small.flatten(2).transpose(1, 2)), model(small))
    assert maps[0].shape == (2, 16, 6, 6)  # the padding is cropped from the leaf maps
    with pytest.raises(ValueError, match=r'raster pixels of img_size \(6, 6\)'):
        raster(torch.rand(1, 35, 1))


def test_readout_masks_the_perfect_tree_padding():
    """50 steps on a binary tree: perfect = 64 leaves; the mean covers the nodes with a real step under them."""
    torch.manual_seed(0)
    model = MyoSequence(in_chans=3, seq_len=50, arity=2, num_classes=4, **SMALL).eval()
    x = torch.randn(2, 50, 3)
    with torch.no_grad():
        nodes = model.forward_features(x)
        logits = model(x)
    assert nodes.shape == (2, 127, 16)  # 64 + 32 + 16 + 8 + 4 + 2 + 1
    spans = [(0, 64, 1), (64, 32, 2), (96, 16, 4), (112, 8, 8), (120, 4, 16), (124, 2, 32), (126, 1, 64)]
    keep = [start + j for start, count, span in spans for j in range(count) if j * span < 50]
    torch.testing.assert_close(logits, model.head(nodes[:, keep].mean(1)))
    model.readout_levels = 1  # the root only
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.head(nodes[:, -1]))


def test_listops_tokens_padding_mask_and_errors():
    torch.manual_seed(0)
    model = timm.create_model('myo_listops', **SMALL).eval()
    tokens = torch.randint(1, 20, (2, 30))
    padded = torch.cat([tokens, torch.zeros(2, 10, dtype=torch.long)], dim=1)  # LRA pads batches with id 0
    mask = torch.zeros(2, 40, dtype=torch.bool)
    mask[:, 30:] = True
    with torch.no_grad():
        masked, unmasked = model(padded, padding_mask=mask), model(padded)
        nodes = model.forward_features(padded, padding_mask=mask)
    assert masked.shape == (2, 10) and not torch.allclose(masked, unmasked)  # the mask changes the readout only
    keep = model._layout.node_valid
    assert keep.shape == (2, 127) and int(keep[0, :64].sum()) == 30  # 40 -> 64 leaves, 30 real
    torch.testing.assert_close(masked, model.head((nodes * keep[..., None]).sum(1) / keep.sum(1, keepdim=True)))
    with pytest.raises(ValueError, match=r'x must have shape \(B, L\) of int64 token ids'):
        model(torch.rand(2, 30))
    with pytest.raises(ValueError, match=r'token ids in \[0, vocab_size=20\)'):
        model(torch.full((1, 5), 20))
    with pytest.raises(ValueError, match=r'padding_mask must have shape \(B, L\) = \(2, 30\)'):
        model(tokens, padding_mask=mask)
    with pytest.raises(ValueError, match='at least one token'):
        model(torch.zeros(1, 0, dtype=torch.long))


def test_bad_arguments_name_themselves():
    for kwargs, message in ((dict(tree='full'), 'tree must be one of'), (dict(order='hilbert'), 'order must be'),
                            (dict(order='morton', arity=2), 'arity must be 4'), (dict(arity=1), 'arity must be'),
                            (dict(seq_len=None), 'seq_len or img_size')):
        with pytest.raises(ValueError, match=message):
            MyoSequence(**dict(dict(seq_len=16), **kwargs))
    model = MyoSequence(seq_len=16, arity=2, **SMALL)
    with pytest.raises(ValueError, match='input length 40 has a 7-level 2-ary tree.*cover 5 levels'):
        model(torch.randn(1, 40, 1))  # 40 steps need 6 levels + padding
    assert MyoSequence(seq_len=16, arity=2, virtual_init='zero', **SMALL)(torch.randn(1, 40, 1)).shape == (1, 10)


def _group_of(groups):
    return {id(p): g['name'] for g in groups for p in g['params']}


@pytest.mark.parametrize('opt_config,b_group', [('standard', 'ssm'), ('BandCdecay', 'ssm_decay'),
                                                ('BfastandCdecay', 'regular'), ('noBCdecay', 'ssm')])
def test_myo_param_groups_are_s5s(opt_config, b_group):
    model = timm.create_model('myo_listops', **SMALL)
    groups = myo_param_groups(model, lr=3e-3, lr_ssm=1e-3, weight_decay=0.04, opt_config=opt_config)
    settings = {g['name']: (g['lr'], g['weight_decay']) for g in groups}
    assert settings['ssm'] == (1e-3, 0.) and settings['regular'] == (3e-3, 0.04)
    assert settings.get('ssm_decay', (1e-3, 0.04)) == (1e-3, 0.04)
    group = _group_of(groups)
    params = dict(model.named_parameters())
    assert len(group) == len(params)  # every parameter exactly once
    assert sum(len(g['params']) for g in groups) == len(params)
    expected_c = 'ssm' if opt_config == 'noBCdecay' else 'regular'
    for name, p in params.items():
        leaf = name.rsplit('.', 1)[-1]
        if '.ssm.' in name and leaf in ('Lambda_re', 'Lambda_im', 'log_step'):
            assert group[id(p)] == 'ssm', name
        elif '.norm.' in name:
            assert group[id(p)] == 'ssm', name  # S5: norm parameters at the SSM rate, no decay
        elif name.endswith('.ssm.B'):
            assert group[id(p)] == b_group, name
        elif name.endswith(('.ssm.C', '.ssm.D')):
            assert group[id(p)] == expected_c, name
        else:  # encoder, GLU, head, level embeddings (biases decay too, as in optax adamw)
            assert group[id(p)] == 'regular', name
    optimizer = torch.optim.AdamW(groups)
    model(torch.randint(0, 20, (2, 9))).sum().backward()
    optimizer.step()
    with pytest.raises(ValueError, match='opt_config must be one of'):
        myo_param_groups(model, 1e-3, 1e-3, opt_config='fast')


def test_tree_automorphisms_are_symmetries_unless_pos_embed():
    """Level-shared weights, a per-node encoder and the mean readout make the classifier invariant to swapping
    sibling subtrees (e.g. a mirrored image: same logits). Measured on scikit-learn's 8x8 digits (embed 32, depth 2,
    P 32, 6 epochs, 1,437 / 360 split): myo_smnist 23.9 % -> 88.3 % test accuracy with ``pos_embed=True``,
    myo_zmnist 23.3 % -> 81.4 %."""
    torch.manual_seed(0)
    img = torch.rand(2, 1, 8, 8)
    top_bottom = torch.cat([img[..., 4:, :], img[..., :4, :]], dim=-2)  # the root's children, swapped in pairs
    for name in ('myo_zmnist', 'myo_smnist'):
        model = timm.create_model(name, img_size=8, **SMALL).eval()
        positional = timm.create_model(name, img_size=8, pos_embed=True, **SMALL).eval()
        with torch.no_grad():
            torch.testing.assert_close(model(img.flip(-1)), model(img))
            assert not torch.allclose(positional(img.flip(-1)), positional(img), atol=1e-4)
            if name == 'myo_zmnist':
                torch.testing.assert_close(model(top_bottom), model(img))
            assert positional(torch.rand(1, 1, 6, 7)).shape == (1, 10)  # a crop of the 8 x 8 position grid
        assert 'pos_embed' in positional.no_weight_decay() and positional.pos_embed.shape == (1, 64, 16)
    positional = timm.create_model('myo_zmnist', img_size=8, pos_embed=True, virtual_init='zero', **SMALL)
    with pytest.raises(ValueError, match=r'leaf grid \(16, 16\) is larger than the position embeddings \(8, 8\)'):
        positional(torch.rand(1, 1, 9, 8))
