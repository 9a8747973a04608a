// Selective-scan CUDA kernels, structured like mamba_ssm's: one thread block per (batch, channel) row; the
// row is processed in chunks of kThreads * kItems time steps, each thread holding kItems consecutive steps in
// registers. Per chunk, u / delta / z (and per state B_n, C_n) are loaded coalesced (each warp reads its span
// of the chunk and redistributes it through shared memory; B_n and C_n of a whole chunk, where aligned, straight
// into each thread's registers in 16-byte vectors); then for each state n the block runs a parallel
// scan of the (decay, input) pairs of the recurrence h_t = exp(dt_t A_n) h_{t-1} + dt_t B_t u_t: a sequential scan of
// each thread's items, a warp scan of the thread aggregates with shuffles, a scan of the warp aggregates in
// shared memory, and the state carried from the previous chunk. The output accumulates C_t h_t in
// registers over n and is stored coalesced through shared memory.
// The backward walks the chunks against the scan's order; per chunk and state it recomputes the scan from the
// chunk's starting state, then runs the adjoint recurrence as a block scan of the same shape the other way. A
// row of up to kStateEvery steps is one backward chunk, which starts from zero; longer rows have chunks of
// kStateEvery steps, whose starting states the forward saves (the threads whose steps begin, in scan order, at a
// multiple of kStateEvery write the state entering them) or, where the caller has none, a forward pre-pass of
// the same kernel writes (every chunk but the last scanned, without C or outputs). A reverse scan (kReverse)
// takes the chunks and each thread's steps from the last and runs its block scans the other way; its loads,
// stores and chunk boundaries keep the row's time order. Gradients shared by the row's steps (A, D,
// delta_bias) are reduced within the block (warp shuffles, then shared memory) before one atomicAdd per
// block; dB and dC get one atomicAdd per (row, step, state), as in mamba_ssm (a block holds one channel),
// issued coalesced through the shared-memory stage.
// Inputs float32 / float64 / float16 / bfloat16; B and C in the accumulation dtype or the input's (BC, as
// mamba_ssm takes them); state and accumulation in float32 (float64 for float64).
// No torch headers here (see setup.py); runs under the host harness too (tests/cuda_harness).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "device.h"
#include "selective_scan.h"

namespace ssm_plugins {
namespace cuda {
namespace {

constexpr int kMaxState = 256;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

template <typename T> __device__ inline typename Acc<T>::type to_acc(T v) { return static_cast<typename Acc<T>::type>(v); }
template <> __device__ inline float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ inline float to_acc<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ inline T from_acc(typename Acc<T>::type v) { return static_cast<T>(v); }
template <> __device__ inline __half from_acc<__half>(float v) { return __float2half(v); }
template <> __device__ inline __nv_bfloat16 from_acc<__nv_bfloat16>(float v) { return __float2bfloat16(v); }

// The decays exp(dt A_n) of one state: A_n scaled by log2 e once (kLog2e, device.h; as mamba_ssm), then exp2 per
// step. The scaled A_n is clamped to finite values so that a padding step (dt = 0 past the row's end) decays by
// exactly 1 even when A_n is infinite; a NaN stays NaN.
template <typename acc_t>
struct Decay {
  acc_t scaled;
  __device__ explicit Decay(acc_t A) {
    constexpr acc_t kMax = std::numeric_limits<acc_t>::max();
    const acc_t s = A * kLog2e<acc_t>;
    scaled = s < -kMax ? -kMax : (s > kMax ? kMax : s);
  }
  __device__ acc_t operator()(acc_t dt) const { return exp2(dt * scaled); }
};

// One step of a linear recurrence x <- a x + b, as a pair; pairs compose associatively.
template <typename acc_t>
struct Pair {
  acc_t a, b;
};
// `earlier` applied first, then `later`.
template <typename acc_t>
__device__ inline Pair<acc_t> combine(Pair<acc_t> earlier, Pair<acc_t> later) {
  return {earlier.a * later.a, later.a * earlier.b + later.b};
}

// Block-wide exclusive scan of one pair per thread, in thread order (kReverse: from the last thread down),
// starting from `carry`. Returns the composition of carry and every pair before this thread's; `total` gets
// carry composed with all pairs. Every thread of the block must call it (two barriers inside).
template <int kThreads, bool kReverse, typename acc_t, typename Scratch>
__device__ inline Pair<acc_t> block_scan(Pair<acc_t> mine, Pair<acc_t> carry, Scratch warp_total, Pair<acc_t>& total) {
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int pos = kReverse ? 31 - lane : lane;  // position in scan order within the warp
  Pair<acc_t> inc = mine;
  for (int offset = 1; offset < 32; offset *= 2) {
    Pair<acc_t> other;
    other.a = kReverse ? __shfl_down_sync(kFullMask, inc.a, offset) : __shfl_up_sync(kFullMask, inc.a, offset);
    other.b = kReverse ? __shfl_down_sync(kFullMask, inc.b, offset) : __shfl_up_sync(kFullMask, inc.b, offset);
    if (pos >= offset) inc = combine(other, inc);
  }
  Pair<acc_t> exc;
  exc.a = kReverse ? __shfl_down_sync(kFullMask, inc.a, 1) : __shfl_up_sync(kFullMask, inc.a, 1);
  exc.b = kReverse ? __shfl_down_sync(kFullMask, inc.b, 1) : __shfl_up_sync(kFullMask, inc.b, 1);
  if (pos == 0) exc = {acc_t(1), acc_t(0)};
  if (pos == 31) warp_total[warp] = inc;
  __syncthreads();
  Pair<acc_t> prefix = carry;
  total = carry;
  for (int k = 0; k < kWarps; ++k) {  // warps in scan order
    const int w = kReverse ? kWarps - 1 - k : k;
    const Pair<acc_t> wt = warp_total[w];
    if (w == warp) prefix = total;
    total = combine(total, wt);
  }
  __syncthreads();  // warp_total is free again
  return combine(prefix, exc);
}

// Sum over the block of one value per thread, added into *target (shared or global memory) once per warp.
template <typename acc_t, typename Target>
__device__ inline void warp_sum_into(acc_t v, Target target) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(kFullMask, v, offset);
  if (threadIdx.x % 32 == 0) atomicAdd(target, v);
}

// A chunk [t0, t0 + kThreads * kItems) of a row (src points at t0), read so that thread i holds steps
// t0 + i * kItems + k; steps past `valid` read `fill`. Each warp reads its own 32 * kItems steps coalesced
// (lane l reads steps l, l + 32, ...) and redistributes them through its part of the shared-memory stage,
// with warp barriers only (no block barrier).
template <int kItems, typename T, typename acc_t, typename Stage>
__device__ inline void load_chunk(global_ptr<const T> src, int valid, Stage stage, acc_t (&out)[kItems], acc_t fill) {
  const int lane = threadIdx.x % 32, base = (threadIdx.x / 32) * 32 * kItems;
  if (valid >= int(blockDim.x) * kItems) {  // a whole chunk (uniform over the block): no bounds tests
    for (int k = 0; k < kItems; ++k) stage[base + k * 32 + lane] = to_acc(src[base + k * 32 + lane]);
  } else {
    for (int k = 0; k < kItems; ++k) {
      const int i = base + k * 32 + lane;
      stage[i] = i < valid ? to_acc(src[i]) : fill;
    }
  }
  __syncwarp();
  for (int k = 0; k < kItems; ++k) out[k] = stage[base + lane * kItems + k];
  __syncwarp();
}

// The inverse of load_chunk: thread i's kItems values to steps t0 + i * kItems + k, written (kAdd: added with
// atomicAdd) coalesced by each warp.
template <int kItems, bool kAdd = false, typename T, typename acc_t, typename Stage>
__device__ inline void store_chunk(global_ptr<T> dst, int valid, Stage stage, const acc_t (&in)[kItems]) {
  const int lane = threadIdx.x % 32, base = (threadIdx.x / 32) * 32 * kItems;
  for (int k = 0; k < kItems; ++k) stage[base + lane * kItems + k] = in[k];
  __syncwarp();
  const bool whole = valid >= int(blockDim.x) * kItems;  // uniform over the block: no bounds tests
  for (int k = 0; k < kItems; ++k) {
    const int i = base + k * 32 + lane;
    const bool in = whole || i < valid;
    if constexpr (kAdd) {
      if (in) atomicAdd(dst + i, stage[i]);
    } else {
      if (in) dst[i] = from_acc<T>(stage[i]);
    }
  }
  __syncwarp();
}

template <typename T, typename BC>
struct Args {
  using acc_t = typename Acc<T>::type;
  int64_t batch, dim, L, N, groups;
  global_ptr<const T> u, delta, z;
  global_ptr<const acc_t> A;
  global_ptr<const BC> B, C;
  global_ptr<const acc_t> D, delta_bias;
  bool softplus;
  global_ptr<const acc_t> delta_proj;  // null, or (dim, rank) with delta (batch, delta_groups, rank, L)
  int64_t rank, delta_groups;
  bool bc_vectors;  // B and C 16-byte aligned at every row and chunk start: whole chunks read in vectors
};

// B_n or C_n over a chunk: in a whole chunk, where the launch found them aligned, each thread reads its own
// steps straight into registers in 16-byte vectors (mamba_ssm's vectorised load of an even-length row: no
// shared-memory stage, a quarter or less of the load instructions); else coalesced through the stage.
template <int kItems, typename BC, typename acc_t, typename Stage>
__device__ inline void load_state_input(bool vectors, global_ptr<const BC> src, int valid, Stage stage,
                                        acc_t (&out)[kItems]) {
  if (vectors && valid >= int(blockDim.x) * kItems) {  // uniform over the block
    BC raw[kItems];
    load_vectors<kItems>(src + threadIdx.x * kItems, raw);
    for (int k = 0; k < kItems; ++k) out[k] = to_acc(raw[k]);
  } else {
    load_chunk<kItems, BC>(src, valid, stage, out, acc_t(0));
  }
}

// The block's row: batch b, channel d (group g), its chunks, delta bias and skip weight.
template <typename T>
struct Row {
  using acc_t = typename Acc<T>::type;
  int64_t b, d, row, g, n_chunks;
  acc_t bias, skip;
  template <typename BC>
  __device__ Row(const Args<T, BC>& p, int64_t chunk)
      : b(blockIdx.y), d(blockIdx.x), row(b * p.dim + d), g(d / (p.dim / p.groups)),
        n_chunks((p.L + chunk - 1) / chunk), bias(p.delta_bias ? p.delta_bias[d] : acc_t(0)),
        skip(p.D ? p.D[d] : acc_t(0)) {}
};

// Register budgets (ptxas -v, sm_90): left free, the compiler gave the 8-step forward 88-96 registers and the
// backward 230-236 where 70-72 and 168 fit without spills; the bounds keep 768 forward threads (8 steps) and 384
// backward threads an SM resident. The 16-step forward (141-145 registers) and float64 (which would spill) are
// left free.
template <typename T>
constexpr int kFp64 = std::is_same<T, double>::value;

// A thread's items in scan order: the j-th is item k = step<kReverse, kItems>(j) (a reverse scan takes them from
// the last down; the chunks, the loads and the stores keep the time order of the row).
template <bool kReverse, int kItems>
__device__ constexpr int step(int j) {
  return kReverse ? kItems - 1 - j : j;
}

// The scan's states at the boundary before step t = kStateEvery * s, 0 < t < L (the state entering step t, or for
// a reverse scan the state entering step t - 1 from above: the one holding steps t .. L - 1), saved at index s - 1.
// Forward; last_state (batch * dim, N) receives the final state and chunk_states, unless null, those states,
// (batch * dim, saved_states(L), N). Backward pre-pass (chunks of kStateEvery): out and last_state null,
// chunk_states receives the same, and the chunk scanned last (whose entry state is all the backward reads of it)
// is not scanned. kReverse: the scan runs from t = L - 1 down to 0, the chunks from the last.
template <int kThreads, int kItems, bool kReverse, typename T, typename BC>
__global__ void __launch_bounds__(kThreads, kItems <= 8 && !kFp64<T> ? 768 / kThreads : 1)
    fwd_kernel(Args<T, BC> p, global_ptr<T> out, global_ptr<typename Acc<T>::type> last_state,
               global_ptr<typename Acc<T>::type> chunk_states) {
  using acc_t = typename Acc<T>::type;
  constexpr int kChunk = kThreads * kItems;
  __shared__ Pair<acc_t> warp_total[kThreads / 32];
  __shared__ acc_t carry[kMaxState];
  SSM_DYNAMIC_SHARED(acc_t, stage);
  const Row<T> r(p, kChunk);
  const int64_t b = r.b, d = r.d, row = r.row, g = r.g, n_chunks = r.n_chunks;
  const acc_t bias = r.bias, skip = r.skip;
  static_assert(kStateEvery % kItems == 0, "a saved boundary must be the start of some thread's steps");
  const int64_t saves = saved_states(p.L);
  for (int n = threadIdx.x; n < p.N; n += kThreads) carry[n] = acc_t(0);
  __syncthreads();
  for (int64_t i = 0; i < n_chunks; ++i) {
    const int64_t c = kReverse ? n_chunks - 1 - i : i, t0 = c * kChunk;
    if (!out && i == n_chunks - 1) {  // pre-pass: the last chunk's entry state is all the backward reads of it
      const int64_t entry = (kReverse ? t0 + kChunk : t0) / kStateEvery - 1;
      if (threadIdx.x == 0) {  // thread 0 wrote carry: no barrier needed
        for (int64_t n = 0; n < p.N; ++n) chunk_states[(row * saves + entry) * p.N + n] = carry[n];
      }
      break;
    }
    const int valid = static_cast<int>(p.L - t0 < kChunk ? p.L - t0 : kChunk);  // steps of the row in the chunk
    const int64_t first = t0 + threadIdx.x * kItems;  // this thread's first step
    // a saved boundary where this thread's steps begin in scan order: the state entering them goes to chunk_states
    const int64_t boundary = kReverse ? first + kItems : first;
    const bool saves_state = chunk_states && boundary > 0 && boundary < p.L && boundary % kStateEvery == 0;
    global_ptr<acc_t> saved = chunk_states;
    if (saves_state) saved = chunk_states + (row * saves + boundary / kStateEvery - 1) * p.N;
    acc_t u[kItems], dt[kItems], y[kItems];
    load_chunk<kItems, T>(p.u + row * p.L + t0, valid, stage, u, acc_t(0));
    if (p.delta_proj) {  // low rank: dt = delta_proj[d] . delta[b, group of d], one coalesced row per rank
      const int64_t low = (b * p.delta_groups + d / (p.dim / p.delta_groups)) * p.rank * p.L + t0;
      for (int k = 0; k < kItems; ++k) dt[k] = acc_t(0);
      for (int64_t j = 0; j < p.rank; ++j) {
        acc_t part[kItems];
        load_chunk<kItems, T>(p.delta + low + j * p.L, valid, stage, part, acc_t(0));
        const acc_t w = p.delta_proj[d * p.rank + j];
        for (int k = 0; k < kItems; ++k) dt[k] += w * part[k];
      }
    } else {
      load_chunk<kItems, T>(p.delta + row * p.L + t0, valid, stage, dt, acc_t(0));
    }
    acc_t dtu[kItems];  // dt u, shared by every state's step inputs
    for (int k = 0; k < kItems; ++k) {
      const bool in = first + k < p.L;
      // Past the row's end dt = 0 and u = B = 0: the identity step (1, 0), so the state loop needs no bounds test.
      dt[k] = in ? (p.softplus ? softplus_dev(dt[k] + bias) : dt[k] + bias) : acc_t(0);
      dtu[k] = dt[k] * u[k];
      y[k] = skip * u[k];
    }
    for (int64_t n = 0; n < p.N; ++n) {
      const Decay<acc_t> decay(p.A[d * p.N + n]);
      const int64_t bc = ((b * p.groups + g) * p.N + n) * p.L + t0;
      acc_t Bv[kItems];
      load_state_input<kItems, BC>(p.bc_vectors, p.B + bc, valid, stage, Bv);
      Pair<acc_t> pairs[kItems];
      Pair<acc_t> mine{acc_t(1), acc_t(0)};
      for (int j = 0; j < kItems; ++j) {
        const int k = step<kReverse, kItems>(j);
        pairs[k] = Pair<acc_t>{decay(dt[k]), dtu[k] * Bv[k]};
        mine = combine(mine, pairs[k]);
      }
      Pair<acc_t> total;
      const Pair<acc_t> before =
          block_scan<kThreads, kReverse>(mine, Pair<acc_t>{acc_t(1), carry[n]}, warp_total, total);
      if (saves_state) saved[n] = before.b;  // the state entering this thread's steps
      if (out) {  // the backward's pre-pass needs the chunk's end state alone: no C, no per-step states
        acc_t Cv[kItems];
        load_state_input<kItems, BC>(p.bc_vectors, p.C + bc, valid, stage, Cv);
        acc_t h = before.b;
        for (int j = 0; j < kItems; ++j) {
          const int k = step<kReverse, kItems>(j);
          h = pairs[k].a * h + pairs[k].b;
          y[k] += Cv[k] * h;  // Cv is 0 past the end
        }
      }
      if (threadIdx.x == 0) carry[n] = total.b;  // read again only after the next chunk's barriers
    }
    if (out) {
      if (p.z) {
        acc_t z[kItems];
        load_chunk<kItems, T>(p.z + row * p.L + t0, valid, stage, z, acc_t(0));
        for (int k = 0; k < kItems; ++k) y[k] *= z[k] * sigmoid_dev(z[k]);
      }
      store_chunk<kItems, false, T>(out + row * p.L + t0, valid, stage, y);
    }
  }
  if (!last_state) return;
  __syncthreads();
  for (int n = threadIdx.x; n < p.N; n += kThreads) last_state[row * p.N + n] = carry[n];
}

template <typename T>
struct Grads {
  using acc_t = typename Acc<T>::type;
  global_ptr<const T> grad_out;
  global_ptr<const acc_t> grad_last;
  global_ptr<T> du, ddelta, dz;
  global_ptr<acc_t> dA, dB, dC, dD, dbias;
};

// kReverse: the gradients of the reverse scan (the chunks walked from the first, the adjoint from t = 0 up).
template <int kThreads, int kItems, bool kReverse, typename T, typename BC>
__global__ void __launch_bounds__(kThreads, kFp64<T> ? 1 : 384 / kThreads)
    bwd_kernel(Args<T, BC> p, Grads<T> q, global_ptr<const typename Acc<T>::type> chunk_states) {
  using acc_t = typename Acc<T>::type;
  constexpr int kChunk = kThreads * kItems;
  __shared__ Pair<acc_t> warp_total[kThreads / 32];
  __shared__ acc_t mu_carry[kMaxState];  // adjoint flowing into the chunk from the steps after it
  __shared__ acc_t dA_sum[kMaxState];
  __shared__ acc_t row_sums[2];  // dD, dbias
  SSM_DYNAMIC_SHARED(acc_t, stage);
  const Row<T> r(p, kChunk);
  const int64_t b = r.b, d = r.d, row = r.row, g = r.g, n_chunks = r.n_chunks;
  const acc_t bias = r.bias, skip = r.skip;
  for (int n = threadIdx.x; n < p.N; n += kThreads) {
    mu_carry[n] = q.grad_last ? q.grad_last[row * p.N + n] : acc_t(0);
    dA_sum[n] = acc_t(0);
  }
  if (threadIdx.x < 2) row_sums[threadIdx.x] = acc_t(0);
  __syncthreads();
  acc_t dD_part = 0, dbias_part = 0;
  // the chunks in the adjoint's order: the scan's, reversed
  for (int64_t c = kReverse ? 0 : n_chunks - 1; kReverse ? c < n_chunks : c >= 0; c += kReverse ? 1 : -1) {
    const int64_t t0 = c * kChunk;
    const int valid = static_cast<int>(p.L - t0 < kChunk ? p.L - t0 : kChunk);  // steps of the row in the chunk
    const int64_t first = t0 + threadIdx.x * kItems;
    // Per step, shared by the states. Past the row's end dt, u and gy are 0 (loads fill 0), so there every
    // state's step is the identity (1, 0) and adds nothing: the state loop needs no bounds test.
    acc_t u[kItems], dt[kItems], dtu[kItems], gy[kItems], gz[kItems], y[kItems], du[kItems], ddt[kItems];
    load_chunk<kItems, T>(p.u + row * p.L + t0, valid, stage, u, acc_t(0));
    load_chunk<kItems, T>(p.delta + row * p.L + t0, valid, stage, dt, acc_t(0));
    load_chunk<kItems, T>(q.grad_out + row * p.L + t0, valid, stage, gy, acc_t(0));
    if (p.z) load_chunk<kItems, T>(p.z + row * p.L + t0, valid, stage, gz, acc_t(0));
    for (int k = 0; k < kItems; ++k) {
      const bool in = first + k < p.L;
      const acc_t raw = dt[k] + bias;
      dt[k] = in ? (p.softplus ? softplus_dev(raw) : raw) : acc_t(0);
      dtu[k] = dt[k] * u[k];
      if (p.z) {  // y_gated = y z s(z): gy = d loss / d y; dz = gz y once y is summed over the states
        const acc_t zk = gz[k], s = sigmoid_dev(zk);
        gz[k] = gy[k] * s * (acc_t(1) + zk * (acc_t(1) - s));
        gy[k] *= zk * s;
      }
      y[k] = skip * u[k];
      du[k] = skip * gy[k];
      ddt[k] = 0;
    }
    for (int64_t n = 0; n < p.N; ++n) {
      const acc_t An = p.A[d * p.N + n];
      const Decay<acc_t> decay(An);
      const int64_t bc = ((b * p.groups + g) * p.N + n) * p.L + t0;
      acc_t a[kItems], Bv[kItems], gc[kItems], ha[kItems], grad[kItems];
      load_state_input<kItems, BC>(p.bc_vectors, p.B + bc, valid, stage, Bv);
      load_state_input<kItems, BC>(p.bc_vectors, p.C + bc, valid, stage, gc);
      Pair<acc_t> mine{acc_t(1), acc_t(0)};
      for (int j = 0; j < kItems; ++j) {
        const int k = step<kReverse, kItems>(j);
        a[k] = decay(dt[k]);
        mine = combine(mine, Pair<acc_t>{a[k], dtu[k] * Bv[k]});
      }
      // Recomputation of the chunk's states from its starting state (the saved one at the boundary the scan
      // enters it by; the chunk scanned first starts from zero); dC stored at once.
      Pair<acc_t> total;
      const int64_t entry = kReverse ? c : c - 1;  // the boundary before step (kReverse ? c + 1 : c) * kChunk
      const bool first_scanned = kReverse ? c == n_chunks - 1 : c == 0;
      const acc_t h0 = first_scanned ? acc_t(0) : chunk_states[(row * (n_chunks - 1) + entry) * p.N + n];
      acc_t h = block_scan<kThreads, kReverse>(mine, Pair<acc_t>{acc_t(1), h0}, warp_total, total).b;
      for (int j = 0; j < kItems; ++j) {
        const int k = step<kReverse, kItems>(j);
        ha[k] = a[k] * h;  // d h_t / d (dt_t A_n)
        h = a[k] * h + dtu[k] * Bv[k];
        y[k] += gc[k] * h;
        grad[k] = gy[k] * h;  // dC
        gc[k] *= gy[k];  // C_t gy_t from here on
      }
      store_chunk<kItems, true>(q.dC + bc, valid, stage, grad);  // one coalesced atomicAdd per step
      // Adjoint, in scan order: lam_t = gy_t C_t + mu_{t+1}, mu_t = a_t lam_t (the adjoint passed to the state
      // before step t); a scan against the scan's direction of the pairs (a_t, a_t gy_t C_t) from the carry mu
      // of the chunk after it.
      Pair<acc_t> rmine{acc_t(1), acc_t(0)};
      for (int j = 0; j < kItems; ++j) {
        const int k = step<!kReverse, kItems>(j);
        rmine = combine(rmine, Pair<acc_t>{a[k], a[k] * gc[k]});
      }
      acc_t mu = block_scan<kThreads, !kReverse>(rmine, Pair<acc_t>{acc_t(1), mu_carry[n]}, warp_total, total).b;
      acc_t dA_part = 0;
      for (int j = 0; j < kItems; ++j) {
        const int k = step<!kReverse, kItems>(j);
        const acc_t lam = gc[k] + mu, d_log_a = lam * ha[k], lam_b = lam * Bv[k];
        dA_part += d_log_a * dt[k];
        ddt[k] += d_log_a * An + lam_b * u[k];
        du[k] += lam_b * dt[k];
        grad[k] = lam * dtu[k];  // dB
        mu = a[k] * lam;
      }
      if (threadIdx.x == 0) mu_carry[n] = total.b;
      warp_sum_into(dA_part, &dA_sum[n]);
      store_chunk<kItems, true>(q.dB + bc, valid, stage, grad);
    }
    for (int k = 0; k < kItems; ++k) {
      if (first + k >= p.L) continue;
      if (p.softplus) ddt[k] *= softplus_slope(dt[k]);
      dbias_part += ddt[k];
      dD_part += gy[k] * u[k];
      if (p.z) gz[k] *= y[k];  // dz
    }
    store_chunk<kItems, false, T>(q.du + row * p.L + t0, valid, stage, du);
    store_chunk<kItems, false, T>(q.ddelta + row * p.L + t0, valid, stage, ddt);
    if (p.z) store_chunk<kItems, false, T>(q.dz + row * p.L + t0, valid, stage, gz);
  }
  warp_sum_into(dD_part, &row_sums[0]);
  warp_sum_into(dbias_part, &row_sums[1]);
  __syncthreads();
  for (int n = threadIdx.x; n < p.N; n += kThreads) atomicAdd(q.dA + d * p.N + n, dA_sum[n]);
  if (threadIdx.x == 0 && q.dD) atomicAdd(q.dD + d, row_sums[0]);
  if (threadIdx.x == 0 && q.dbias) atomicAdd(q.dbias + d, row_sums[1]);
}

// Threads and steps per thread by sequence length (mamba_ssm's choice: short rows get narrow blocks). The
// backward holds about three times the forward's per-step values in registers, so it takes 8 steps a thread
// (255 registers and spills at 16 steps on sm_90, ptxas -v) and up to 128 threads: a row of up to kStateEvery
// steps is one chunk, longer rows have chunks of kStateEvery, whose entering states the forward saved (the
// pre-pass, where there are none, scans the backward's chunks).
template <bool kBackward, typename F>
void with_config(int64_t L, F&& f) {
  using Steps = std::integral_constant<int, kBackward ? 8 : 16>;  // a thread's steps above 256
  if (L <= 256) {
    f(std::integral_constant<int, 32>{}, std::integral_constant<int, 8>{});
  } else if (L <= (kBackward ? 512 : 1024)) {
    f(std::integral_constant<int, 64>{}, Steps{});
  } else {
    f(std::integral_constant<int, 128>{}, Steps{});
  }
}

template <typename T, typename BC>
Args<T, BC> make_args(int64_t batch, int64_t dim, int64_t L, int64_t N, int64_t groups, const void* u,
                      const void* delta, const void* z, const void* A, const void* B, const void* C, const void* D,
                      const void* delta_bias, bool softplus, const void* delta_proj = nullptr, int64_t rank = 0,
                      int64_t delta_groups = 0) {
  using acc_t = typename Acc<T>::type;
  // B and C are (batch, groups, N, L) rows of L: every row and chunk start is 16-byte aligned when the
  // storages are and a row is a whole number of 16 bytes (chunks are multiples of 256 steps)
  const auto aligned = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0; };
  const bool bc_vectors = aligned(B) && aligned(C) && (L * sizeof(BC)) % 16 == 0;
  return Args<T, BC>{batch, dim, L, N, groups, static_cast<const T*>(u), static_cast<const T*>(delta),
                     static_cast<const T*>(z), static_cast<const acc_t*>(A), static_cast<const BC*>(B),
                     static_cast<const BC*>(C), static_cast<const acc_t*>(D), static_cast<const acc_t*>(delta_bias),
                     softplus, static_cast<const acc_t*>(delta_proj), rank, delta_groups, bc_vectors};
}

// f(std::bool_constant<reverse>)
template <typename F>
void with_direction(bool reverse, F&& f) {
  if (reverse) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

template <bool kBackward, typename T, typename BC>
void launch_fwd(const Args<T, BC>& p, bool reverse, void* out, void* last_state, void* chunk_states,
                cudaStream_t stream) {
  using acc_t = typename Acc<T>::type;
  with_config<kBackward>(p.L, [&](auto threads, auto items) {
    with_direction(reverse, [&](auto rev) {
      constexpr int kThreads = decltype(threads)::value, kItems = decltype(items)::value;
      const dim3 grid(static_cast<unsigned>(p.dim), static_cast<unsigned>(p.batch));
      launch_kernel(fwd_kernel<kThreads, kItems, decltype(rev)::value, T, BC>, grid, kThreads,
                    kThreads * kItems * sizeof(acc_t), stream, p, static_cast<T*>(out),
                    static_cast<acc_t*>(last_state), static_cast<acc_t*>(chunk_states));
    });
  });
}

}  // namespace

int64_t selective_scan_chunk(int64_t L, bool backward) {
  int64_t chunk = 0;
  auto get = [&](auto threads, auto items) { chunk = decltype(threads)::value * decltype(items)::value; };
  if (backward) {
    with_config<true>(L, get);
  } else {
    with_config<false>(L, get);
  }
  return chunk;
}

int64_t selective_scan_bwd_scratch(int64_t batch, int64_t dim, int64_t L, int64_t N) {
  return batch * dim * saved_states(L) * N;
}

void selective_scan_fwd_launch(int dtype, bool bc_input_dtype, int64_t batch, int64_t dim, int64_t L, int64_t N,
                               int64_t groups, const void* u, const void* delta, const void* z, const void* A,
                               const void* B, const void* C, const void* D, const void* delta_bias,
                               bool delta_softplus, bool reverse, const void* delta_proj, int64_t rank,
                               int64_t delta_groups, void* out, void* last_state, void* chunk_states,
                               cudaStream_t stream) {
  if (N > kMaxState) throw std::invalid_argument("ssm_plugins: selective_scan CUDA kernel supports N <= 256");
  if (batch * dim == 0 || L == 0) return;
  if (dim > 2147483647 || batch > 65535) throw std::invalid_argument("ssm_plugins: selective_scan: grid too large");
  with_input_types(dtype, bc_input_dtype, "selective_scan", [&](auto t, auto bc) {
    using T = decltype(t);
    using BC = decltype(bc);
    launch_fwd<false>(make_args<T, BC>(batch, dim, L, N, groups, u, delta, z, A, B, C, D, delta_bias, delta_softplus,
                                       delta_proj, rank, delta_groups),
                      reverse, out, last_state, chunk_states, stream);
  });
  check_launch("selective_scan_fwd");
}

namespace {
template <typename T, typename BC>
void launch_bwd(const Args<T, BC>& p, bool reverse, const void* grad_out, const void* grad_last, void* du,
                void* ddelta, void* dz, void* dA, void* dB, void* dC, void* dD, void* dbias, const void* chunk_states,
                void* scratch, cudaStream_t stream) {
  using acc_t = typename Acc<T>::type;
  if (p.L > kStateEvery && selective_scan_chunk(p.L, true) != kStateEvery) {
    throw std::logic_error("ssm_plugins: selective_scan_bwd: a long row's chunks must be the saved states' spacing");
  }
  if (p.L > kStateEvery && !chunk_states) {  // none saved: the state entering every chunk after the first
    launch_fwd<true>(p, reverse, nullptr, nullptr, scratch, stream);
    check_launch("selective_scan_bwd (forward pre-pass)");
    chunk_states = scratch;
  }
  const Grads<T> q{static_cast<const T*>(grad_out), static_cast<const acc_t*>(grad_last), static_cast<T*>(du),
                   static_cast<T*>(ddelta), static_cast<T*>(dz), static_cast<acc_t*>(dA), static_cast<acc_t*>(dB),
                   static_cast<acc_t*>(dC), static_cast<acc_t*>(dD), static_cast<acc_t*>(dbias)};
  with_config<true>(p.L, [&](auto threads, auto items) {
    with_direction(reverse, [&](auto rev) {
      constexpr int kThreads = decltype(threads)::value, kItems = decltype(items)::value;
      const dim3 grid(static_cast<unsigned>(p.dim), static_cast<unsigned>(p.batch));
      launch_kernel(bwd_kernel<kThreads, kItems, decltype(rev)::value, T, BC>, grid, kThreads,
                    kThreads * kItems * sizeof(acc_t), stream, p, q, static_cast<const acc_t*>(chunk_states));
    });
  });
}
}  // namespace

void selective_scan_bwd_launch(int dtype, bool bc_input_dtype, int64_t batch, int64_t dim, int64_t L, int64_t N,
                               int64_t groups, const void* u, const void* delta, const void* z, const void* A,
                               const void* B, const void* C, const void* D, const void* delta_bias,
                               bool delta_softplus, bool reverse, const void* grad_out,
                               const void* grad_last_state, void* du, void* ddelta, void* dz, void* dA, void* dB,
                               void* dC, void* dD, void* ddelta_bias, const void* chunk_states, void* scratch,
                               cudaStream_t stream) {
  if (N > kMaxState) throw std::invalid_argument("ssm_plugins: selective_scan CUDA kernel supports N <= 256");
  if (batch * dim == 0 || L == 0) return;
  if (dim > 2147483647 || batch > 65535) throw std::invalid_argument("ssm_plugins: selective_scan: grid too large");
  with_input_types(dtype, bc_input_dtype, "selective_scan", [&](auto t, auto bc) {
    using T = decltype(t);
    using BC = decltype(bc);
    launch_bwd(make_args<T, BC>(batch, dim, L, N, groups, u, delta, z, A, B, C, D, delta_bias, delta_softplus),
               reverse, grad_out, grad_last_state, du, ddelta, dz, dA, dB, dC, dD, ddelta_bias, chunk_states, scratch,
               stream);
  });
  check_launch("selective_scan_bwd");
}

}  // namespace cuda
}  // namespace ssm_plugins
