// Selective-scan CUDA kernels. One thread per (batch, channel) row runs the recurrence over L with the
// state in registers/local memory and fp32 (fp64 for double) accumulation: simple and exact; the chunked
// parallel scan is a later optimisation. The backward checkpoints the state every kBwdChunk steps in a
// global scratch buffer and walks the row back one chunk at a time; the gradients shared across rows
// (A, B, C, D, delta_bias) are atomicAdds. No torch headers here (see setup.py).
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

template <typename acc_t>
__device__ inline acc_t softplus_dev(acc_t x) {
  return x > acc_t(20) ? x : log1p(exp(x));
}

template <typename acc_t>
__device__ inline acc_t sigmoid_dev(acc_t x) {
  return acc_t(1) / (acc_t(1) + exp(-x));
}

template <typename T>
__global__ void bwd_kernel(int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t groups, const T* u,
                           const T* delta, const T* z, const typename Acc<T>::type* A,
                           const typename Acc<T>::type* B, const typename Acc<T>::type* C,
                           const typename Acc<T>::type* D, const typename Acc<T>::type* delta_bias, bool softplus_dt,
                           const T* grad_out, const typename Acc<T>::type* grad_last, T* du, T* ddelta, T* dz,
                           typename Acc<T>::type* dA, typename Acc<T>::type* dB, typename Acc<T>::type* dC,
                           typename Acc<T>::type* dD, typename Acc<T>::type* dbias,
                           typename Acc<T>::type* scratch) {
  using acc_t = typename Acc<T>::type;
  const int64_t row = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (row >= batch * dim) return;
  const int64_t b = row / dim, d = row % dim, g = d / (dim / groups);
  const int64_t off = row * L;
  const int64_t n_chunks = (L + kBwdChunk - 1) / kBwdChunk;
  const acc_t* Ad = A + d * N;
  const int64_t bc = (b * groups + g) * N * L;
  const acc_t* Bg = B + bc;
  const acc_t* Cg = C + bc;
  acc_t* dBg = dB + bc;
  acc_t* dCg = dC + bc;
  acc_t* ckpt = scratch + row * (n_chunks + kBwdChunk) * N;  // (n_chunks, N)
  acc_t* hs = ckpt + n_chunks * N;                           // (kBwdChunk, N): h of the chunk's steps
  const acc_t bias = delta_bias ? delta_bias[d] : acc_t(0);
  const acc_t skip = D ? D[d] : acc_t(0);
  auto dt_at = [&](int64_t t) {
    const acc_t raw = to_acc(delta[off + t]) + bias;
    return softplus_dt ? softplus_dev(raw) : raw;
  };
  auto gy_at = [&](int64_t t) {  // grad of y_t before the gate
    const acc_t go = to_acc(grad_out[off + t]);
    if (!z) return go;
    const acc_t zv = to_acc(z[off + t]);
    return go * zv * sigmoid_dev(zv);
  };
  acc_t h[kMaxState], gh[kMaxState], gA[kMaxState];
  for (int64_t n = 0; n < N; ++n) h[n] = 0;
  // Pass 1, forward: checkpoints, grad C, grad z.
  for (int64_t t = 0; t < L; ++t) {
    if (t % kBwdChunk == 0) {
      for (int64_t n = 0; n < N; ++n) ckpt[(t / kBwdChunk) * N + n] = h[n];
    }
    const acc_t dt = dt_at(t), x = to_acc(u[off + t]), gyt = gy_at(t);
    acc_t y = 0;
    for (int64_t n = 0; n < N; ++n) {
      h[n] = exp(dt * Ad[n]) * h[n] + dt * Bg[n * L + t] * x;
      y += Cg[n * L + t] * h[n];
      atomicAdd(&dCg[n * L + t], gyt * h[n]);
    }
    if (z) {
      const acc_t zv = to_acc(z[off + t]), sz = sigmoid_dev(zv);
      const acc_t go = to_acc(grad_out[off + t]);
      dz[off + t] = from_acc<T>(go * (y + skip * x) * sz * (acc_t(1) + zv * (acc_t(1) - sz)));
    }
  }
  // Pass 2, reverse, one chunk at a time.
  for (int64_t n = 0; n < N; ++n) {
    gh[n] = grad_last ? grad_last[row * N + n] : acc_t(0);
    gA[n] = 0;
  }
  acc_t sum_gD = 0, sum_gbias = 0;
  for (int64_t c = n_chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * kBwdChunk, t1 = min(t0 + kBwdChunk, L);
    for (int64_t n = 0; n < N; ++n) h[n] = ckpt[c * N + n];
    for (int64_t t = t0; t < t1; ++t) {
      const acc_t dt = dt_at(t), x = to_acc(u[off + t]);
      for (int64_t n = 0; n < N; ++n) {
        h[n] = exp(dt * Ad[n]) * h[n] + dt * Bg[n * L + t] * x;
        hs[(t - t0) * N + n] = h[n];
      }
    }
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const acc_t raw = to_acc(delta[off + t]) + bias;
      const acc_t dt = softplus_dt ? softplus_dev(raw) : raw, x = to_acc(u[off + t]), gyt = gy_at(t);
      const acc_t* hprev = t > t0 ? hs + (t - 1 - t0) * N : ckpt + c * N;
      acc_t s1 = 0, s2 = 0;
      for (int64_t n = 0; n < N; ++n) {
        const acc_t a = exp(dt * Ad[n]);
        const acc_t gj = gh[n] + gyt * Cg[n * L + t];
        const acc_t w = gj * a * hprev[n];
        gA[n] += w * dt;
        s2 += w * Ad[n];
        s1 += gj * Bg[n * L + t];
        atomicAdd(&dBg[n * L + t], gj * dt * x);
        gh[n] = gj * a;
      }
      acc_t gdt = s1 * x + s2;
      if (softplus_dt && raw <= acc_t(20)) gdt *= sigmoid_dev(raw);
      du[off + t] = from_acc<T>(s1 * dt + gyt * skip);
      ddelta[off + t] = from_acc<T>(gdt);
      sum_gbias += gdt;
      sum_gD += gyt * x;
    }
  }
  for (int64_t n = 0; n < N; ++n) atomicAdd(&dA[d * N + n], gA[n]);
  if (dD) atomicAdd(&dD[d], sum_gD);
  if (dbias) atomicAdd(&dbias[d], sum_gbias);
}

template <typename T>
void launch_bwd(int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t groups, const void* u, const void* delta,
                const void* z, const void* A, const void* B, const void* C, const void* D, const void* delta_bias,
                bool softplus_dt, const void* grad_out, const void* grad_last, void* du, void* ddelta, void* dz,
                void* dA, void* dB, void* dC, void* dD, void* dbias, void* scratch, cudaStream_t stream) {
  using acc_t = typename Acc<T>::type;
  const int threads = 64;
  const int64_t rows = batch * dim;
  const int64_t blocks = (rows + threads - 1) / threads;
  bwd_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      batch, dim, L, N, groups, static_cast<const T*>(u), static_cast<const T*>(delta), static_cast<const T*>(z),
      static_cast<const acc_t*>(A), static_cast<const acc_t*>(B), static_cast<const acc_t*>(C),
      static_cast<const acc_t*>(D), static_cast<const acc_t*>(delta_bias), softplus_dt,
      static_cast<const T*>(grad_out), static_cast<const acc_t*>(grad_last), static_cast<T*>(du),
      static_cast<T*>(ddelta), static_cast<T*>(dz), static_cast<acc_t*>(dA), static_cast<acc_t*>(dB),
      static_cast<acc_t*>(dC), static_cast<acc_t*>(dD), static_cast<acc_t*>(dbias), static_cast<acc_t*>(scratch));
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

void selective_scan_bwd_launch(int dtype, int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t groups,
                               const void* u, const void* delta, const void* z, const void* A, const void* B,
                               const void* C, const void* D, const void* delta_bias, bool delta_softplus,
                               const void* grad_out, const void* grad_last_state, void* du, void* ddelta, void* dz,
                               void* dA, void* dB, void* dC, void* dD, void* ddelta_bias, void* scratch,
                               cudaStream_t stream) {
  if (N > kMaxState) throw std::invalid_argument("ssm_plugins: selective_scan CUDA kernel supports N <= 256");
  if (batch * dim == 0 || L == 0) return;
#define SSM_BWD_ARGS                                                                                          \
  batch, dim, L, N, groups, u, delta, z, A, B, C, D, delta_bias, delta_softplus, grad_out, grad_last_state, du, \
      ddelta, dz, dA, dB, dC, dD, ddelta_bias, scratch, stream
  switch (dtype) {
    case 0: launch_bwd<float>(SSM_BWD_ARGS); break;
    case 1: launch_bwd<double>(SSM_BWD_ARGS); break;
    case 2: launch_bwd<__half>(SSM_BWD_ARGS); break;
    case 3: launch_bwd<__nv_bfloat16>(SSM_BWD_ARGS); break;
    default: throw std::invalid_argument("ssm_plugins: selective_scan: unsupported dtype code");
  }
#undef SSM_BWD_ARGS
  check_launch("selective_scan_bwd");
}

}  // namespace cuda
}  // namespace ssm_plugins
