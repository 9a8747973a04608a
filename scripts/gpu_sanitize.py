"""Every CUDA kernel of ssm_plugins once, on small odd shapes, for NVIDIA's compute-sanitizer (scripts/gpu_check.sh):

    compute-sanitizer --tool memcheck  python scripts/gpu_sanitize.py   # out-of-bounds / misaligned accesses
    compute-sanitizer --tool racecheck python scripts/gpu_sanitize.py   # shared-memory races

The cases: every op's forward and backward on tests/ops/test_fake_strides.py's rows (odd sizes, strided and
half-precision inputs), then the public ops on shapes that cross the kernels' chunk and block boundaries
(benchmarks/gpu.py's quick cases and an odd-sized scan / QS mix). Values are checked by the gpu tests, not here.
"""
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "ops")]

from benchmarks import gpu  # noqa: E402
from ssm_plugins.ops import qs_mix, selective_scan  # noqa: E402
from test_fake_strides import KINDS, OPS, ROWS, on_device  # noqa: E402


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_sanitize: no CUDA device")
        return 0
    os.environ["SSM_PLUGINS_QS"] = "scan"  # the QS kernels, not qs_mix's chunked form for scalar A on CUDA
    for op, row in ROWS.items():
        for kind in KINDS.get(op, ("transposed", "plain")):
            getattr(OPS, op).default(*on_device(row(kind), "cuda"))
            torch.cuda.synchronize()
            print(f"{op} {kind}", flush=True)
    for cases in (gpu.scan_cases, gpu.qs_mix_cases, gpu.ssm2d_cases, gpu.essm_cases, gpu.myo_cases):
        for op, case, _, ours in cases(True):
            ours()
            torch.cuda.synchronize()
            print(f"{op} {case}", flush=True)
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g).cuda()  # noqa: E731
    for dtype in (torch.float32, torch.bfloat16):
        u, delta, z = (r(2, 37, 1031).to(dtype) for _ in range(3))
        leaves = [t.requires_grad_() for t in (u, delta, -r(37, 16).abs(), r(2, 1, 16, 1031), r(2, 1, 16, 1031), z)]
        out = selective_scan(*leaves[:5], D=None, z=leaves[5], delta_softplus=True)
        out.float().sum().backward()
        x = r(2, 300, 3, 70).to(dtype).requires_grad_()
        rest = [r(2, 300, 3), -r(3).abs(), r(2, 300, 1, 16), r(2, 300, 1, 16), r(2, 300, 3), -r(3, 16).abs(),
                r(2, 300, 1, 16), r(2, 300, 1, 16), r(2, 300, 3)]
        qs_mix(x, *[t.requires_grad_() for t in rest], dt_softplus=True).float().sum().backward()
        torch.cuda.synchronize()
        print(f"odd-sized selective_scan and qs_mix {dtype}", flush=True)
    print("gpu_sanitize: every case ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
