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


def train_step(model, batch):
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    y = torch.randint(0, 1000, (batch,), device="cuda")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step, x


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
    """Our selective scan's forward alone and forward+backward against mamba_ssm's (B, C in u's dtype, its
    contract; ours float32), milliseconds."""
    from ssm_plugins.ops import selective_scan
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except Exception:  # noqa: BLE001 - not installed
        selective_scan_fn = None
    rows = []
    for batch, dim, length in ((8, 1536, 1024), (2, 768, 4096)):
        for dtype in (torch.float32, torch.bfloat16):
            g = torch.Generator().manual_seed(0)
            r = lambda *s: torch.randn(*s, generator=g).cuda()  # noqa: E731
            t = dict(u=r(batch, dim, length).to(dtype), delta=(0.5 * r(batch, dim, length) - 4.0).to(dtype),
                     A=-torch.arange(1, 17.0).repeat(dim, 1).cuda(), B=r(batch, 16, length), C=r(batch, 16, length),
                     D=torch.ones(dim).cuda(), z=r(batch, dim, length).to(dtype), delta_bias=0.5 * r(dim))
            t = {k: v.requires_grad_() for k, v in t.items()}
            mt = {**t, "B": t["B"].detach().to(dtype).requires_grad_(), "C": t["C"].detach().to(dtype).requires_grad_()}
            times = []
            for fn, inputs in ((selective_scan, t), (selective_scan_fn, mt)):
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
        step, x = train_step(model, args.batch)
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
