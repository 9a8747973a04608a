// Quasi-separable (non-causal) mixing: op schemas and registration, and the CUDA glue (the kernels are in
// cuda/qs_mix.cu). The contract of the raw ops is in qs_mix.h; the CPU kernels are in qs_mix_fwd.cpp and
// qs_mix_bwd.cpp.
#include "qs_mix.h"

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/qs_mix.h"
#endif

namespace ssm_plugins {
namespace {

#ifdef WITH_CUDA
// Element strides of the tensors the CUDA kernels read, in the launcher's fixed order (see cuda/qs_mix.h).
cuda::QsMixTensors cuda_tensors(const at::Tensor& x, const DirectionTensors& fwd, const DirectionTensors& rev,
                                const at::Tensor& gamma) {
  cuda::QsMixTensors t{};
  t.x = x.data_ptr();
  copy_strides(x, t.x_s);
  t.gamma = gamma.data_ptr();
  copy_strides(gamma, t.gamma_s);
  const DirectionTensors* dirs[2] = {&fwd, &rev};
  for (int dir = 0; dir < 2; ++dir) {
    const DirectionTensors& d = *dirs[dir];
    t.dir[dir].dt = d.dt.data_ptr();
    t.dir[dir].A = d.A.data_ptr();
    t.dir[dir].B = d.B.data_ptr();
    t.dir[dir].C = d.C.data_ptr();
    t.dir[dir].bias = d.bias ? d.bias->data_ptr() : nullptr;
    t.dir[dir].A_cols = d.A.size(1);
    copy_strides(d.dt, t.dir[dir].dt_s);
    copy_strides(d.B, t.dir[dir].B_s);
    copy_strides(d.C, t.dir[dir].C_s);
  }
  return t;
}

at::Tensor qs_mix_fwd_cuda(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                           const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                           const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                           const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                           bool dt_softplus, bool hydra_shift) {
  const MixShape s = check_inputs(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev);
  const c10::cuda::CUDAGuard guard(x.device());
  const bool in_acc = in_acc_for_cuda(x, dt, A);
  const DirectionTensors fwd(dt, A, B, C, dt_bias, in_acc), rev(dt_rev, A_rev, B_rev, C_rev, dt_bias_rev, in_acc);
  // The kernel accumulates both directions in the accumulation dtype, then y is cast to x's dtype.
  auto y_acc = at::empty_like(x, x.options().dtype(A.scalar_type()));
  cuda::QsMixTensors t = cuda_tensors(x, fwd, rev, gamma);
  int64_t y_s[4];
  copy_strides(y_acc, y_s);
  cuda::qs_mix_fwd_launch(static_cast<int>(dtype_code(x)), fwd.dt.scalar_type() != A.scalar_type(), s.batch, s.L,
                          s.H, s.P, s.N, s.G, t, dt_softplus, hydra_shift, y_acc.data_ptr(), y_s,
                          c10::cuda::getCurrentCUDAStream().stream());
  return y_acc.to(x.scalar_type());
}

BwdResult qs_mix_bwd_cuda(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                          const at::Tensor& B, const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                          const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                          const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                          bool dt_softplus, bool hydra_shift) {
  const MixShape s = check_inputs(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev);
  SSM_CHECK(grad_y.sizes() == x.sizes() && grad_y.scalar_type() == x.scalar_type(),
            "qs_mix_bwd: grad_y must match x in shape and dtype");
  const c10::cuda::CUDAGuard guard(x.device());
  const bool in_acc = in_acc_for_cuda(x, dt, A);
  const DirectionTensors fwd(dt, A, B, C, dt_bias, in_acc), rev(dt_rev, A_rev, B_rev, C_rev, dt_bias_rev, in_acc);
  const auto acc_opts = A.options();
  const int64_t chunk = cuda::qs_mix_bwd_chunk(s.L);
  const int64_t columns = cuda::qs_mix_bwd_columns(s.batch, s.H, s.P);
  // Per-column state checkpoints and one chunk of recomputed states (column index fastest, for coalescing).
  auto ckpt = at::empty({(s.L + chunk - 1) / chunk, s.N, columns}, acc_opts);
  auto chunk_states = at::empty({chunk, s.N, columns}, acc_opts);
  auto dx_acc = at::empty({s.batch, s.L, s.H, s.P}, acc_opts);
  auto dgamma = at::zeros({s.batch, s.L, s.H}, acc_opts);
  at::Tensor ddt[2], dA[2], dB[2], dC[2];
  void *ddt_p[2], *dA_p[2], *dB_p[2], *dC_p[2];
  for (int dir = 0; dir < 2; ++dir) {
    ddt[dir] = at::zeros({s.batch, s.L, s.H}, acc_opts);
    dA[dir] = at::zeros({s.H, (dir == 0 ? A : A_rev).size(1)}, acc_opts);
    dB[dir] = at::zeros({s.batch, s.L, s.G, s.N}, acc_opts);
    dC[dir] = at::zeros({s.batch, s.L, s.G, s.N}, acc_opts);
    ddt_p[dir] = ddt[dir].data_ptr(), dA_p[dir] = dA[dir].data_ptr();
    dB_p[dir] = dB[dir].data_ptr(), dC_p[dir] = dC[dir].data_ptr();
  }
  cuda::QsMixTensors t = cuda_tensors(x, fwd, rev, gamma);
  int64_t grad_s[4];
  copy_strides(grad_y, grad_s);
  cuda::qs_mix_bwd_launch(static_cast<int>(dtype_code(x)), fwd.dt.scalar_type() != A.scalar_type(), s.batch, s.L,
                          s.H, s.P, s.N, s.G, t, dt_softplus, hydra_shift, grad_y.data_ptr(), grad_s, chunk,
                          ckpt.data_ptr(), chunk_states.data_ptr(), dx_acc.data_ptr(), ddt_p, dA_p, dB_p, dC_p,
                          dgamma.data_ptr(), c10::cuda::getCurrentCUDAStream().stream());
  return bwd_result(in_layout_of(x, dx_acc), ddt, dA, dB, dC, dgamma, dt.scalar_type());
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(ssm_plugins, m) {
  m.def(
      "qs_mix_fwd(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor dt_rev, Tensor A_rev, Tensor B_rev, "
      "Tensor C_rev, Tensor gamma, Tensor? dt_bias, Tensor? dt_bias_rev, bool dt_softplus, bool hydra_shift) "
      "-> Tensor");
  m.def(
      "qs_mix_bwd(Tensor grad_y, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor dt_rev, Tensor A_rev, "
      "Tensor B_rev, Tensor C_rev, Tensor gamma, Tensor? dt_bias, Tensor? dt_bias_rev, bool dt_softplus, "
      "bool hydra_shift) -> (Tensor dx, Tensor ddt, Tensor dA, Tensor dB, Tensor dC, Tensor ddt_rev, "
      "Tensor dA_rev, Tensor dB_rev, Tensor dC_rev, Tensor dgamma)");
}

TORCH_LIBRARY_IMPL(ssm_plugins, CPU, m) {
  m.impl("qs_mix_fwd", &qs_mix_fwd_cpu);
  m.impl("qs_mix_bwd", &qs_mix_bwd_cpu);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(ssm_plugins, CUDA, m) {
  m.impl("qs_mix_fwd", &qs_mix_fwd_cuda);
  m.impl("qs_mix_bwd", &qs_mix_bwd_cuda);
}
#endif

}  // namespace ssm_plugins
