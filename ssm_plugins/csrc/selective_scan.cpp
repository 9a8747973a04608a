// Selective scan (S6, Mamba-1): op schemas, C++ CPU kernels (forward and backward), CUDA glue.
//
// Contract of the raw ops (ssm_plugins/ops/selective_scan.py normalises user input to it):
//   u, delta, z   (batch, dim, L)         float32 / float64 / float16 / bfloat16, one dtype
//   A             (dim, N)                accumulation dtype (float64 for float64 input, else float32)
//   B, C          (batch, groups, N, L)   accumulation dtype; dim % groups == 0
//   D, delta_bias (dim,)                  accumulation dtype
//   out           (batch, dim, L)         dtype of u;  last_state (batch, dim, N) accumulation dtype
// h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t ;  y_t = C_t . h_t + D u_t ;  out = y * silu(z)
// with dt_t = delta_t + delta_bias, passed through softplus when delta_softplus.
//
// selective_scan_bwd takes the forward's inputs plus grad_out (batch, dim, L) and an optional
// grad_last_state (batch, dim, N) and returns the gradients of u, delta, A, B, C, D, z, delta_bias
// (the last three None when the input was absent), each in its input's dtype.
//
// CPU design. Each (batch, channel) row is sequential in L and independent of the others, so rows are
// handed out to threads dynamically (a busy machine may deschedule one). Per row, the inputs are first
// converted to the accumulation type in thread-local buffers; the core then works on SIMD vectors
// spanning the state axis N (GCC vector extensions, compiled for AVX-512, AVX2 and baseline x86-64 and
// picked at run time), with B and C transposed to (L, N) and N padded to a whole number of vectors
// (the padding lanes have A = B = C = 0, so their state stays 0). Sums over N are reduced W steps at a
// time. float uses a polynomial exp/log1p that vectorises; double (the gradcheck precision) calls libm.
// The backward re-runs the forward recurrence of a row, keeping (exp(dt A), h) of every step, or for a
// long row a checkpoint every 64 steps and one recomputed chunk at a time, then runs the reverse
// recurrence. Gradients shared across rows are summed without races: A, D and delta_bias per
// (batch, channel), then over batch; B and C per task (batch, group, chunk of its channels) in a
// thread-local buffer, added to the (batch, group) sum under that sum's lock.
#include "common.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/selective_scan.h"
#endif

#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__GNUC__) && !defined(__clang__)
#define SSM_INLINE inline __attribute__((always_inline))
#else
#define SSM_INLINE inline
#endif

namespace ssm_plugins {
namespace {

// ---- SIMD helpers (64-byte vectors; GCC lowers them to zmm, 2 ymm or 4 xmm per the target) ----------

typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef double f64x8 __attribute__((vector_size(64)));
typedef int64_t i64x8 __attribute__((vector_size(64)));

template <typename V>
struct LaneIndex;  // the integer vector that indexes V's lanes (for __builtin_shuffle)
template <>
struct LaneIndex<f32x16> {
  using type = i32x16;
};
template <>
struct LaneIndex<f64x8> {
  using type = i64x8;
};

// Transposed reduction of W vectors: lane i of the result is the sum of the lanes of vector i. Each
// level adds pairs of vectors whose lanes hold per-source partial sums in groups of G lanes, halving G.
constexpr int tree_lo(int W, int G, int i) {
  return (i < W / 2 ? 0 : W) + ((i % (W / 2)) / (G / 2)) * G + (i % (W / 2)) % (G / 2);
}

template <typename V, int W, int G, size_t... I>
SSM_INLINE V tree_combine(V x, V y, std::index_sequence<I...>) {
#if defined(__clang__) || __GNUC__ >= 12
  return __builtin_shufflevector(x, y, tree_lo(W, G, I)...) + __builtin_shufflevector(x, y, (tree_lo(W, G, I) + G / 2)...);
#else  // GCC 11 and older: no __builtin_shufflevector
  using IV = typename LaneIndex<V>::type;
  return __builtin_shuffle(x, y, IV{tree_lo(W, G, I)...}) + __builtin_shuffle(x, y, IV{(tree_lo(W, G, I) + G / 2)...});
#endif
}

template <typename V, int W, int G>
struct TreeSum {  // v holds G vectors with groups of G lanes
  static SSM_INLINE V run(V* v) {
    for (int i = 0; i < G / 2; ++i) v[i] = tree_combine<V, W, G>(v[2 * i], v[2 * i + 1], std::make_index_sequence<W>{});
    return TreeSum<V, W, G / 2>::run(v);
  }
};
template <typename V, int W>
struct TreeSum<V, W, 1> {
  static SSM_INLINE V run(V* v) { return v[0]; }
};

template <typename T>
struct Simd;

template <>
struct Simd<float> {
  using V = f32x16;
  static constexpr int W = 16;
  static SSM_INLINE V splat(float s) { return V{} + s; }
  static SSM_INLINE V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  static SSM_INLINE void store(float* p, V v) { std::memcpy(p, &v, sizeof(V)); }
  static SSM_INLINE float hsum(V v) {  // (epilogues only)
    float sum = 0;
    for (int i = 0; i < W; ++i) sum += v[i];
    return sum;
  }
  // exp: Cody-Waite reduction to r in [-ln2/2, ln2/2] and the degree-6 Taylor polynomial (relative
  // error < 2e-7). The argument is clamped to [-87.3, 88]: below, the result is ~1.2e-38 instead of 0;
  // above, exp(88). NaN propagates.
  static SSM_INLINE V exp(V x) {
    const V lo = splat(-87.33654f), hi = splat(88.0f);
    V xc = x > lo ? x : lo;
    xc = xc < hi ? xc : hi;
    const V magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    const V k = (xc * 1.44269504088896341f + magic) - magic;
    V r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    V p = splat(1.0f / 720);
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const i32x16 bits = (__builtin_convertvector(k, i32x16) + 127) << 23;
    return p * (V)bits;  // a vector cast reinterprets the bits: 2^k
  }
  // log1p(y) for y in [0, 1]: 2 atanh(s), s = y / (2 + y) <= 1/3, series to s^13 (error < 1e-8).
  static SSM_INLINE V log1p_unit(V y) {
    V s = y / (y + 2.0f);
    V s2 = s * s;
    V p = splat(1.0f / 13);
    p = p * s2 + 1.0f / 11;
    p = p * s2 + 1.0f / 9;
    p = p * s2 + 1.0f / 7;
    p = p * s2 + 1.0f / 5;
    p = p * s2 + 1.0f / 3;
    p = p * s2 + 1.0f;
    return 2.0f * s * p;
  }
  // torch's softplus (beta 1, threshold 20): x above 20, else log1p(exp(x)) = max(x,0) + log1p(exp(-|x|))
  static SSM_INLINE V softplus(V x) {
    V ax = x < 0.0f ? -x : x;
    V pos = x > 0.0f ? x : V{};
    V sp = pos + log1p_unit(exp(-ax));
    return x > 20.0f ? x : sp;
  }
  static SSM_INLINE V sigmoid(V x) { return 1.0f / (1.0f + exp(-x)); }
};

template <>
struct Simd<double> {
  using V = f64x8;
  static constexpr int W = 8;
  static SSM_INLINE V splat(double s) { return V{} + s; }
  static SSM_INLINE V load(const double* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  static SSM_INLINE void store(double* p, V v) { std::memcpy(p, &v, sizeof(V)); }
  static SSM_INLINE double hsum(V v) {
    double sum = 0;
    for (int i = 0; i < W; ++i) sum += v[i];
    return sum;
  }
  // float64 is the checking precision (gradcheck): libm per lane.
  static SSM_INLINE V exp(V x) {
    for (int i = 0; i < W; ++i) x[i] = std::exp(x[i]);
    return x;
  }
  static SSM_INLINE V softplus(V x) {
    for (int i = 0; i < W; ++i) x[i] = ssm_plugins::softplus(x[i]);
    return x;
  }
  static SSM_INLINE V sigmoid(V x) {
    for (int i = 0; i < W; ++i) x[i] = 1.0 / (1.0 + std::exp(-x[i]));
    return x;
  }
};

// W consecutive vectors at p (W*W values) -> vector of their lane sums.
template <typename acc_t>
SSM_INLINE typename Simd<acc_t>::V block_sums(const acc_t* p) {
  using S = Simd<acc_t>;
  typename S::V v[S::W];
  for (int i = 0; i < S::W; ++i) v[i] = S::load(p + i * S::W);
  return TreeSum<typename S::V, S::W, S::W>::run(v);
}

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Zeroed thread-local buffer whose data() is 64-byte aligned (the vectors' alignment).
template <typename T>
class AlignedBuffer {
 public:
  explicit AlignedBuffer(int64_t n) : store_(static_cast<size_t>(n) + 64 / sizeof(T), T(0)) {}
  T* data() {
    const auto addr = reinterpret_cast<uintptr_t>(store_.data());
    return reinterpret_cast<T*>((addr + 63) & ~uintptr_t(63));
  }
  template <typename V>
  V* as() {
    return reinterpret_cast<V*>(data());
  }

 private:
  std::vector<T> store_;
};

// ---- per-row cores -------------------------------------------------------------------------------
// All row buffers hold Lpad = round_up(L, W) entries, the padding zeroed. B/C rows are (L, nv*W),
// A and the state are nv*W wide. NV > 0 fixes the vector count at compile time (registers).
// Sums over the state axis are not reduced per step: each step stores its vector of partial sums in
// a ring of W vectors (`ring`, W*W entries), reduced W steps at a time (block_sums).
// The backward walks a row back in time with the states (exp(dt A), h) of every step at hand. A short
// row keeps them all from the forward pass; a long one keeps the state every `chunk` steps and
// recomputes one chunk at a time (one more exp per step, but a working set that stays in cache).

constexpr int64_t kChunk = 64;             // a multiple of both vector widths
constexpr int64_t kKeepAllBytes = 512 << 10;  // states of a row up to this size are all kept

template <typename acc_t>
int64_t bwd_chunk(int64_t L, int64_t Npad) {
  return L * 2 * Npad * int64_t(sizeof(acc_t)) <= kKeepAllBytes ? std::max<int64_t>(L, 1) : kChunk;
}

template <typename acc_t>
struct RowParams {
  int64_t L, nv, chunk;  // chunk: the backward's checkpoint spacing (bwd_chunk)
  bool softplus_dt;
  acc_t bias, skip;
  const acc_t* A;   // (nv*W)
  const acc_t* BT;  // (L, nv*W)
  const acc_t* CT;
};

// In: x (u), dt (delta, raw), z (or null). Out: y = out before the cast, hlast (nv*W), dt (dt).
template <typename acc_t, int NV>
SSM_INLINE void fwd_core(const RowParams<acc_t>& p, const acc_t* x, acc_t* dt, const acc_t* z, acc_t* y,
                         acc_t* hlast, acc_t* ring, typename Simd<acc_t>::V* scratch) {
  using S = Simd<acc_t>;
  using V = typename S::V;
  constexpr int W = S::W;
  const int64_t nv = NV ? NV : p.nv, L = p.L, Lpad = round_up(L, W), stride = nv * W;
  for (int64_t t = 0; t < Lpad; t += W) {
    V v = S::load(dt + t) + p.bias;
    S::store(dt + t, p.softplus_dt ? S::softplus(v) : v);
  }
  V h_local[NV ? 2 * NV : 1];
  V* h = NV ? h_local : scratch;
  V* Av = h + nv;
  for (int64_t j = 0; j < nv; ++j) {
    h[j] = V{};
    Av[j] = S::load(p.A + j * W);
  }
  for (int64_t tb = 0; tb < L; tb += W) {
    const int64_t te = std::min<int64_t>(tb + W, L);
    if (te - tb < W) std::fill(ring, ring + W * W, acc_t(0));
    for (int64_t t = tb; t < te; ++t) {
      const acc_t d = dt[t], dx = d * x[t];
      const acc_t* Bt = p.BT + t * stride;
      const acc_t* Ct = p.CT + t * stride;
      V acc{};
      for (int64_t j = 0; j < nv; ++j) {
        h[j] = S::exp(Av[j] * d) * h[j] + dx * S::load(Bt + j * W);
        acc += S::load(Ct + j * W) * h[j];
      }
      S::store(ring + (t - tb) * W, acc);
    }
    V v = block_sums(ring) + p.skip * S::load(x + tb);
    if (z) {
      const V zv = S::load(z + tb);
      v = v * zv * S::sigmoid(zv);
    }
    S::store(y + tb, v);
  }
  for (int64_t j = 0; j < nv; ++j) S::store(hlast + j * W, h[j]);
}

// In: x (u), dt (delta, raw), z (or null), g (grad_out), glast (nv*W or null).
// Out: gx (grad u), g (grad delta), gz (grad z), gA (nv*W), *gD, *gbias. Accumulates into dB, dC
// ((L, nv*W)). Scratch: gy, dsp (Lpad each), ring1, ring2 (W*W each), states (chunk*2*nv*W),
// ckpt (ceil(L/chunk)*nv*W).
template <typename acc_t, int NV>
SSM_INLINE void bwd_core(const RowParams<acc_t>& p, const acc_t* x, acc_t* dt, const acc_t* z, acc_t* g,
                         const acc_t* glast, acc_t* gx, acc_t* gz, acc_t* gA, acc_t* gD, acc_t* gbias,
                         acc_t* dB, acc_t* dC, acc_t* gy, acc_t* dsp, acc_t* ring1, acc_t* ring2,
                         acc_t* states, acc_t* ckpt, typename Simd<acc_t>::V* scratch) {
  using S = Simd<acc_t>;
  using V = typename S::V;
  constexpr int W = S::W;
  const int64_t nv = NV ? NV : p.nv, L = p.L, Lpad = round_up(L, W), stride = nv * W;
  // dt and d(dt)/d(delta); gy = grad of the pre-gate output; the gz factor (kept in gz).
  for (int64_t t = 0; t < Lpad; t += W) {
    const V raw = S::load(dt + t) + p.bias;
    if (p.softplus_dt) {
      S::store(dt + t, S::softplus(raw));
      const V sg = S::sigmoid(raw);
      S::store(dsp + t, raw > acc_t(20) ? S::splat(1) : sg);
    } else {
      S::store(dt + t, raw);
    }
    const V gv = S::load(g + t);
    if (z) {
      const V zv = S::load(z + t), sz = S::sigmoid(zv);
      S::store(gy + t, gv * zv * sz);
      S::store(gz + t, gv * sz * (acc_t(1) + zv * (acc_t(1) - sz)));
    } else {
      S::store(gy + t, gv);
    }
  }

  V local[NV ? 4 * NV : 1];
  V* h = NV ? local : scratch;
  V* Av = h + nv;
  V* gh = h + 2 * nv;
  V* gAv = h + 3 * nv;
  for (int64_t j = 0; j < nv; ++j) {
    h[j] = V{};
    Av[j] = S::load(p.A + j * W);
  }
  // Pass 1, forward: checkpoints (or, for a short row, all the states), grad C, and y (before the
  // gate) for grad z.
  const int64_t chunk = p.chunk;
  const bool keep_all = chunk >= L;
  for (int64_t tb = 0; tb < L; tb += W) {
    const int64_t te = std::min<int64_t>(tb + W, L);
    if (tb % chunk == 0) {
      for (int64_t j = 0; j < nv; ++j) S::store(ckpt + (tb / chunk) * stride + j * W, h[j]);
    }
    if (z && te - tb < W) std::fill(ring1, ring1 + W * W, acc_t(0));
    for (int64_t t = tb; t < te; ++t) {
      const acc_t d = dt[t], dx = d * x[t], gyt = gy[t];
      const acc_t* Bt = p.BT + t * stride;
      const acc_t* Ct = p.CT + t * stride;
      acc_t* dCt = dC + t * stride;
      acc_t* st = states + t * 2 * stride;
      V acc{};
      for (int64_t j = 0; j < nv; ++j) {
        const V a = S::exp(Av[j] * d);
        h[j] = a * h[j] + dx * S::load(Bt + j * W);
        if (keep_all) {
          S::store(st + j * W, a);
          S::store(st + stride + j * W, h[j]);
        }
        S::store(dCt + j * W, S::load(dCt + j * W) + gyt * h[j]);
        if (z) acc += S::load(Ct + j * W) * h[j];
      }
      if (z) S::store(ring1 + (t - tb) * W, acc);
    }
    if (z) S::store(gz + tb, S::load(gz + tb) * (block_sums(ring1) + p.skip * S::load(x + tb)));
  }
  // Pass 2, reverse, one chunk at a time: gh = dLoss/dh_t, from the future and from y_t.
  for (int64_t j = 0; j < nv; ++j) {
    gh[j] = glast ? S::load(glast + j * W) : V{};
    gAv[j] = V{};
  }
  V sum_gdelta{}, sum_gD{};
  const int64_t n_chunks = (L + chunk - 1) / chunk;
  for (int64_t c = n_chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * chunk, t1 = std::min<int64_t>(t0 + chunk, L);
    const acc_t* h0 = ckpt + c * stride;
    for (int64_t j = 0; j < nv; ++j) h[j] = S::load(h0 + j * W);
    for (int64_t t = t0; t < (keep_all ? t0 : t1); ++t) {  // states of the chunk: (exp(dt_t A), h_t)
      const acc_t d = dt[t], dx = d * x[t];
      const acc_t* Bt = p.BT + t * stride;
      acc_t* st = states + (t - t0) * 2 * stride;
      for (int64_t j = 0; j < nv; ++j) {
        const V a = S::exp(Av[j] * d);
        h[j] = a * h[j] + dx * S::load(Bt + j * W);
        S::store(st + j * W, a);
        S::store(st + stride + j * W, h[j]);
      }
    }
    for (int64_t tb = round_up(t1, W) - W; tb >= t0; tb -= W) {
      const int64_t te = std::min<int64_t>(tb + W, t1);
      if (te - tb < W) {
        std::fill(ring1, ring1 + W * W, acc_t(0));
        std::fill(ring2, ring2 + W * W, acc_t(0));
      }
      for (int64_t t = te - 1; t >= tb; --t) {
        const acc_t* Bt = p.BT + t * stride;
        const acc_t* Ct = p.CT + t * stride;
        const acc_t* st = states + (t - t0) * 2 * stride;
        const acc_t* hprev = t > t0 ? st - stride : h0;
        acc_t* dBt = dB + t * stride;
        const acc_t d = dt[t], dx = d * x[t], gyt = gy[t];
        V s1{}, s2{};
        for (int64_t j = 0; j < nv; ++j) {
          const V a = S::load(st + j * W);
          const V gj = gh[j] + gyt * S::load(Ct + j * W);
          const V w = gj * a * S::load(hprev + j * W);  // grad of (dt A), over A
          gAv[j] += w * d;
          s2 += w * Av[j];
          s1 += gj * S::load(Bt + j * W);
          S::store(dBt + j * W, S::load(dBt + j * W) + gj * dx);
          gh[j] = gj * a;
        }
        S::store(ring1 + (t - tb) * W, s1);
        S::store(ring2 + (t - tb) * W, s2);
      }
      // grad u and delta for these W steps (padded steps: zero rings, gy = 0).
      const V sb = block_sums(ring1), xv = S::load(x + tb), gyv = S::load(gy + tb);
      S::store(gx + tb, sb * S::load(dt + tb) + gyv * p.skip);
      V gd = sb * xv + block_sums(ring2);
      if (p.softplus_dt) gd = gd * S::load(dsp + tb);
      S::store(g + tb, gd);
      sum_gdelta += gd;
      sum_gD += gyv * xv;
    }
  }
  for (int64_t j = 0; j < nv; ++j) S::store(gA + j * W, gAv[j]);
  *gbias = S::hsum(sum_gdelta);
  *gD = S::hsum(sum_gD);
}

// ---- ISA variants of the cores, picked at run time -------------------------------------------------

template <typename acc_t>
struct FwdRow {
  RowParams<acc_t> p;
  const acc_t* x;
  acc_t* dt;
  const acc_t* z;
  acc_t* y;
  acc_t* hlast;
  acc_t* ring;
  typename Simd<acc_t>::V* scratch;
};

template <typename acc_t>
struct BwdRow {
  RowParams<acc_t> p;
  const acc_t *x, *z, *glast;
  acc_t *dt, *g, *gx, *gz, *gA, *gD, *gbias, *dB, *dC, *gy, *dsp, *ring1, *ring2, *states, *ckpt;
  typename Simd<acc_t>::V* scratch;
};

template <typename acc_t>
using FwdFn = void (*)(const FwdRow<acc_t>&);
template <typename acc_t>
using BwdFn = void (*)(const BwdRow<acc_t>&);

#define SSM_SCAN_VARIANT(NAME, ATTR)                                                                   \
  template <typename acc_t, int NV>                                                                    \
  ATTR void fwd_##NAME(const FwdRow<acc_t>& r) {                                                       \
    fwd_core<acc_t, NV>(r.p, r.x, r.dt, r.z, r.y, r.hlast, r.ring, r.scratch);                         \
  }                                                                                                    \
  template <typename acc_t, int NV>                                                                    \
  ATTR void bwd_##NAME(const BwdRow<acc_t>& r) {                                                       \
    bwd_core<acc_t, NV>(r.p, r.x, r.dt, r.z, r.g, r.glast, r.gx, r.gz, r.gA, r.gD, r.gbias, r.dB, r.dC, \
                        r.gy, r.dsp, r.ring1, r.ring2, r.states, r.ckpt, r.scratch);                   \
  }                                                                                                    \
  template <typename acc_t>                                                                            \
  std::pair<FwdFn<acc_t>, BwdFn<acc_t>> pick_##NAME(int64_t nv) {                                      \
    if (nv == 1) return {&fwd_##NAME<acc_t, 1>, &bwd_##NAME<acc_t, 1>};                                \
    if (nv == 2) return {&fwd_##NAME<acc_t, 2>, &bwd_##NAME<acc_t, 2>};                                \
    return {&fwd_##NAME<acc_t, 0>, &bwd_##NAME<acc_t, 0>};                                             \
  }

SSM_SCAN_VARIANT(generic, )
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SSM_X86_VARIANTS 1
SSM_SCAN_VARIANT(avx2, __attribute__((target("avx2,fma,bmi2"))))
SSM_SCAN_VARIANT(avx512, __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,bmi2"))))
#endif

// The widest instruction set this CPU has; SSM_PLUGINS_CPU_ISA=generic|avx2|avx512 narrows it (tests).
std::string cpu_isa() {
  static const std::string best = [] {
#ifdef SSM_X86_VARIANTS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
      return std::string("avx512");
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
      return std::string("avx2");
#endif
    return std::string("generic");
  }();
  const char* env = std::getenv("SSM_PLUGINS_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string want(env);
  SSM_CHECK(want == "generic" || want == "avx2" || want == "avx512",
            "SSM_PLUGINS_CPU_ISA must be generic, avx2 or avx512, got ", want);
  static const char* order[] = {"generic", "avx2", "avx512"};
  auto rank = [&](const std::string& v) { return std::find(order, order + 3, v) - order; };
  return rank(want) <= rank(best) ? want : best;
}

template <typename acc_t>
std::pair<FwdFn<acc_t>, BwdFn<acc_t>> pick_cores(int64_t nv) {
#ifdef SSM_X86_VARIANTS
  const std::string isa = cpu_isa();
  if (isa == "avx512") return pick_avx512<acc_t>(nv);
  if (isa == "avx2") return pick_avx2<acc_t>(nv);
#endif
  return pick_generic<acc_t>(nv);
}

// ---- drivers ---------------------------------------------------------------------------------------

struct ScanShape {
  int64_t batch, dim, L, N, groups;
};

ScanShape check_fwd(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                    const at::Tensor& C, const c10::optional<at::Tensor>& D, const c10::optional<at::Tensor>& z,
                    const c10::optional<at::Tensor>& delta_bias) {
  SSM_CHECK(u.dim() == 3, "selective_scan: u must be (batch, dim, L)");
  SSM_CHECK(A.dim() == 2 && A.size(0) == u.size(1), "selective_scan: A must be (dim, N)");
  SSM_CHECK(B.dim() == 4, "selective_scan: B must be (batch, groups, N, L)");
  ScanShape s{u.size(0), u.size(1), u.size(2), A.size(1), B.size(1)};
  SSM_CHECK(delta.sizes() == u.sizes() && delta.scalar_type() == u.scalar_type(),
            "selective_scan: delta must match u in shape and dtype");
  const auto acc = A.scalar_type();
  SSM_CHECK(acc == (u.scalar_type() == at::kDouble ? at::kDouble : at::kFloat),
            "selective_scan: A must be float64 for float64 input, else float32");
  for (const at::Tensor* t : {&B, &C}) {
    SSM_CHECK(t->dim() == 4 && t->size(0) == s.batch && t->size(1) == s.groups && t->size(2) == s.N &&
                  t->size(3) == s.L && t->scalar_type() == acc,
              "selective_scan: B and C must be (batch, groups, N, L) in A's dtype");
  }
  SSM_CHECK(s.groups > 0 && s.dim % s.groups == 0, "selective_scan: dim must be a multiple of groups");
  for (const auto* t : {&D, &delta_bias}) {
    if (t->has_value()) {
      SSM_CHECK((*t)->dim() == 1 && (*t)->size(0) == s.dim && (*t)->scalar_type() == acc,
                "selective_scan: D and delta_bias must be (dim,) in A's dtype");
    }
  }
  if (z.has_value()) {
    SSM_CHECK(z->sizes() == u.sizes() && z->scalar_type() == u.scalar_type(), "selective_scan: z must match u");
  }
  return s;
}

template <typename T>
T* opt_ptr(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

c10::optional<at::Tensor> opt_contiguous(const c10::optional<at::Tensor>& t) {
  if (t.has_value()) return t->contiguous();
  return c10::nullopt;
}

// The drivers below do their own copies and reductions (serial, small next to the scan) rather than
// calling ATen ops: every ATen op above its grain size opens a parallel region, and on a busy machine
// each region waits for a descheduled thread.

// Contiguous (rows, n) -> (rows, npad), zero padded.
template <typename acc_t>
void pad_rows(acc_t* dst, const acc_t* src, int64_t rows, int64_t n, int64_t npad) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * n, src + (r + 1) * n, dst + r * npad);
    std::fill(dst + r * npad + n, dst + (r + 1) * npad, acc_t(0));
  }
}

// Contiguous (mats, N, L) -> (mats, L, Npad), zero padded.
template <typename acc_t>
void transpose_pad(acc_t* dst, const acc_t* src, int64_t mats, int64_t N, int64_t L, int64_t Npad) {
  for (int64_t m = 0; m < mats; ++m) {
    const acc_t* sm = src + m * N * L;
    acc_t* dm = dst + m * L * Npad;
    for (int64_t t = 0; t < L; ++t) {
      for (int64_t n = 0; n < N; ++n) dm[t * Npad + n] = sm[n * L + t];
      std::fill(dm + t * Npad + N, dm + (t + 1) * Npad, acc_t(0));
    }
  }
}

// Row of a (.., L) tensor into an accumulation buffer of Lpad entries, padding zeroed.
template <typename scalar_t, typename acc_t>
inline void load_row(acc_t* dst, const scalar_t* src, int64_t L, int64_t Lpad) {
  for (int64_t t = 0; t < L; ++t) dst[t] = static_cast<acc_t>(src[t]);
  std::fill(dst + L, dst + Lpad, acc_t(0));
}

template <typename scalar_t, typename acc_t>
inline void store_row(scalar_t* dst, const acc_t* src, int64_t L) {
  for (int64_t t = 0; t < L; ++t) dst[t] = static_cast<scalar_t>(src[t]);
}

// Rows per grab: about 32k state updates.
int64_t row_grab(const ScanShape& s) { return std::max<int64_t>(1, 32768 / (s.L * std::max<int64_t>(s.N, 1) + 1)); }

// Threads for a call of `updates` state updates (batch * dim * L * N, times ~2.5 for the backward):
// each gets at least kMinUpdatesPerThread (about a millisecond of work).
constexpr int64_t kMinUpdatesPerThread = int64_t(2) << 20;

int64_t threads_for(int64_t updates) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), updates / kMinUpdatesPerThread));
}

// A, B and C in the cores' layout: A (dim, Npad), B and C (batch * groups, L, Npad).
template <typename acc_t>
struct Prepared {
  AlignedBuffer<acc_t> A, BT, CT;
  Prepared(const ScanShape& s, int64_t Npad, const at::Tensor& A_, const at::Tensor& B_, const at::Tensor& C_)
      : A(s.dim * Npad), BT(s.batch * s.groups * s.L * Npad), CT(s.batch * s.groups * s.L * Npad) {
    const at::Tensor Ac = A_.contiguous(), Bc = B_.contiguous(), Cc = C_.contiguous();
    pad_rows(A.data(), Ac.data_ptr<acc_t>(), s.dim, s.N, Npad);
    transpose_pad(BT.data(), Bc.data_ptr<acc_t>(), s.batch * s.groups, s.N, s.L, Npad);
    transpose_pad(CT.data(), Cc.data_ptr<acc_t>(), s.batch * s.groups, s.N, s.L, Npad);
  }
};

template <typename scalar_t>
void fwd_cpu_kernel(const ScanShape& s, const at::Tensor& u, const at::Tensor& delta,
                    const c10::optional<at::Tensor>& z, const at::Tensor& A, const at::Tensor& B,
                    const at::Tensor& C, const c10::optional<at::Tensor>& D,
                    const c10::optional<at::Tensor>& delta_bias, bool softplus_dt, at::Tensor& out,
                    at::Tensor& last_state) {
  using acc_t = at::opmath_type<scalar_t>;
  using S = Simd<acc_t>;
  constexpr int W = S::W;
  const int64_t Npad = round_up(s.N, W), nv = Npad / W, Lpad = round_up(s.L, W);
  const int64_t per_group = s.dim / s.groups;
  Prepared<acc_t> prep(s, Npad, A, B, C);
  const FwdFn<acc_t> core = pick_cores<acc_t>(nv).first;
  const scalar_t *u_p = u.data_ptr<scalar_t>(), *delta_p = delta.data_ptr<scalar_t>();
  const scalar_t* z_p = opt_ptr<scalar_t>(z);
  const acc_t *A_p = prep.A.data(), *B_p = prep.BT.data(), *C_p = prep.CT.data();
  const acc_t *D_p = opt_ptr<acc_t>(D), *bias_p = opt_ptr<acc_t>(delta_bias);
  scalar_t* out_p = out.data_ptr<scalar_t>();
  acc_t* last_p = last_state.data_ptr<acc_t>();
  const int64_t updates = s.batch * s.dim * s.L * s.N;
  dynamic_for(s.batch * s.dim, row_grab(s), threads_for(updates), [&](auto take) {
    AlignedBuffer<acc_t> buf(4 * Lpad + Npad), ring(W * W), scratch(2 * nv * W);
    FwdRow<acc_t> r;
    acc_t* x = buf.data();
    acc_t* zb = x + 2 * Lpad;
    r.x = x;
    r.dt = x + Lpad;
    r.z = z_p ? zb : nullptr;
    r.y = x + 3 * Lpad;
    r.hlast = x + 4 * Lpad;
    r.ring = ring.data();
    r.scratch = scratch.template as<typename S::V>();
    r.p.L = s.L;
    r.p.nv = nv;
    r.p.chunk = s.L;
    r.p.softplus_dt = softplus_dt;
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / s.dim, d = row % s.dim, g = d / per_group;
        const int64_t off = row * s.L;
        r.p.A = A_p + d * Npad;
        r.p.BT = B_p + (b * s.groups + g) * s.L * Npad;
        r.p.CT = C_p + (b * s.groups + g) * s.L * Npad;
        r.p.bias = bias_p ? bias_p[d] : acc_t(0);
        r.p.skip = D_p ? D_p[d] : acc_t(0);
        load_row(x, u_p + off, s.L, Lpad);
        load_row(r.dt, delta_p + off, s.L, Lpad);
        if (z_p) load_row(zb, z_p + off, s.L, Lpad);
        core(r);
        store_row(out_p + off, r.y, s.L);
        std::copy(r.hlast, r.hlast + s.N, last_p + row * s.N);
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> selective_scan_fwd_cpu(const at::Tensor& u_, const at::Tensor& delta_,
                                                          const at::Tensor& A, const at::Tensor& B,
                                                          const at::Tensor& C, const c10::optional<at::Tensor>& D_,
                                                          const c10::optional<at::Tensor>& z_,
                                                          const c10::optional<at::Tensor>& delta_bias_,
                                                          bool delta_softplus) {
  const ScanShape s = check_fwd(u_, delta_, A, B, C, D_, z_, delta_bias_);
  auto u = u_.contiguous(), delta = delta_.contiguous();
  auto D = opt_contiguous(D_), z = opt_contiguous(z_), bias = opt_contiguous(delta_bias_);
  auto out = at::empty_like(u, at::MemoryFormat::Contiguous);
  if (s.batch * s.dim == 0 || s.L == 0) return {out, at::zeros({s.batch, s.dim, s.N}, A.options())};
  auto last_state = at::empty({s.batch, s.dim, s.N}, A.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, u.scalar_type(), "selective_scan_fwd_cpu", [&] {
    fwd_cpu_kernel<scalar_t>(s, u, delta, z, A, B, C, D, bias, delta_softplus, out, last_state);
  });
  return {out, last_state};
}

using BwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::optional<at::Tensor>,
                             c10::optional<at::Tensor>, c10::optional<at::Tensor>>;

void check_bwd(const ScanShape& s, const at::Tensor& u, const at::Tensor& grad_out,
               const c10::optional<at::Tensor>& grad_last_state) {
  SSM_CHECK(grad_out.sizes() == u.sizes(), "selective_scan_bwd: grad_out must be (batch, dim, L)");
  if (grad_last_state.has_value()) {
    SSM_CHECK(grad_last_state->dim() == 3 && grad_last_state->size(0) == s.batch &&
                  grad_last_state->size(1) == s.dim && grad_last_state->size(2) == s.N,
              "selective_scan_bwd: grad_last_state must be (batch, dim, N)");
  }
}

template <typename scalar_t>
BwdResult bwd_cpu_kernel(const ScanShape& s, const at::Tensor& u, const at::Tensor& delta,
                         const c10::optional<at::Tensor>& z, const at::Tensor& A, const at::Tensor& B,
                         const at::Tensor& C, const c10::optional<at::Tensor>& D,
                         const c10::optional<at::Tensor>& delta_bias, bool softplus_dt, const at::Tensor& grad_out,
                         const c10::optional<at::Tensor>& grad_last) {
  using acc_t = at::opmath_type<scalar_t>;
  using S = Simd<acc_t>;
  constexpr int W = S::W;
  const int64_t Npad = round_up(s.N, W), nv = Npad / W, Lpad = round_up(s.L, W);
  const int64_t per_group = s.dim / s.groups, bg_count = s.batch * s.groups, rows = s.batch * s.dim;
  const int64_t bc_size = s.L * Npad;  // one (batch, group)'s B, C, grad B or grad C
  Prepared<acc_t> prep(s, Npad, A, B, C);
  const BwdFn<acc_t> core = pick_cores<acc_t>(nv).second;

  auto du = at::empty_like(u, at::MemoryFormat::Contiguous);
  auto ddelta = at::empty_like(u, at::MemoryFormat::Contiguous);
  c10::optional<at::Tensor> dz;
  if (z) dz = at::empty_like(u, at::MemoryFormat::Contiguous);
  // Per-row results, folded over batch at the end; grad B and C summed per (batch, group).
  AlignedBuffer<acc_t> gA_rows(rows * Npad), gD_rows(rows), gbias_rows(rows);
  AlignedBuffer<acc_t> dB_sum(bg_count * bc_size), dC_sum(bg_count * bc_size);
  std::vector<std::mutex> sum_locks(bg_count);

  // Task = (batch, group, chunk of the group's channels): enough tasks to balance the threads.
  const int64_t chunks = std::min<int64_t>(per_group, (8 * at::get_num_threads() + bg_count - 1) / bg_count);
  // (8 tasks per thread balance a dynamic schedule; each task adds its L * N grad B and C once.)
  const int64_t tasks = bg_count * chunks;
  const int64_t grab = std::max<int64_t>(1, row_grab(s) / std::max<int64_t>(1, per_group / chunks));

  const scalar_t *u_p = u.data_ptr<scalar_t>(), *delta_p = delta.data_ptr<scalar_t>();
  const scalar_t *z_p = opt_ptr<scalar_t>(z), *go_p = grad_out.data_ptr<scalar_t>();
  const acc_t *A_p = prep.A.data(), *B_p = prep.BT.data(), *C_p = prep.CT.data();
  const acc_t *D_p = opt_ptr<acc_t>(D), *bias_p = opt_ptr<acc_t>(delta_bias);
  const acc_t* gl_p = opt_ptr<acc_t>(grad_last);
  scalar_t *du_p = du.data_ptr<scalar_t>(), *ddelta_p = ddelta.data_ptr<scalar_t>();
  scalar_t* dz_p = opt_ptr<scalar_t>(dz);
  const int64_t updates = s.batch * s.dim * s.L * s.N * 5 / 2;
  dynamic_for(tasks, grab, threads_for(updates), [&](auto take) {
    const int64_t chunk = bwd_chunk<acc_t>(s.L, Npad);
    AlignedBuffer<acc_t> buf(8 * Lpad), rings(2 * W * W), states(chunk * 2 * Npad),
        ckpt((s.L + chunk - 1) / chunk * Npad), scratch(4 * nv * W), glast(Npad), dBC(2 * bc_size);
    BwdRow<acc_t> r;
    acc_t* x = buf.data();
    acc_t* zb = x + 2 * Lpad;
    r.x = x;
    r.dt = x + Lpad;
    r.z = z_p ? zb : nullptr;
    r.g = x + 3 * Lpad;
    r.gx = x + 4 * Lpad;
    r.gz = x + 5 * Lpad;
    r.gy = x + 6 * Lpad;
    r.dsp = x + 7 * Lpad;
    r.ring1 = rings.data();
    r.ring2 = rings.data() + W * W;
    r.states = states.data();
    r.ckpt = ckpt.data();
    r.scratch = scratch.template as<typename S::V>();
    r.dB = dBC.data();
    r.dC = dBC.data() + bc_size;
    r.glast = gl_p ? glast.data() : nullptr;
    r.p.L = s.L;
    r.p.nv = nv;
    r.p.chunk = chunk;
    r.p.softplus_dt = softplus_dt;
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t bg = task / chunks, k = task % chunks;
        const int64_t b = bg / s.groups, g = bg % s.groups;
        const int64_t d0 = g * per_group + k * per_group / chunks;
        const int64_t d1 = g * per_group + (k + 1) * per_group / chunks;
        r.p.BT = B_p + bg * bc_size;
        r.p.CT = C_p + bg * bc_size;
        std::fill(r.dB, r.dB + 2 * bc_size, acc_t(0));
        for (int64_t d = d0; d < d1; ++d) {
          const int64_t row = b * s.dim + d, off = row * s.L;
          r.p.A = A_p + d * Npad;
          r.p.bias = bias_p ? bias_p[d] : acc_t(0);
          r.p.skip = D_p ? D_p[d] : acc_t(0);
          if (gl_p) pad_rows(glast.data(), gl_p + row * s.N, 1, s.N, Npad);
          r.gA = gA_rows.data() + row * Npad;
          r.gD = gD_rows.data() + row;
          r.gbias = gbias_rows.data() + row;
          load_row(x, u_p + off, s.L, Lpad);
          load_row(r.dt, delta_p + off, s.L, Lpad);
          if (z_p) load_row(zb, z_p + off, s.L, Lpad);
          load_row(r.g, go_p + off, s.L, Lpad);
          core(r);
          store_row(du_p + off, r.gx, s.L);
          store_row(ddelta_p + off, r.g, s.L);
          if (z_p) store_row(dz_p + off, r.gz, s.L);
        }
        // This task's grad B and C into its (batch, group)'s sums.
        std::lock_guard<std::mutex> lock(sum_locks[bg]);
        acc_t* dBs = dB_sum.data() + bg * bc_size;
        acc_t* dCs = dC_sum.data() + bg * bc_size;
        for (int64_t i = 0; i < bc_size; ++i) {
          dBs[i] += r.dB[i];
          dCs[i] += r.dC[i];
        }
      }
    }
  });

  const auto acc = A.options();
  auto dA = at::empty({s.dim, s.N}, acc), dB = at::empty({s.batch, s.groups, s.N, s.L}, acc),
       dC = at::empty({s.batch, s.groups, s.N, s.L}, acc);
  acc_t* dA_p = dA.data_ptr<acc_t>();
  for (int64_t d = 0; d < s.dim; ++d) {
    for (int64_t n = 0; n < s.N; ++n) {
      acc_t sum = 0;
      for (int64_t b = 0; b < s.batch; ++b) sum += gA_rows.data()[(b * s.dim + d) * Npad + n];
      dA_p[d * s.N + n] = sum;
    }
  }
  auto fold_rows = [&](acc_t* rows_p) {  // (batch, dim) -> (dim,)
    auto out = at::empty({s.dim}, acc);
    acc_t* o = out.data_ptr<acc_t>();
    for (int64_t d = 0; d < s.dim; ++d) {
      acc_t sum = 0;
      for (int64_t b = 0; b < s.batch; ++b) sum += rows_p[b * s.dim + d];
      o[d] = sum;
    }
    return out;
  };
  auto unpad = [&](at::Tensor& out, const acc_t* src) {  // (bg, L, Npad) -> (bg, N, L)
    acc_t* o = out.data_ptr<acc_t>();
    for (int64_t m = 0; m < bg_count; ++m)
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t t = 0; t < s.L; ++t) o[(m * s.N + n) * s.L + t] = src[(m * s.L + t) * Npad + n];
  };
  unpad(dB, dB_sum.data());
  unpad(dC, dC_sum.data());
  c10::optional<at::Tensor> dD, dbias;
  if (D) dD = fold_rows(gD_rows.data());
  if (delta_bias) dbias = fold_rows(gbias_rows.data());
  return {du, ddelta, dA, dB, dC, dD, dz, dbias};
}

BwdResult selective_scan_bwd_cpu(const at::Tensor& u_, const at::Tensor& delta_, const at::Tensor& A,
                                 const at::Tensor& B, const at::Tensor& C, const c10::optional<at::Tensor>& D_,
                                 const c10::optional<at::Tensor>& z_, const c10::optional<at::Tensor>& delta_bias_,
                                 bool delta_softplus, const at::Tensor& grad_out_,
                                 const c10::optional<at::Tensor>& grad_last_state_) {
  const ScanShape s = check_fwd(u_, delta_, A, B, C, D_, z_, delta_bias_);
  check_bwd(s, u_, grad_out_, grad_last_state_);
  if (s.batch * s.dim == 0 || s.L == 0) {
    auto zeros = [](const at::Tensor& t) { return at::zeros_like(t, at::MemoryFormat::Contiguous); };
    auto opt_zeros = [&](const c10::optional<at::Tensor>& t) -> c10::optional<at::Tensor> {
      if (t) return zeros(*t);
      return c10::nullopt;
    };
    return {zeros(u_), zeros(delta_), zeros(A), zeros(B), zeros(C), opt_zeros(D_), opt_zeros(z_),
            opt_zeros(delta_bias_)};
  }
  auto u = u_.contiguous(), delta = delta_.contiguous();
  auto D = opt_contiguous(D_), z = opt_contiguous(z_), bias = opt_contiguous(delta_bias_);
  auto grad_out = grad_out_.to(u.scalar_type()).contiguous();
  c10::optional<at::Tensor> grad_last;
  if (grad_last_state_.has_value()) grad_last = grad_last_state_->to(A.scalar_type()).contiguous();
  BwdResult result;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, u.scalar_type(), "selective_scan_bwd_cpu", [&] {
    result = bwd_cpu_kernel<scalar_t>(s, u, delta, z, A, B, C, D, bias, delta_softplus, grad_out, grad_last);
  });
  return result;
}

#ifdef WITH_CUDA
std::tuple<at::Tensor, at::Tensor> selective_scan_fwd_cuda(const at::Tensor& u_, const at::Tensor& delta_,
                                                           const at::Tensor& A_, const at::Tensor& B_,
                                                           const at::Tensor& C_, const c10::optional<at::Tensor>& D_,
                                                           const c10::optional<at::Tensor>& z_,
                                                           const c10::optional<at::Tensor>& delta_bias_,
                                                           bool delta_softplus) {
  const ScanShape s = check_fwd(u_, delta_, A_, B_, C_, D_, z_, delta_bias_);
  const c10::cuda::CUDAGuard guard(u_.device());
  auto u = u_.contiguous(), delta = delta_.contiguous(), A = A_.contiguous(), B = B_.contiguous(),
       C = C_.contiguous();
  auto D = opt_contiguous(D_), z = opt_contiguous(z_), bias = opt_contiguous(delta_bias_);
  auto out = at::empty_like(u, at::MemoryFormat::Contiguous);
  auto last_state = at::zeros({s.batch, s.dim, s.N}, A.options());
  auto ptr = [](const c10::optional<at::Tensor>& t) -> const void* { return t ? t->data_ptr() : nullptr; };
  cuda::selective_scan_fwd_launch(static_cast<int>(dtype_code(u)), s.batch, s.dim, s.L, s.N, s.groups,
                                  u.data_ptr(), delta.data_ptr(), ptr(z), A.data_ptr(), B.data_ptr(), C.data_ptr(),
                                  ptr(D), ptr(bias), delta_softplus, out.data_ptr(), last_state.data_ptr(),
                                  c10::cuda::getCurrentCUDAStream().stream());
  return {out, last_state};
}

BwdResult selective_scan_bwd_cuda(const at::Tensor& u_, const at::Tensor& delta_, const at::Tensor& A_,
                                  const at::Tensor& B_, const at::Tensor& C_, const c10::optional<at::Tensor>& D_,
                                  const c10::optional<at::Tensor>& z_, const c10::optional<at::Tensor>& delta_bias_,
                                  bool delta_softplus, const at::Tensor& grad_out_,
                                  const c10::optional<at::Tensor>& grad_last_state_) {
  const ScanShape s = check_fwd(u_, delta_, A_, B_, C_, D_, z_, delta_bias_);
  check_bwd(s, u_, grad_out_, grad_last_state_);
  const c10::cuda::CUDAGuard guard(u_.device());
  auto u = u_.contiguous(), delta = delta_.contiguous(), A = A_.contiguous(), B = B_.contiguous(),
       C = C_.contiguous();
  auto D = opt_contiguous(D_), z = opt_contiguous(z_), bias = opt_contiguous(delta_bias_);
  auto grad_out = grad_out_.to(u.scalar_type()).contiguous();
  c10::optional<at::Tensor> grad_last;
  if (grad_last_state_.has_value()) grad_last = grad_last_state_->to(A.scalar_type()).contiguous();
  const auto acc = A.options();
  auto du = at::empty_like(u, at::MemoryFormat::Contiguous);
  auto ddelta = at::empty_like(u, at::MemoryFormat::Contiguous);
  c10::optional<at::Tensor> dz;
  if (z) dz = at::empty_like(u, at::MemoryFormat::Contiguous);
  // Shared reductions are atomics into zeroed accumulation-dtype buffers.
  auto dA = at::zeros_like(A);
  auto dB = at::zeros_like(B);
  auto dC = at::zeros_like(C);
  auto dD = at::zeros({s.dim}, acc);
  auto dbias = at::zeros({s.dim}, acc);
  // Per-row scratch: states at chunk boundaries, and the states of one chunk while it is reversed.
  const int64_t chunk = cuda::kBwdChunk, n_chunks = (s.L + chunk - 1) / chunk;
  auto scratch = at::empty({s.batch * s.dim, n_chunks + chunk, std::max<int64_t>(s.N, 1)}, acc);
  auto ptr = [](const c10::optional<at::Tensor>& t) -> const void* { return t ? t->data_ptr() : nullptr; };
  auto mptr = [](c10::optional<at::Tensor>& t) -> void* { return t ? t->data_ptr() : nullptr; };
  cuda::selective_scan_bwd_launch(static_cast<int>(dtype_code(u)), s.batch, s.dim, s.L, s.N, s.groups,
                                  u.data_ptr(), delta.data_ptr(), ptr(z), A.data_ptr(), B.data_ptr(), C.data_ptr(),
                                  ptr(D), ptr(bias), delta_softplus, grad_out.data_ptr(), ptr(grad_last),
                                  du.data_ptr(), ddelta.data_ptr(), mptr(dz), dA.data_ptr(), dB.data_ptr(),
                                  dC.data_ptr(), dD.data_ptr(), dbias.data_ptr(), scratch.data_ptr(),
                                  c10::cuda::getCurrentCUDAStream().stream());
  c10::optional<at::Tensor> dD_out, dbias_out;
  if (D) dD_out = dD;
  if (bias) dbias_out = dbias;
  return {du, ddelta, dA, dB, dC, dD_out, dz, dbias_out};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(ssm_plugins, m) {
  m.def(
      "selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus) -> (Tensor out, Tensor last_state)");
  m.def(
      "selective_scan_bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus, Tensor grad_out, Tensor? grad_last_state) -> "
      "(Tensor grad_u, Tensor grad_delta, Tensor grad_A, Tensor grad_B, Tensor grad_C, Tensor? grad_D, "
      "Tensor? grad_z, Tensor? grad_delta_bias)");
}

TORCH_LIBRARY_IMPL(ssm_plugins, CPU, m) {
  m.impl("selective_scan_fwd", &selective_scan_fwd_cpu);
  m.impl("selective_scan_bwd", &selective_scan_bwd_cpu);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(ssm_plugins, CUDA, m) {
  m.impl("selective_scan_fwd", &selective_scan_fwd_cuda);
  m.impl("selective_scan_bwd", &selective_scan_bwd_cuda);
}
#endif

}  // namespace ssm_plugins
