// eSSM state-kernel CUDA kernels (contract in ssm_plugins/csrc/essm.cpp; eSSM paper, arXiv 2402.15290, and
// docs/essm.md, 'State kernel', 'Bidirectional kernel', 'GPU kernels').
//
// Work is split into (mode, tile) items, a tile being kTile = kThreads * kLagsPerThread consecutive positions
// of the mode's n_fft buffer (forward) or lags (backward), so long kernels spread over many blocks. Thread t of
// a block holds the tile's positions t, t + kThreads, ..., so at each step a warp touches 32 consecutive
// elements: every read of grad_K and every write of K is coalesced (the bidirectional tail, written or read at
// n_fft - 1 - j, is a contiguous descending segment).
//
// Powers e^{jz}: each thread evaluates e^{jz} directly (exp, sincos) at the first lag of its chunk and reaches
// its other kLagsPerThread - 1 lags by multiplying with e^{kThreads z}, which is also evaluated directly
// (kThreads * Im z is exact: a power of two). The error of a walk is bounded by kLagsPerThread - 1 complex
// products whatever L is; there is no product chained along L (docs/essm.md, 'State kernel'). The phase j Im z is
// formed with its rounding error recovered by an fma and applied to the sine and cosine, so long kernels in
// float32 keep the phase to about an ulp (rounding j Im z alone loses up to half an ulp of j Im z, e.g. 2e-3 rad
// at j Im z ~ 5e4).
//
// The forward writes the whole n_fft buffer in one pass: the kernel, its flip at the tail (bidirectional) and
// the zero padding, so no pad/flip/add temporaries are needed (docs/essm.md, 'GPU kernels'). The backward reduces a
// tile's four parameter gradients within the block (warp shuffles, then shared memory) and stores them, or, when L
// spans several tiles, adds them with one atomicAdd per block and gradient into outputs the launcher zeroed.
// The FFT convolution itself runs on torch's cuFFT (ssm_plugins/ops/essm.py). No torch headers here.
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

constexpr int kThreads = 256;  // a power of two: kThreads * Im z is exact
constexpr int kLagsPerThread = 8;
constexpr int64_t kTile = int64_t(kThreads) * kLagsPerThread;
constexpr int kWarp = 32;
constexpr int kWarps = kThreads / kWarp;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline void sin_cos(float x, float* s, float* c) { sincosf(x, s, c); }
__device__ inline void sin_cos(double x, double* s, double* c) { sincos(x, s, c); }

template <typename T>
struct Cplx {
  T re, im;
};

template <typename T>
__device__ inline Cplx<T> mul(Cplx<T> a, Cplx<T> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}

// e^{jz} evaluated directly. e is the rounding error of the phase p = fl(j Im z) (exact: j is an integer
// below 2^24 resp. 2^53); sin and cos of p + e to second order in e.
template <typename T>
__device__ inline Cplx<T> power_at(T j, T zr, T zi) {
  const T p = j * zi;
  const T e = fma(j, zi, -p);
  T s, c;
  sin_cos(p, &s, &c);
  const T decay = exp(j * zr), half_e2 = T(0.5) * e * e;
  return {decay * (c - e * s - half_e2 * c), decay * (s + e * c - half_e2 * s)};
}

// How many of a thread's positions first, first + kThreads, ... (at most kLagsPerThread) lie below `limit`.
__device__ inline int count_below(int64_t first, int64_t limit) {
  if (first >= limit) return 0;
  const int64_t n = (limit - first + kThreads - 1) / kThreads;
  return n < kLagsPerThread ? static_cast<int>(n) : kLagsPerThread;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) fwd_kernel(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional,
                                                       global_ptr<const T> g_re, global_ptr<const T> g_im,
                                                       global_ptr<const T> z_re, global_ptr<const T> z_im,
                                                       global_ptr<T> K) {
  const int64_t tiles = (n_fft + kTile - 1) / kTile;
  const int64_t total = modes * tiles;
  for (int64_t idx = blockIdx.x; idx < total; idx += gridDim.x) {
    const int64_t row = idx / tiles;
    const int64_t first = (idx - row * tiles) * kTile + threadIdx.x;  // positions first + k * kThreads
    const T a = g_re[row], b = g_im[row], zr = z_re[row], zi = z_im[row];
    const global_ptr<T> out = K + row * n_fft;
    // Lags j = position below L (ascending in k); the flipped copy at n_fft - 1 - j (descending in k) when
    // bidirectional; zeros in between. n_fft >= 2L keeps the two ranges apart.
    const int head = count_below(first, L);
    const int tail_end = count_below(first, n_fft);
    const int tail_begin = bidirectional ? count_below(first, n_fft - L) : tail_end;
    const Cplx<T> step = power_at(static_cast<T>(kThreads), zr, zi);
    if (head > 0) {
      Cplx<T> w = power_at(static_cast<T>(first), zr, zi);
      for (int k = 0; k < head; ++k) {
        if (k > 0) w = mul(w, step);
        out[first + k * kThreads] = a * w.re - b * w.im;
      }
    }
    for (int k = head; k < tail_begin; ++k) out[first + k * kThreads] = T(0);
    if (tail_end > tail_begin) {  // walk the tail from its smallest lag (the largest position) up
      const int64_t last = first + int64_t(tail_end - 1) * kThreads;
      Cplx<T> w = power_at(static_cast<T>(n_fft - 1 - last), zr, zi);
      for (int k = tail_end - 1; k >= tail_begin; --k) {
        if (k < tail_end - 1) w = mul(w, step);
        out[first + k * kThreads] = a * w.re - b * w.im;
      }
    }
  }
}

template <typename T>
struct Grads {
  T g_re, g_im, z_re, z_im;
};

template <typename T>
__device__ inline Grads<T> warp_sum(Grads<T> v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v.g_re += __shfl_down_sync(kFullMask, v.g_re, offset);
    v.g_im += __shfl_down_sync(kFullMask, v.g_im, offset);
    v.z_re += __shfl_down_sync(kFullMask, v.z_re, offset);
    v.z_im += __shfl_down_sync(kFullMask, v.z_im, offset);
  }
  return v;  // the warp's sum in lane 0
}

// One block per (mode, tile of lags) item. With G_j = grad_K[j] (+ grad_K[n_fft-1-j]) and c + i s = e^{jz}:
// dg_re = Σ G c, dg_im = -Σ G s, dz_re = Σ G j (g_re c - g_im s), dz_im = -Σ G j (g_re s + g_im c).
template <typename T>
__global__ void __launch_bounds__(kThreads) bwd_kernel(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional,
                                                       global_ptr<const T> grad_K, global_ptr<const T> g_re,
                                                       global_ptr<const T> g_im, global_ptr<const T> z_re,
                                                       global_ptr<const T> z_im, global_ptr<T> grad_g_re,
                                                       global_ptr<T> grad_g_im, global_ptr<T> grad_z_re,
                                                       global_ptr<T> grad_z_im) {
  __shared__ Grads<T> warp_partial[kWarps];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t tiles = (L + kTile - 1) / kTile;
  const int64_t work_items = modes * tiles;
  for (int64_t item = blockIdx.x; item < work_items; item += gridDim.x) {
    const int64_t row = item / tiles;
    const int64_t first = (item - row * tiles) * kTile + threadIdx.x;  // lags first + k * kThreads
    const T a = g_re[row], b = g_im[row], zr = z_re[row], zi = z_im[row];
    const global_ptr<const T> G = grad_K + row * n_fft;
    Grads<T> sum{T(0), T(0), T(0), T(0)};
    const int lags = count_below(first, L);
    if (lags > 0) {
      const Cplx<T> step = power_at(static_cast<T>(kThreads), zr, zi);
      Cplx<T> w = power_at(static_cast<T>(first), zr, zi);
      for (int k = 0; k < lags; ++k) {
        if (k > 0) w = mul(w, step);
        const int64_t j = first + k * kThreads;
        const T Gj = bidirectional ? G[j] + G[n_fft - 1 - j] : G[j];
        const T Gl = Gj * static_cast<T>(j);
        sum.g_re += Gj * w.re;
        sum.g_im -= Gj * w.im;
        sum.z_re += Gl * (a * w.re - b * w.im);
        sum.z_im -= Gl * (a * w.im + b * w.re);
      }
    }
    sum = warp_sum(sum);
    __syncthreads();  // the previous item's reads of warp_partial are done
    if (lane == 0) warp_partial[warp] = sum;
    __syncthreads();
    if (warp == 0) {
      sum = lane < kWarps ? warp_partial[lane] : Grads<T>{T(0), T(0), T(0), T(0)};
      sum = warp_sum(sum);
      if (lane == 0 && tiles == 1) {
        grad_g_re[row] = sum.g_re;
        grad_g_im[row] = sum.g_im;
        grad_z_re[row] = sum.z_re;
        grad_z_im[row] = sum.z_im;
      } else if (lane == 0) {  // several tiles of this mode: the launcher zeroed the outputs
        atomicAdd(grad_g_re + row, sum.g_re);
        atomicAdd(grad_g_im + row, sum.g_im);
        atomicAdd(grad_z_re + row, sum.z_re);
        atomicAdd(grad_z_im + row, sum.z_im);
      }
    }
  }
}

// Enough blocks to fill a large GPU several times over; the kernels loop over the remaining items.
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

inline unsigned blocks_for(int64_t items) { return static_cast<unsigned>(std::min(items, kMaxBlocks)); }

template <typename T>
void fwd(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, const void* g_re, const void* g_im,
         const void* z_re, const void* z_im, void* K, cudaStream_t stream) {
  const int64_t items = modes * ((n_fft + kTile - 1) / kTile);
  launch_kernel(fwd_kernel<T>, blocks_for(items), kThreads, 0, stream,
      modes, L, n_fft, bidirectional, static_cast<const T*>(g_re), static_cast<const T*>(g_im),
      static_cast<const T*>(z_re), static_cast<const T*>(z_im), static_cast<T*>(K));
}

template <typename T>
void bwd(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, const void* grad_K, const void* g_re,
         const void* g_im, const void* z_re, const void* z_im, void* grad_g_re, void* grad_g_im, void* grad_z_re,
         void* grad_z_im, cudaStream_t stream) {
  const int64_t tiles = (L + kTile - 1) / kTile;
  if (tiles > 1) {  // blocks add their tiles' sums atomically
    for (void* out : {grad_g_re, grad_g_im, grad_z_re, grad_z_im}) {
      cudaMemsetAsync(out, 0, static_cast<size_t>(modes) * sizeof(T), stream);
    }
  }
  launch_kernel(bwd_kernel<T>, blocks_for(modes * tiles), kThreads, 0, stream,
      modes, L, n_fft, bidirectional, static_cast<const T*>(grad_K), static_cast<const T*>(g_re),
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
