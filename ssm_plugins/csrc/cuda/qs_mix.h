// Plain launchers for the quasi-separable mixing CUDA kernels (no torch types, so the .cu needs no torch
// headers). Layouts and the math are documented in ssm_plugins/csrc/qs_mix.cpp.
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ssm_plugins {
namespace cuda {

// One scan direction: dt (batch, L, H), A (H, A_cols) contiguous with A_cols = N (diagonal) or 1 (scalar),
// B and C (batch, L, G, N) with unit stride along N (the launchers check it), bias (H,) or null. Strides are in
// elements. All in the accumulation dtype (float64 for float64 x, float32 otherwise), except dt, B and C (of both
// directions) when the launcher is told they are in x's dtype (params_in_input_dtype).
struct QsMixDirection {
  const void *dt, *A, *B, *C, *bias;
  int64_t A_cols, dt_s[3], B_s[4], C_s[4];
};

// The forward's inputs: x (batch, L, H, P) in its own dtype, gamma (batch, L, H) in the accumulation dtype,
// directions 0 (forward) and 1 (reverse).
struct QsMixTensors {
  const void* x;
  int64_t x_s[4];
  const void* gamma;
  int64_t gamma_s[3];
  QsMixDirection dir[2];
};

// dtype: 0 float32, 1 float64, 2 float16, 3 bfloat16 (ssm_plugins::DType). y_acc (accumulation dtype,
// strides y_s) receives both directions plus gamma * x.
void qs_mix_fwd_launch(int dtype, bool params_in_input_dtype, int64_t batch, int64_t L, int64_t H, int64_t P,
                       int64_t N, int64_t G, const QsMixTensors& t, bool dt_softplus, bool hydra_shift, void* y_acc,
                       const int64_t* y_s, cudaStream_t stream);

// Chunk length of the backward's state checkpoints, and the number of (batch, head, feature) columns the
// backward's workspaces must hold (the launch grid, rounded up to whole blocks).
int64_t qs_mix_bwd_chunk(int64_t L);
int64_t qs_mix_bwd_columns(int64_t batch, int64_t H, int64_t P);

// Workspaces: ckpt (ceil(L / chunk), N, columns), chunk_states (chunk, N, columns) with columns from
// qs_mix_bwd_columns. Outputs in the accumulation dtype, all contiguous: dx_acc (batch, L, H, P) written;
// ddt[2], dgamma (batch, L, H), dA[2] (H, A_cols), dB[2], dC[2] (batch, L, G, N) accumulated (zero them first).
void qs_mix_bwd_launch(int dtype, bool params_in_input_dtype, int64_t batch, int64_t L, int64_t H, int64_t P,
                       int64_t N, int64_t G, const QsMixTensors& t, bool dt_softplus, bool hydra_shift,
                       const void* grad_y, const int64_t* grad_s, int64_t chunk, void* ckpt, void* chunk_states,
                       void* dx_acc, void* const* ddt, void* const* dA, void* const* dB, void* const* dC,
                       void* dgamma, cudaStream_t stream);

}  // namespace cuda
}  // namespace ssm_plugins
