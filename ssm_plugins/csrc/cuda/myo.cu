// Myosotis tree-solve CUDA kernel (Myosotis, arXiv 2509.20503, Sec. 3.3; docs/myosotis.md, 'Scalar Hermitian solve',
// 'Backward pass', 'Kernel'). A block per (batch element, tile of up to 32 channels) sweeps the tree level by level:
// the nodes of a level (a window of consecutive nodes no one of which is another's parent) are solved in parallel, a
// node's channels by adjacent threads (coalesced), with each thread's consecutive siblings summed before one atomic
// into their parent; barriers separate the levels. Up-sweep pivots and right-hand sides, down-sweep
// back-substitution, then (backward) the edge gradients, summed per thread while the level-shared row repeats before
// one atomic. Linear in N; the sums into a parent are atomics, so results may differ between runs by rounding. A
// tiled subtree decomposition (several blocks per tree; docs/myosotis.md, 'Kernel') is not done. No torch headers
// here (see setup.py).
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

constexpr int kThreads = 256;
constexpr int kRun = 4;  // consecutive nodes per run: siblings' messages summed before one atomic
// Runs per thread in a full window. A window costs a block-wide reduction, a barrier and the latency of its
// loads, serially: with one run a thread (64-node windows at 16-channel tiles) a binary tree of 65,536 leaves
// (131,071 nodes, benchmarks.gpu's case) took 2,053 windows a sweep; with 16 (2,048-node windows at the 8-channel
// tiles it now gets) 74.
constexpr int kRunsPerThread = 16;

template <typename T> __device__ inline void atomic_add(global_ptr<T> p, T v) { atomicAdd(p, v); }
template <typename R> __device__ inline void atomic_add(global_ptr<Complex<R>> p, Complex<R> v) {
  Complex<R>& cell = *p;  // one bounds check for both parts
  atomicAdd(&cell.re, v.re);
  atomicAdd(&cell.im, v.im);
}

// Block-wide min (or max) of one int64 per thread; every thread gets the result. `slots` holds one value per
// warp; consecutive calls alternate between two slot arrays, so the barrier of call k + 1 (which every thread
// reaches after reading call k's slots) orders call k's reads before call k + 2's writes: one barrier a call.
template <bool kMax>
__device__ inline int64_t block_reduce(int64_t v, int64_t* slots) {
  for (int k = 16; k > 0; k /= 2) {
    const int64_t o = __shfl_xor_sync(0xffffffffu, v, k);
    v = kMax ? (o > v ? o : v) : (o < v ? o : v);
  }
  if ((threadIdx.x & 31u) == 0) slots[threadIdx.x / 32] = v;
  __syncthreads();
  v = slots[0];
  for (unsigned w = 1; w < blockDim.x / 32; ++w) v = kMax ? (slots[w] > v ? slots[w] : v) : (slots[w] < v ? slots[w] : v);
  return v;
}

// A block solves one batch element's tree for a tile of `tile` channels: thread t holds channel c0 + t % tile
// and node group t / tile. The tree is swept in windows of consecutive nodes (storage order) no one of which
// is another's parent, so a window's nodes are independent: up-sweep windows [s, e) end at the first parent
// of a node in them (e = min parent of [s, s + window), then every parent lies at or beyond e); down-sweep
// windows [a, e) start after the last node whose parent lies inside. For level-major trees (myo_tree,
// myo_quadtree) a window is a level, or a part of one when the level holds more than `window` nodes. Within a
// window, group g takes every groups-th run of kRun consecutive nodes (coalesced: a node's channels are
// adjacent), sums the messages of a run's consecutive siblings and adds each parent's sum with one atomic
// (several runs may share a parent);
// a barrier separates windows. Work and pivots live in (batch, N, C) scratch (the parents' running sums).
template <typename S>
__global__ void __launch_bounds__(kThreads) solve_kernel(
    int64_t N, int64_t C, int tile, int64_t batch_b, int64_t Nb, global_ptr<const S> rhs,
    global_ptr<const typename Types<S>::Acc> b, global_ptr<const int64_t> parent, global_ptr<const int64_t> b_index,
    typename Types<S>::Real sign, typename Types<S>::Real b_scale, global_ptr<S> out,
    global_ptr<typename Types<S>::Acc> work, global_ptr<typename Types<S>::Real> inv_pivot,
    global_ptr<const S> x_saved, global_ptr<typename Types<S>::Acc> grad_b) {
  using acc_t = typename Types<S>::Acc;
  using real_t = typename Types<S>::Real;
  __shared__ int64_t slots[2][kThreads / 32];
  int parity = 0;
  const int64_t tiles = (C + tile - 1) / tile, bi = blockIdx.x / tiles;
  const int64_t c = blockIdx.x % tiles * tile + threadIdx.x % tile;
  const int64_t groups = kThreads / tile, group = threadIdx.x / tile, stride = groups * kRun;
  const int64_t window = stride * kRunsPerThread;
  const bool active = group < groups && c < C;  // threads past the last group or channel only join barriers
  const int64_t base = bi * N * C + c;          // element (bi, v, c) of a (batch, N, C) array is base + v * C
  const global_ptr<const acc_t> bb = b + (batch_b > 1 ? bi : 0) * Nb * C + c;
  // A run's loads are issued together, before any use (one memory latency a run, where a node's dependent loads
  // took one or more each): f(k, v) for its kRun nodes, those past the window's end reading its last node again
  // (in bounds, unused), so no branch separates the loads.
  auto run_size = [](int64_t run, int64_t end) { return end - run < kRun ? static_cast<int>(end - run) : kRun; };
  auto load_run = [&](int64_t run, int n, auto&& f) {
    for (int k = 0; k < kRun; ++k) f(k, run + (k < n ? k : n - 1));
  };
  auto weights_of = [&](int64_t run, int n, acc_t (&w)[kRun]) {  // b_scale b_v, the rows first, then the weights
    int64_t rows[kRun];
    load_run(run, n, [&](int k, int64_t v) { rows[k] = b_index ? b_index[v] : v; });
    for (int k = 0; k < kRun; ++k) w[k] = b_scale * bb[rows[k] * C];
  };
  if (active) {
    for (int64_t v = group; v < N; v += groups) {
      work[base + v * C] = load(rhs[base + v * C]);
      inv_pivot[base + v * C] = real_t(1);
    }
  }
  // Up-sweep (the first window's block_reduce barrier orders the initialisation before it): y_v = ũ_v/α_v; α_p -= s|b_v|²/α_v; ũ_p -= s conj(b_v) y_v.
  for (int64_t s = 0; s < N;) {
    int64_t first_parent = N;
    for (int64_t v = s + threadIdx.x; v < s + window && v < N; v += blockDim.x) {
      const int64_t p = parent[v];
      if (p >= 0 && p < first_parent) first_parent = p;
    }
    first_parent = block_reduce<false>(first_parent, slots[parity ^= 1]);
    const int64_t e = first_parent < s + window ? first_parent : (s + window < N ? s + window : N);
    for (int64_t run = s + group * kRun; active && run < e; run += stride) {  // this group's runs of the window
      // The run's loads first (its nodes' entries are no one's parents in this window: the atomics below
      // cannot touch them).
      const int n = run_size(run, e);
      real_t pivot[kRun];
      acc_t rhs_v[kRun], w[kRun];
      int64_t par[kRun];
      load_run(run, n, [&](int k, int64_t v) {
        pivot[k] = inv_pivot[base + v * C], rhs_v[k] = work[base + v * C], par[k] = parent[v];
      });
      weights_of(run, n, w);
      int64_t run_parent = -1;
      real_t run_pivot = 0;
      acc_t run_rhs{};
      for (int k = 0; k < kRun; ++k) {
        if (k >= n) break;
        const int64_t v = run + k, p = par[k];
        const real_t iv = real_t(1) / pivot[k];
        const acc_t yv = iv * rhs_v[k];
        inv_pivot[base + v * C] = iv;
        work[base + v * C] = yv;
        if (p != run_parent && run_parent >= 0) {
          atomic_add(inv_pivot + base + run_parent * C, run_pivot);
          atomic_add(work + base + run_parent * C, run_rhs);
        }
        if (p != run_parent) run_pivot = real_t(0), run_rhs = acc_t{}, run_parent = p;
        if (p < 0) continue;
        run_pivot -= sign * abs2(w[k]) * iv;
        run_rhs = run_rhs - sign * (conj_of(w[k]) * yv);
      }
      if (run_parent >= 0) {
        atomic_add(inv_pivot + base + run_parent * C, run_pivot);
        atomic_add(work + base + run_parent * C, run_rhs);
      }
    }
    s = e;  // the next window's block_reduce barrier orders these writes before its reads
  }
  // Down-sweep: x_v = y_v - (b_v/α_v) x_p, parents before children.
  for (int64_t e = N; e > 0;) {
    const int64_t lo = e - window > 0 ? e - window : 0;
    int64_t last_inner = lo - 1;  // the last node of [lo, e) whose parent is inside [lo, e)
    for (int64_t v = lo + threadIdx.x; v < e; v += blockDim.x) {
      const int64_t p = parent[v];
      if (p >= 0 && p < e && v > last_inner) last_inner = v;
    }
    const int64_t a = block_reduce<true>(last_inner, slots[parity ^= 1]) + 1;
    for (int64_t run = a + group * kRun; active && run < e; run += stride) {
      // The run's loads first: its own entries, its weights, its parents' solutions (written by earlier
      // windows: every parent lies at or beyond e; a root reads its own entry, unused).
      const int n = run_size(run, e);
      acc_t y[kRun], w[kRun], xp[kRun];
      real_t pivot[kRun];
      int64_t par[kRun];
      load_run(run, n, [&](int k, int64_t v) {
        y[k] = work[base + v * C], pivot[k] = inv_pivot[base + v * C], par[k] = parent[v];
      });
      weights_of(run, n, w);
      load_run(run, n, [&](int k, int64_t v) { xp[k] = work[base + (par[k] >= 0 ? par[k] : v) * C]; });
      for (int k = 0; k < kRun; ++k) {
        if (k >= n) break;
        const int64_t v = run + k;
        acc_t xv = y[k];
        if (par[k] >= 0) {
          xv = xv - pivot[k] * (w[k] * xp[k]);
          work[base + v * C] = xv;
        }
        out[base + v * C] = store<S>(xv);
      }
    }
    e = a;
  }
  if (grad_b == nullptr) return;
  __syncthreads();  // the gradient reads the parents' solution, written by other threads
  if (!active) return;
  // grad_b_v = -(ḡ_v conj(x_p) + s conj(ḡ_p) x_v), ḡ the solution above. Per-node rows are this block's own;
  // level-shared rows (b_index) take each group's run of consecutive nodes, summed while the row repeats.
  const global_ptr<acc_t> gb = grad_b + bi * Nb * C + c;
  const int64_t per_group = (N + groups - 1) / groups;
  const int64_t first = group * per_group, last = (group + 1) * per_group < N ? (group + 1) * per_group : N;
  int64_t run_row = -1;
  acc_t run_sum{};
  for (int64_t run = first; run < last; run += kRun) {  // runs of kRun nodes, their loads issued together
    const int n = run_size(run, last);
    int64_t par[kRun], rows[kRun];
    acc_t xv[kRun], gv[kRun], xp[kRun], gp[kRun], old[kRun];
    load_run(run, n, [&](int k, int64_t v) {
      par[k] = parent[v], xv[k] = load(x_saved[base + v * C]), gv[k] = work[base + v * C];
      rows[k] = b_index ? b_index[v] : v;
    });
    load_run(run, n, [&](int k, int64_t v) {  // a root reads its own entries, unused
      const int64_t q = par[k] >= 0 ? par[k] : v;
      xp[k] = load(x_saved[base + q * C]), gp[k] = work[base + q * C];
      if (!b_index) old[k] = gb[v * C];  // per-node rows are this thread's own
    });
    for (int k = 0; k < kRun; ++k) {  // a constant trip count: the run's arrays stay in registers
      if (k >= n) break;
      if (par[k] < 0) continue;
      const acc_t term = gv[k] * conj_of(xp[k]) + sign * (conj_of(gp[k]) * xv[k]);
      if (!b_index) {
        gb[(run + k) * C] = old[k] - term;
        continue;
      }
      if (rows[k] != run_row && run_row >= 0) atomic_add(gb + run_row * C, run_sum);
      if (rows[k] != run_row) run_sum = acc_t{}, run_row = rows[k];
      run_sum = run_sum - term;
    }
  }
  if (run_row >= 0) atomic_add(gb + run_row * C, run_sum);
}

template <typename S>
void launch(int64_t batch, int64_t N, int64_t C, int64_t batch_b, int64_t Nb, const void* rhs, const void* b,
            const int64_t* parent, const int64_t* b_index, bool skew, bool adjoint, void* out, void* work,
            void* inv_pivot, const void* x_saved, void* grad_b, cudaStream_t stream) {
  using acc_t = typename Types<S>::Acc;
  using real_t = typename Types<S>::Real;
  const real_t sign = skew ? real_t(-1) : real_t(1);
  const real_t b_scale = adjoint ? sign : real_t(1);  // Tᴴ: B_v -> conj(C_v) = s b_v
  // Channel tiles of up to 32 (a warp reads one node's 32 adjacent channels); narrower, down to 8 channels
  // (a 32-byte sector of floats, so a warp's loads still fill whole sectors), while there are fewer than ~512
  // blocks: a block's sweep is a chain of dependent loads, whose latency only other resident blocks hide (one
  // block an SM, as 128 blocks left a 132-SM H200, keeps 8 warps on it).
  int64_t tile = C < 32 ? C : 32;
  while (tile > 8 && batch * ((C + tile - 1) / tile) < 512) tile /= 2;
  const int64_t blocks = batch * ((C + tile - 1) / tile);
  launch_kernel(solve_kernel<S>, static_cast<unsigned>(blocks), kThreads, 0, stream, N, C, static_cast<int>(tile), batch_b, Nb,
      static_cast<const S*>(rhs), static_cast<const acc_t*>(b), parent, b_index, sign, b_scale,
      static_cast<S*>(out), static_cast<acc_t*>(work), static_cast<real_t*>(inv_pivot),
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
