// 2-D SSM kernel-generation CUDA kernels (spec 2d-ssm.md §1.4, §1.5, §1.10). One thread per (kernel set s,
// state coordinate n) raster-scans the grid with the left neighbour in registers and the row above in a
// global scratch row laid out [j][s * N + n], so a warp's loads and stores coalesce. The forward sums each
// thread's e(i,j) / sqrt(N) * Re(C1 x^h + C2 x^v) over n with warp shuffles (N a power of two <= 32; else
// per-thread atomics) and adds it into K with atomicAdd. The backward
// recomputes and stores all states, then runs the adjoint recurrence in reverse raster order. Real and
// complex variants share the code through the Real / Complex value types. No torch headers here.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "device.h"
#include "ssm2d.h"

namespace ssm_plugins {
namespace cuda {
namespace {

template <typename T>
struct Complex {
  T re, im;
};

template <typename T> __device__ inline T make_zero(T*) { return T(0); }
template <typename T> __device__ inline Complex<T> make_zero(Complex<T>*) { return {T(0), T(0)}; }
template <typename T> __device__ inline T real_of(T v) { return v; }
template <typename T> __device__ inline T real_of(Complex<T> v) { return v.re; }
template <typename T> __device__ inline T conj_of(T v) { return v; }
template <typename T> __device__ inline Complex<T> conj_of(Complex<T> v) { return {v.re, -v.im}; }
template <typename T> __device__ inline Complex<T> operator+(Complex<T> a, Complex<T> b) { return {a.re + b.re, a.im + b.im}; }
template <typename T> __device__ inline Complex<T> operator*(Complex<T> a, Complex<T> b) {
  return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <typename T> __device__ inline Complex<T> operator*(T a, Complex<T> b) { return {a * b.re, a * b.im}; }

template <typename V> struct RealOf { using type = V; };
template <typename T> struct RealOf<Complex<T>> { using type = T; };

// Official normalisation (§1.4): halve an update exactly when both incoming states are non-zero.
__device__ inline bool halve_h(int64_t i, int64_t j) { return (i == 0 && j == 1) || (i >= 1 && j >= 2); }
__device__ inline bool halve_v(int64_t i, int64_t j) { return (j == 0 && i == 1) || (j >= 1 && i >= 2); }
__device__ inline int edge_factor(int64_t i, int64_t j) { return (i == 0) != (j == 0) ? 2 : 1; }

template <typename V>
struct Params {
  V a1, a2, a3, a4, b1, b2, c1, c2;
};

template <typename V>
__device__ inline Params<V> load_params(global_ptr<const V> A, global_ptr<const V> B, global_ptr<const V> C, int64_t S, int64_t N, int64_t s, int64_t n) {
  const int64_t at = s * N + n, plane = S * N;
  return {A[at], A[plane + at], A[2 * plane + at], A[3 * plane + at], B[at], B[plane + at], C[at], C[plane + at]};
}

// Value of cell (i, j) from its left neighbour (i, j-1) and the cell above (i-1, j).
template <typename V>
__device__ inline void step(const Params<V>& p, int64_t i, int64_t j, V left_h, V left_v, V up_h, V up_v, V& xh, V& xv) {
  using acc_t = typename RealOf<V>::type;
  if (i == 0 && j == 0) {
    xh = p.b1;
    xv = p.b2;
    return;
  }
  const acc_t fh = j >= 1 ? (halve_h(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
  const acc_t fv = i >= 1 ? (halve_v(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
  xh = fh * (p.a1 * left_h + p.a2 * left_v);
  xv = fv * (p.a3 * up_h + p.a4 * up_v);
}

// The N threads of one kernel set s are consecutive lanes. When N is a power of two up to the warp size they
// sum their contributions to a cell with warp shuffles and the set's first lane adds the sum to K: one atomic
// per (set, cell) instead of N. Threads past the last (s, n) then stay in the loop with zero contributions,
// because every lane of a warp takes part in the shuffles.
template <typename V>
__global__ void fwd_kernel(int64_t S, int64_t N, int64_t H, int64_t W, global_ptr<const V> A, global_ptr<const V> B,
                           global_ptr<const V> C, global_ptr<V> rows, global_ptr<typename RealOf<V>::type> K) {
  using acc_t = typename RealOf<V>::type;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = S * N;
  const bool active = t < stride;
  const bool reduce = N <= 32 && (N & (N - 1)) == 0;
  if (!active && !reduce) return;
  const int64_t s = t / N, n = t % N;
  const V zero = make_zero(static_cast<V*>(nullptr));
  const Params<V> p = active ? load_params(A, B, C, S, N, s, n) : Params<V>{zero, zero, zero, zero, zero, zero, zero, zero};
  const acc_t scale = acc_t(1) / sqrt(acc_t(N));
  const global_ptr<V> row_h = rows + t;
  const global_ptr<V> row_v = rows + W * stride + t;
  for (int64_t i = 0; i < H; ++i) {
    V left_h = zero, left_v = zero;
    for (int64_t j = 0; j < W; ++j) {
      acc_t value = 0;
      if (active) {
        const V up_h = i > 0 ? row_h[j * stride] : zero;
        const V up_v = i > 0 ? row_v[j * stride] : zero;
        V xh, xv;
        step(p, i, j, left_h, left_v, up_h, up_v, xh, xv);
        row_h[j * stride] = xh;
        row_v[j * stride] = xv;
        left_h = xh;
        left_v = xv;
        value = edge_factor(i, j) * scale * real_of(p.c1 * xh + p.c2 * xv);
      }
      if (reduce) {
        for (int offset = static_cast<int>(N) / 2; offset > 0; offset /= 2) {
          value += __shfl_down_sync(0xffffffffu, value, offset, static_cast<int>(N));
        }
      }
      if (active && (!reduce || n == 0)) atomicAdd(&K[(s * H + i) * W + j], value);
    }
  }
}

// Adjoint recurrence (§1.5), reverse raster order. lam_h of the right neighbour stays in a register; lam_v of
// the row below sits in the scratch row. Gradients use the conjugate convention, so for complex parameters
// they are (dL/dRe, dL/dIm) pairs.
template <typename V>
__global__ void bwd_kernel(int64_t S, int64_t N, int64_t H, int64_t W, global_ptr<const typename RealOf<V>::type> grad,
                           global_ptr<const V> A, global_ptr<const V> B, global_ptr<const V> C, global_ptr<V> states, global_ptr<V> lam_v_row, global_ptr<V> dA, global_ptr<V> dB, global_ptr<V> dC) {
  using acc_t = typename RealOf<V>::type;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = S * N;
  if (t >= stride) return;
  const int64_t s = t / N, n = t % N;
  const Params<V> p = load_params(A, B, C, S, N, s, n);
  const acc_t scale = acc_t(1) / sqrt(acc_t(N));
  const V zero = make_zero(static_cast<V*>(nullptr));
  const global_ptr<V> st_h = states + t;
  const global_ptr<V> st_v = states + H * W * stride + t;
  auto cell = [&](int64_t i, int64_t j) { return (i * W + j) * stride; };
  for (int64_t i = 0; i < H; ++i) {
    for (int64_t j = 0; j < W; ++j) {
      const V left_h = j > 0 ? st_h[cell(i, j - 1)] : zero, left_v = j > 0 ? st_v[cell(i, j - 1)] : zero;
      const V up_h = i > 0 ? st_h[cell(i - 1, j)] : zero, up_v = i > 0 ? st_v[cell(i - 1, j)] : zero;
      step(p, i, j, left_h, left_v, up_h, up_v, st_h[cell(i, j)], st_v[cell(i, j)]);
    }
  }
  const global_ptr<V> lam_v = lam_v_row + t;
  for (int64_t j = 0; j < W; ++j) lam_v[j * stride] = zero;
  V da1 = zero, da2 = zero, da3 = zero, da4 = zero, dc1 = zero, dc2 = zero, lh = zero, lv = zero;
  const global_ptr<const acc_t> G = grad + s * H * W;
  for (int64_t i = H - 1; i >= 0; --i) {
    V lam_h_right = zero;
    for (int64_t j = W - 1; j >= 0; --j) {
      const acc_t gk = edge_factor(i, j) * scale * G[i * W + j];
      const acc_t right = halve_h(i, j + 1) ? acc_t(0.5) : acc_t(1);
      const acc_t below = halve_v(i + 1, j) ? acc_t(0.5) : acc_t(1);
      const acc_t fh = j >= 1 ? (halve_h(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
      const acc_t fv = i >= 1 ? (halve_v(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
      const V from_right = right * lam_h_right;
      const V from_below = below * lam_v[j * stride];
      lh = gk * conj_of(p.c1) + conj_of(p.a1) * from_right + conj_of(p.a3) * from_below;
      lv = gk * conj_of(p.c2) + conj_of(p.a2) * from_right + conj_of(p.a4) * from_below;
      dc1 = dc1 + gk * conj_of(st_h[cell(i, j)]);
      dc2 = dc2 + gk * conj_of(st_v[cell(i, j)]);
      if (j >= 1) {
        da1 = da1 + fh * (lh * conj_of(st_h[cell(i, j - 1)]));
        da2 = da2 + fh * (lh * conj_of(st_v[cell(i, j - 1)]));
      }
      if (i >= 1) {
        da3 = da3 + fv * (lv * conj_of(st_h[cell(i - 1, j)]));
        da4 = da4 + fv * (lv * conj_of(st_v[cell(i - 1, j)]));
      }
      lam_h_right = lh;
      lam_v[j * stride] = lv;
    }
  }
  // The loop ends at cell (0, 0), whose adjoints are the gradients of B1 = x^h[0,0] and B2 = x^v[0,0].
  const int64_t at = s * N + n;
  dA[at] = da1;
  dA[stride + at] = da2;
  dA[2 * stride + at] = da3;
  dA[3 * stride + at] = da4;
  dB[at] = lh;
  dB[stride + at] = lv;
  dC[at] = dc1;
  dC[stride + at] = dc2;
}

constexpr int kThreads = 128;

inline unsigned blocks_for(int64_t tasks) { return static_cast<unsigned>((tasks + kThreads - 1) / kThreads); }

template <typename V>
void fwd(int64_t S, int64_t N, int64_t H, int64_t W, const void* A, const void* B, const void* C, void* rows, void* K,
         cudaStream_t stream) {
  launch_kernel(fwd_kernel<V>, blocks_for(S * N), kThreads, 0, stream,
      S, N, H, W, static_cast<const V*>(A), static_cast<const V*>(B), static_cast<const V*>(C), static_cast<V*>(rows),
      static_cast<typename RealOf<V>::type*>(K));
}

template <typename V>
void bwd(int64_t S, int64_t N, int64_t H, int64_t W, const void* grad, const void* A, const void* B, const void* C,
         void* states, void* lam, void* dA, void* dB, void* dC, cudaStream_t stream) {
  launch_kernel(bwd_kernel<V>, blocks_for(S * N), kThreads, 0, stream,
      S, N, H, W, static_cast<const typename RealOf<V>::type*>(grad), static_cast<const V*>(A),
      static_cast<const V*>(B), static_cast<const V*>(C), static_cast<V*>(states), static_cast<V*>(lam),
      static_cast<V*>(dA), static_cast<V*>(dB), static_cast<V*>(dC));
}

}  // namespace

void ssm2d_kernel_fwd_launch(int dtype, bool is_complex, int64_t S, int64_t N, int64_t H, int64_t W, const void* A,
                             const void* B, const void* C, void* row_scratch, void* K, cudaStream_t stream) {
  if (S * N == 0 || H * W == 0) return;
  const int variant = dtype * 2 + (is_complex ? 1 : 0);
  switch (variant) {
    case 0: fwd<float>(S, N, H, W, A, B, C, row_scratch, K, stream); break;
    case 1: fwd<Complex<float>>(S, N, H, W, A, B, C, row_scratch, K, stream); break;
    case 2: fwd<double>(S, N, H, W, A, B, C, row_scratch, K, stream); break;
    case 3: fwd<Complex<double>>(S, N, H, W, A, B, C, row_scratch, K, stream); break;
    default: throw std::invalid_argument("ssm_plugins: ssm2d_kernel: parameters must be float32 or float64");
  }
  check_launch("ssm2d_kernel_fwd");
}

void ssm2d_kernel_bwd_launch(int dtype, bool is_complex, int64_t S, int64_t N, int64_t H, int64_t W,
                             const void* grad_K, const void* A, const void* B, const void* C, void* state_scratch,
                             void* lam_scratch, void* dA, void* dB, void* dC, cudaStream_t stream) {
  if (S * N == 0 || H * W == 0) return;
  const int variant = dtype * 2 + (is_complex ? 1 : 0);
  switch (variant) {
    case 0: bwd<float>(S, N, H, W, grad_K, A, B, C, state_scratch, lam_scratch, dA, dB, dC, stream); break;
    case 1: bwd<Complex<float>>(S, N, H, W, grad_K, A, B, C, state_scratch, lam_scratch, dA, dB, dC, stream); break;
    case 2: bwd<double>(S, N, H, W, grad_K, A, B, C, state_scratch, lam_scratch, dA, dB, dC, stream); break;
    case 3: bwd<Complex<double>>(S, N, H, W, grad_K, A, B, C, state_scratch, lam_scratch, dA, dB, dC, stream); break;
    default: throw std::invalid_argument("ssm_plugins: ssm2d_kernel: parameters must be float32 or float64");
  }
  check_launch("ssm2d_kernel_bwd");
}

}  // namespace cuda
}  // namespace ssm_plugins
