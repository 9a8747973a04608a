"""GPU benchmark: every op forward+backward against its reference (and mamba_ssm's selective_scan_fn when it is
installed), and model training / inference throughput next to timm's DeiT-S and Swin-T, in one run.

    .venv/bin/python -m benchmarks.gpu [--quick] [--batch 128] [--only ops|models] [--models NAME ...]
                                       [--compile MODE] [--write-readme]

``--device cpu`` runs the same cases on the CPU (wall-clock timing, the models in float32: bf16 autocast on a CPU
without native bf16 is ~10x slower than float32): a check that the script's calls are right on a machine without a
GPU (tests/ops/test_cuda_benchmark.py), not a benchmark.

Timing: CUDA events around each call after warm-up, torch.cuda.synchronize() before and after, median of the
repeats. Settings pinned and printed: TF32 matmul and cuDNN on, cudnn.benchmark on, AMP bf16 autocast for the
models (batch 128, 224x224, SGD step included in "train"). On a machine without a CUDA device it prints that
there is no GPU and exits 0 (nothing is measured or faked).

``--compile MODE`` also times each model compiled (torch.compile, inductor, that mode: ``default``, or
``reduce-overhead`` to replay the step as a CUDA graph), a row beside the eager one: an eager vim2_t step spends
as long launching its ~16,000 operators from Python as the GPU spends running them (benchmarks/README, GPU).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys

import torch

from benchmarks._common import add_write_readme, readme_section, seconds, table

OUR_MODELS = ("vim2_t", "vim2_s", "viqs_t", "viqs_s", "deit_small_patch16_224_ssm2d",
              "swin_tiny_patch4_window7_224_ssm2d", "essm_2d_tiny", "myonet_tiny")
PEERS = ("deit_small_patch16_224", "swin_tiny_patch4_window7_224")
DEVICE = "cuda"  # --device
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def pin_settings() -> dict:
    """The numerics the figures depend on, set explicitly (and printed with the table)."""
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    torch.set_float32_matmul_precision("high")
    return {"tf32 matmul": torch.backends.cuda.matmul.allow_tf32, "tf32 cudnn": torch.backends.cudnn.allow_tf32,
            "cudnn.benchmark": torch.backends.cudnn.benchmark, "float32 matmul precision": "high",
            "SSM_PLUGINS_QS (the models' qs_mix for scalar A)": os.environ.get("SSM_PLUGINS_QS", "auto")}


def cuda_seconds(fn, repeat: int = 10, warmup: int = 3) -> float:
    """Median seconds of fn() on the GPU: CUDA events around each call, the device synchronised before and after
    (wall clock with --device cpu)."""
    if DEVICE != "cuda":
        return seconds(fn, repeat=repeat, warmup=warmup)
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


_BACKENDS = {"reference": {"SSM_PLUGINS_BACKEND": "reference"}, "kernel": {"SSM_PLUGINS_BACKEND": "auto"},
             "scan": {"SSM_PLUGINS_BACKEND": "auto", "SSM_PLUGINS_QS": "scan"}}


@contextlib.contextmanager
def backend(name: str):
    """Run the ssm_plugins ops as shipped ("kernel": the compiled kernels, qs_mix's chunked form for scalar A on
    CUDA), with the PyTorch references ("reference") or with qs_mix's scan kernels for every A ("scan")."""
    previous = {key: os.environ.get(key) for key in ("SSM_PLUGINS_BACKEND", "SSM_PLUGINS_QS")}
    os.environ.pop("SSM_PLUGINS_QS", None)
    os.environ.update(_BACKENDS[name])
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def fwd_bwd(fn, leaves):
    """A step: fn() -> tensor, then backward of its sum into `leaves` (gradients cleared first)."""
    def step():
        for t in leaves:
            t.grad = None
        out = fn()
        out = out[0] if isinstance(out, tuple) else out
        out.float().sum().backward()
    return step


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(DEVICE).requires_grad_(t.is_floating_point() or t.is_complex())


# ---- op cases: (op, case, {baseline name: step}, our step) ------------------------------------------------

def scan_inputs(batch: int, dim: int, length: int, n_state: int, dtype) -> tuple[dict, dict]:
    """Leaves of one selective-scan case on DEVICE, for ours and for mamba_ssm's kernel (the same tensors): u, delta,
    z and the time-varying B, C in ``dtype`` (mamba_ssm's contract, which ours follows), the rest float32."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    t = dict(u=r(batch, dim, length).to(dtype), delta=(0.5 * r(batch, dim, length) - 4.0).to(dtype),
             A=-torch.arange(1, n_state + 1.0).repeat(dim, 1), B=r(batch, n_state, length).to(dtype),
             C=r(batch, n_state, length).to(dtype), D=torch.ones(dim), z=r(batch, dim, length).to(dtype),
             delta_bias=0.5 * r(dim))
    t = {k: _leaf(v) for k, v in t.items()}
    return t, t


def mamba_selective_scan_fn():
    """mamba_ssm's selective_scan_fn, or None (saying why) when it is not importable."""
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except Exception as exc:  # noqa: BLE001 - not installed (or built for another torch): no mamba_ssm row
        print(f"(no mamba_ssm row: {type(exc).__name__}: {exc})")
        return None
    return selective_scan_fn


def _flipped_in_time(fn, t: dict):
    """fn's reverse scan as bidirectional Mamba models run it with mamba_ssm: time-flipped copies in, output flipped
    back."""
    timed = {"u", "delta", "B", "C", "z"}
    return fn(**{k: v.flip(-1) if k in timed else v for k, v in t.items()}, delta_softplus=True).flip(-1)


def scan_cases(quick: bool):
    """The selective scan at three lengths, and a reverse scan (ours in the kernels; mamba_ssm's on flipped
    copies) at the first."""
    from ssm_plugins.ops import selective_scan
    shapes = [(2, 64, 256, 16)] if quick else [(8, 1536, 1024, 16), (2, 768, 4096, 16), (1, 1536, 16384, 16)]
    selective_scan_fn = mamba_selective_scan_fn()
    for (batch, dim, length, n_state), reverse in [(s, False) for s in shapes] + [(shapes[0], True)]:
        for dtype in (torch.float32, torch.bfloat16):
            t, mt = scan_inputs(batch, dim, length, n_state, dtype)
            call = lambda fn, t=t: fn(**t, delta_softplus=True, reverse=reverse)  # noqa: E731
            baselines = {"reference (PyTorch)": fwd_bwd(lambda: call(selective_scan), t.values())}
            if selective_scan_fn is not None:
                mamba = (lambda mt=mt: _flipped_in_time(selective_scan_fn, mt)) if reverse else \
                    (lambda mt=mt: selective_scan_fn(**mt, delta_softplus=True))
                baselines["mamba_ssm selective_scan_fn" + (" on flipped copies" if reverse else "")] = \
                    fwd_bwd(mamba, mt.values())
            yield ("selective_scan", f"b{batch} d{dim} L{length} N{n_state} {str(dtype)[6:]}"
                   + (" reverse" if reverse else ""), baselines, fwd_bwd(lambda: call(selective_scan), t.values()))


def qs_mix_cases(quick: bool):
    """viqs's token mixer (head layout) at a long sequence; a sequence of 16k steps (256 chunks of 64: the chunked
    form's grouped carry; no reference, whose Python loop takes minutes there); vim2_t's channel mixer: the channels
    are the sequence and the 197 tokens one head's features, x a (batch, dim, 1, tokens) view. Scalar A also
    against the scan kernels (ours: the chunked form)."""
    from ssm_plugins.ops import qs_mix
    # batch, L, heads, P, N, label, x strided as the channel mixer's, diagonal A too, against the reference
    cases = [(2, 128, 4, 16, 16, "", False, True, True) if quick else (16, 3136, 12, 64, 16, "", False, True, True),
             (1, 1024, 2, 16, 16, " long", False, False, False) if quick
             else (4, 16384, 4, 64, 16, " long", False, False, False),
             (2, 64, 1, 50, 16, " channel mixer", True, False, True) if quick
             else (128, 192, 1, 197, 16, " vim2_t channel mixer", True, False, True)]
    for batch, length, heads, feat, n_state, what, strided, diagonal, with_reference in cases:
        for a_cols in (1, n_state) if diagonal else (1,):
            g = torch.Generator().manual_seed(0)
            r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
            a_shape = (heads,) if a_cols == 1 else (heads, n_state)
            x = r(batch, length, heads, feat).bfloat16()
            if strided:  # the channel mixer's u.transpose(1, 2).unsqueeze(2): features (tokens) `length` apart
                x = x.permute(0, 3, 2, 1).contiguous().permute(0, 3, 2, 1)
            t = [x]
            for _ in range(2):
                t += [r(batch, length, heads) - 2.0, -torch.rand(*a_shape, generator=g) - 0.5,
                      r(batch, length, 1, n_state), r(batch, length, 1, n_state)]
            t += [r(batch, length, heads)]
            t = [_leaf(v) for v in t]
            step = fwd_bwd(lambda t=t: qs_mix(*t, dt_softplus=True), t)
            baselines = {"reference (PyTorch)": step} if with_reference else {}
            if a_cols == 1:
                baselines["scan kernels (SSM_PLUGINS_QS=scan)"] = step
            yield ("qs_mix", f"b{batch} L{length} H{heads} P{feat} N{n_state} {'scalar' if a_cols == 1 else 'diag'} "
                   f"A bf16{what}", baselines, step)


def ssm2d_cases(quick: bool):
    from ssm_plugins.ops import ssm2d_kernel
    S, N, H, W = (8, 16, 14, 14) if quick else (4 * 192, 16, 56, 56)
    g = torch.Generator().manual_seed(0)
    params = [_leaf(torch.randn(*shape, generator=g) * std) for shape, std in
              (((4, S, N), 0.2), ((2, S, N), 0.2), ((2, S, N), 1.0))]
    step = fwd_bwd(lambda: ssm2d_kernel(*params, H, W, directions=4, fused=True), params)
    yield "ssm2d_kernel", f"S{S} N{N} {H}x{W} fp32", {"reference (PyTorch)": step}, step


def essm_cases(quick: bool):
    from ssm_plugins.ops import essm_conv
    batch, heads, modes, width, length = (2, 4, 16, 32, 256) if quick else (16, 8, 256, 512, 4096)
    g = torch.Generator().manual_seed(0)
    n, h = modes // heads, width // heads
    params = [-0.5 * torch.ones(heads, n), math.pi * torch.randn(heads, n, generator=g),
              math.log(1e-3) + math.log(100) * torch.rand(heads, n, generator=g),
              torch.randn(heads, n, h, generator=g) / math.sqrt(h), torch.randn(heads, h, n, generator=g) / math.sqrt(n),
              torch.ones(heads, h)]
    u = torch.randn(batch, width, length, generator=g)
    leaves = [_leaf(v) for v in [u, *params]]
    step = fwd_bwd(lambda: essm_conv(*leaves, bidirectional=True), leaves)
    yield "essm_conv", f"b{batch} S{heads} modes{modes} width{width} L{length} fp32 bidir", \
        {"reference (PyTorch)": step}, step


def myo_cases(quick: bool):
    from ssm_plugins.ops.myo import myo_solve, myo_tree
    leaves, batch, channels, arity = (1024, 2, 16, 2) if quick else (65536, 16, 128, 2)
    tree = myo_tree(leaves, arity)
    g = torch.Generator().manual_seed(0)
    u = torch.randn(batch, tree.parent.numel(), channels, generator=g)
    b = (2 * torch.rand(channels, len(tree.level_sizes) - 1, generator=g) - 1) / (arity + 1)
    u, b = _leaf(u), _leaf(b)
    step = fwd_bwd(lambda: myo_solve(u, b, arity), [u, b])
    yield "myo_solve", f"b{batch} C{channels} L{leaves} k{arity} fp32", {"reference (PyTorch)": step}, step


def op_rows(quick: bool) -> list[tuple]:
    rows = []
    for cases in (scan_cases, qs_mix_cases, ssm2d_cases, essm_cases, myo_cases):
        for op, case, baselines, ours in cases(quick):
            with backend("kernel"):
                t_ours = cuda_seconds(ours)
            for name, step in baselines.items():
                reference = name.startswith("reference")  # Python loops over L: seconds a call, 2 repeats
                with backend("reference" if reference else "scan" if name.startswith("scan") else "kernel"):
                    t_base = cuda_seconds(step, repeat=2 if reference else 10, warmup=0 if reference else 3)
                rows.append((op, case + " fwd+bwd", name, t_base, t_ours, t_base / t_ours))
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    return rows


# ---- model throughput -------------------------------------------------------------------------------------

def train_step(model, batch: int, size=(224, 224)):
    """One training step of ``model`` on a random batch of images of ``size`` (AMP bf16 on the GPU, float32 on the
    CPU; SGD); returns (step, x)."""
    x = torch.randn(batch, 3, *size, device=DEVICE)
    y = torch.randint(0, model.num_classes, (batch,), device=DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        torch.compiler.cudagraph_mark_step_begin()  # a compiled CUDA-graph model: a new step (else nothing)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=DEVICE == "cuda"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step, x


def throughput(model, batch: int) -> tuple[float, float, float | None]:
    """(training, inference) images/s of ``model`` (compiled or not) at ``batch``, and the training steps' peak of
    allocated GPU memory in GiB (None on the CPU)."""
    train, x = train_step(model, batch)

    def infer_step():
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad(), torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=DEVICE == "cuda"):
            model(x)

    model.train()
    if DEVICE == "cuda":
        torch.cuda.reset_peak_memory_stats()
    train_speed = batch / cuda_seconds(train, repeat=5, warmup=2)
    peak = torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else None
    model.eval()  # a compiled model recompiles for eval mode in its warm-up
    return train_speed, batch / cuda_seconds(infer_step, repeat=5, warmup=2), peak


def model_rows(batch: int, quick: bool, names=None, compile_mode=None, compile_backend="inductor") -> list[tuple]:
    """A row per model (default: the peers and ours; ``quick`` the first three): eager, then compiled with
    ``compile_mode`` when given; ratios against the peers run the same way."""
    import timm
    import ssm_plugins  # noqa: F401  (registers our models with timm)
    registered = set(timm.list_models())
    if names is None:
        names = [n for n in PEERS + OUR_MODELS if n in registered]
        names = names[:3] if quick else names
    unknown = [n for n in names if n not in registered]
    if unknown:
        raise ValueError(f"--models: not registered with timm: {unknown}")
    modes = [None] + ([compile_mode] if compile_mode else [])
    speed = {}  # (name, mode) -> (train, infer, training peak GiB)
    for name in names:
        for mode in modes:
            model = timm.create_model(name).to(DEVICE)
            if mode is not None:
                torch._dynamo.reset()
                model = torch.compile(model, mode=None if mode == "default" else mode, backend=compile_backend)
            speed[name, mode] = throughput(model, batch)
            del model
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    rows = []
    for (name, mode), (train, infer, peak) in speed.items():
        ref = {p: speed[p, mode] for p in PEERS if (p, mode) in speed}
        rel = [f"{train / ref[p][0]:.2f} / {infer / ref[p][1]:.2f}" for p in PEERS if p in ref]
        label = name if mode is None else f"{name} (compiled, {mode})"
        rows.append((label, train, infer, "-" if peak is None else f"{peak:.1f}", *rel,
                     *[""] * (len(PEERS) - len(rel))))
    return rows


OP_COLUMNS = ["op", "case", "baseline", "baseline s", "ours s", "speed-up"]
MODEL_COLUMNS = ["model", "train img/s", "infer img/s", "train peak GiB", *[f"vs {p}" for p in PEERS]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and three models: a smoke run")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--only", choices=("ops", "models"), default=None)
    parser.add_argument("--models", nargs="+", default=None, metavar="NAME",
                        help="the models to time (timm names; default: DeiT-S, Swin-T and ours)")
    parser.add_argument("--compile", choices=COMPILE_MODES, default=None, metavar="MODE",
                        help=f"also time each model under torch.compile in this mode ({', '.join(COMPILE_MODES)})")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: run the cases on the CPU to check the script (not a benchmark)")
    add_write_readme(parser)
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cpu":
        print("benchmarks.gpu --device cpu: the cases on the CPU, wall clock (a check of the script)")
        if args.only in (None, "ops"):
            print(table(OP_COLUMNS, op_rows(args.quick)))
        if args.only in (None, "models"):
            print(table(MODEL_COLUMNS, model_rows(args.batch, args.quick, args.models, args.compile)))
        return 0
    if not torch.cuda.is_available():
        print("benchmarks.gpu: no CUDA device on this machine (torch.cuda.is_available() is False); "
              "nothing measured.")
        return 0
    settings = pin_settings()
    with readme_section("benchmarks.gpu", args.write_readme, argv):
        props = torch.cuda.get_device_properties(0)
        print(f"{props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, CUDA "
              f"{torch.version.cuda}; " + ", ".join(f"{k} {v}" for k, v in settings.items()))
        print()
        if args.only in (None, "ops"):
            print(table(OP_COLUMNS, op_rows(args.quick)))
            print()
        if args.only in (None, "models"):
            print(f"Training (fwd+bwd+SGD step) and inference images/s, batch {args.batch}, 224x224, AMP bf16; "
                  "the training steps' peak of allocated GPU memory; ratios train / inference against each peer")
            print(table(MODEL_COLUMNS, model_rows(args.batch, args.quick, args.models, args.compile)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
