"""The eSSM state-kernel and 2-D SSM kernel CUDA kernels (ssm_plugins/csrc/cuda/essm.cu, ssm2d.cu) through the
host-side CUDA harness, on shapes that exercise their block decompositions, against the compiled CPU kernels.

eSSM: work items are (mode, tile of 2048 buffer positions or lags), 256 threads with 8 positions each, 256
apart; so L and n_fft are chosen past one tile (several blocks per mode, the backward's atomics), not multiples
of 256 or 2048, with n_fft = 2L (the flipped tail right after the kernel) and L = 1. float32 results are compared
with the float64 CPU kernel on the same float32 inputs: the float32 CPU kernel rounds the phase j Im z (up to
2e-4 rad at j Im z ~ 5e3), the CUDA kernel recovers that rounding, so the float32 CPU kernel is not the closer
of the two. 2-D SSM: a warp per (set, state) system, lanes on 32 consecutive columns, up to 4 systems per
forward block; so W spans several 32-column tiles with a partial last one, N is not a multiple of 4 (idle warps,
several blocks adding into K), and the grid is one row, one column or one cell. Both raw ops take float32 and
float64 (16-bit inputs are converted by ssm_plugins.ops before them). Helpers and tolerances are those of
tests/ops/test_cuda_harness.py.
"""
from __future__ import annotations

import pytest
import torch

import test_cuda_harness as base
from test_cuda_harness import OPS, assert_same, harness, planted, randn, rel_err

pytestmark = base.pytestmark
cuda = base.cuda  # the module-scoped harness fixture

# ---- eSSM state kernel ------------------------------------------------------------------------------------

ESSM_CASES = [  # (modes, L, n_fft)
    ((3,), 2500, 5003),  # forward: 3 tiles per mode, n_fft odd; backward: 2 tiles (atomics), 452-lag tail tile
    ((2, 2), 257, 514),  # n_fft = 2L; L one past the block width: thread 0 walks two lags
    ((1,), 2048, 4097),  # L exactly one tile
    ((5,), 1, 2),  # one lag
]


def essm_params(dtype, modes, gen, z_re_scale=0.05):
    g_re, g_im, z_im = (randn(*modes, dtype=dtype, gen=gen) for _ in range(3))
    z_re = (-z_re_scale * torch.rand(*modes, generator=gen, dtype=torch.float64)).to(dtype)
    return g_re, g_im, z_re, z_im


def essm_oracle(op, dtype, *args):
    """The CPU kernel in float64 on the (already rounded) inputs, returned in `dtype`."""
    up = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    out = op(*up)
    return tuple(t.to(dtype) for t in out) if isinstance(out, (tuple, list)) else out.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("case", range(len(ESSM_CASES)))
def test_essm_kernel_tiles(cuda, dtype, bidirectional, case):
    modes, length, n_fft = ESSM_CASES[case]
    gen = torch.Generator().manual_seed(10 + case)
    p = essm_params(dtype, modes, gen, z_re_scale=0.05 * 300 / max(length, 300))
    got = cuda.essm_kernel(*p, length, n_fft, bidirectional)
    assert_same(got, essm_oracle(OPS.essm_kernel, dtype, *p, length, n_fft, bidirectional), dtype, "fwd")
    grad = randn(*modes, n_fft, dtype=dtype, gen=gen)
    assert_same(cuda.essm_kernel_bwd(grad, *p, length, bidirectional),
                essm_oracle(OPS.essm_kernel_bwd, dtype, grad, *p, length, bidirectional), dtype, "bwd")
    assert (got[..., length:n_fft - (length if bidirectional else 0)] == 0).all()  # the zero padding, exactly


def test_essm_kernel_long_float32_keeps_the_phase(cuda):
    """L = 16384 (8 backward tiles, 16 forward tiles per mode) with phases j Im z up to 5e4 rad, a mode that
    does not decay, one that decays slowly and one that underflows after a few lags: the float32 kernel is
    finite and within 2e-6 of the float64 CPU kernel on the same inputs (measured 5e-7; the float32 CPU kernel
    is 2e-4 away, from rounding j Im z)."""
    length, n_fft = 16384, 32768
    gen = torch.Generator().manual_seed(12)
    g_re, g_im = (randn(3, dtype=torch.float32, gen=gen) for _ in range(2))
    z_re = torch.tensor([0.0, -1e-4, -30.0])
    z_im = torch.tensor([3.1, -2.7, 1.3])
    p = (g_re, g_im, z_re, z_im)
    for bidirectional in (False, True):
        got = cuda.essm_kernel(*p, length, n_fft, bidirectional)
        want = essm_oracle(OPS.essm_kernel, torch.float64, *p, length, n_fft, bidirectional)
        assert torch.isfinite(got).all()
        assert rel_err(got, want) < 2e-6
        grad = randn(3, n_fft, dtype=torch.float32, gen=gen)
        got = cuda.essm_kernel_bwd(grad, *p, length, bidirectional)
        want = essm_oracle(OPS.essm_kernel_bwd, torch.float64, grad, *p, length, bidirectional)
        for a, b in zip(got, want):
            assert torch.isfinite(a).all()
            assert rel_err(a, b) < 2e-6


def test_essm_backward_tiles_are_added_into_zeroed_gradients(cuda):
    """When L spans several tiles the blocks add their sums atomically into outputs the launcher zeroes first;
    without that zeroing the harness's NaN-filled outputs stay NaN, so the case above really runs that path.
    Also right with every warp of the block running concurrently."""
    gen = torch.Generator().manual_seed(13)
    p = essm_params(torch.float64, (3,), gen, z_re_scale=0.006)
    grad = randn(3, 5003, gen=gen)
    want = OPS.essm_kernel_bwd(grad, *p, 2500, True)
    cuda.set_schedule("concurrent")
    try:
        assert_same(cuda.essm_kernel_bwd(grad, *p, 2500, True), want, torch.float64)
    finally:
        cuda.set_schedule("ordered")
    broken = planted("essm.cu", "if (tiles > 1) {  // blocks add", "if (false) {  // blocks add", count=1)
    got = broken.essm_kernel_bwd(grad, *p, 2500, True)
    assert all(torch.isnan(t).all() for t in got)


def test_essm_kernel_takes_float32_and_float64_only(cuda):
    p = tuple(torch.zeros(2, dtype=torch.float16) for _ in range(4))
    with pytest.raises(harness.HarnessError, match="unsupported dtype code"):
        cuda.essm_kernel(*p, 4, 8, False)


# ---- 2-D SSM kernel ---------------------------------------------------------------------------------------

SSM2D_CASES = [  # (S, N, H, W)
    (2, 5, 3, 70),  # 3 column tiles, the last 6 wide; N = 5: a block of 4 systems and one of 1 per set (atomics)
    (1, 3, 9, 33),  # a 1-column last tile; one block of 3 warps (direct store)
    (1, 16, 4, 32),  # W = one tile exactly; N = 16 (the default): 4 forward blocks add into K
    (1, 2, 40, 1),  # one column
    (2, 1, 1, 37),  # one row
    (2, 2, 1, 1),  # one cell
]


def ssm2d_params(dtype, is_complex, S, N, gen, scale=0.4):
    tail = (2,) if is_complex else ()
    A = randn(4, S, N, *tail, dtype=dtype, gen=gen, scale=scale)
    B, C = randn(2, S, N, *tail, dtype=dtype, gen=gen), randn(2, S, N, *tail, dtype=dtype, gen=gen)
    return A, B, C


def ssm2d_matrix():
    """(dtype, is_complex, case): every case in float64, float32 on case 0; the rest marked slow (about 2 s each
    on the loaded shared machine)."""
    return [pytest.param(dtype, is_complex, case, id=f"{str(dtype)[6:]}-{'complex' if is_complex else 'real'}-case{case}",
                         marks=() if dtype == torch.float64 or case == 0 else pytest.mark.slow)
            for dtype in (torch.float64, torch.float32) for is_complex in (False, True)
            for case in range(len(SSM2D_CASES))]


@pytest.mark.parametrize("dtype, is_complex, case", ssm2d_matrix())
def test_ssm2d_kernel_tiles(cuda, dtype, is_complex, case):
    S, N, H, W = SSM2D_CASES[case]
    gen = torch.Generator().manual_seed(20 + case)
    A, B, C = ssm2d_params(dtype, is_complex, S, N, gen)
    assert_same(cuda.ssm2d_kernel_fwd(A, B, C, H, W), OPS.ssm2d_kernel_fwd(A, B, C, H, W), dtype, "fwd")
    grad = randn(S, H, W, dtype=dtype, gen=gen)
    assert_same(cuda.ssm2d_kernel_bwd(grad, A, B, C, H, W), OPS.ssm2d_kernel_bwd(grad, A, B, C, H, W), dtype, "bwd")


def test_ssm2d_kernel_larger_grid_float32_complex_stays_finite(cuda):
    """A 24x72 grid (3 column tiles, 24 rows) with |A| close to 1 (the slowest decay the parameterisation
    allows in practice): finite and equal to the CPU kernel in float32."""
    gen = torch.Generator().manual_seed(30)
    S, N, H, W = 1, 2, 24, 72
    radius = 0.97 + 0.02 * torch.rand(4, S, N, generator=gen, dtype=torch.float64)
    angle = 2 * torch.pi * torch.rand(4, S, N, generator=gen, dtype=torch.float64)
    A = torch.stack((radius * torch.cos(angle), radius * torch.sin(angle)), -1).float()
    B = torch.rand(2, S, N, 2, generator=gen, dtype=torch.float64).float()
    C = randn(2, S, N, 2, dtype=torch.float32, gen=gen)
    got = cuda.ssm2d_kernel_fwd(A, B, C, H, W)
    assert torch.isfinite(got).all()
    assert_same(got, OPS.ssm2d_kernel_fwd(A, B, C, H, W), torch.float32, "fwd")
    grad = randn(S, H, W, dtype=torch.float32, gen=gen)
    got = cuda.ssm2d_kernel_bwd(grad, A, B, C, H, W)
    assert all(torch.isfinite(t).all() for t in got)
    assert_same(got, OPS.ssm2d_kernel_bwd(grad, A, B, C, H, W), torch.float32, "bwd")


def test_ssm2d_kernels_are_right_with_all_warps_running_concurrently(cuda):
    S, N, H, W = SSM2D_CASES[0]
    gen = torch.Generator().manual_seed(31)
    A, B, C = ssm2d_params(torch.float64, True, S, N, gen)
    grad = randn(S, H, W, gen=gen)
    cuda.set_schedule("concurrent")
    try:
        assert_same(cuda.ssm2d_kernel_fwd(A, B, C, H, W), OPS.ssm2d_kernel_fwd(A, B, C, H, W), torch.float64)
        assert_same(cuda.ssm2d_kernel_bwd(grad, A, B, C, H, W), OPS.ssm2d_kernel_bwd(grad, A, B, C, H, W),
                    torch.float64)
    finally:
        cuda.set_schedule("ordered")


SSM2D_PLANTED = {  # what is removed from ssm2d.cu -> which op then goes wrong
    "forward block barrier": ("      __syncthreads();\n", "fwd"),  # warp 0 sums partials not yet written
    "x^h carried across tiles": ("  r.xh_left = shfl_from(xh, kWarp - 1);\n", "fwd"),
    "lam_h carried across tiles": ("      lam_h_right = shfl_from(lam_h, 0);\n", "bwd"),
}


@pytest.mark.parametrize("bug", list(SSM2D_PLANTED))
def test_ssm2d_planted_bugs_are_caught(cuda, bug):
    """The first case (3 column tiles, 4 systems summed per block) catches each of these removals."""
    old, op = SSM2D_PLANTED[bug]
    S, N, H, W = SSM2D_CASES[0]
    gen = torch.Generator().manual_seed(32)
    A, B, C = ssm2d_params(torch.float64, False, S, N, gen)
    grad = randn(S, H, W, gen=gen)
    broken = planted("ssm2d.cu", old, "", count=1)
    if op == "fwd":
        got, want = broken.ssm2d_kernel_fwd(A, B, C, H, W), OPS.ssm2d_kernel_fwd(A, B, C, H, W)
    else:
        got, want = broken.ssm2d_kernel_bwd(grad, A, B, C, H, W)[0], OPS.ssm2d_kernel_bwd(grad, A, B, C, H, W)[0]
    assert rel_err(got, want) > 1e-3
