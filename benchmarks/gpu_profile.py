"""Where a model's training step spends its time on a GPU (benchmarks/gpu.py says how fast; this says why).

    python -m benchmarks.gpu_profile [--models vim2_t viqs_t] [--batch 128] [--rows 25]

Per model, after three warm-up steps of benchmarks/gpu.py's training step (AMP bf16, SGD): the host-device
synchronisations one step makes (torch.cuda.set_sync_debug_mode, counted per call site), the forward time of each
top-level part (CUDA events around the part's forward), and torch.profiler's top operators and kernels by GPU
time for one step. Then the selective scan's forward and backward apart, ours against mamba_ssm's when installed.
On a machine without a CUDA device it says so and exits 0.
"""
from __future__ import annotations

import argparse
import collections
import sys
import warnings

import torch

from benchmarks import gpu
from benchmarks._common import table


def sync_sites(step) -> list[tuple[str, int]]:
    """(call site, count) of the synchronising CUDA calls one step makes, most frequent first."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    sites = collections.Counter(f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message))
    return sites.most_common()


def part_times(model, x) -> list[tuple[str, float]]:
    """Forward milliseconds of each top-level child (and each block of a ModuleList) under AMP bf16."""
    parts = []
    for name, child in model.named_children():
        if isinstance(child, torch.nn.ModuleList):
            parts += [(f"{name}.{i}", c) for i, c in enumerate(child)]
        else:
            parts.append((name, child))
    events, ran, handles = {}, set(), []

    def hooks(name, start, end):
        def before(module, args):
            start.record()

        def after(module, args, out):  # returns None: the output is left as it is
            end.record()
            ran.add(name)
        return before, after

    for name, module in parts:
        events[name] = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        before, after = hooks(name, *events[name])
        handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
    try:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            model(x)
        torch.cuda.synchronize()
    finally:
        for h in handles:
            h.remove()
    return [(name, start.elapsed_time(end)) for name, (start, end) in events.items() if name in ran]


def scan_split() -> list[tuple]:
    """Our selective scan's forward alone and forward+backward against mamba_ssm's (benchmarks/gpu.py's inputs),
    milliseconds."""
    from ssm_plugins.ops import selective_scan
    selective_scan_fn = gpu.mamba_selective_scan_fn()
    rows = []
    for batch, dim, length in ((8, 1536, 1024), (2, 768, 4096)):
        for dtype in (torch.float32, torch.bfloat16):
            times = []
            for fn, inputs in zip((selective_scan, selective_scan_fn), gpu.scan_inputs(batch, dim, length, 16, dtype)):
                if fn is None:
                    times += [float("nan")] * 2
                    continue
                call = lambda fn=fn, inputs=inputs: fn(**inputs, delta_softplus=True)  # noqa: E731

                def forward(call=call):
                    with torch.no_grad():
                        call()
                times += [gpu.cuda_seconds(forward) * 1e3, gpu.cuda_seconds(gpu.fwd_bwd(call, inputs.values())) * 1e3]
            rows.append((f"b{batch} d{dim} L{length} N16 {str(dtype)[6:]}", *times))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["vim2_t", "viqs_t"])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks.gpu_profile: no CUDA device on this machine; nothing measured.")
        return 0
    import timm

    import ssm_plugins  # noqa: F401  (registers our models)
    gpu.pin_settings()
    for name in args.models:
        model = timm.create_model(name).cuda().train()
        step, x = gpu.train_step(model, args.batch)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        print(f"\n## {name}, batch {args.batch}: synchronising calls in one training step")
        for site, count in sync_sites(step) or [("none", 0)]:
            print(f"{count:5d}  {site}")
        print(f"\n## {name}: forward ms per part (AMP bf16, no grad)")
        for part, ms in part_times(model.eval(), x):
            print(f"{ms:9.3f}  {part}")
        model.train()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        averages = prof.key_averages()
        print(f"\n## {name}: one training step, by GPU time")
        print(averages.table(sort_by="self_cuda_time_total", row_limit=args.rows, max_name_column_width=70))
        print(f"\n## {name}: one training step, by CPU time")
        print(averages.table(sort_by="cpu_time_total", row_limit=args.rows, max_name_column_width=70))
        del model, step
        torch.cuda.empty_cache()
    print("\n## selective scan, ms: ours and mamba_ssm's, forward alone and forward+backward")
    print(table(["case", "ours fwd", "mamba fwd", "ours fwd+bwd", "mamba fwd+bwd"],
                    [(case, o_f, m_f, o_fb, m_fb) for case, o_f, o_fb, m_f, m_fb in scan_split()]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
