// Myosotis tree-solve CUDA kernel (spec myosotis.md §2.3, §2.9). One thread per (batch, channel) runs the
// up-sweep over the nodes in storage order (children before parents) and the down-sweep in reverse, with
// its pivots and right-hand sides in a (batch, N, C) scratch buffer: neighbouring threads are neighbouring
// channels, so every access is coalesced. Linear in N, exact, deterministic (no atomics). The tiled
// subtree decomposition of spec §6.2 (parallel over nodes as well) is a later optimisation.
// No torch headers here (see setup.py).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "device.h"
#include "myo.h"

namespace ssm_plugins {
namespace cuda {
namespace {

// Interleaved (re, im) complex, the storage of torch.complex64 / complex128.
template <typename R>
struct Complex {
  R re, im;
};
template <typename R> __device__ inline Complex<R> operator+(Complex<R> a, Complex<R> b) {
  return {a.re + b.re, a.im + b.im};
}
template <typename R> __device__ inline Complex<R> operator-(Complex<R> a, Complex<R> b) {
  return {a.re - b.re, a.im - b.im};
}
template <typename R> __device__ inline Complex<R> operator*(Complex<R> a, Complex<R> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <typename R> __device__ inline Complex<R> operator*(R a, Complex<R> b) { return {a * b.re, a * b.im}; }

template <typename T> __device__ inline T conj_of(T v) { return v; }
template <typename R> __device__ inline Complex<R> conj_of(Complex<R> v) { return {v.re, -v.im}; }
template <typename T> __device__ inline T abs2(T v) { return v * v; }
template <typename R> __device__ inline R abs2(Complex<R> v) { return v.re * v.re + v.im * v.im; }

// Storage type S -> accumulation type (Acc) and its real part (Real).
template <typename S> struct Types { using Acc = float; using Real = float; };
template <> struct Types<double> { using Acc = double; using Real = double; };
template <typename R> struct Types<Complex<R>> { using Acc = Complex<R>; using Real = R; };

template <typename S> __device__ inline typename Types<S>::Acc load(S v) { return v; }
template <> __device__ inline float load<__half>(__half v) { return __half2float(v); }
template <> __device__ inline float load<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename S> __device__ inline S store(typename Types<S>::Acc v) { return v; }
template <> __device__ inline __half store<__half>(float v) { return __float2half(v); }
template <> __device__ inline __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

template <typename S>
__global__ void solve_kernel(int64_t batch, int64_t N, int64_t C, int64_t batch_b, int64_t Nb, global_ptr<const S> rhs,
                             global_ptr<const typename Types<S>::Acc> b, global_ptr<const int64_t> parent, global_ptr<const int64_t> b_index,
                             typename Types<S>::Real sign, typename Types<S>::Real b_scale, global_ptr<S> out,
                             global_ptr<typename Types<S>::Acc> work, global_ptr<typename Types<S>::Real> inv_pivot, global_ptr<const S> x_saved,
                             global_ptr<typename Types<S>::Acc> grad_b) {
  using acc_t = typename Types<S>::Acc;
  using real_t = typename Types<S>::Real;
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= batch * C) return;
  const int64_t bi = idx / C, c = idx % C;
  const int64_t base = bi * N * C + c;  // element (bi, v, c) of a (batch, N, C) array is base + v * C
  const global_ptr<const acc_t> bb = b + (batch_b > 1 ? bi : 0) * Nb * C + c;
  for (int64_t v = 0; v < N; ++v) {
    work[base + v * C] = load(rhs[base + v * C]);
    inv_pivot[base + v * C] = real_t(1);
  }
  for (int64_t v = 0; v < N; ++v) {  // up-sweep: y_v = ũ_v/α_v; α_p -= s|b_v|²/α_v; ũ_p -= s conj(b_v) y_v
    const real_t iv = real_t(1) / inv_pivot[base + v * C];
    const acc_t yv = iv * work[base + v * C];
    inv_pivot[base + v * C] = iv;
    work[base + v * C] = yv;
    const int64_t p = parent[v];
    if (p < 0) continue;
    const acc_t w = b_scale * bb[(b_index ? b_index[v] : v) * C];
    inv_pivot[base + p * C] -= sign * abs2(w) * iv;
    work[base + p * C] = work[base + p * C] - sign * (conj_of(w) * yv);
  }
  for (int64_t v = N - 1; v >= 0; --v) {  // down-sweep: x_v = y_v - (b_v/α_v) x_p
    acc_t xv = work[base + v * C];
    const int64_t p = parent[v];
    if (p >= 0) {
      const acc_t w = b_scale * bb[(b_index ? b_index[v] : v) * C];
      xv = xv - inv_pivot[base + v * C] * (w * work[base + p * C]);
      work[base + v * C] = xv;
    }
    out[base + v * C] = store<S>(xv);
  }
  if (grad_b == nullptr) return;
  const global_ptr<acc_t> gb = grad_b + bi * Nb * C + c;
  for (int64_t v = 0; v < N; ++v) {  // grad_b_v = -(ḡ_v conj(x_p) + s conj(ḡ_p) x_v)
    const int64_t p = parent[v];
    if (p < 0) continue;
    const acc_t xv = load(x_saved[base + v * C]), xp = load(x_saved[base + p * C]);
    const acc_t term = work[base + v * C] * conj_of(xp) + sign * (conj_of(work[base + p * C]) * xv);
    const int64_t row = (b_index ? b_index[v] : v) * C;
    gb[row] = gb[row] - term;
  }
}

template <typename S>
void launch(int64_t batch, int64_t N, int64_t C, int64_t batch_b, int64_t Nb, const void* rhs, const void* b,
            const int64_t* parent, const int64_t* b_index, bool skew, bool adjoint, void* out, void* work,
            void* inv_pivot, const void* x_saved, void* grad_b, cudaStream_t stream) {
  using acc_t = typename Types<S>::Acc;
  using real_t = typename Types<S>::Real;
  const real_t sign = skew ? real_t(-1) : real_t(1);
  const real_t b_scale = adjoint ? sign : real_t(1);  // Tᴴ: B_v -> conj(C_v) = s b_v
  const int threads = 128;
  const int64_t blocks = (batch * C + threads - 1) / threads;
  launch_kernel(solve_kernel<S>, static_cast<unsigned>(blocks), threads, 0, stream,
      batch, N, C, batch_b, Nb, static_cast<const S*>(rhs), static_cast<const acc_t*>(b), parent, b_index, sign,
      b_scale, static_cast<S*>(out), static_cast<acc_t*>(work), static_cast<real_t*>(inv_pivot),
      static_cast<const S*>(x_saved), static_cast<acc_t*>(grad_b));
}

}  // namespace

void myo_solve_launch(int dtype, int64_t batch, int64_t N, int64_t C, int64_t batch_b, int64_t Nb,
                      const void* rhs, const void* b, const int64_t* parent, const int64_t* b_index, bool skew,
                      bool adjoint, void* out, void* work, void* inv_pivot, const void* x_saved, void* grad_b,
                      cudaStream_t stream) {
  if (batch * C == 0 || N == 0) return;
  switch (dtype) {
#define MYO_LAUNCH(CODE, S)                                                                                  \
  case CODE:                                                                                                 \
    launch<S>(batch, N, C, batch_b, Nb, rhs, b, parent, b_index, skew, adjoint, out, work, inv_pivot, x_saved, \
              grad_b, stream);                                                                               \
    break;
    MYO_LAUNCH(0, float)
    MYO_LAUNCH(1, double)
    MYO_LAUNCH(2, __half)
    MYO_LAUNCH(3, __nv_bfloat16)
    MYO_LAUNCH(4, Complex<float>)
    MYO_LAUNCH(5, Complex<double>)
#undef MYO_LAUNCH
    default: throw std::invalid_argument("ssm_plugins: myo_solve: unsupported dtype code");
  }
  check_launch("myo_solve");
}

}  // namespace cuda
}  // namespace ssm_plugins
