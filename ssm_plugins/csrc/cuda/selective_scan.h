// Plain launchers for the selective-scan CUDA kernels (no torch types, so the .cu needs no torch headers).
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ssm_plugins {
namespace cuda {

// dtype: 0 float32, 1 float64, 2 float16, 3 bfloat16 (ssm_plugins::DType). A, B, C, D, delta_bias and
// last_state are float64 for float64 input, float32 otherwise.
void selective_scan_fwd_launch(int dtype, int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t groups,
                               const void* u, const void* delta, const void* z, const void* A, const void* B,
                               const void* C, const void* D, const void* delta_bias, bool delta_softplus, void* out,
                               void* last_state, cudaStream_t stream);

}  // namespace cuda
}  // namespace ssm_plugins
