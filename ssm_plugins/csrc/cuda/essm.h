// Plain launchers for the eSSM state-kernel CUDA kernels (no torch types, so the .cu needs no torch headers).
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ssm_plugins {
namespace cuda {

// dtype: 0 float32, 1 float64 (ssm_plugins::DType). All pointers are contiguous device memory of that dtype;
// g_re, g_im, z_re, z_im and the four gradients hold `modes` values, K and grad_K hold modes * n_fft.
// Every output element is written (the gradients may come uninitialised: when L spans several of the
// backward's tiles the launcher zeroes them on `stream` before the blocks add their sums).
void essm_kernel_fwd_launch(int dtype, int64_t modes, int64_t L, int64_t n_fft, bool bidirectional,
                            const void* g_re, const void* g_im, const void* z_re, const void* z_im, void* K,
                            cudaStream_t stream);

void essm_kernel_bwd_launch(int dtype, int64_t modes, int64_t L, int64_t n_fft, bool bidirectional,
                            const void* grad_K, const void* g_re, const void* g_im, const void* z_re,
                            const void* z_im, void* grad_g_re, void* grad_g_im, void* grad_z_re, void* grad_z_im,
                            cudaStream_t stream);

}  // namespace cuda
}  // namespace ssm_plugins
