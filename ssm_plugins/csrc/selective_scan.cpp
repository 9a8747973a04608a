// Selective scan (S6, Mamba-1): op schemas and registration, and the CUDA glue (the kernels are in
// cuda/selective_scan.cu). The contract of the raw ops is in selective_scan.h; the CPU kernels are in
// selective_scan_fwd.cpp and selective_scan_bwd.cpp.
#include "selective_scan.h"

#include <algorithm>

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/selective_scan.h"
#endif

namespace ssm_plugins {
namespace {

#ifdef WITH_CUDA
// The kernels scan either way (reverse: the chunks and each thread's steps from the last): no flipped copies.
FwdResult selective_scan_fwd_cuda(const at::Tensor& u_, const at::Tensor& delta_, const at::Tensor& A_,
                                  const at::Tensor& B_, const at::Tensor& C_, const c10::optional<at::Tensor>& D_,
                                  const c10::optional<at::Tensor>& z_, const c10::optional<at::Tensor>& delta_bias_,
                                  bool delta_softplus, const c10::optional<at::Tensor>& delta_proj_, bool reverse) {
  const ScanShape s = check_fwd(u_, delta_, A_, B_, C_, D_, z_, delta_bias_, delta_proj_);
  const c10::cuda::CUDAGuard guard(u_.device());
  auto u = u_.contiguous(), delta = delta_.contiguous(), A = A_.contiguous(), B = B_.contiguous(),
       C = C_.contiguous();
  auto D = opt_contiguous(D_), z = opt_contiguous(z_), bias = opt_contiguous(delta_bias_);
  auto proj = opt_contiguous(delta_proj_);
  auto out = at::empty_like(u, at::MemoryFormat::Contiguous);
  auto last_state = at::zeros({s.batch, s.dim, s.N}, A.options());
  auto chunk_states = at::empty(chunk_states_shape(s), A.options());
  auto ptr = [](const c10::optional<at::Tensor>& t) -> const void* { return t ? t->data_ptr() : nullptr; };
  const bool bc_input_dtype = B.scalar_type() != A.scalar_type();  // B, C in u's dtype (check_fwd)
  cuda::selective_scan_fwd_launch(static_cast<int>(dtype_code(u)), bc_input_dtype, s.batch, s.dim, s.L, s.N, s.groups,
                                  u.data_ptr(), delta.data_ptr(), ptr(z), A.data_ptr(), B.data_ptr(), C.data_ptr(),
                                  ptr(D), ptr(bias), delta_softplus, reverse, ptr(proj), s.rank, s.delta_groups,
                                  out.data_ptr(), last_state.data_ptr(), chunk_states.data_ptr(),
                                  c10::cuda::getCurrentCUDAStream().stream());
  return {in_layout_of(u_, out), last_state, chunk_states};
}

BwdResult selective_scan_bwd_cuda(const at::Tensor& u_, const at::Tensor& delta_, const at::Tensor& A_,
                                  const at::Tensor& B_, const at::Tensor& C_, const c10::optional<at::Tensor>& D_,
                                  const c10::optional<at::Tensor>& z_, const c10::optional<at::Tensor>& delta_bias_,
                                  bool delta_softplus, const at::Tensor& grad_out_,
                                  const c10::optional<at::Tensor>& grad_last_state_, bool reverse,
                                  const c10::optional<at::Tensor>& chunk_states_) {
  const ScanShape s = check_fwd(u_, delta_, A_, B_, C_, D_, z_, delta_bias_);
  check_bwd(s, u_, grad_out_, grad_last_state_, chunk_states_, A_);
  const c10::cuda::CUDAGuard guard(u_.device());
  auto u = u_.contiguous(), delta = delta_.contiguous(), A = A_.contiguous(), B = B_.contiguous(),
       C = C_.contiguous();
  auto D = opt_contiguous(D_), z = opt_contiguous(z_), bias = opt_contiguous(delta_bias_);
  auto grad_out = grad_out_.to(u.scalar_type()).contiguous();
  c10::optional<at::Tensor> grad_last;
  if (grad_last_state_.has_value()) grad_last = grad_last_state_->to(A.scalar_type()).contiguous();
  const auto acc = A.options();
  auto du = at::empty_like(u, at::MemoryFormat::Contiguous);
  auto ddelta = at::empty_like(u, at::MemoryFormat::Contiguous);
  c10::optional<at::Tensor> dz;
  if (z) dz = at::empty_like(u, at::MemoryFormat::Contiguous);
  // Shared reductions are atomics into zeroed accumulation-dtype buffers.
  auto dA = at::zeros_like(A);
  auto dB = at::zeros(B.sizes(), acc);  // atomics accumulate in A's dtype, whatever B's
  auto dC = at::zeros(C.sizes(), acc);
  auto dD = at::zeros({s.dim}, acc);
  auto dbias = at::zeros({s.dim}, acc);
  // The state entering each chunk of a long row: the forward's, or else a pre-pass fills the scratch.
  auto chunk_states = opt_contiguous(chunk_states_);
  auto scratch = at::empty({chunk_states ? 0 : cuda::selective_scan_bwd_scratch(s.batch, s.dim, s.L, s.N)}, acc);
  auto ptr = [](const c10::optional<at::Tensor>& t) -> const void* { return t ? t->data_ptr() : nullptr; };
  auto mptr = [](c10::optional<at::Tensor>& t) -> void* { return t ? t->data_ptr() : nullptr; };
  const bool bc_input_dtype = B.scalar_type() != A.scalar_type();  // B, C in u's dtype (check_fwd)
  cuda::selective_scan_bwd_launch(static_cast<int>(dtype_code(u)), bc_input_dtype, s.batch, s.dim, s.L, s.N, s.groups,
                                  u.data_ptr(), delta.data_ptr(), ptr(z), A.data_ptr(), B.data_ptr(), C.data_ptr(),
                                  ptr(D), ptr(bias), delta_softplus, reverse, grad_out.data_ptr(), ptr(grad_last),
                                  du.data_ptr(), ddelta.data_ptr(), mptr(dz), dA.data_ptr(), dB.data_ptr(),
                                  dC.data_ptr(), dD.data_ptr(), dbias.data_ptr(), ptr(chunk_states), scratch.data_ptr(),
                                  c10::cuda::getCurrentCUDAStream().stream());
  c10::optional<at::Tensor> dD_out, dbias_out;
  if (D) dD_out = dD;
  if (bias) dbias_out = dbias;
  return {du, ddelta, dA, dB.to(B.scalar_type()), dC.to(C.scalar_type()), dD_out, dz, dbias_out};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(ssm_plugins, m) {
  m.def(
      "selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus, Tensor? delta_proj=None, bool reverse=False) -> "
      "(Tensor out, Tensor last_state, Tensor chunk_states)");
  m.def(
      "selective_scan_bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus, Tensor grad_out, Tensor? grad_last_state, bool reverse=False, "
      "Tensor? chunk_states=None) -> "
      "(Tensor grad_u, Tensor grad_delta, Tensor grad_A, Tensor grad_B, Tensor grad_C, Tensor? grad_D, "
      "Tensor? grad_z, Tensor? grad_delta_bias)");
}

TORCH_LIBRARY_IMPL(ssm_plugins, CPU, m) {
  m.impl("selective_scan_fwd", &selective_scan_fwd_cpu);
  m.impl("selective_scan_bwd", &selective_scan_bwd_cpu);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(ssm_plugins, CUDA, m) {
  m.impl("selective_scan_fwd", &selective_scan_fwd_cuda);
  m.impl("selective_scan_bwd", &selective_scan_bwd_cuda);
}
#endif

}  // namespace ssm_plugins
