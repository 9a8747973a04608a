// Quasi-separable mixing CUDA kernels (math and layouts in ssm_plugins/csrc/qs_mix.cpp). A block per (batch
// element, tile of 32 adjacent (head, feature) columns): threadIdx.x is the column (the loads of x, dt, y and
// the gradients coalesce over features), threadIdx.y one of up to 8 time segments of 8 consecutive steps, so a
// chunk of up to 64 steps runs in parallel along L. Per state (in groups of 8, 4 for double, held in
// registers) each direction's strict scan h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t is a block-wide scan of
// (decay, input) pairs: each thread scans its steps from zero, publishes (decay product, local state) in
// shared memory, composes the segments before it onto the state carried from the previous chunk, and re-runs
// its steps from the true state for the output. The backward stores the chunk-start states in a pre-pass,
// then per chunk (last to first) recomputes the states (kept per step in a global workspace), runs the
// adjoint as the mirror-image reverse block scan, and reduces the shared gradients before atomics: dB, dC
// per (step, group) and ddt, dgamma per (step, head) with segmented warp sums (one atomic per warp segment),
// dA per head over the block (warp sums, then the warps' sums in shared memory, one atomic per block).
// fp32 state and accumulation for float16/bfloat16 (fp64 for double); dt, B, C in the accumulation dtype or in x's
// (SelT: a bf16 projection's output is read as it is). No torch headers here (see setup.py).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "device.h"
#include "qs_mix.h"

namespace ssm_plugins {
namespace cuda {
namespace {

constexpr int kLanes = 32;       // columns per block: one warp-wide row of adjacent (head, feature) columns
constexpr int kSteps = 8;        // consecutive time steps per thread
constexpr int kMaxSegments = 8;  // time segments (warps) per block: chunks of up to 64 steps
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };
// States per pass, held in registers. 8 (4 for double): at 16, the per-state arrays and the hoisted B/C loads took
// 245-255 registers a thread (one 256-thread block per SM, 12.5 % occupancy, the backward spilling; Nsight Compute
// on the H200, csrc/README); at 8 the forward needs 121 and the backward 128 (ptxas -v, sm_90): two blocks per SM.
// A second pass over the states re-reads x and dt, which the profile shows idle DRAM can afford (1-2 % busy).
template <typename acc_t> constexpr int kGroup = sizeof(acc_t) == 8 ? 4 : 8;

// Over the states of the current group (a compile-time trip count, so the per-state arrays stay in registers).
#define QS_FOR_STATE(n) _Pragma("unroll") for (int n = 0; n < kG; ++n) if (n < nn)

template <typename T> __device__ inline typename Acc<T>::type to_acc(T v) { return static_cast<typename Acc<T>::type>(v); }
template <> __device__ inline float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ inline float to_acc<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

struct Shape {
  int64_t batch, L, H, P, N, G;
};

int64_t segments_of(int64_t L) {
  const int64_t segments = (L + kSteps - 1) / kSteps;
  return segments < kMaxSegments ? (segments > 0 ? segments : 1) : kMaxSegments;
}

// Where column `col` = (b, h, p) reads its direction's parameters: dt, B, C of type SelT (acc_t, or x's dtype when the
// op got them so), A and the bias in acc_t.
template <typename acc_t, typename SelT>
struct ColumnDirection {
  global_ptr<const SelT> dt, B, C;
  global_ptr<const acc_t> A;
  acc_t bias;
  int64_t a_step, dt_s1, B_s1, C_s1;  // A[h, n] = A[n * a_step]: a_step 0 for scalar A; B, C: N contiguous

  __device__ ColumnDirection(const QsMixDirection& d, int64_t b, int64_t h, int64_t g) {
    dt = global_ptr<const SelT>(static_cast<const SelT*>(d.dt)) + b * d.dt_s[0] + h * d.dt_s[2];
    A = global_ptr<const acc_t>(static_cast<const acc_t*>(d.A)) + h * d.A_cols;
    a_step = d.A_cols == 1 ? 0 : 1;
    B = global_ptr<const SelT>(static_cast<const SelT*>(d.B)) + b * d.B_s[0] + g * d.B_s[2];
    C = global_ptr<const SelT>(static_cast<const SelT*>(d.C)) + b * d.C_s[0] + g * d.C_s[2];
    bias = d.bias ? global_ptr<const acc_t>(static_cast<const acc_t*>(d.bias))[h] : acc_t(0);
    dt_s1 = d.dt_s[1], B_s1 = d.B_s[1], C_s1 = d.C_s[1];
  }
  __device__ acc_t raw_delta(int64_t t) const { return to_acc(dt[t * dt_s1]) + bias; }
  __device__ acc_t Av(int64_t n) const { return A[n * a_step]; }
  // A step's B or C: unit stride along N, so its states are one base address plus immediate offsets (a stride
  // per state held 16 more 64-bit addresses in registers; an index formed per state cost 64-bit multiplies).
  __device__ global_ptr<const SelT> B_row(int64_t t) const { return B + t * B_s1; }
  __device__ global_ptr<const SelT> C_row(int64_t t) const { return C + t * C_s1; }
};

// A thread's column: block blockIdx.x = (batch element, tile of kLanes columns), lane threadIdx.x. Lanes past
// the last column replay the last one (every lane of a warp takes part in the shuffles) and store nothing.
struct Place {
  int64_t b, hp, h, p, g, col;  // col: the column's index in the backward's workspaces
  bool active;
  __device__ explicit Place(const Shape& s) {
    const int64_t HP = s.H * s.P, tiles = (HP + kLanes - 1) / kLanes;
    b = blockIdx.x / tiles;
    hp = blockIdx.x % tiles * kLanes + threadIdx.x;
    active = hp < HP;
    const int64_t real = active ? hp : HP - 1;
    h = real / s.P, p = real % s.P, g = h / (s.H / s.G);
    col = b * tiles * kLanes + hp;
  }
};

// Scan order i -> time t of a direction (0 forward, 1 reverse), and a step's delta.
template <typename acc_t, typename SelT>
struct Direction {
  ColumnDirection<acc_t, SelT> d;
  int dir;
  int64_t L;
  bool softplus_dt;
  __device__ int64_t t_of(int64_t i) const { return dir ? L - 1 - i : i; }
  __device__ acc_t delta(int64_t t) const {
    const acc_t v = d.raw_delta(t);
    return softplus_dt ? softplus_dev(v) : v;
  }
  // A step's decays exp(delta A_n) as exp2 of delta log2 e (kLog2e, device.h), formed once per step; scalar A
  // (a_step 0) has one decay per step, `first`.
  struct Decays {
    acc_t dl2, first;
  };
  __device__ Decays decays(acc_t delta) const {
    const acc_t dl2 = delta * kLog2e<acc_t>;
    return {dl2, exp2(dl2 * d.Av(0))};
  }
  __device__ acc_t decay(const Decays& s, int64_t n) const { return d.a_step ? exp2(s.dl2 * d.Av(n)) : s.first; }
  // Calls f(decay), decay(n) giving state n's decay at this step, with the scalar / diagonal choice made once
  // per step: in a state loop the diagonal arm's loads and exp2 were issued (predicated off) for every state
  // of a scalar A too.
  template <typename F>
  __device__ void with_decay(const Decays& s, F&& f) const {
    if (d.a_step) {
      f([&](int64_t n) { return exp2(s.dl2 * d.Av(n)); });
    } else {
      f([&](int64_t) { return s.first; });
    }
  }
};

// The deltas of a thread's kSteps steps in the current chunk, softplus'd once and read by every pass over those
// steps (each pass recomputed them: an accurate softplus is ~40 instructions, per pass and state group), in the
// thread's own cells of shared memory after the block-scan pairs, kLanes apart: written and read by the same
// thread, so no barrier.
template <int kG, typename Smem>
__device__ inline Smem own_delta_cells(Smem pairs) {
  return pairs + (blockDim.y * 2 * kG + threadIdx.y * kSteps) * kLanes + threadIdx.x;
}

template <typename acc_t, typename SelT, typename Own>
__device__ inline void fill_deltas(const Direction<acc_t, SelT>& dr, int64_t i0, Own deltas) {
#pragma unroll 1
  for (int64_t i = i0; i < i0 + kSteps && i < dr.L; ++i) deltas[(i - i0) * kLanes] = dr.delta(dr.t_of(i));
}

// The thread's steps composed from a zero state: h <- a h + delta B x; prod <- a prod (states n0 .. n0 + nn).
// The step loops of the kernels stay rolled (delta and x are reloaded per pass): unrolled over steps and
// states, the compiler hoisted every step's B and C loads into registers and spilled.
template <int kG, typename T, typename acc_t, typename SelT, typename Own>
__device__ inline void local_scan(const Direction<acc_t, SelT>& dr, global_ptr<const T> x, int64_t x_s1, int64_t i0,
                                  Own deltas, int64_t n0, int nn, acc_t (&prod)[kG], acc_t (&h)[kG]) {
  QS_FOR_STATE(n) prod[n] = acc_t(1), h[n] = acc_t(0);
#pragma unroll 1
  for (int64_t i = i0; i < i0 + kSteps && i < dr.L; ++i) {
    const int64_t t = dr.t_of(i);
    const acc_t delta = deltas[(i - i0) * kLanes], xv = to_acc(x[t * x_s1]);
    const global_ptr<const SelT> Bt = dr.d.B_row(t) + n0;
    dr.with_decay(dr.decays(delta), [&](auto decay) {
      QS_FOR_STATE(n) {
        const acc_t a = decay(n0 + n);
        h[n] = a * h[n] + delta * to_acc(Bt[n]) * xv;
        prod[n] *= a;
      }
    });
  }
}

// The block scan across the time segments (threadIdx.y): publishes this segment's pairs (prod, h), then
// composes the segments before it (after it, kReverse) onto `carry`, the value entering the chunk. Returns in
// h the value entering this segment and leaves in carry the value leaving the chunk (the next chunk's entry).
template <bool kReverse, int kG, typename acc_t, typename Smem>
__device__ inline void block_compose(Smem pairs, int nn, acc_t (&prod)[kG], acc_t (&h)[kG], acc_t (&carry)[kG]) {
  const int seg = threadIdx.y, segments = blockDim.y, lane = threadIdx.x;
  auto at = [&](int sg, int which, int n) { return ((sg * 2 + which) * kG + n) * kLanes + lane; };
  QS_FOR_STATE(n) pairs[at(seg, 0, n)] = prod[n], pairs[at(seg, 1, n)] = h[n];
  __syncthreads();
  QS_FOR_STATE(n) h[n] = carry[n];
  for (int j = 0; j < segments; ++j) {
    const int sg = kReverse ? segments - 1 - j : j;
    if (sg == seg) {
      QS_FOR_STATE(n) prod[n] = h[n];  // prod is free: keep the entry of this segment
    }
    QS_FOR_STATE(n) h[n] = pairs[at(sg, 0, n)] * h[n] + pairs[at(sg, 1, n)];
  }
  QS_FOR_STATE(n) carry[n] = h[n], h[n] = prod[n];
  __syncthreads();  // the pairs are rewritten by the next chunk
}

template <typename T, typename SelT>
__global__ void __launch_bounds__(kLanes * kMaxSegments)
    fwd_kernel(Shape s, QsMixTensors tensors, bool softplus_dt, bool hydra_shift, global_ptr<typename Acc<T>::type> y,
               int64_t y_s0, int64_t y_s1, int64_t y_s2, int64_t y_s3) {
  using acc_t = typename Acc<T>::type;
  constexpr int kG = kGroup<acc_t>;
  SSM_DYNAMIC_SHARED(acc_t, pairs);
  const auto deltas = own_delta_cells<kG>(pairs);
  const Place q(s);
  const global_ptr<const T> x = global_ptr<const T>(static_cast<const T*>(tensors.x)) + q.b * tensors.x_s[0] +
                                q.h * tensors.x_s[2] + q.p * tensors.x_s[3];
  const global_ptr<const acc_t> gamma = global_ptr<const acc_t>(static_cast<const acc_t*>(tensors.gamma)) +
                                        q.b * tensors.gamma_s[0] + q.h * tensors.gamma_s[2];
  const global_ptr<acc_t> yc = y + q.b * y_s0 + q.h * y_s2 + q.p * y_s3;
  const int64_t chunk = blockDim.y * kSteps;
  for (int dir = 0; dir < 2; ++dir) {
    const Direction<acc_t, SelT> dr{ColumnDirection<acc_t, SelT>(tensors.dir[dir], q.b, q.h, q.g), dir, s.L,
                                    softplus_dt};
    for (int64_t n0 = 0; n0 < s.N; n0 += kG) {
      const int nn = s.N - n0 < kG ? static_cast<int>(s.N - n0) : kG;
      acc_t carry[kG], prod[kG], h[kG];
      QS_FOR_STATE(n) carry[n] = acc_t(0);
      for (int64_t c0 = 0; c0 < s.L; c0 += chunk) {
        const int64_t i0 = c0 + threadIdx.y * kSteps;
        fill_deltas(dr, i0, deltas);
        local_scan(dr, x, tensors.x_s[1], i0, deltas, n0, nn, prod, h);
        block_compose<false>(pairs, nn, prod, h, carry);
#pragma unroll 1
        for (int64_t i = i0; i < i0 + kSteps && i < s.L; ++i) {  // the steps again from the true state, with the output
          const int64_t t = dr.t_of(i);
          const acc_t delta = deltas[(i - i0) * kLanes], xv = to_acc(x[t * tensors.x_s[1]]);
          const global_ptr<const SelT> Bt = dr.d.B_row(t) + n0;
          const global_ptr<const SelT> Ct = dr.d.C_row(hydra_shift && i > 0 ? dr.t_of(i - 1) : t) + n0;
          acc_t out = 0;
          dr.with_decay(dr.decays(delta), [&](auto decay) {
            QS_FOR_STATE(n) {
              const acc_t a = decay(n0 + n), input = delta * to_acc(Bt[n]) * xv;
              if (hydra_shift) {  // y_t = C_{t-1} · h_{t-1}
                if (i > 0) out += to_acc(Ct[n]) * h[n];
                h[n] = a * h[n] + input;
              } else {  // y_t = C_t · (Ā_t h_{t-1})
                const acc_t z = a * h[n];
                out += to_acc(Ct[n]) * z;
                h[n] = z + input;
              }
            }
          });
          // The thread owning step t in this direction and state group owns y_t; the reverse direction's
          // owner of t differs, but barriers of the block scan lie between the two.
          if (q.active) {
            if (dir == 0 && n0 == 0) {
              yc[t * y_s1] = out + gamma[t * tensors.gamma_s[1]] * xv;
            } else {
              yc[t * y_s1] += out;
            }
          }
        }
      }
    }
  }
}

// Sum of v over the lanes from this one up to the end of its segment (lanes with an equal key form one
// contiguous segment); `same` bit k says lane + 2^k has this lane's key. The segment's first lane ends up
// with the segment's total.
template <typename acc_t>
__device__ inline acc_t segment_sum(acc_t v, unsigned same) {
  for (int k = 0; k < 5; ++k) {
    const acc_t other = __shfl_down_sync(kFullMask, v, 1 << k);
    if (same & (1u << k)) v += other;
  }
  return v;
}

// The warp sums of two values at once: the lower half-warp sums `a` over all 32 lanes, the upper half `b` (each
// half first takes the other half's share of its value), 5 shuffles for the two where two segment_sums take 10.
template <typename acc_t>
__device__ inline acc_t pair_sum(acc_t a, acc_t b, unsigned lane) {
  const bool upper = lane >= 16;
  acc_t v = (upper ? b : a) + __shfl_xor_sync(kFullMask, upper ? a : b, 16);
  for (int k = 8; k > 0; k /= 2) v += __shfl_xor_sync(kFullMask, v, k);
  return v;
}

__device__ inline unsigned same_key_bits(int64_t key, unsigned lane) {
  unsigned bits = 0;
  for (int k = 0; k < 5; ++k) {
    const int64_t other = __shfl_down_sync(kFullMask, key, 1 << k);
    if (lane + (1u << k) < 32 && other == key) bits |= 1u << k;
  }
  return bits;
}

__device__ inline bool segment_head(int64_t key, unsigned lane) {
  const int64_t prev = __shfl_up_sync(kFullMask, key, 1);
  return lane == 0 || prev != key;
}

template <typename acc_t>
struct BwdOut {
  global_ptr<acc_t> dx, ddt[2], dA[2], dB[2], dC[2], dgamma;
};

template <typename T, typename SelT>
__global__ void __launch_bounds__(kLanes * kMaxSegments, 2)  // two blocks an SM: 128 registers (174 unbounded)
    bwd_kernel(Shape s, QsMixTensors tensors, bool softplus_dt, bool hydra_shift, global_ptr<const T> grad,
               int64_t g_s0, int64_t g_s1, int64_t g_s2, int64_t g_s3, int64_t columns,
               global_ptr<typename Acc<T>::type> ckpt, global_ptr<typename Acc<T>::type> chunk_states,
               BwdOut<typename Acc<T>::type> out) {
  using acc_t = typename Acc<T>::type;
  constexpr int kG = kGroup<acc_t>;
  SSM_DYNAMIC_SHARED(acc_t, pairs);
  const auto deltas = own_delta_cells<kG>(pairs);
  const Place q(s);
  const unsigned lane = threadIdx.x;
  const unsigned same_head = same_key_bits(q.h, lane), same_group = same_key_bits(q.g, lane);
  const bool head_lead = segment_head(q.h, lane), group_lead = segment_head(q.g, lane);
  // The warp's columns all read one group's B and C (vim2's channel mixer, one head and group): dB and dC then
  // reduce together, half a warp each (see pair_sum).
  const bool one_group = __all_sync(kFullMask, q.g == __shfl_sync(kFullMask, q.g, 0));
  const global_ptr<const T> x = global_ptr<const T>(static_cast<const T*>(tensors.x)) + q.b * tensors.x_s[0] +
                                q.h * tensors.x_s[2] + q.p * tensors.x_s[3];
  const global_ptr<const T> gy = grad + q.b * g_s0 + q.h * g_s2 + q.p * g_s3;
  const global_ptr<const acc_t> gamma = global_ptr<const acc_t>(static_cast<const acc_t*>(tensors.gamma)) +
                                        q.b * tensors.gamma_s[0] + q.h * tensors.gamma_s[2];
  auto grad_at = [&](int64_t t) { return q.active ? to_acc(gy[t * g_s1]) : acc_t(0); };
  const global_ptr<acc_t> dx = out.dx + q.b * s.L * s.H * s.P + q.hp;  // contiguous (batch, L, H, P)
  const int64_t chunk = blockDim.y * kSteps, n_chunks = (s.L + chunk - 1) / chunk;

  for (int dir = 0; dir < 2; ++dir) {
    const Direction<acc_t, SelT> dr{ColumnDirection<acc_t, SelT>(tensors.dir[dir], q.b, q.h, q.g), dir, s.L,
                                    softplus_dt};
    const QsMixDirection& raw = tensors.dir[dir];
    // This direction's gradient outputs, picked with constant indices: indexing the parameter arrays with `dir`
    // copied them to local memory, and atomics through pointers loaded from there compiled to generic atomics
    // that test the address space at run time (ptxas sm_90: 200-byte stack, 60 LDL.64, 50 generic ATOMs).
    const global_ptr<acc_t> dB_out = dir ? out.dB[1] : out.dB[0], dC_out = dir ? out.dC[1] : out.dC[0];
    const global_ptr<acc_t> ddt_out = dir ? out.ddt[1] : out.ddt[0], dA_out = dir ? out.dA[1] : out.dA[0];
    for (int64_t n0 = 0; n0 < s.N; n0 += kG) {
      const int nn = s.N - n0 < kG ? static_cast<int>(s.N - n0) : kG;
      auto ckpt_at = [&](int64_t c, int n) { return (c * s.N + n0 + n) * columns + q.col; };
      acc_t carry[kG], prod[kG], h[kG], dA_acc[kG];
      // Pre-pass: the state entering each chunk (the last chunk's exit state is never read: not scanned).
      QS_FOR_STATE(n) carry[n] = acc_t(0);
      for (int64_t c = 0; c < n_chunks; ++c) {
        if (threadIdx.y == 0) {
          QS_FOR_STATE(n) ckpt[ckpt_at(c, n)] = carry[n];
        }
        if (c == n_chunks - 1) break;  // uniform over the block: the block scan's barriers stay matched
        const int64_t i0 = c * chunk + threadIdx.y * kSteps;
        fill_deltas(dr, i0, deltas);
        local_scan(dr, x, tensors.x_s[1], i0, deltas, n0, nn, prod, h);
        block_compose<false>(pairs, nn, prod, h, carry);
      }
      __syncthreads();  // the last checkpoint (no block scan after it) is read by every segment below
      // Chunks from last to first; lam_carry is the adjoint of the state leaving the chunk.
      acc_t lam_carry[kG];
      QS_FOR_STATE(n) lam_carry[n] = acc_t(0), dA_acc[n] = acc_t(0);
      for (int64_t c = n_chunks - 1; c >= 0; --c) {
        const int64_t c0 = c * chunk, i0 = c0 + threadIdx.y * kSteps;
        auto state_at = [&](int64_t i, int n) { return ((i - c0) * s.N + n0 + n) * columns + q.col; };
        QS_FOR_STATE(n) carry[n] = ckpt[ckpt_at(c, n)];
        fill_deltas(dr, i0, deltas);
        local_scan(dr, x, tensors.x_s[1], i0, deltas, n0, nn, prod, h);
        block_compose<false>(pairs, nn, prod, h, carry);
#pragma unroll 1
        for (int64_t i = i0; i < i0 + kSteps && i < s.L; ++i) {  // the state before each step, for the adjoint
          const int64_t t = dr.t_of(i);
          const acc_t delta = deltas[(i - i0) * kLanes], xv = to_acc(x[t * tensors.x_s[1]]);
          const global_ptr<const SelT> Bt = dr.d.B_row(t) + n0;
          global_ptr<acc_t> saved = chunk_states + state_at(i, 0);  // the step's states, `columns` apart
          dr.with_decay(dr.decays(delta), [&](auto decay) {
            QS_FOR_STATE(n) {
              *saved = h[n];  // read back by this thread only
              saved += columns;
              h[n] = decay(n0 + n) * h[n] + delta * to_acc(Bt[n]) * xv;
            }
          });
        }
        // The adjoint lam_{i-1} = a_i (lam_i + C_t g), g = g_t (or g_{next}, hydra): the reverse block scan.
        QS_FOR_STATE(n) prod[n] = acc_t(1), h[n] = acc_t(0);
        const int64_t i_last = (i0 + kSteps < s.L ? i0 + kSteps : s.L) - 1;
#pragma unroll 1
        for (int64_t i = i_last; i >= i0; --i) {
          const int64_t t = dr.t_of(i);
          const acc_t gc = hydra_shift ? (i + 1 < s.L ? grad_at(dr.t_of(i + 1)) : acc_t(0)) : grad_at(t);
          const global_ptr<const SelT> Ct = dr.d.C_row(t) + n0;
          dr.with_decay(dr.decays(deltas[(i - i0) * kLanes]), [&](auto decay) {
            QS_FOR_STATE(n) {
              const acc_t a = decay(n0 + n);
              h[n] = a * (h[n] + to_acc(Ct[n]) * gc);
              prod[n] *= a;
            }
          });
        }
        block_compose<true>(pairs, nn, prod, h, lam_carry);  // h: the adjoint of the state after the last own step
#pragma unroll 1
        for (int64_t i = i_last; i >= i0; --i) {  // bounds uniform over the warp: the shuffles below stay full
          const int64_t t = dr.t_of(i);
          const acc_t dl = deltas[(i - i0) * kLanes], xk = to_acc(x[t * tensors.x_s[1]]);
          const acc_t gv = grad_at(t);
          const acc_t g_next = hydra_shift && i + 1 < s.L ? grad_at(dr.t_of(i + 1)) : acc_t(0);
          const int64_t bc = ((q.b * s.L + t) * s.G + q.g) * s.N + n0;
          const auto decays = dr.decays(dl);
          const global_ptr<const SelT> Bt = dr.d.B_row(t) + n0, Ct = dr.d.C_row(t) + n0;
          global_ptr<const acc_t> saved = chunk_states + state_at(i, 0);
          acc_t ddelta = 0, dx_t = 0;
          QS_FOR_STATE(n) {
            const acc_t a = dr.decay(decays, n0 + n), Bn = to_acc(Bt[n]), Cn = to_acc(Ct[n]);
            const acc_t hp = *saved;
            saved += columns;
            acc_t dCn, mu;
            if (hydra_shift) {  // y_next = C_t · h_t
              dCn = g_next * (a * hp + dl * Bn * xk);
              h[n] += Cn * g_next;
              mu = h[n];
            } else {  // y_t = C_t · (Ā_t h_{t-1}): the decayed state's adjoint is mu = lam + C_t g_t
              dCn = gv * a * hp;
              mu = h[n] + Cn * gv;
            }
            const acc_t lam_x = h[n] * xk;
            dx_t += dl * Bn * h[n];
            const acc_t d_logdecay = mu * hp * a;  // d/d(Δ A_n)
            ddelta += Bn * lam_x + d_logdecay * dr.d.Av(n0 + n);
            dA_acc[n] += d_logdecay * dl;
            h[n] = a * mu;
            if (one_group) {
              const acc_t sum = pair_sum(dl * lam_x, dCn, lane);  // lane 0: dB's sum, lane 16: dC's
              if (lane % 16 == 0) atomicAdd((lane ? dC_out : dB_out) + bc + n, sum);
            } else {
              const acc_t dB_sum = segment_sum(dl * lam_x, same_group), dC_sum = segment_sum(dCn, same_group);
              if (group_lead) {
                atomicAdd(dB_out + bc + n, dB_sum);
                atomicAdd(dC_out + bc + n, dC_sum);
              }
            }
          }
          const acc_t ddt_sum = segment_sum(softplus_dt ? ddelta * softplus_slope(dl) : ddelta, same_head);
          if (head_lead) atomicAdd(ddt_out + (q.b * s.L + t) * s.H + q.h, ddt_sum);
          if (dir == 0 && n0 == 0) {
            const acc_t dgamma_sum = segment_sum(gv * xk, same_head);
            if (head_lead) atomicAdd(out.dgamma + (q.b * s.L + t) * s.H + q.h, dgamma_sum);
            if (q.active) dx[t * s.H * s.P] = dx_t + gamma[t * tensors.gamma_s[1]] * gv;
          } else if (q.active) {
            dx[t * s.H * s.P] += dx_t;
          }
        }
      }
      // dA per head: the warp's segment sums, then the warps' (all hold the same columns) summed in shared
      // memory, one atomic per (block, head, state); scalar A sums its states first.
      QS_FOR_STATE(n) pairs[(threadIdx.y * kG + n) * kLanes + lane] = segment_sum(dA_acc[n], same_head);
      __syncthreads();
      if (threadIdx.y == 0 && head_lead) {
        acc_t scalar_sum = 0;
        QS_FOR_STATE(n) {
          acc_t sum = 0;
          for (unsigned sg = 0; sg < blockDim.y; ++sg) sum += pairs[(sg * kG + n) * kLanes + lane];
          if (dr.d.a_step) {
            atomicAdd(dA_out + q.h * raw.A_cols + n0 + n, sum);
          } else {
            scalar_sum += sum;
          }
        }
        if (!dr.d.a_step) atomicAdd(dA_out + q.h * raw.A_cols, scalar_sum);
      }
      __syncthreads();
    }
  }
}

template <typename T>
std::size_t shared_bytes(int64_t segments) {
  using acc_t = typename Acc<T>::type;
  return static_cast<std::size_t>(segments) * (2 * kGroup<acc_t> + kSteps) * kLanes * sizeof(acc_t);  // pairs, deltas
}

template <typename T, typename SelT>
void launch_fwd(const Shape& s, const QsMixTensors& t, bool softplus_dt, bool hydra_shift, void* y,
                const int64_t* y_s, cudaStream_t stream) {
  using acc_t = typename Acc<T>::type;
  const int64_t segments = segments_of(s.L);
  const int64_t blocks = s.batch * ((s.H * s.P + kLanes - 1) / kLanes);
  launch_kernel(fwd_kernel<T, SelT>, static_cast<unsigned>(blocks), dim3(kLanes, static_cast<unsigned>(segments)),
                shared_bytes<T>(segments), stream, s, t, softplus_dt, hydra_shift, static_cast<acc_t*>(y), y_s[0],
                y_s[1], y_s[2], y_s[3]);
}

template <typename T, typename SelT>
void launch_bwd(const Shape& s, const QsMixTensors& t, bool softplus_dt, bool hydra_shift, const void* grad,
                const int64_t* g_s, int64_t chunk, void* ckpt, void* chunk_states, void* dx, void* const* ddt,
                void* const* dA, void* const* dB, void* const* dC, void* dgamma, cudaStream_t stream) {
  using acc_t = typename Acc<T>::type;
  if (chunk != qs_mix_bwd_chunk(s.L)) throw std::invalid_argument("ssm_plugins: qs_mix_bwd: chunk must be qs_mix_bwd_chunk(L)");
  const int64_t segments = chunk / kSteps, columns = qs_mix_bwd_columns(s.batch, s.H, s.P);
  BwdOut<acc_t> out{static_cast<acc_t*>(dx), {}, {}, {}, {}, static_cast<acc_t*>(dgamma)};
  for (int dir = 0; dir < 2; ++dir) {
    out.ddt[dir] = static_cast<acc_t*>(ddt[dir]);
    out.dA[dir] = static_cast<acc_t*>(dA[dir]);
    out.dB[dir] = static_cast<acc_t*>(dB[dir]);
    out.dC[dir] = static_cast<acc_t*>(dC[dir]);
  }
  const dim3 block(kLanes, static_cast<unsigned>(segments));
  launch_kernel(bwd_kernel<T, SelT>, static_cast<unsigned>(columns / kLanes), block, shared_bytes<T>(segments), stream,
                s, t, softplus_dt, hydra_shift, static_cast<const T*>(grad), g_s[0], g_s[1], g_s[2], g_s[3], columns,
                static_cast<acc_t*>(ckpt), static_cast<acc_t*>(chunk_states), out);
}

}  // namespace

int64_t qs_mix_bwd_chunk(int64_t L) { return segments_of(L) * kSteps; }

int64_t qs_mix_bwd_columns(int64_t batch, int64_t H, int64_t P) {
  return batch * ((H * P + kLanes - 1) / kLanes * kLanes);
}

namespace {
void check_state_strides(const QsMixTensors& t, int64_t N) {
  for (const QsMixDirection& d : t.dir) {
    if (N > 1 && (d.B_s[3] != 1 || d.C_s[3] != 1)) {
      throw std::invalid_argument("ssm_plugins: qs_mix CUDA kernels need B and C with unit stride along N");
    }
  }
}
}  // namespace

void qs_mix_fwd_launch(int dtype, bool params_in_input_dtype, int64_t batch, int64_t L, int64_t H, int64_t P,
                       int64_t N, int64_t G, const QsMixTensors& t, bool dt_softplus, bool hydra_shift, void* y_acc,
                       const int64_t* y_s, cudaStream_t stream) {
  if (batch * H * P == 0 || L == 0) return;
  check_state_strides(t, N);
  const Shape s{batch, L, H, P, N, G};
  with_input_types(dtype, params_in_input_dtype, "qs_mix", [&](auto x_type, auto param_type) {
    launch_fwd<decltype(x_type), decltype(param_type)>(s, t, dt_softplus, hydra_shift, y_acc, y_s, stream);
  });
  check_launch("qs_mix_fwd");
}

void qs_mix_bwd_launch(int dtype, bool params_in_input_dtype, int64_t batch, int64_t L, int64_t H, int64_t P,
                       int64_t N, int64_t G, const QsMixTensors& t, bool dt_softplus, bool hydra_shift,
                       const void* grad_y, const int64_t* grad_s, int64_t chunk, void* ckpt, void* chunk_states,
                       void* dx_acc, void* const* ddt, void* const* dA, void* const* dB, void* const* dC,
                       void* dgamma, cudaStream_t stream) {
  if (batch * H * P == 0 || L == 0) return;
  check_state_strides(t, N);
  const Shape s{batch, L, H, P, N, G};
  with_input_types(dtype, params_in_input_dtype, "qs_mix", [&](auto x_type, auto param_type) {
    launch_bwd<decltype(x_type), decltype(param_type)>(s, t, dt_softplus, hydra_shift, grad_y, grad_s, chunk, ckpt,
                                                       chunk_states, dx_acc, ddt, dA, dB, dC, dgamma, stream);
  });
  check_launch("qs_mix_bwd");
}

}  // namespace cuda
}  // namespace ssm_plugins
