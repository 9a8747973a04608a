// Plain launcher for the Myosotis tree-solve CUDA kernel (no torch types, so the .cu needs no torch headers).
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ssm_plugins {
namespace cuda {

// dtype of rhs / out / x_saved: 0 float32, 1 float64, 2 float16, 3 bfloat16 (ssm_plugins::DType),
// 4 complex64, 5 complex128. b, work and grad_b are in the accumulation dtype (float32 for 0/2/3, float64
// for 1, complex64 / complex128 for 4 / 5); inv_pivot in its real part. work and inv_pivot are scratch of
// shape (batch, N, C). Solves T x = rhs (adjoint: Tᴴ x = rhs) per (batch, channel); with grad_b (zeroed,
// (batch, Nb, C)) also accumulates the edge gradients against the saved forward output x_saved.
void myo_solve_launch(int dtype, int64_t batch, int64_t N, int64_t C, int64_t batch_b, int64_t Nb,
                      const void* rhs, const void* b, const int64_t* parent, const int64_t* b_index, bool skew,
                      bool adjoint, void* out, void* work, void* inv_pivot, const void* x_saved, void* grad_b,
                      cudaStream_t stream);

}  // namespace cuda
}  // namespace ssm_plugins
