"""eSSM timm models: parameters and GFLOPs vs the paper's figures (Tables 4, 7-9), CPU timings.

Paper: Liang & Li, "Efficient State Space Model via Fast Tensor Convolution and Block Diagonalization",
arXiv 2402.15290. The parameter formula is ours: docs/essm.md, 'Parameter counts'.

    .venv/bin/python -m benchmarks.models_essm            # all tables
    .venv/bin/python -m benchmarks.models_essm --quick    # no timings

1. Parameter checks against the only counts the paper prints for these layers: Table 4 (IMDB, one layer,
   H = N = 128, S = 4/16/64: 75.5k/69.3k/67.8k) and SC35 (Table 8: 220K). Table 4's text encoder is an
   Embedding of unknown vocabulary: the table shows what is left for it after our layer + final norm + decoder
   (the same ~258-token vocabulary in all three rows means the per-head differences agree exactly).
2. The registered models: parameters (= the formula), GFLOPs of one sample at the default input, and the
   paper's accuracy target (Table 9 / Table 7; the paper prints no parameter counts or FLOPs for these tasks).
3. The 2-D backbone (an extension, no paper figures) next to timm peers at 224 px.

FLOPs are 2 x multiply-adds, counted with torch.utils.flop_counter.FlopCounterMode: matmuls/convs, our
registered ``essm_kernel`` formula, and rFFT/irFFT at 2.5 n log2 n per transformed row (torch has no FFT
formula; ``ssm_plugins.ops._flops`` registers one package-wide). Elementwise work (the spectral product, GELU,
gates, norms) is not counted, as usual for GFLOPs tables. "SSM core" = the essm_conv part: B/C projections, FFTs, kernel.
"""
from __future__ import annotations

import argparse

import torch
from torch.utils.flop_counter import FlopCounterMode

import ssm_plugins  # noqa: F401  (registers the models)
from ssm_plugins.layers.essm import ESSM, essm_layer_param_count

from ._common import add_write_readme, readme_section, seconds, table


def gflops(model: torch.nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """(total, SSM core) GFLOPs of one eval forward of ``x``."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(x)
    per_module = counter.get_flop_counts()
    core = 0
    for name, module in model.named_modules():
        if isinstance(module, ESSM):
            # the module's total minus its Linear layers = B/C projections + FFTs + kernel
            total = sum(per_module.get(f'{type(model).__name__}.{name}', {}).values())
            linears = sum(sum(per_module.get(f'{type(model).__name__}.{name}.{child}', {}).values())
                          for child in ('head_mixer', 'gate', 'out'))
            core += total - linears
    return counter.get_total_flops() / 1e9, core / 1e9


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


# ---- 1. the paper's parameter counts --------------------------------------------------------------------------


def paper_count_table() -> str:
    from ssm_plugins.models.essm import ESSMSequence

    rows = []
    paper_table4 = {4: 75.5e3, 16: 69.3e3, 64: 67.8e3}
    previous = None
    for heads, paper in paper_table4.items():
        layer = essm_layer_param_count(128, 128, heads)  # block: layer + its BN
        rest = layer + 2 * 128 + 128 * 2 + 2  # + final norm (IMDB is prenorm) + Linear(128, 2)
        delta = '' if previous is None else f'{previous[0] - layer:+,} (paper {previous[1] - paper:+,.0f})'
        rows.append([f'Table 4 IMDB, 1 layer, S={heads}', f'{layer:,}', delta, f'{paper / 1e3:.1f}k',
                     f'embedding {paper - rest:,.0f} = {(paper - rest) / 128:.1f} x 128'])
        previous = (layer, paper)
    for heads in (32, 16):
        model = ESSMSequence(in_chans=1, num_classes=35, d_model=128, depth=6, d_state=128, n_heads=heads,
                             device='meta')
        count = _params(model)
        rows.append([f'SC35 (Table 8), 6 layers, S={heads}', f'{count:,}', '', '220K',
                     f'{100 * (count - 220e3) / 220e3:+.1f}%' + (' (Table 10: S=32)' if heads == 32 else ' (guess)')])
    return table(['configuration', 'ours (params)', 'per-head delta', 'paper', 'remainder / diff'], rows)


# ---- 2. the registered models ---------------------------------------------------------------------------------

# model: (paper's accuracy target, where it is printed)
TARGETS = {
    'essm_scifar': '88.12% (Table 9)',
    'essm_lra_image': '87.25% (Table 7)',
    'essm_smnist': '99.54% (Table 9)',
    'essm_smnist_official': '99.54% (Table 9, official config)',
    'essm_psmnist': '98.45% (Table 9)',
    'essm_psmnist_official': '98.45% (Table 9, official config)',
    'essm_scifar_tiny': '- (test model)',
}


def _formula(model) -> int:
    """docs/essm.md, 'Parameter counts', for the sequence models: depth x P_layer + encoder + decoder + final norm."""
    layer = model.blocks[0].ssm
    H = layer.d_model
    return (len(model.blocks) * essm_layer_param_count(H, layer.d_state, layer.n_heads, layer.glu)
            + model.in_chans * H + H + H * model.num_classes + model.num_classes + (2 * H if model.prenorm else 0))


def models_table(quick: bool) -> str:
    import timm

    rows = []
    for name in TARGETS:
        torch.manual_seed(0)
        model = timm.create_model(name).eval()
        size = model.pretrained_cfg['input_size']
        x = torch.randn(1, *size)
        total, core = gflops(model, x)
        timing = '-'
        if not quick:
            batch = torch.randn(16, *size)
            with torch.no_grad():
                timing = f'{1e3 * seconds(lambda: model(batch), repeat=3) / 16:.2f}'
        layer = model.blocks[0].ssm
        rows.append([name, size[1] * size[2], len(model.blocks), layer.d_model, layer.n_heads, layer.d_state,
                     f'{_params(model):,}', f'{_formula(model):,}', f'{total:.3f}', f'{core:.3f}', timing,
                     TARGETS[name]])
    return table(['model', 'L', 'depth', 'H', 'S', 'N', 'params', 'formula', 'GFLOPs', 'SSM core',
                  'ms/sample (eval, batch 16)', 'paper accuracy'], rows)


# ---- 3. the 2-D backbone next to timm peers --------------------------------------------------------------------

PEERS = ['essm_2d_tiny', 'resnet18', 'convnext_atto', 'swin_tiny_patch4_window7_224']


def backbone_table(quick: bool) -> str:
    import timm
    from timm.layers import set_fused_attn

    set_fused_attn(False)  # count the attention matmuls (FlopCounterMode has no CPU fused-attention formula)
    rows = []
    for name in PEERS:
        torch.manual_seed(0)
        model = timm.create_model(name).eval()
        x = torch.randn(1, 3, 224, 224)
        total, core = gflops(model, x)
        timing = train = '-'
        if not quick:
            batch = torch.randn(8, 3, 224, 224)
            with torch.no_grad():
                timing = f'{1e3 * seconds(lambda: model(batch), repeat=3) / 8:.1f}'
            model.train()

            def step():
                model.zero_grad(set_to_none=True)
                model(batch).logsumexp(-1).sum().backward()

            train = f'{1e3 * seconds(step, repeat=2) / 8:.1f}'
        rows.append([name, f'{_params(model) / 1e6:.2f}', f'{total:.2f}', f'{core:.3f}' if core else '-',
                     timing, train])
    return table(['model', 'params M', 'GFLOPs (224)', 'SSM core', 'ms/img eval (b8)', 'ms/img train (b8)'], rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true', help='counts only, no timings')
    add_write_readme(parser)
    args = parser.parse_args(argv)
    with readme_section('benchmarks.models_essm', args.write_readme, argv):
        print(f'torch {torch.__version__}, {torch.get_num_threads()} threads, CPU\n')
        print('1. Parameter counts the paper prints (Tables 4 and 8)\n')
        print(paper_count_table())
        print('\n2. Registered eSSM sequence models (one sample; the paper prints no params/FLOPs for them)\n')
        print(models_table(args.quick))
        print('\n3. 2-D backbone (extension) and timm peers at 224 px\n')
        print(backbone_table(args.quick))


if __name__ == '__main__':
    main()
