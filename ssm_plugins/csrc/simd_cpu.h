// SIMD helpers of the CPU kernels (selective_scan_*.cpp, qs_mix_*.cpp): 64-byte GCC vector types, which GCC
// lowers to one zmm, two ymm or four xmm registers per the instruction set the including function is compiled
// for (the kernels compile their per-row cores for AVX-512, AVX2 and baseline x86-64 and pick one at run time),
// a vectorised float exp / log1p / softplus / sigmoid, and transposed sums of W vectors.
#pragma once
#include "common.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#pragma GCC diagnostic ignored "-Wpsabi"

#if defined(__GNUC__) && !defined(__clang__)
#define SSM_INLINE inline __attribute__((always_inline))
#else
#define SSM_INLINE inline
#endif

// Instruction sets the per-row cores of the CPU kernels are compiled for, picked at run time (cpu_isa below).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SSM_X86_VARIANTS 1
#define SSM_TARGET_AVX2 __attribute__((target("avx2,fma,bmi2")))
#define SSM_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,bmi2")))
#include <immintrin.h>
#endif

namespace ssm_plugins {
namespace {  // internal linkage in every including source, as the kernels' own helpers

enum class Isa { generic, avx2, avx512 };

// The widest instruction set this CPU has; SSM_PLUGINS_CPU_ISA=generic|avx2|avx512 narrows it (tests).
inline Isa cpu_isa() {
  static const Isa best = [] {
#ifdef SSM_X86_VARIANTS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
      return Isa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2"))
      return Isa::avx2;
#endif
    return Isa::generic;
  }();
  const char* env = std::getenv("SSM_PLUGINS_CPU_ISA");
  if (env == nullptr || *env == '\0') return best;
  const std::string want(env);
  SSM_CHECK(want == "generic" || want == "avx2" || want == "avx512",
            "SSM_PLUGINS_CPU_ISA must be generic, avx2 or avx512, got ", want);
  const Isa asked = want == "avx512" ? Isa::avx512 : (want == "avx2" ? Isa::avx2 : Isa::generic);
  return static_cast<int>(asked) < static_cast<int>(best) ? asked : best;
}

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

// In-place transpose of W vectors of W lanes (lane l of vector i <-> lane i of vector l): log2(W) stages; the
// stage of stride S exchanges, between vectors i and i + S (bit S of i clear), the lanes with bit S set in i's
// lane index and clear in i + S's, i.e. swaps the off-diagonal S x S blocks of every 2S x 2S block.
template <typename V, int W, int S, size_t... I>
SSM_INLINE void transpose_pair(V& a, V& b, std::index_sequence<I...>) {
#if defined(__clang__) || __GNUC__ >= 12
  const V lo = __builtin_shufflevector(a, b, ((I & S) ? int(W + I - S) : int(I))...);
  const V hi = __builtin_shufflevector(a, b, ((I & S) ? int(W + I) : int(I + S))...);
#else
  using IV = typename LaneIndex<V>::type;
  const V lo = __builtin_shuffle(a, b, IV{((I & S) ? int(W + I - S) : int(I))...});
  const V hi = __builtin_shuffle(a, b, IV{((I & S) ? int(W + I) : int(I + S))...});
#endif
  a = lo;
  b = hi;
}

template <typename V, int W, int S = 1>
SSM_INLINE void transpose_square(V* v) {
  if constexpr (S < W) {
    for (int i = 0; i < W; ++i)
      if (!(i & S)) transpose_pair<V, W, S>(v[i], v[i + S], std::make_index_sequence<W>{});
    transpose_square<V, W, 2 * S>(v);
  }
}

// W x W tile: src rows i (stride src_ld) -> dst rows (stride dst_ld), transposed (dst row j = src column j).
template <typename T, typename V, int W>
SSM_INLINE void transpose_tile(const T* src, int64_t src_ld, T* dst, int64_t dst_ld) {
  V v[W];
  for (int i = 0; i < W; ++i) std::memcpy(&v[i], src + i * src_ld, sizeof(V));
  transpose_square<V, W>(v);
  for (int i = 0; i < W; ++i) std::memcpy(dst + i * dst_ld, &v[i], sizeof(V));
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

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// What both specialisations share: lane count, broadcast, unaligned load/store, lane sum.
template <typename T, typename Vec>
struct SimdCommon {
  using V = Vec;
  static constexpr int W = sizeof(Vec) / sizeof(T);
  static SSM_INLINE V splat(T s) { return V{} + s; }
  static SSM_INLINE V load(const T* p) {
    V v;
    std::memcpy(&v, p, sizeof(V));
    return v;
  }
  static SSM_INLINE void store(T* p, V v) { std::memcpy(p, &v, sizeof(V)); }
  static SSM_INLINE T hsum(V v) {  // (epilogues only)
    T sum = 0;
    for (int i = 0; i < W; ++i) sum += v[i];
    return sum;
  }
};

template <>
struct Simd<float> : SimdCommon<float, f32x16> {
  // exp: k = round(x / ln2) and r = x - k ln2 in [-ln2/2, ln2/2] (Cody-Waite), e^r = 1 + r + r^2 q(r) with
  // q cubic and minimax (relative error < 2e-7 in float32, the degree-6 Taylor series' 2.4e-7 for one FMA
  // less; 1 + r stays exact, so a decay near 1 has no bias for 16k steps to compound), and p * 2^k as an
  // integer add of k to p's exponent field (no multiply). The argument is clamped to [-87.3, 88]: below,
  // the result is ~1.2e-38 instead of 0; above, exp(88). The clamps compare so that a NaN fails both, and
  // NaN's k converts to 0x80000000, whose shifted bits are 0: NaN stays NaN.
  static SSM_INLINE V exp(V x) {
    const V lo = splat(-87.33654f), hi = splat(88.0f);
    V xc = x < lo ? lo : x;
    xc = xc > hi ? hi : xc;
    const V magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    const V t = xc * 1.44269504088896341f + magic;
    const V k = t - magic;
    V r = xc - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    V p = splat(8.3125252e-3f);
    p = p * r + 4.1890115e-2f;
    p = p * r + 0.16667114f;
    p = p * r + 0.49999231f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return (V)((i32x16)p + (__builtin_convertvector(k, i32x16) << 23));  // p * 2^k: k added to p's exponent
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
struct Simd<double> : SimdCommon<double, f64x8> {
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

// exp(Δ·A), the scan's per-step decay: a core multiplies A by `scale` once per row and calls `of` on Δ·(scale A)
// every step. The AVX-512 float variant works in base 2 with two instructions the portable exp has no form for:
// y = k + f with f = y - round(y) in [-1/2, 1/2] (VREDUCEPS, exact), 2^f a degree-5 minimax polynomial with
// 2^0 = 1 exact (relative error < 1.9e-7 in float32), and 2^k applied by VSCALEFPS, which underflows to
// subnormals and 0, overflows to inf and passes NaN on by itself (y = +-inf: f = 0, k = y): 8 vector
// instructions a step against the portable exp's 14 (with its clamps and Cody-Waite reduction). log2(e) folded
// into A rounds once more: Δ·A is off by ~|Δ·A| 1.2e-7 instead of 6e-8 relative, where the decay e^(Δ·A) is
// below e^-1 for the difference to exceed the polynomial's.
template <typename acc_t, bool kAvx512>
struct Decay {
  using V = typename Simd<acc_t>::V;
  static constexpr acc_t scale = acc_t(1);
  static SSM_INLINE V of(V x) { return Simd<acc_t>::exp(x); }
};
#ifdef SSM_X86_VARIANTS
template <>
struct Decay<float, true> {
  using V = f32x16;
  static constexpr float scale = 1.44269504088896341f;  // log2(e)
  SSM_TARGET_AVX512 static inline V of(V y) {  // not always_inline: inlined into the AVX-512 variants only
    const V f = (V)_mm512_maskz_reduce_ps(0xFFFF, (__m512)y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V p = f * 1.32647273e-3f + 9.67151299e-3f;
    p = p * f + 5.55073358e-2f;
    p = p * f + 0.240222424f;
    p = p * f + 0.693147004f;
    p = p * f + 1.0f;
    return (V)_mm512_maskz_scalef_ps(0xFFFF, (__m512)p, (__m512)(y - f));
  }
};
#endif

// W consecutive vectors at p (W*W values) -> vector of their lane sums.
template <typename acc_t>
SSM_INLINE typename Simd<acc_t>::V block_sums(const acc_t* p) {
  using S = Simd<acc_t>;
  typename S::V v[S::W];
  for (int i = 0; i < S::W; ++i) v[i] = S::load(p + i * S::W);
  return TreeSum<typename S::V, S::W, S::W>::run(v);
}

}  // namespace
}  // namespace ssm_plugins
