// Selective scan (S6, Mamba-1): op schemas, C++ CPU kernel, CUDA glue.
//
// Contract of the raw op (ssm_plugins/ops/selective_scan.py normalises user input to it):
//   u, delta, z   (batch, dim, L)         float32 / float64 / float16 / bfloat16, one dtype
//   A             (dim, N)                accumulation dtype (float64 for float64 input, else float32)
//   B, C          (batch, groups, N, L)   accumulation dtype; dim % groups == 0
//   D, delta_bias (dim,)                  accumulation dtype
//   out           (batch, dim, L)         dtype of u;  last_state (batch, dim, N) accumulation dtype
// h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t ;  y_t = C_t . h_t + D u_t ;  out = y * silu(z)
#include "common.h"

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/selective_scan.h"
#endif

namespace ssm_plugins {
namespace {

struct ScanShape {
  int64_t batch, dim, L, N, groups;
};

ScanShape check_fwd(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                    const at::Tensor& C, const c10::optional<at::Tensor>& D, const c10::optional<at::Tensor>& z,
                    const c10::optional<at::Tensor>& delta_bias) {
  SSM_CHECK(u.dim() == 3, "selective_scan: u must be (batch, dim, L)");
  ScanShape s{u.size(0), u.size(1), u.size(2), A.size(1), B.size(1)};
  SSM_CHECK(delta.sizes() == u.sizes() && delta.scalar_type() == u.scalar_type(),
            "selective_scan: delta must match u in shape and dtype");
  SSM_CHECK(A.dim() == 2 && A.size(0) == s.dim, "selective_scan: A must be (dim, N)");
  const auto acc = A.scalar_type();
  for (const at::Tensor* t : {&B, &C}) {
    SSM_CHECK(t->dim() == 4 && t->size(0) == s.batch && t->size(1) == s.groups && t->size(2) == s.N &&
                  t->size(3) == s.L && t->scalar_type() == acc,
              "selective_scan: B and C must be (batch, groups, N, L) in A's dtype");
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

template <typename scalar_t>
void fwd_cpu_kernel(const ScanShape& s, const scalar_t* u, const scalar_t* delta, const scalar_t* z,
                    const at::opmath_type<scalar_t>* A, const at::opmath_type<scalar_t>* B,
                    const at::opmath_type<scalar_t>* C, const at::opmath_type<scalar_t>* D,
                    const at::opmath_type<scalar_t>* delta_bias, bool softplus_dt, scalar_t* out,
                    at::opmath_type<scalar_t>* last_state) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t per_group = s.dim / s.groups;
  // One (batch, channel) row per task: the recurrence is sequential in L, independent across rows.
  at::parallel_for(0, s.batch * s.dim, 1, [&](int64_t begin, int64_t end) {
    std::vector<acc_t> h(s.N);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / s.dim, d = row % s.dim, g = d / per_group;
      const int64_t off = row * s.L;
      const acc_t* Ad = A + d * s.N;
      const acc_t* Bg = B + (b * s.groups + g) * s.N * s.L;
      const acc_t* Cg = C + (b * s.groups + g) * s.N * s.L;
      const acc_t bias = delta_bias ? delta_bias[d] : acc_t(0);
      const acc_t skip = D ? D[d] : acc_t(0);
      std::fill(h.begin(), h.end(), acc_t(0));
      for (int64_t t = 0; t < s.L; ++t) {
        acc_t dt = static_cast<acc_t>(delta[off + t]) + bias;
        if (softplus_dt) dt = softplus(dt);
        const acc_t x = static_cast<acc_t>(u[off + t]);
        acc_t y = 0;
        for (int64_t n = 0; n < s.N; ++n) {
          h[n] = std::exp(dt * Ad[n]) * h[n] + dt * Bg[n * s.L + t] * x;
          y += Cg[n * s.L + t] * h[n];
        }
        y += skip * x;
        if (z) y *= silu(static_cast<acc_t>(z[off + t]));
        out[off + t] = static_cast<scalar_t>(y);
      }
      std::copy(h.begin(), h.end(), last_state + row * s.N);
    }
  });
}

template <typename T>
const T* opt_ptr(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

std::tuple<at::Tensor, at::Tensor> selective_scan_fwd_cpu(const at::Tensor& u_, const at::Tensor& delta_,
                                                          const at::Tensor& A_, const at::Tensor& B_,
                                                          const at::Tensor& C_, const c10::optional<at::Tensor>& D_,
                                                          const c10::optional<at::Tensor>& z_,
                                                          const c10::optional<at::Tensor>& delta_bias_,
                                                          bool delta_softplus) {
  const ScanShape s = check_fwd(u_, delta_, A_, B_, C_, D_, z_, delta_bias_);
  auto u = u_.contiguous(), delta = delta_.contiguous(), A = A_.contiguous(), B = B_.contiguous(),
       C = C_.contiguous();
  c10::optional<at::Tensor> D, z, bias;
  if (D_) D = D_->contiguous();
  if (z_) z = z_->contiguous();
  if (delta_bias_) bias = delta_bias_->contiguous();
  auto out = at::empty_like(u);
  auto last_state = at::empty({s.batch, s.dim, s.N}, A.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, u.scalar_type(), "selective_scan_fwd_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    fwd_cpu_kernel<scalar_t>(s, u.data_ptr<scalar_t>(), delta.data_ptr<scalar_t>(), opt_ptr<scalar_t>(z),
                             A.data_ptr<acc_t>(), B.data_ptr<acc_t>(), C.data_ptr<acc_t>(), opt_ptr<acc_t>(D),
                             opt_ptr<acc_t>(bias), delta_softplus, out.data_ptr<scalar_t>(),
                             last_state.data_ptr<acc_t>());
  });
  return {out, last_state};
}

#ifdef WITH_CUDA
std::tuple<at::Tensor, at::Tensor> selective_scan_fwd_cuda(const at::Tensor& u_, const at::Tensor& delta_,
                                                           const at::Tensor& A_, const at::Tensor& B_,
                                                           const at::Tensor& C_, const c10::optional<at::Tensor>& D_,
                                                           const c10::optional<at::Tensor>& z_,
                                                           const c10::optional<at::Tensor>& delta_bias_,
                                                           bool delta_softplus) {
  const ScanShape s = check_fwd(u_, delta_, A_, B_, C_, D_, z_, delta_bias_);
  const c10::cuda::CUDAGuard guard(u_.device());
  auto u = u_.contiguous(), delta = delta_.contiguous(), A = A_.contiguous(), B = B_.contiguous(),
       C = C_.contiguous();
  c10::optional<at::Tensor> D, z, bias;
  if (D_) D = D_->contiguous();
  if (z_) z = z_->contiguous();
  if (delta_bias_) bias = delta_bias_->contiguous();
  auto out = at::empty_like(u);
  auto last_state = at::empty({s.batch, s.dim, s.N}, A.options());
  auto ptr = [](const c10::optional<at::Tensor>& t) -> const void* { return t ? t->data_ptr() : nullptr; };
  cuda::selective_scan_fwd_launch(static_cast<int>(dtype_code(u)), s.batch, s.dim, s.L, s.N, s.groups,
                                  u.data_ptr(), delta.data_ptr(), ptr(z), A.data_ptr(), B.data_ptr(), C.data_ptr(),
                                  ptr(D), ptr(bias), delta_softplus, out.data_ptr(), last_state.data_ptr(),
                                  c10::cuda::getCurrentCUDAStream().stream());
  return {out, last_state};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(ssm_plugins, m) {
  m.def(
      "selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus) -> (Tensor out, Tensor last_state)");
}

TORCH_LIBRARY_IMPL(ssm_plugins, CPU, m) { m.impl("selective_scan_fwd", &selective_scan_fwd_cpu); }

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(ssm_plugins, CUDA, m) { m.impl("selective_scan_fwd", &selective_scan_fwd_cuda); }
#endif

}  // namespace ssm_plugins
