// 2-D SSM kernel-generation CUDA kernels (contract in ssm_plugins/csrc/ssm2d.cpp; "2-D SSM", arXiv:2306.06635,
// Sec. 3.2; docs/2d-ssm.md, 'Normalisation and edge relaxation', 'Kernel computation', 'Backward pass').
// A warp owns one system (kernel set s, state coordinate n) and sweeps the grid a row at a time, its
// 32 lanes on 32 consecutive columns, so every read and write of a row tile (states, K, grad_K) is one
// coalesced segment. Within a row, x^v[i, j] = sv (A3 x^h[i-1, j] + A4 x^v[i-1, j]) only needs the row above
// (same column: elementwise); x^h[i, j] = sh A1 x^h[i, j-1] + sh A2 x^v[i, j-1] is a first-order linear
// recurrence along j, run as a warp scan of (sh A1, sh A2 x^v[i, j-1]) pairs with shuffles, carried from tile
// to tile. The row above lives in global scratch laid out [system][h|v][column] (the forward's row buffer; the
// backward's state store, [system][h|v][row][column]).
//
// Forward: a block holds up to kMaxWarps systems of one set s; each row tile's contributions
// e(i, j) / sqrt(N) Re(C1 x^h + C2 x^v) are summed over the block's warps in shared memory and the sum is
// stored into K by one warp (added with one atomicAdd per cell when N spans several blocks; K comes
// zero-filled from the glue). Backward: a forward pass stores every state, then the adjoint recurrence
// ('Backward pass') runs bottom-up, each row right to left: lam_v needs lam_h[i, j+1] (a shuffle) and
// lam_v[i+1, j] (a row buffer), lam_h is a reverse warp scan. The gradients are sums over the grid of one
// system: each lane accumulates its columns, the warp reduces with shuffles and lane 0 stores (a system is one
// warp's, so no atomics). Real and complex variants share the code through the Real / Complex value types. No
// torch headers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "device.h"
#include "ssm2d.h"

namespace ssm_plugins {
namespace cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kMaxWarps = 4;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
struct Complex {
  T re, im;
};

template <typename T> __device__ inline T make_zero(T*) { return T(0); }
template <typename T> __device__ inline Complex<T> make_zero(Complex<T>*) { return {T(0), T(0)}; }
template <typename T> __device__ inline T make_one(T*) { return T(1); }
template <typename T> __device__ inline Complex<T> make_one(Complex<T>*) { return {T(1), T(0)}; }
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

template <typename V> __device__ inline V zero_v() { return make_zero(static_cast<V*>(nullptr)); }
template <typename V> __device__ inline V one_v() { return make_one(static_cast<V*>(nullptr)); }

// Warp shuffles of a real or complex value (full warp).
template <typename T> __device__ inline T shfl_up(T v, int d) { return __shfl_up_sync(kFullMask, v, d); }
template <typename T> __device__ inline T shfl_down(T v, int d) { return __shfl_down_sync(kFullMask, v, d); }
template <typename T> __device__ inline T shfl_from(T v, int lane) { return __shfl_sync(kFullMask, v, lane); }
template <typename T> __device__ inline Complex<T> shfl_up(Complex<T> v, int d) { return {shfl_up(v.re, d), shfl_up(v.im, d)}; }
template <typename T> __device__ inline Complex<T> shfl_down(Complex<T> v, int d) { return {shfl_down(v.re, d), shfl_down(v.im, d)}; }
template <typename T> __device__ inline Complex<T> shfl_from(Complex<T> v, int lane) { return {shfl_from(v.re, lane), shfl_from(v.im, lane)}; }

// Official normalisation (docs/2d-ssm.md, 'Normalisation and edge relaxation'): halve an update exactly when
// both incoming states are non-zero.
__device__ inline bool halve_h(int64_t i, int64_t j) { return (i == 0 && j == 1) || (i >= 1 && j >= 2); }
__device__ inline bool halve_v(int64_t i, int64_t j) { return (j == 0 && i == 1) || (j >= 1 && i >= 2); }
__device__ inline int edge_factor(int64_t i, int64_t j) { return (i == 0) != (j == 0) ? 2 : 1; }
// Factors of the updates producing x^h[i, j] and x^v[i, j]; zero where the source lies outside the grid.
template <typename acc_t> __device__ inline acc_t factor_h(int64_t i, int64_t j) {
  return j >= 1 ? (halve_h(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
}
template <typename acc_t> __device__ inline acc_t factor_v(int64_t i, int64_t j) {
  return i >= 1 ? (halve_v(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
}

template <typename V>
struct Params {
  V a1, a2, a3, a4, b1, b2, c1, c2;
};

template <typename V>
__device__ inline Params<V> load_params(global_ptr<const V> A, global_ptr<const V> B, global_ptr<const V> C,
                                        int64_t systems, int64_t q) {
  return {A[q], A[systems + q], A[2 * systems + q], A[3 * systems + q], B[q], B[systems + q], C[q], C[systems + q]};
}

// x <- a x + b as a pair; pairs compose associatively (`earlier` applied first).
template <typename V>
struct Pair {
  V a, b;
};
template <typename V>
__device__ inline Pair<V> combine(Pair<V> earlier, Pair<V> later) {
  return {later.a * earlier.a, later.a * earlier.b + later.b};
}

// Inclusive warp scan of one pair per lane: in lane order, or (kReverse) from lane 31 down.
template <bool kReverse, typename V>
__device__ inline Pair<V> warp_scan(Pair<V> p) {
  const int lane = threadIdx.x % kWarp;
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const Pair<V> other = kReverse ? Pair<V>{shfl_down(p.a, offset), shfl_down(p.b, offset)}
                                   : Pair<V>{shfl_up(p.a, offset), shfl_up(p.b, offset)};
    if (kReverse ? lane + offset < kWarp : lane >= offset) p = combine(other, p);
  }
  return p;
}

template <typename V>
__device__ inline V warp_sum(V v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = v + shfl_down(v, offset);
  return v;  // in lane 0
}

// One warp's system, one row: where the row above is read and the row is written ([h|v] planes `plane`
// apart), and the carries from the tile to the left.
template <typename V>
struct RowSweep {
  global_ptr<V> above, here;  // column 0 of the row above (unused in row 0) and of this row
  int64_t plane;
  V xh_left, xv_left;  // x^h, x^v at the column left of the current tile
};

// States x^h, x^v of the lane's cell (i, j = j0 + lane) of one system; advances the carries. Every lane
// of the warp calls it (shuffles); lanes with `active` false (no system, or j >= W) get zeros and act as
// the identity in the scan, which only ever follows the valid columns.
template <typename V>
__device__ inline void row_tile(const Params<V>& p, RowSweep<V>& r, int64_t i, int64_t j0, int64_t W, bool has_system,
                                V& xh, V& xv) {
  using acc_t = typename RealOf<V>::type;
  const int lane = threadIdx.x % kWarp;
  const int64_t j = j0 + lane;
  const bool active = has_system && j < W;
  const bool origin = i == 0 && j == 0;
  xv = zero_v<V>();
  if (active && origin) {
    xv = p.b2;
  } else if (active && i >= 1) {
    xv = factor_v<acc_t>(i, j) * (p.a3 * r.above[j] + p.a4 * r.above[r.plane + j]);
  }
  V xv_left = shfl_up(xv, 1);
  if (lane == 0) xv_left = r.xv_left;
  const acc_t fh = factor_h<acc_t>(i, j);
  Pair<V> step{one_v<V>(), zero_v<V>()};
  if (active) step = origin ? Pair<V>{zero_v<V>(), p.b1} : Pair<V>{fh * p.a1, fh * (p.a2 * xv_left)};
  const Pair<V> through = warp_scan<false>(step);
  xh = through.a * r.xh_left + through.b;
  r.xh_left = shfl_from(xh, kWarp - 1);
  r.xv_left = shfl_from(xv, kWarp - 1);
  if (active) {
    r.here[j] = xh;
    r.here[r.plane + j] = xv;
  }
}

// Forward: block (s, group) holds systems n = group * warps + warp. rows: [system][h|v][W].
template <typename V>
__global__ void __launch_bounds__(kMaxWarps * kWarp) fwd_kernel(int64_t S, int64_t N, int64_t H, int64_t W,
                                                                global_ptr<const V> A, global_ptr<const V> B,
                                                                global_ptr<const V> C, global_ptr<V> rows,
                                                                global_ptr<typename RealOf<V>::type> K) {
  using acc_t = typename RealOf<V>::type;
  __shared__ acc_t partial[2][kMaxWarps][kWarp];  // double-buffered by tile: one barrier per tile
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  const int64_t groups = (N + warps - 1) / warps;
  const int64_t s = blockIdx.x / groups, n = (blockIdx.x % groups) * warps + warp;
  const bool has_system = n < N;
  const int64_t q = s * N + (has_system ? n : 0);
  const V zero = zero_v<V>();
  const Params<V> p = has_system ? load_params(A, B, C, S * N, q) : Params<V>{zero, zero, zero, zero, zero, zero, zero, zero};
  const acc_t scale = acc_t(1) / sqrt(acc_t(N));
  RowSweep<V> r{rows + q * 2 * W, rows + q * 2 * W, W, zero, zero};
  int buffer = 0;
  for (int64_t i = 0; i < H; ++i) {
    r.xh_left = zero;
    r.xv_left = zero;
    for (int64_t j0 = 0; j0 < W; j0 += kWarp) {
      V xh, xv;
      row_tile(p, r, i, j0, W, has_system, xh, xv);
      const int64_t j = j0 + lane;
      partial[buffer][warp][lane] = has_system && j < W ? edge_factor(i, j) * scale * real_of(p.c1 * xh + p.c2 * xv) : acc_t(0);
      __syncthreads();
      if (warp == 0 && j < W) {
        acc_t sum = 0;
        for (int w = 0; w < warps; ++w) sum += partial[buffer][w][lane];
        if (groups == 1) {
          K[(s * H + i) * W + j] = sum;
        } else {
          atomicAdd(&K[(s * H + i) * W + j], sum);
        }
      }
      buffer ^= 1;
    }
  }
}

// Backward: warp `warp` of block b owns system q = b * warps + warp. states: [system][h|v][H][W];
// lam_rows: [system][W], lam_v of the row below.
template <typename V>
__global__ void __launch_bounds__(kMaxWarps * kWarp) bwd_kernel(int64_t S, int64_t N, int64_t H, int64_t W,
                                                                global_ptr<const typename RealOf<V>::type> grad,
                                                                global_ptr<const V> A, global_ptr<const V> B,
                                                                global_ptr<const V> C, global_ptr<V> states,
                                                                global_ptr<V> lam_rows, global_ptr<V> dA,
                                                                global_ptr<V> dB, global_ptr<V> dC) {
  using acc_t = typename RealOf<V>::type;
  const int lane = threadIdx.x % kWarp, warps = blockDim.x / kWarp;
  const int64_t systems = S * N;
  const int64_t q = static_cast<int64_t>(blockIdx.x) * warps + threadIdx.x / kWarp;
  if (q >= systems) return;  // the whole warp: no block-wide barriers below
  const int64_t s = q / N;
  const Params<V> p = load_params(A, B, C, systems, q);
  const acc_t scale = acc_t(1) / sqrt(acc_t(N));
  const V zero = zero_v<V>();
  const int64_t plane = H * W;
  const global_ptr<V> st = states + q * 2 * plane;  // x^h at st[i * W + j], x^v at st[plane + i * W + j]
  // Forward sweep storing every state.
  for (int64_t i = 0; i < H; ++i) {
    RowSweep<V> r{st + (i > 0 ? i - 1 : 0) * W, st + i * W, plane, zero, zero};
    for (int64_t j0 = 0; j0 < W; j0 += kWarp) {
      V xh, xv;
      row_tile(p, r, i, j0, W, true, xh, xv);
    }
  }
  // Adjoint sweep: rows bottom-up, tiles right to left.
  const global_ptr<V> lam_below = lam_rows + q * W;
  const global_ptr<const acc_t> G = grad + s * plane;
  V da1 = zero, da2 = zero, da3 = zero, da4 = zero, dc1 = zero, dc2 = zero, db1 = zero, db2 = zero;
  const int64_t last_tile = ((W - 1) / kWarp) * kWarp;
  for (int64_t i = H - 1; i >= 0; --i) {
    V lam_h_right = zero;  // lam_h[i, j0 + 32] for the current tile; zero past the last column
    for (int64_t j0 = last_tile; j0 >= 0; j0 -= kWarp) {
      const int64_t j = j0 + lane;
      const bool active = j < W;
      const acc_t gk = active ? edge_factor(i, j) * scale * G[i * W + j] : acc_t(0);
      // Factors of the updates that consumed this cell: x^h[i, j+1] and x^v[i+1, j].
      const acc_t right = halve_h(i, j + 1) ? acc_t(0.5) : acc_t(1);
      const acc_t below = halve_v(i + 1, j) ? acc_t(0.5) : acc_t(1);
      const V from_below = active && i + 1 < H ? below * lam_below[j] : zero;
      Pair<V> step{one_v<V>(), zero};
      if (active) step = {right * conj_of(p.a1), gk * conj_of(p.c1) + conj_of(p.a3) * from_below};
      const Pair<V> through = warp_scan<true>(step);
      const V lam_h = through.a * lam_h_right + through.b;
      V lam_h_next = shfl_down(lam_h, 1);  // lam_h[i, j+1]
      if (lane == kWarp - 1) lam_h_next = lam_h_right;
      const V from_right = right * lam_h_next;
      const V lam_v = gk * conj_of(p.c2) + conj_of(p.a2) * from_right + conj_of(p.a4) * from_below;
      lam_h_right = shfl_from(lam_h, 0);
      if (!active) continue;
      dc1 = dc1 + gk * conj_of(st[i * W + j]);
      dc2 = dc2 + gk * conj_of(st[plane + i * W + j]);
      if (j >= 1) {
        const acc_t fh = factor_h<acc_t>(i, j);
        da1 = da1 + fh * (lam_h * conj_of(st[i * W + j - 1]));
        da2 = da2 + fh * (lam_h * conj_of(st[plane + i * W + j - 1]));
      }
      if (i >= 1) {
        const acc_t fv = factor_v<acc_t>(i, j);
        da3 = da3 + fv * (lam_v * conj_of(st[(i - 1) * W + j]));
        da4 = da4 + fv * (lam_v * conj_of(st[plane + (i - 1) * W + j]));
      }
      lam_below[j] = lam_v;
      if (i == 0 && j == 0) {  // the adjoints of x^h[0,0] = B1 and x^v[0,0] = B2
        db1 = lam_h;
        db2 = lam_v;
      }
    }
  }
  da1 = warp_sum(da1);
  da2 = warp_sum(da2);
  da3 = warp_sum(da3);
  da4 = warp_sum(da4);
  dc1 = warp_sum(dc1);
  dc2 = warp_sum(dc2);
  if (lane == 0) {
    dA[q] = da1;
    dA[systems + q] = da2;
    dA[2 * systems + q] = da3;
    dA[3 * systems + q] = da4;
    dB[q] = db1;
    dB[systems + q] = db2;
    dC[q] = dc1;
    dC[systems + q] = dc2;
  }
}

template <typename V>
void fwd(int64_t S, int64_t N, int64_t H, int64_t W, const void* A, const void* B, const void* C, void* rows, void* K,
         cudaStream_t stream) {
  const int warps = static_cast<int>(std::min<int64_t>(N, kMaxWarps));
  const int64_t groups = (N + warps - 1) / warps;
  launch_kernel(fwd_kernel<V>, static_cast<unsigned>(S * groups), warps * kWarp, 0, stream,
      S, N, H, W, static_cast<const V*>(A), static_cast<const V*>(B), static_cast<const V*>(C), static_cast<V*>(rows),
      static_cast<typename RealOf<V>::type*>(K));
}

template <typename V>
void bwd(int64_t S, int64_t N, int64_t H, int64_t W, const void* grad, const void* A, const void* B, const void* C,
         void* states, void* lam, void* dA, void* dB, void* dC, cudaStream_t stream) {
  const int64_t blocks = (S * N + kMaxWarps - 1) / kMaxWarps;
  launch_kernel(bwd_kernel<V>, static_cast<unsigned>(blocks), kMaxWarps * kWarp, 0, stream,
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
