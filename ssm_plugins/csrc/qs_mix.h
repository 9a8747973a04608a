// Quasi-separable (non-causal) mixing (MambaMixer, arXiv:2403.19888 v2, Sec. 2.1 Eq. 8, App. D; kernels K2/K3 of
// docs/mambamixer.md, 'Kernels K1-K3'): what the op's sources share on the torch side. The files of the op:
//   qs_mix.h        this header: the raw ops' contract, input checks, strided views, entry points
//   qs_mix_cpu.h    the CPU kernels' shared helpers (decays, sums, work parts) and the forward's arguments
//   qs_mix_fwd.cpp  the CPU forward (both scan directions and the gamma term)
//   qs_mix_bwd.cpp  the CPU backward (adjoint recursion with chunked recomputation)
//   qs_mix.cpp      op schemas, registration, CUDA glue (kernels in cuda/qs_mix.cu)
//
// Contract of the raw ops (ssm_plugins/ops/qs_mix.py normalises user input to it). Any strides are allowed
// (the channel mixer scans along a strided axis); `acc` is float64 for float64 x, float32 otherwise.
//   x                     (batch, L, H, P)  float32 / float64 / float16 / bfloat16
//   dt, dt_rev            (batch, L, H)     one floating dtype for dt, B, C and their _rev (a bf16 projection's
//                                           outputs are taken as they are): the kernels read acc or x's dtype,
//                                           another is converted to acc on the way in; the gradients of B and C
//                                           have it, those of dt and dt_rev are in acc (their sums are the biases')
//   gamma                 (batch, L, H)     acc
//   A, A_rev              (H, N) or (H, 1)  acc (diagonal A per head, or scalar A per head)
//   B, C, B_rev, C_rev    (batch, L, G, N)  dt's dtype, H % G == 0 (head h reads group h / (H / G))
//   dt_bias, dt_bias_rev  (H,)              acc, optional
//   y                     (batch, L, H, P)  x's dtype and memory layout
// Per (batch, head, feature), with Δ = softplus?(dt + dt_bias), Ā_t = exp(Δ_t A), B̄_t = Δ_t B_t:
//   forward direction:  h_t = Ā_t h_{t-1} + B̄_t x_t,  out_t = C_t·(Ā_t h_{t-1})   (exact strict scan)
//                                                     or C_{t-1}·h_{t-1}         (hydra_shift)
//   reverse direction:  the same recursion run from t = L-1 down to 0 with the *_rev parameters
//   y_t = out_t + out_rev_t + gamma_t x_t
// The backward re-runs each scan, keeping one state per chunk of ~sqrt(L) steps, then walks back through
// each chunk with its states recomputed: O(L) time, O(sqrt(L) N P) memory per (batch, head).
#pragma once
#include "common.h"

#include <tuple>

namespace ssm_plugins {
namespace {  // the op's private helpers keep internal linkage, as when the op was one file

struct MixShape {
  int64_t batch, L, H, P, N, G;
};

// One scan direction's parameters with element strides (batch, L, H) for dt and (batch, L, G, N) for B, C
// (whose N stride is 1: DirectionTensors makes them contiguous).
// A is (H, A_cols) contiguous with A_cols = N (diagonal) or 1 (scalar: one exp per step instead of N).
template <typename acc_t>
struct Direction {
  const acc_t *dt, *A, *B, *C, *bias;
  int64_t A_cols, dt_s[3], B_s[4], C_s[4];
};

inline MixShape check_inputs(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                             const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                             const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                             const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev) {
  SSM_CHECK(x.dim() == 4, "qs_mix: x must be (batch, L, H, P)");
  SSM_CHECK(A.dim() == 2 && B.dim() == 4, "qs_mix: A must be (H, N) and B (batch, L, G, N)");
  MixShape s{x.size(0), x.size(1), x.size(2), x.size(3), B.size(3), B.size(2)};
  const auto acc = A.scalar_type();
  SSM_CHECK(acc == (x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat),
            "qs_mix: A must be float64 for float64 x, float32 otherwise");
  const auto params = dt.scalar_type();
  SSM_CHECK(at::isFloatingType(params), "qs_mix: dt must be a floating-point tensor");
  for (const at::Tensor* t : {&dt, &dt_rev, &gamma}) {
    SSM_CHECK(t->dim() == 3 && t->size(0) == s.batch && t->size(1) == s.L && t->size(2) == s.H &&
                  t->scalar_type() == (t == &gamma ? acc : params),
              "qs_mix: dt, dt_rev and gamma must be (batch, L, H); gamma in A's dtype, dt_rev in dt's");
  }
  for (const at::Tensor* t : {&A, &A_rev}) {
    SSM_CHECK(t->dim() == 2 && t->size(0) == s.H && (t->size(1) == s.N || t->size(1) == 1) &&
                  t->scalar_type() == acc,
              "qs_mix: A and A_rev must be (H, N) or (H, 1)");
  }
  for (const at::Tensor* t : {&B, &C, &B_rev, &C_rev}) {
    SSM_CHECK(t->dim() == 4 && t->size(0) == s.batch && t->size(1) == s.L && t->size(2) == s.G &&
                  t->size(3) == s.N && t->scalar_type() == params,
              "qs_mix: B, C, B_rev and C_rev must be (batch, L, G, N) in dt's dtype");
  }
  SSM_CHECK(s.G > 0 && s.H % s.G == 0, "qs_mix: H must be a multiple of the number of groups G");
  for (const auto* t : {&dt_bias, &dt_bias_rev}) {
    if (t->has_value()) {
      SSM_CHECK((*t)->dim() == 1 && (*t)->size(0) == s.H && (*t)->scalar_type() == acc,
                "qs_mix: dt_bias and dt_bias_rev must be (H,) in A's dtype");
    }
  }
  return s;
}

// The per-op tensors behind a Direction. dt keeps its strides (it is as long as x's sequence axis); A, the
// bias, B and C are made contiguous: B and C are small (no head or feature axis), and a Mamba-layout
// (batch, N, L) B read N values L elements apart per step, 32 pages per step with C, which ran 4x slower.
// `in_acc`: dt, B and C are converted to A's dtype (the CPU kernels read acc_t; the CUDA kernels read acc_t or
// x's dtype: in_acc_for_cuda).
struct DirectionTensors {
  at::Tensor dt, A, B, C;
  c10::optional<at::Tensor> bias;
  DirectionTensors(const at::Tensor& dt_, const at::Tensor& A_, const at::Tensor& B_, const at::Tensor& C_,
                   const c10::optional<at::Tensor>& bias_, bool in_acc)
      : dt(in_acc ? dt_.to(A_.scalar_type()) : dt_),
        A(A_.contiguous()),
        B((in_acc ? B_.to(A_.scalar_type()) : B_).contiguous()),
        C((in_acc ? C_.to(A_.scalar_type()) : C_).contiguous()) {
    if (bias_) bias = bias_->contiguous();
  }
  template <typename acc_t>
  Direction<acc_t> view() const {
    Direction<acc_t> d{dt.data_ptr<acc_t>(), A.data_ptr<acc_t>(), B.data_ptr<acc_t>(), C.data_ptr<acc_t>(),
                       bias ? bias->data_ptr<acc_t>() : nullptr, A.size(1), {}, {}, {}};
    for (int i = 0; i < 3; ++i) d.dt_s[i] = dt.stride(i);
    for (int i = 0; i < 4; ++i) d.B_s[i] = B.stride(i), d.C_s[i] = C.stride(i);
    return d;
  }
};

template <int D>
void copy_strides(const at::Tensor& t, int64_t (&out)[D]) {
  for (int i = 0; i < D; ++i) out[i] = t.stride(i);
}

inline bool in_acc_for_cuda(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A) {
  return dt.scalar_type() != A.scalar_type() && dt.scalar_type() != x.scalar_type();
}

using BwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor, at::Tensor>;

// The backward's result from gradients accumulated in A's dtype: dB, dC of both directions in their inputs' dtype
// (no copy when that is A's); ddt stays in A's: the dt biases' gradients are its sums (ops/qs_mix.py), which a
// bf16 ddt would round.
inline BwdResult bwd_result(const at::Tensor& dx, const at::Tensor (&ddt)[2], const at::Tensor (&dA)[2],
                            const at::Tensor (&dB)[2], const at::Tensor (&dC)[2], const at::Tensor& dgamma,
                            at::ScalarType params) {
  return {dx, ddt[0], dA[0], dB[0].to(params), dC[0].to(params), ddt[1], dA[1], dB[1].to(params), dC[1].to(params),
          dgamma};
}

}  // namespace

// The ops' CPU kernels, registered in qs_mix.cpp.
at::Tensor qs_mix_fwd_cpu(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                          const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                          const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                          const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                          bool dt_softplus, bool hydra_shift);
BwdResult qs_mix_bwd_cpu(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                         const at::Tensor& B, const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                         const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                         const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                         bool dt_softplus, bool hydra_shift);

}  // namespace ssm_plugins
