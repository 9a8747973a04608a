// Plain launchers for the selective-scan CUDA kernels (no torch types, so the .cu needs no torch headers).
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ssm_plugins {

// The forward also returns the scan's states at the boundaries before steps t = kStateEvery * s, 0 < t < L, s >= 1
// (the state entering step t; for a reverse scan the one entering step t - 1, which holds steps t .. L - 1),
// (batch, dim, saved_states(L), N) in the accumulation dtype. The CUDA backward's chunks of a long row start at
// those boundaries, so with them it needs no forward pass of its own (mamba_ssm's forward saves its chunk states
// likewise).
constexpr int64_t kStateEvery = 1024;
constexpr int64_t saved_states(int64_t L) { return L > 0 ? (L - 1) / kStateEvery : 0; }

namespace cuda {

// dtype: 0 float32, 1 float64, 2 float16, 3 bfloat16 (ssm_plugins::DType). A, D, delta_bias and last_state are
// float64 for float64 input, float32 otherwise; so are B and C, or, with bc_input_dtype, they have the input's dtype.
// delta_proj (dim, rank), accumulation dtype, or null: with it delta is (batch, delta_groups, rank, L) and each
// row's delta is delta_proj[d] . delta[b, d / (dim / delta_groups)] (selective_scan.h). reverse: the scan runs from
// t = L - 1 down to 0 (last_state is h_0). chunk_states receives the saved states (kStateEvery above), or is null.
void selective_scan_fwd_launch(int dtype, bool bc_input_dtype, int64_t batch, int64_t dim, int64_t L, int64_t N,
                               int64_t groups, const void* u, const void* delta, const void* z, const void* A,
                               const void* B, const void* C, const void* D, const void* delta_bias,
                               bool delta_softplus, bool reverse, const void* delta_proj, int64_t rank,
                               int64_t delta_groups, void* out, void* last_state, void* chunk_states,
                               cudaStream_t stream);

// Time steps per chunk (a block's threads x steps per thread) of the forward or backward for rows of length L.
int64_t selective_scan_chunk(int64_t L, bool backward);

// Elements (accumulation dtype) of the backward's scratch: the saved states of every row (kStateEvery above).
int64_t selective_scan_bwd_scratch(int64_t batch, int64_t dim, int64_t L, int64_t N);

// Backward. One block per (batch, channel) row walks the chunks from last to first, recomputing each chunk's
// states from the state entering it: rows up to kStateEvery steps are one chunk, which starts from zero; longer
// rows have chunks of kStateEvery steps, which start from `chunk_states` (the forward's saved states) or, when
// that is null, from `scratch`, filled by a forward pre-pass.
// grad A, D and delta_bias are reduced per block, then added with atomicAdd; grad B and C are added per step:
// dA (dim, N), dB and dC (batch, groups, N, L), dD and dbias (dim,) must be zeroed, in the accumulation
// dtype (dB and dC too, whatever B's dtype). du, ddelta and dz are in the input dtype; z, grad_last_state, dz, dD
// and dbias may be null.
void selective_scan_bwd_launch(int dtype, bool bc_input_dtype, int64_t batch, int64_t dim, int64_t L, int64_t N,
                               int64_t groups, const void* u, const void* delta, const void* z, const void* A,
                               const void* B, const void* C, const void* D, const void* delta_bias,
                               bool delta_softplus, bool reverse, const void* grad_out,
                               const void* grad_last_state, void* du, void* ddelta, void* dz, void* dA, void* dB,
                               void* dC, void* dD, void* ddelta_bias, const void* chunk_states, void* scratch,
                               cudaStream_t stream);

}  // namespace cuda
}  // namespace ssm_plugins
