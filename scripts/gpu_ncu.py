"""The scan kernels at the shapes vim2_t / viqs_t give them (batch 128, 224x224), forward and backward once each,
for Nsight Compute (scripts/gpu_check.sh, step ncu):

    ncu --clock-control none --section SpeedOfLight ... -k regex:"fwd_kernel|bwd_kernel" python scripts/gpu_ncu.py

In launch order: qs_mix bf16 (viqs_t's token mixer: x (128, 197, 6, 64), scalar A), qs_mix float32 (vim2_t's
channel mixer: x (128, 192, 1, 197) transposed, as the layer passes it), selective_scan bf16 (vim2_t's token
mixer: u (128, 384, 197) token-major, low-rank delta).
"""
import os
import sys

import torch

from ssm_plugins.ops import qs_mix, selective_scan


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_ncu: no CUDA device")
        return 0
    os.environ["SSM_PLUGINS_QS"] = "scan"  # the QS kernels, not qs_mix's chunked form for scalar A on CUDA
    g = torch.Generator(device="cuda").manual_seed(0)
    r = lambda *s, dtype=torch.float32: torch.randn(*s, generator=g, device="cuda").to(dtype)  # noqa: E731

    def qs(x, heads, a_shape):
        batch, length = x.shape[:2]
        rest = []
        for _ in range(2):
            rest += [r(batch, length, heads) - 2, -torch.rand(*a_shape, device="cuda") - 0.5,
                     r(batch, length, 16), r(batch, length, 16)]
        rest.append(r(batch, length, heads))
        leaves = [x.requires_grad_()] + [t.requires_grad_() for t in rest]
        qs_mix(*leaves, dt_softplus=True).float().sum().backward()

    qs(r(128, 197, 6, 64, dtype=torch.bfloat16), 6, (6,))
    qs(r(128, 197, 1, 192).permute(0, 3, 2, 1), 1, (1,))  # (128, 192, 1, 197), L contiguous
    u = r(128, 197, 384, dtype=torch.bfloat16).transpose(1, 2)
    leaves = [u.requires_grad_(), r(128, 12, 197, dtype=torch.bfloat16).requires_grad_(),
              (-torch.rand(384, 16, device="cuda") - 0.5).requires_grad_(),
              r(128, 16, 197, dtype=torch.bfloat16).requires_grad_(),
              r(128, 16, 197, dtype=torch.bfloat16).requires_grad_(), r(384, 12).requires_grad_()]
    out = selective_scan(*leaves[:5], delta_proj=leaves[5], delta_softplus=True)
    out.float().sum().backward()
    torch.cuda.synchronize()
    print("gpu_ncu: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
