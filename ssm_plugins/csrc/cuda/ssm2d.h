// Plain launchers for the 2-D SSM kernel-generation CUDA kernels (no torch types, so the .cu needs no
// torch headers). Contract: see ssm_plugins/csrc/ssm2d.cpp.
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ssm_plugins {
namespace cuda {

// dtype: 0 float32, 1 float64 (ssm_plugins::DType). A (4,S,N[,2]), B and C (2,S,N[,2]) contiguous; is_complex
// selects the (re, im) layout. row_scratch holds 2 * W * S * N values (pairs when complex; used as
// [system][h|v][W], system = s * N + n). K (S,H,W) must be zero-filled: when N spans several blocks (N > 4)
// each block adds its systems' sum into it.
void ssm2d_kernel_fwd_launch(int dtype, bool is_complex, int64_t S, int64_t N, int64_t H, int64_t W, const void* A,
                             const void* B, const void* C, void* row_scratch, void* K, cudaStream_t stream);

// grad_K (S,H,W). state_scratch holds 2 * H * W * S * N values and lam_scratch W * S * N values (pairs when
// complex; used as [system][h|v][H][W] and [system][W]). Writes every element of dA, dB, dC (layouts of A,
// B, C), so they may come uninitialised.
void ssm2d_kernel_bwd_launch(int dtype, bool is_complex, int64_t S, int64_t N, int64_t H, int64_t W,
                             const void* grad_K, const void* A, const void* B, const void* C, void* state_scratch,
                             void* lam_scratch, void* dA, void* dB, void* dC, cudaStream_t stream);

}  // namespace cuda
}  // namespace ssm_plugins
