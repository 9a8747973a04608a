// eSSM state-kernel CUDA kernels (contract in ssm_plugins/csrc/essm.cpp). The forward writes the whole
// n_fft buffer in one pass, one thread per element: the kernel value, its bidirectional flip at the tail and
// the zero padding, so no pad/flip/add temporaries are needed (spec essm.md §8.3.1). The backward runs one
// block per mode and reduces the four parameter gradients over the lags. No torch headers here (see setup.py).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "device.h"
#include "essm.h"

namespace ssm_plugins {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

__device__ inline void sin_cos(float x, float* s, float* c) { sincosf(x, s, c); }
__device__ inline void sin_cos(double x, double* s, double* c) { sincos(x, s, c); }

// Lag j stored at buffer position p, or -1 for the zero padding.
__device__ inline int64_t lag_at(int64_t p, int64_t L, int64_t n_fft, bool bidirectional) {
  if (p < L) return p;
  if (bidirectional && p >= n_fft - L) return n_fft - 1 - p;
  return -1;
}

template <typename T>
__global__ void fwd_kernel(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, global_ptr<const T> g_re,
                           global_ptr<const T> g_im, global_ptr<const T> z_re, global_ptr<const T> z_im,
                           global_ptr<T> K) {
  const int64_t total = modes * n_fft;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = idx / n_fft;
    const int64_t j = lag_at(idx - row * n_fft, L, n_fft, bidirectional);
    T value = 0;
    if (j >= 0) {
      const T lag = static_cast<T>(j);
      T s, c;
      sin_cos(lag * z_im[row], &s, &c);
      value = exp(lag * z_re[row]) * (g_re[row] * c - g_im[row] * s);
    }
    K[idx] = value;
  }
}

template <typename T>
__device__ inline T block_sum(T v, T* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  __syncthreads();  // scratch may still be read by the previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T total = 0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kThreads / kWarp; ++w) total += scratch[w];
  }
  return total;  // valid in thread 0 only
}

template <typename T>
__global__ void bwd_kernel(int64_t L, int64_t n_fft, bool bidirectional, global_ptr<const T> grad_K,
                           global_ptr<const T> g_re, global_ptr<const T> g_im, global_ptr<const T> z_re,
                           global_ptr<const T> z_im, global_ptr<T> grad_g_re, global_ptr<T> grad_g_im,
                           global_ptr<T> grad_z_re, global_ptr<T> grad_z_im) {
  __shared__ T scratch[kThreads / kWarp];
  const int64_t row = blockIdx.x;
  const global_ptr<const T> G = grad_K + row * n_fft;
  const T a = g_re[row], b = g_im[row], zr = z_re[row], zi = z_im[row];
  T da = 0, db = 0, dzr = 0, dzi = 0;
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
    const T lag = static_cast<T>(j);
    const T Gj = bidirectional ? G[j] + G[n_fft - 1 - j] : G[j];
    const T decay = exp(lag * zr);
    T s, c;
    sin_cos(lag * zi, &s, &c);
    c *= decay;
    s *= decay;
    da += Gj * c;
    db -= Gj * s;
    dzr += Gj * lag * (a * c - b * s);
    dzi -= Gj * lag * (a * s + b * c);
  }
  da = block_sum(da, scratch);
  db = block_sum(db, scratch);
  dzr = block_sum(dzr, scratch);
  dzi = block_sum(dzi, scratch);
  if (threadIdx.x == 0) {
    grad_g_re[row] = da;
    grad_g_im[row] = db;
    grad_z_re[row] = dzr;
    grad_z_im[row] = dzi;
  }
}

template <typename T>
void fwd(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, const void* g_re, const void* g_im,
         const void* z_re, const void* z_im, void* K, cudaStream_t stream) {
  const int64_t total = modes * n_fft;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, int64_t(1) << 20);
  launch_kernel(fwd_kernel<T>, static_cast<unsigned>(blocks), kThreads, 0, stream,
      modes, L, n_fft, bidirectional, static_cast<const T*>(g_re), static_cast<const T*>(g_im),
      static_cast<const T*>(z_re), static_cast<const T*>(z_im), static_cast<T*>(K));
}

template <typename T>
void bwd(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, const void* grad_K, const void* g_re,
         const void* g_im, const void* z_re, const void* z_im, void* grad_g_re, void* grad_g_im, void* grad_z_re,
         void* grad_z_im, cudaStream_t stream) {
  launch_kernel(bwd_kernel<T>, static_cast<unsigned>(modes), kThreads, 0, stream,
      L, n_fft, bidirectional, static_cast<const T*>(grad_K), static_cast<const T*>(g_re),
      static_cast<const T*>(g_im), static_cast<const T*>(z_re), static_cast<const T*>(z_im),
      static_cast<T*>(grad_g_re), static_cast<T*>(grad_g_im), static_cast<T*>(grad_z_re),
      static_cast<T*>(grad_z_im));
}

}  // namespace

void essm_kernel_fwd_launch(int dtype, int64_t modes, int64_t L, int64_t n_fft, bool bidirectional,
                            const void* g_re, const void* g_im, const void* z_re, const void* z_im, void* K,
                            cudaStream_t stream) {
  if (modes == 0) return;
  switch (dtype) {
    case 0: fwd<float>(modes, L, n_fft, bidirectional, g_re, g_im, z_re, z_im, K, stream); break;
    case 1: fwd<double>(modes, L, n_fft, bidirectional, g_re, g_im, z_re, z_im, K, stream); break;
    default: throw std::invalid_argument("ssm_plugins: essm_kernel: unsupported dtype code");
  }
  check_launch("essm_kernel");
}

void essm_kernel_bwd_launch(int dtype, int64_t modes, int64_t L, int64_t n_fft, bool bidirectional,
                            const void* grad_K, const void* g_re, const void* g_im, const void* z_re,
                            const void* z_im, void* grad_g_re, void* grad_g_im, void* grad_z_re, void* grad_z_im,
                            cudaStream_t stream) {
  if (modes == 0) return;
  switch (dtype) {
    case 0: bwd<float>(modes, L, n_fft, bidirectional, grad_K, g_re, g_im, z_re, z_im, grad_g_re, grad_g_im, grad_z_re, grad_z_im, stream); break;
    case 1: bwd<double>(modes, L, n_fft, bidirectional, grad_K, g_re, g_im, z_re, z_im, grad_g_re, grad_g_im, grad_z_re, grad_z_im, stream); break;
    default: throw std::invalid_argument("ssm_plugins: essm_kernel_bwd: unsupported dtype code");
  }
  check_launch("essm_kernel_bwd");
}

}  // namespace cuda
}  // namespace ssm_plugins
