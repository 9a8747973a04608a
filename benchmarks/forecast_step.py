"""Where a forecasting training step goes on the CPU: TSM2 / TSQS (the recipe's hparams defaults) against the DLinear
control (recipes_sequence/forecasting).

    python -m benchmarks.forecast_step [--batch 32] [--seq-len 512] [--horizon 96] [--n-vars 7] [--threads 1]
                                       [--models tsm2 tsqs dlinear] [--rows 12] [--repeat 5]

Per model: the median wall time of one training step (forward, MSE loss, backward, Adam step) on a random batch
(batch, seq_len, n_vars) after a warm-up step, the forward alone under no_grad, and torch.profiler's top
operators by self CPU time for one step (their share of the step). The models are the ones the hparams files
build (``recipes_sequence/forecasting/hparams/{tsm2,tsqs,dlinear}_ETTh1.yaml``); ``--model-kwargs`` overrides
them, e.g. the former defaults: ``--model-kwargs "{'embed_dim': 64, 'headdim': 32, 'drop_rate': 0.1}"``.
"""
from __future__ import annotations

import argparse
import ast

import torch
import torch.nn.functional as F

from benchmarks._common import machine, seconds, table


def build(name: str, seq_len: int, horizon: int, n_vars: int, **kwargs):
    from ssm_plugins.models.tsm2 import DLinear, TimeSeriesMixer

    if name == "dlinear":
        return DLinear(seq_len, horizon, n_vars, **kwargs)
    # the hparams files' TSM2 / TSQS: recipes_sequence/forecasting/hparams/<model>_<dataset>.yaml
    defaults = dict(patch_len=16, stride=8, embed_dim=16, depth=2, d_state=16, expand=2, headdim=16,
                    dense_wavg=True, variate_mixer=True, variate_selection="pooled", drop_rate=0.3)
    defaults.update(kwargs)
    return TimeSeriesMixer(seq_len, horizon, n_vars, token_mixer={"tsm2": "s6", "tsqs": "qs"}[name], **defaults)


def step_fn(model, x, y):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    return step


def top_ops(step, rows):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: -e.self_cpu_time_total)
    return [(e.key, e.count, e.self_cpu_time_total / 1e3, 100.0 * e.self_cpu_time_total / total)
            for e in events[:rows]], total / 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["tsm2", "tsqs", "dlinear"])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--horizon", type=int, default=96)
    parser.add_argument("--n-vars", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", type=int, default=12, help="profiler rows per model (0: none)")
    parser.add_argument("--model-kwargs", default="{}", help="overrides of the TSM2/TSQS arguments, a dict literal")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    kwargs = ast.literal_eval(args.model_kwargs)
    x = torch.randn(args.batch, args.seq_len, args.n_vars)
    y = torch.randn(args.batch, args.horizon, args.n_vars)
    print(f"{machine()}; batch {args.batch}, "
          f"L {args.seq_len}, H {args.horizon}, M {args.n_vars}, overrides {kwargs}\n")
    summary, profiles = [], []
    for name in args.models:
        model = build(name, args.seq_len, args.horizon, args.n_vars, **({} if name == "dlinear" else kwargs))
        model.train()
        step = step_fn(model, x, y)
        train_s = seconds(step, repeat=args.repeat)
        with torch.no_grad():
            model.eval()
            fwd_s = seconds(lambda: model(x), repeat=args.repeat)
            model.train()
        params = sum(p.numel() for p in model.parameters())
        summary.append((name, f"{params:,}", round(1e3 * train_s, 1), round(1e3 * fwd_s, 1)))
        if args.rows:
            profiles.append((name, *top_ops(step, args.rows)))
    print(table(["model", "params", "train step ms (fwd+bwd+Adam)", "eval forward ms"], summary))
    for name, ops, total_ms in profiles:
        print(f"\n{name}: top operators by self CPU time (one profiled step, {total_ms:.0f} ms in all)\n")
        print(table(["operator", "calls", "self ms", "% of step"],
                    [(k, c, round(ms, 1), round(p, 1)) for k, c, ms, p in ops]))


if __name__ == "__main__":
    main()
