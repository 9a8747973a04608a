// C entry points of the harness library (loaded with ctypes by tests/cuda_harness/harness.py): the
// launchers of ssm_plugins/csrc/cuda/*.h behind extern "C" functions that return 0, or 1 with the error text
// in cuda_harness_error(). Pointers are CPU memory the caller registered with cuda_harness_register.
#include <cstdint>
#include <cstring>
#include <mutex>
#include <exception>
#include <string>

#include "cuda_harness.h"
#include "essm.h"
#include "myo.h"
#include "qs_mix.h"
#include "selective_scan.h"
#include "ssm2d.h"

namespace {
std::string g_api_error;

template <typename F>
int guarded(F&& call) {
  try {
    call();
    return 0;
  } catch (const std::exception& e) {
    g_api_error = e.what();
  } catch (...) {
    g_api_error = "unknown C++ exception";
  }
  return 1;
}
}  // namespace

namespace sc = ssm_plugins::cuda;

// The CUDA runtime functions the kernels' launchers call.
cudaError_t cudaGetLastError() {
  std::lock_guard<std::mutex> lock(cuda_harness::g_error.mutex);
  const cudaError_t code = cuda_harness::g_error.code;
  cuda_harness::g_error.code = cudaSuccess;
  return code;
}

const char* cudaGetErrorString(cudaError_t code) {
  static thread_local std::string text;
  std::lock_guard<std::mutex> lock(cuda_harness::g_error.mutex);
  text = code == cudaSuccess ? std::string("no error") : cuda_harness::g_error.message;
  return text.c_str();
}

cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}

extern "C" {

const char* cuda_harness_error() { return g_api_error.c_str(); }

void cuda_harness_register(const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  cuda_harness::g_regions.push_back({a, a + bytes});
}

void cuda_harness_set_schedule(int schedule) { cuda_harness::g_schedule = schedule; }

void cuda_harness_clear() {
  cuda_harness::g_regions.clear();
  cudaGetLastError();
}

int selective_scan_fwd(int dtype, bool bc_input_dtype, int64_t batch, int64_t dim, int64_t L, int64_t N,
                       int64_t groups, const void* u, const void* delta, const void* z, const void* A, const void* B,
                       const void* C, const void* D, const void* delta_bias, bool delta_softplus, bool reverse,
                       const void* delta_proj, int64_t rank, int64_t delta_groups, void* out, void* last_state,
                       void* chunk_states) {
  return guarded([&] {
    sc::selective_scan_fwd_launch(dtype, bc_input_dtype, batch, dim, L, N, groups, u, delta, z, A, B, C, D,
                                  delta_bias, delta_softplus, reverse, delta_proj, rank, delta_groups, out,
                                  last_state, chunk_states, nullptr);
  });
}

int64_t selective_scan_bwd_scratch(int64_t batch, int64_t dim, int64_t L, int64_t N) {
  return sc::selective_scan_bwd_scratch(batch, dim, L, N);
}

int selective_scan_bwd(int dtype, bool bc_input_dtype, int64_t batch, int64_t dim, int64_t L, int64_t N,
                       int64_t groups, const void* u, const void* delta, const void* z, const void* A, const void* B,
                       const void* C, const void* D, const void* delta_bias, bool delta_softplus, bool reverse,
                       const void* grad_out, const void* grad_last_state, void* du, void* ddelta, void* dz, void* dA,
                       void* dB, void* dC, void* dD, void* ddelta_bias, const void* chunk_states, void* scratch) {
  return guarded([&] {
    sc::selective_scan_bwd_launch(dtype, bc_input_dtype, batch, dim, L, N, groups, u, delta, z, A, B, C, D,
                                  delta_bias, delta_softplus, reverse, grad_out, grad_last_state, du, ddelta, dz, dA,
                                  dB, dC, dD, ddelta_bias, chunk_states, scratch, nullptr);
  });
}

int qs_mix_fwd(int dtype, bool params_in_input_dtype, int64_t batch, int64_t L, int64_t H, int64_t P, int64_t N,
               int64_t G, const sc::QsMixTensors* t, bool dt_softplus, bool hydra_shift, void* y_acc,
               const int64_t* y_s) {
  return guarded([&] {
    sc::qs_mix_fwd_launch(dtype, params_in_input_dtype, batch, L, H, P, N, G, *t, dt_softplus, hydra_shift, y_acc,
                          y_s, nullptr);
  });
}

int64_t qs_mix_bwd_chunk(int64_t L) { return sc::qs_mix_bwd_chunk(L); }
int64_t qs_mix_bwd_columns(int64_t batch, int64_t H, int64_t P) { return sc::qs_mix_bwd_columns(batch, H, P); }

int qs_mix_bwd(int dtype, bool params_in_input_dtype, int64_t batch, int64_t L, int64_t H, int64_t P, int64_t N,
               int64_t G, const sc::QsMixTensors* t, bool dt_softplus, bool hydra_shift, const void* grad_y,
               const int64_t* grad_s, int64_t chunk, void* ckpt, void* chunk_states, void* dx_acc,
               void* const* ddt, void* const* dA, void* const* dB, void* const* dC, void* dgamma) {
  return guarded([&] {
    sc::qs_mix_bwd_launch(dtype, params_in_input_dtype, batch, L, H, P, N, G, *t, dt_softplus, hydra_shift, grad_y,
                          grad_s, chunk, ckpt, chunk_states, dx_acc, ddt, dA, dB, dC, dgamma, nullptr);
  });
}

int ssm2d_kernel_fwd(int dtype, bool is_complex, int64_t S, int64_t N, int64_t H, int64_t W, const void* A,
                     const void* B, const void* C, void* row_scratch, void* K) {
  return guarded([&] { sc::ssm2d_kernel_fwd_launch(dtype, is_complex, S, N, H, W, A, B, C, row_scratch, K, nullptr); });
}

int ssm2d_kernel_bwd(int dtype, bool is_complex, int64_t S, int64_t N, int64_t H, int64_t W, const void* grad_K,
                     const void* A, const void* B, const void* C, void* state_scratch, void* lam_scratch, void* dA,
                     void* dB, void* dC) {
  return guarded([&] {
    sc::ssm2d_kernel_bwd_launch(dtype, is_complex, S, N, H, W, grad_K, A, B, C, state_scratch, lam_scratch, dA, dB,
                                dC, nullptr);
  });
}

int essm_kernel_fwd(int dtype, int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, const void* g_re,
                    const void* g_im, const void* z_re, const void* z_im, void* K) {
  return guarded([&] {
    sc::essm_kernel_fwd_launch(dtype, modes, L, n_fft, bidirectional, g_re, g_im, z_re, z_im, K, nullptr);
  });
}

int essm_kernel_bwd(int dtype, int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, const void* grad_K,
                    const void* g_re, const void* g_im, const void* z_re, const void* z_im, void* grad_g_re,
                    void* grad_g_im, void* grad_z_re, void* grad_z_im) {
  return guarded([&] {
    sc::essm_kernel_bwd_launch(dtype, modes, L, n_fft, bidirectional, grad_K, g_re, g_im, z_re, z_im, grad_g_re,
                               grad_g_im, grad_z_re, grad_z_im, nullptr);
  });
}

int myo_solve(int dtype, int64_t batch, int64_t N, int64_t C, int64_t batch_b, int64_t Nb, const void* rhs,
              const void* b, const int64_t* parent, const int64_t* b_index, bool skew, bool adjoint, void* out,
              void* work, void* inv_pivot, const void* x_saved, void* grad_b) {
  return guarded([&] {
    sc::myo_solve_launch(dtype, batch, N, C, batch_b, Nb, rhs, b, parent, b_index, skew, adjoint, out, work,
                         inv_pivot, x_saved, grad_b, nullptr);
  });
}

}  // extern "C"
