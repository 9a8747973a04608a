// Selective scan (S6, Mamba-1): what the op's sources share on the torch side. The files of the op:
//   selective_scan.h        this header: the raw ops' contract, input checks, entry points
//   selective_scan_cpu.h    the CPU kernels' SIMD helpers, row buffers and instruction-set selection
//   selective_scan_fwd.cpp  the CPU forward (per-row core and driver)
//   selective_scan_bwd.cpp  the CPU backward (per-row core and driver)
//   selective_scan.cpp      op schemas, registration, CUDA glue (kernels in cuda/selective_scan.cu)
//
// Contract of the raw ops (ssm_plugins/ops/selective_scan.py normalises user input to it):
//   u, delta, z   (batch, dim, L)         float32 / float64 / float16 / bfloat16, one dtype
//   A             (dim, N)                accumulation dtype (float64 for float64 input, else float32)
//   B, C          (batch, groups, N, L)   accumulation dtype or u's (mamba_ssm's contract), one dtype for both;
//                                         dim % groups == 0
//   D, delta_bias (dim,)                  accumulation dtype
//   out           (batch, dim, L)         dtype of u;  last_state (batch, dim, N) accumulation dtype
//   chunk_states  (batch, dim, S, N)      accumulation dtype: the states at the boundaries before steps 1024 s < L
//                                         (S = saved_states(L); kStateEvery in cuda/selective_scan.h)
// h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t ;  y_t = C_t . h_t + D u_t ;  out = y * silu(z)
// with dt_t = delta_t + delta_bias, passed through softplus when delta_softplus.
// selective_scan_fwd's optional delta_proj (dim, R), accumulation dtype, makes delta low rank: delta is then
// (batch, delta_groups, R, L) in u's dtype (dim % delta_groups == 0) and channel d's delta_t is
// delta_proj[d] . delta[b, d / (dim / delta_groups), :, t] (Mamba's dt_proj, computed per row by the kernel
// instead of materialised as a (batch, dim, L) tensor).
// reverse (both ops): the recurrence runs from t = L - 1 down to 0 (h_t from h_{t+1}; last_state is h_0), i.e. the
// scan of the time-flipped inputs, flipped back; the kernels scan the rows in reverse order (the saved state at
// a boundary then holds the steps after it).
//
// selective_scan_bwd takes the forward's inputs plus grad_out (batch, dim, L), an optional
// grad_last_state (batch, dim, N) and, optionally, the forward's chunk_states, and returns the gradients of u,
// delta, A, B, C, D, z, delta_bias (the last three None when the input was absent), each in its input's dtype.
// The CUDA backward starts its chunks of a long row from chunk_states (without them it runs a forward pre-pass);
// the CPU backward keeps its own checkpoints and only checks them.
#pragma once
#include "common.h"
#include "cuda/selective_scan.h"  // kStateEvery, saved_states (plain C++)

#include <tuple>
#include <vector>

namespace ssm_plugins {
namespace {  // the op's private helpers keep internal linkage, as when the op was one file

struct ScanShape {
  int64_t batch, dim, L, N, groups;
  int64_t rank = 0, delta_groups = 0;  // low-rank delta (delta_proj given), else 0
  bool reverse = false;                // the scan runs from t = L - 1 down to 0
};

inline ScanShape check_fwd(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                           const at::Tensor& C, const c10::optional<at::Tensor>& D, const c10::optional<at::Tensor>& z,
                           const c10::optional<at::Tensor>& delta_bias,
                           const c10::optional<at::Tensor>& delta_proj = c10::nullopt) {
  SSM_CHECK(u.dim() == 3, "selective_scan: u must be (batch, dim, L)");
  SSM_CHECK(A.dim() == 2 && A.size(0) == u.size(1), "selective_scan: A must be (dim, N)");
  SSM_CHECK(B.dim() == 4, "selective_scan: B must be (batch, groups, N, L)");
  ScanShape s{u.size(0), u.size(1), u.size(2), A.size(1), B.size(1)};
  const auto acc = A.scalar_type();
  if (delta_proj.has_value()) {
    SSM_CHECK(delta_proj->dim() == 2 && delta_proj->size(0) == s.dim && delta_proj->scalar_type() == acc,
              "selective_scan: delta_proj must be (dim, R) in A's dtype");
    SSM_CHECK(delta.dim() == 4 && delta.size(0) == s.batch && delta.size(2) == delta_proj->size(1) &&
                  delta.size(3) == s.L && delta.scalar_type() == u.scalar_type(),
              "selective_scan: with delta_proj, delta must be (batch, delta_groups, R, L) in u's dtype");
    SSM_CHECK(delta.size(1) > 0 && s.dim % delta.size(1) == 0,
              "selective_scan: dim must be a multiple of delta's groups");
    s.rank = delta_proj->size(1);
    s.delta_groups = delta.size(1);
  } else {
    SSM_CHECK(delta.sizes() == u.sizes() && delta.scalar_type() == u.scalar_type(),
              "selective_scan: delta must match u in shape and dtype");
  }
  SSM_CHECK(acc == (u.scalar_type() == at::kDouble ? at::kDouble : at::kFloat),
            "selective_scan: A must be float64 for float64 input, else float32");
  for (const at::Tensor* t : {&B, &C}) {
    SSM_CHECK(t->dim() == 4 && t->size(0) == s.batch && t->size(1) == s.groups && t->size(2) == s.N &&
                  t->size(3) == s.L && t->scalar_type() == B.scalar_type() &&
                  (B.scalar_type() == acc || B.scalar_type() == u.scalar_type()),
              "selective_scan: B and C must be (batch, groups, N, L), both in A's dtype or both in u's");
  }
  SSM_CHECK(s.groups > 0 && s.dim % s.groups == 0, "selective_scan: dim must be a multiple of groups");
  for (const auto* t : {&D, &delta_bias}) {
    if (t->has_value()) {
      SSM_CHECK((*t)->dim() == 1 && (*t)->size(0) == s.dim && (*t)->scalar_type() == acc,
                "selective_scan: D and delta_bias must be (dim,) in A's dtype");
    }
  }
  if (z.has_value()) {
    SSM_CHECK(z->sizes() == u.sizes() && z->scalar_type() == u.scalar_type(), "selective_scan: z must match u");
  }
  return s;
}

template <typename T>
T* opt_ptr(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

inline c10::optional<at::Tensor> opt_contiguous(const c10::optional<at::Tensor>& t) {
  if (t.has_value()) return t->contiguous();
  return c10::nullopt;
}

using BwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::optional<at::Tensor>,
                             c10::optional<at::Tensor>, c10::optional<at::Tensor>>;

// The forward's third output: (batch, dim, saved_states(L), N).
inline std::vector<int64_t> chunk_states_shape(const ScanShape& s) {
  return {s.batch, s.dim, saved_states(s.L), s.N};
}

inline void check_bwd(const ScanShape& s, const at::Tensor& u, const at::Tensor& grad_out,
                      const c10::optional<at::Tensor>& grad_last_state,
                      const c10::optional<at::Tensor>& chunk_states, const at::Tensor& A) {
  SSM_CHECK(grad_out.sizes() == u.sizes(), "selective_scan_bwd: grad_out must be (batch, dim, L)");
  if (grad_last_state.has_value()) {
    SSM_CHECK(grad_last_state->dim() == 3 && grad_last_state->size(0) == s.batch &&
                  grad_last_state->size(1) == s.dim && grad_last_state->size(2) == s.N,
              "selective_scan_bwd: grad_last_state must be (batch, dim, N)");
  }
  if (chunk_states.has_value()) {
    SSM_CHECK(chunk_states->sizes() == at::IntArrayRef(chunk_states_shape(s)) &&
                  chunk_states->scalar_type() == A.scalar_type() && chunk_states->device() == u.device(),
              "selective_scan_bwd: chunk_states must be the forward's: (batch, dim, (L - 1) / 1024, N) in A's "
              "dtype, on u's device");
  }
}

}  // namespace

// The ops' kernels, registered in selective_scan.cpp.
using FwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor>;  // out, last_state, chunk_states
FwdResult selective_scan_fwd_cpu(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                                 const at::Tensor& C, const c10::optional<at::Tensor>& D,
                                 const c10::optional<at::Tensor>& z, const c10::optional<at::Tensor>& delta_bias,
                                 bool delta_softplus, const c10::optional<at::Tensor>& delta_proj, bool reverse);
BwdResult selective_scan_bwd_cpu(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                 const at::Tensor& B, const at::Tensor& C, const c10::optional<at::Tensor>& D,
                                 const c10::optional<at::Tensor>& z, const c10::optional<at::Tensor>& delta_bias,
                                 bool delta_softplus, const at::Tensor& grad_out,
                                 const c10::optional<at::Tensor>& grad_last_state, bool reverse,
                                 const c10::optional<at::Tensor>& chunk_states);

}  // namespace ssm_plugins
