// Selective-scan CUDA kernels. One thread per (batch, channel) row runs the recurrence over L with the
// state in registers/local memory and fp32 (fp64 for double) accumulation: simple and exact; the chunked
// parallel scan is a later optimisation. No torch headers here (see setup.py).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "selective_scan.h"

namespace ssm_plugins {
namespace cuda {
namespace {

constexpr int kMaxState = 256;

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

template <typename T> __device__ inline typename Acc<T>::type to_acc(T v) { return static_cast<typename Acc<T>::type>(v); }
template <> __device__ inline float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ inline float to_acc<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ inline T from_acc(typename Acc<T>::type v) { return static_cast<T>(v); }
template <> __device__ inline __half from_acc<__half>(float v) { return __float2half(v); }
template <> __device__ inline __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename T>
__global__ void fwd_kernel(int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t groups, const T* u,
                           const T* delta, const T* z, const typename Acc<T>::type* A,
                           const typename Acc<T>::type* B, const typename Acc<T>::type* C,
                           const typename Acc<T>::type* D, const typename Acc<T>::type* delta_bias, bool softplus_dt,
                           T* out, typename Acc<T>::type* last_state) {
  using acc_t = typename Acc<T>::type;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= batch * dim) return;
  const int64_t b = row / dim, d = row % dim, g = d / (dim / groups);
  const int64_t off = row * L;
  const acc_t* Ad = A + d * N;
  const acc_t* Bg = B + (b * groups + g) * N * L;
  const acc_t* Cg = C + (b * groups + g) * N * L;
  const acc_t bias = delta_bias ? delta_bias[d] : acc_t(0);
  const acc_t skip = D ? D[d] : acc_t(0);
  acc_t h[kMaxState];
  for (int64_t n = 0; n < N; ++n) h[n] = 0;
  for (int64_t t = 0; t < L; ++t) {
    acc_t dt = to_acc(delta[off + t]) + bias;
    if (softplus_dt) dt = dt > acc_t(20) ? dt : log1p(exp(dt));
    const acc_t x = to_acc(u[off + t]);
    acc_t y = 0;
    for (int64_t n = 0; n < N; ++n) {
      h[n] = exp(dt * Ad[n]) * h[n] + dt * Bg[n * L + t] * x;
      y += Cg[n * L + t] * h[n];
    }
    y += skip * x;
    if (z) {
      const acc_t zv = to_acc(z[off + t]);
      y *= zv / (acc_t(1) + exp(-zv));
    }
    out[off + t] = from_acc<T>(y);
  }
  for (int64_t n = 0; n < N; ++n) last_state[row * N + n] = h[n];
}

template <typename T>
void launch(int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t groups, const void* u, const void* delta,
            const void* z, const void* A, const void* B, const void* C, const void* D, const void* delta_bias,
            bool softplus_dt, void* out, void* last_state, cudaStream_t stream) {
  using acc_t = typename Acc<T>::type;
  const int threads = 128;
  const int64_t rows = batch * dim;
  const int64_t blocks = (rows + threads - 1) / threads;
  fwd_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      batch, dim, L, N, groups, static_cast<const T*>(u), static_cast<const T*>(delta), static_cast<const T*>(z),
      static_cast<const acc_t*>(A), static_cast<const acc_t*>(B), static_cast<const acc_t*>(C),
      static_cast<const acc_t*>(D), static_cast<const acc_t*>(delta_bias), softplus_dt, static_cast<T*>(out),
      static_cast<acc_t*>(last_state));
}

void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

void selective_scan_fwd_launch(int dtype, int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t groups,
                               const void* u, const void* delta, const void* z, const void* A, const void* B,
                               const void* C, const void* D, const void* delta_bias, bool delta_softplus, void* out,
                               void* last_state, cudaStream_t stream) {
  if (N > kMaxState) throw std::invalid_argument("ssm_plugins: selective_scan CUDA kernel supports N <= 256");
  if (batch * dim == 0 || L == 0) return;
  switch (dtype) {
    case 0: launch<float>(batch, dim, L, N, groups, u, delta, z, A, B, C, D, delta_bias, delta_softplus, out, last_state, stream); break;
    case 1: launch<double>(batch, dim, L, N, groups, u, delta, z, A, B, C, D, delta_bias, delta_softplus, out, last_state, stream); break;
    case 2: launch<__half>(batch, dim, L, N, groups, u, delta, z, A, B, C, D, delta_bias, delta_softplus, out, last_state, stream); break;
    case 3: launch<__nv_bfloat16>(batch, dim, L, N, groups, u, delta, z, A, B, C, D, delta_bias, delta_softplus, out, last_state, stream); break;
    default: throw std::invalid_argument("ssm_plugins: selective_scan: unsupported dtype code");
  }
  check_launch("selective_scan_fwd");
}

}  // namespace cuda
}  // namespace ssm_plugins
