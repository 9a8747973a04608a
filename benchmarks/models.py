"""Every model ssm_plugins registers in timm, at its paper resolution: parameters and GFLOPs next to the papers.

    .venv/bin/python -m benchmarks.models                  # all models
    .venv/bin/python -m benchmarks.models --filter '^vi'   # a regex on the name; --no-flops: parameters only

Models are built as registered (the input size of their pretrained_cfg), in the setting the paper counts them in
(the 2-D SSM CelebA models with 40 classes). GFLOPs: one eval forward of one image under
torch.utils.flop_counter.FlopCounterMode, 2 x multiply-adds, with our ops' formulas and torch's FFTs
(``ssm_plugins.ops._flops``) counted; elementwise work is not. "SSM ops" is the part of our compiled ops.
Attention is built unfused so that its matmuls are counted. Paper figures come from the per-family tables of
benchmarks/models_{vim2,ssm2d,essm,myo}.py (those scripts print the families' detailed breakdowns):
  * ViM2/ViQS (MambaMixer, arXiv 2403.19888 v2): Table 15 params and FLOPs. The paper's FLOPs are fvcore MACs
    (our reading: docs/mambamixer.md, 'Variant sizes'), so the ratio compares our GMACs (= GFLOPs / 2) with them.
  * 2-D SSM (arXiv 2306.06635): the Table 1/2 parameter counts with SSM-r (the paper reports no FLOPs).
  * eSSM (arXiv 2402.15290) and Myo (Myosotis, arXiv 2509.20503): the papers print no parameter counts or FLOPs
    for these models; myopix_zcifar is shown next to the S5 sCIFAR network it copies (docs/myosotis.md,
    'S5 settings'), which is not a paper figure.
"""
from __future__ import annotations

import argparse
import re

import torch

import ssm_plugins  # noqa: F401  (registers the models)

from . import models_essm, models_myo, models_ssm2d, models_vim2
from ._common import add_write_readme, gflops, readme_section, table

VIM2_PAPER = {name: (params, gflops) for name, params, gflops in models_vim2.PAPER}
SSM2D_PAPER = {name: (kwargs, real) for name, kwargs, _, real, _ in models_ssm2d.PAPER}


def reference(name: str):
    """(kwargs of the paper's setting, reference params in M or None, reference G(MAC)s or None, source)."""
    if name in VIM2_PAPER:
        params, gmacs = VIM2_PAPER[name]
        return {}, params, gmacs, 'Table 15 (FLOPs = MACs)'
    if name in SSM2D_PAPER:
        kwargs, params = SSM2D_PAPER[name]
        return kwargs, params, None, 'Table 1/2, SSM-r' + (', 40 classes' if kwargs else '') if params else '-'
    if name == 'myopix_zcifar':
        return {}, models_myo.s5_cifar_params() / 1e6, None, 'S5 sCIFAR network (not a paper figure)'
    if '%' in models_essm.TARGETS.get(name, ''):
        return {}, None, None, f'none; accuracy {models_essm.TARGETS[name]}'
    return {}, None, None, '-'


def _ratio(ours, paper):
    return f'{ours / paper:.2f}' if paper else '-'


def rows(pattern: str, with_flops: bool):
    import timm
    from timm.layers import set_fused_attn

    set_fused_attn(False)  # FlopCounterMode has no formula for the CPU fused attention kernel
    names = sorted(n for n in timm.list_models()
                   if timm.models.model_entrypoint(n).__module__.startswith('ssm_plugins.') and re.search(pattern, n))
    for name in names:
        if timm.models.get_pretrained_cfg(name).input_size is None:
            continue  # not an image model (the TSM2/TSQS forecasters: recipes_sequence/forecasting/README.md)
        kwargs, paper_params, paper_gmacs, source = reference(name)
        torch.manual_seed(0)
        model = timm.create_model(name, **kwargs).eval()
        input_size = model.pretrained_cfg['input_size']
        params = sum(p.numel() for p in model.parameters()) / 1e6
        total = ssm = None
        if with_flops:
            total, ssm = gflops(model, input_size[1:], in_chans=input_size[0])
        yield [name, 'x'.join(map(str, input_size[1:])), f'{params:.2f}',
               f'{paper_params:.2f}' if paper_params else '-', _ratio(params, paper_params),
               f'{total:.3f}' if total is not None else '-', f'{ssm:.3f}' if ssm is not None else '-',
               f'{total / 2:.3f}' if total is not None else '-', f'{paper_gmacs:.1f}' if paper_gmacs else '-',
               _ratio(total / 2, paper_gmacs) if total is not None else '-', source]
        del model


HEADERS = ['model', 'input', 'params M', 'paper M', 'ratio', 'GFLOPs (2xMAC)', 'of which SSM ops', 'GMACs',
           'paper G', 'ratio (MACs)', 'paper figure']


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--filter', default='', help='regex on the model name')
    parser.add_argument('--no-flops', action='store_true', help='parameters only')
    add_write_readme(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with readme_section('benchmarks.models', args.write_readme, argv):
        print(table(HEADERS, list(rows(args.filter, not args.no_flops))))


if __name__ == '__main__':
    main()
