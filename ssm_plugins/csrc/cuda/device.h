// What the kernels need besides CUDA itself, written once for the two builds of every .cu file:
//   nvcc          (ssm_plugins._C)  global_ptr<T> is T*, launch_kernel is <<<grid, block, smem, stream>>>;
//   host compiler (tests/cuda_harness, the CPU execution harness of the CUDA sources)  global_ptr<T> is a
//                 bounds-checked pointer and launch_kernel runs the grid on OS threads.
// Kernels take their global-memory arguments as global_ptr<T>, launch through launch_kernel, and declare
// dynamic shared memory with SSM_DYNAMIC_SHARED(T, name). No torch headers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#if defined(__CUDACC__)
#include <cuda_runtime.h>

namespace ssm_plugins {
namespace cuda {

template <typename T>
using global_ptr = T*;

template <typename... KArgs, typename... Args>
inline void launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                          Args&&... args) {
  kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
}

}  // namespace cuda
}  // namespace ssm_plugins

#define SSM_DYNAMIC_SHARED(T, name)                       \
  extern __shared__ __align__(16) unsigned char ssm_smem_[]; \
  T* name = reinterpret_cast<T*>(ssm_smem_)

#else
#include <cuda_harness.h>

namespace ssm_plugins {
namespace cuda {

template <typename T>
using global_ptr = ::cuda_harness::checked_ptr<T>;


template <typename... KArgs, typename... Args>
inline void launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                          Args&&... args) {
  ::cuda_harness::launch(kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

}  // namespace cuda
}  // namespace ssm_plugins

#define SSM_DYNAMIC_SHARED(T, name) ::cuda_harness::checked_ptr<T> name = ::cuda_harness::dynamic_shared<T>()

#endif

namespace ssm_plugins {
namespace cuda {

// log2 e: the kernels' decays exp(x) run as exp2(x log2 e) with the factor folded into a value formed once per
// row or step (float: one MUFU.EX2 under the extension's -ftz=true, setup.py; 4 instructions with the denormal
// fix-up without it, where expf's range reduction takes 12).
template <typename acc_t>
constexpr acc_t kLog2e = acc_t(1.4426950408889634074);

// kItems consecutive values from p, read as 16-byte vectors (LDG.128, as mamba_ssm's vectorised loads) straight
// into registers. p must be 16-byte aligned, which the caller ensures (a launch checks its pointers and row
// length once); under the harness a misaligned p is recorded as cudaErrorMisalignedAddress, as a GPU would fault.
template <int kItems, typename T>
__device__ inline void load_vectors(global_ptr<const T> p, T (&out)[kItems]) {
  static_assert(kItems * sizeof(T) % 16 == 0, "load_vectors reads whole 16-byte vectors");
#if defined(__CUDACC__)
  uint4 v[kItems * sizeof(T) / 16];
  for (int i = 0; i < int(kItems * sizeof(T) / 16); ++i) v[i] = reinterpret_cast<const uint4*>(p)[i];
  memcpy(out, v, sizeof(v));
#else
  ::cuda_harness::check_aligned(p, 16);
  for (int k = 0; k < kItems; ++k) out[k] = p[k];
#endif
}

// softplus with torch's threshold (x itself above 20) and the logistic sigmoid, its derivative below it.
template <typename acc_t>
__device__ inline acc_t softplus_dev(acc_t x) {
  return x > acc_t(20) ? x : log1p(exp(x));
}
template <typename acc_t>
__device__ inline acc_t sigmoid_dev(acc_t x) {
  return acc_t(1) / (acc_t(1) + exp(-x));
}
// softplus' at the input whose softplus is y: sigmoid(x) = 1 - exp(-y), 1 above the threshold (there y = x > 20).
// From the output the kernels already hold, so their backward needs no raw input again.
template <typename acc_t>
__device__ inline acc_t softplus_slope(acc_t y) {
  return y > acc_t(20) ? acc_t(1) : -expm1(-y);
}

// Throws with the launch's (or the harness's) error, if any.
inline void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

// Calls f(T{}, P{}) for an input dtype code (0 float32, 1 float64, 2 float16, 3 bfloat16: ssm_plugins::DType) and
// P, the type of the inputs an op takes in the accumulation dtype or, with `params_in_input_dtype`, in the input's
// (as mamba_ssm takes B and C): float16 / bfloat16 input then instantiates its kernels twice, float32 and float64
// once (both choices are the same type).
template <typename F>
void with_input_types(int dtype, bool params_in_input_dtype, const char* op, F&& f) {
  switch (dtype) {
    case 0: f(float{}, float{}); break;
    case 1: f(double{}, double{}); break;
    case 2: params_in_input_dtype ? f(__half{}, __half{}) : f(__half{}, float{}); break;
    case 3: params_in_input_dtype ? f(__nv_bfloat16{}, __nv_bfloat16{}) : f(__nv_bfloat16{}, float{}); break;
    default: throw std::invalid_argument(std::string("ssm_plugins: ") + op + ": unsupported dtype code");
  }
}

}  // namespace cuda
}  // namespace ssm_plugins
