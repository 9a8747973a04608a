// Quasi-separable mixing, CPU side: what the forward (qs_mix_fwd.cpp) and the backward (qs_mix_bwd.cpp)
// kernels share.
#pragma once
#include "qs_mix.h"
#include "simd_cpu.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

// The per-row work of both kernels is compiled three times, for AVX-512, AVX2 and baseline x86-64 (the
// build's -O3 alone targets SSE2: 4 float lanes), and picked at run time by cpu_isa (simd_cpu.h), as the
// scan's cores are. Every helper the rows call is always_inline, so it is compiled with its caller's
// instruction set.
#if defined(__GNUC__) && !defined(__clang__)
#define QS_INLINE inline __attribute__((always_inline))
#define QS_LAMBDA_INLINE __attribute__((always_inline))
#else
#define QS_INLINE inline
#define QS_LAMBDA_INLINE
#endif

namespace ssm_plugins {
namespace {  // the op's private helpers keep internal linkage, as when the op was one file

// Features per register block of the head layout's loops over p (two AVX-512 vectors of float).
constexpr int64_t kBlock = 32;
// Features per vector of the forward's register-blocked path (one AVX-512 vector of float), and P rounded up to it.
constexpr int64_t kLanes = 16;
inline int64_t padded(int64_t P) { return round_up(P, kLanes); }

// Δ before the softplus: dt + dt_bias.
template <typename acc_t>
QS_INLINE acc_t raw_delta(const Direction<acc_t>& d, int64_t b, int64_t t, int64_t h) {
  return d.dt[b * d.dt_s[0] + t * d.dt_s[1] + h * d.dt_s[2]] + (d.bias ? d.bias[h] : acc_t(0));
}

// v[n] <- exp(v[n]) for float32 with the kernels' vector exp (simd_cpu.h; libm's expf is a scalar call), the
// last N % 16 values through a zero-padded vector.
QS_INLINE void exp_in_place(float* v, int64_t N) {
  using S = Simd<float>;
  int64_t n = 0;
  for (; n + S::W <= N; n += S::W) S::store(v + n, S::exp(S::load(v + n)));
  if (n < N) {
    float tail[S::W] = {};
    std::copy(v + n, v + N, tail);
    S::store(tail, S::exp(S::load(tail)));
    std::copy(tail, tail + (N - n), v + n);
  }
}

QS_INLINE void exp_in_place(double* v, int64_t N) {  // float64 stays libm-exact
  for (int64_t n = 0; n < N; ++n) v[n] = std::exp(v[n]);
}

// Ā_t per state index n for head h: exp(Δ A[h, n]).
template <typename acc_t>
QS_INLINE void fill_decays(const Direction<acc_t>& d, int64_t h, acc_t delta, int64_t N, acc_t* decay) {
  const acc_t* Arow = d.A + h * d.A_cols;
  if (d.A_cols == 1) {
    std::fill(decay, decay + N, std::exp(delta * Arow[0]));
  } else {
    for (int64_t n = 0; n < N; ++n) decay[n] = delta * Arow[n];
    exp_in_place(decay, N);
  }
}

// Row (b, h) of a strided (batch, L, H, P) tensor <-> L rows of ld >= P accumulation values: kRead copies the
// tensor into the rows (zero-padded to ld), else the rows' first P values go to the tensor. Along the tensor's
// smaller stride: the head layout is often a view of (batch, dim, L) activations, features L apart; there the
// steps are adjacent and W x W tiles are transposed in registers (element-wise, each step's row was W scattered
// accesses), the edges element-wise.
template <bool kRead, typename T, typename acc_t>
QS_INLINE void transfer_row(T* base, const int64_t* st, int64_t b, int64_t h, int64_t L, int64_t P, int64_t ld,
                            acc_t* rows) {
  using scalar_t = std::remove_const_t<T>;
  T* row = base + b * st[0] + h * st[2];
  auto move = [&](int64_t t, int64_t p) QS_LAMBDA_INLINE {
    if constexpr (kRead) {
      rows[t * ld + p] = static_cast<acc_t>(row[t * st[1] + p * st[3]]);
    } else {
      row[t * st[1] + p * st[3]] = static_cast<scalar_t>(rows[t * ld + p]);
    }
  };
  int64_t p_tiled = 0;
  if (st[3] <= st[1]) {
    for (int64_t t = 0; t < L; ++t)
      for (int64_t p = 0; p < P; ++p) move(t, p);
    p_tiled = P;
  } else if constexpr (std::is_same<scalar_t, acc_t>::value) {
    using V = typename Simd<acc_t>::V;
    constexpr int W = Simd<acc_t>::W;
    const int64_t Lw = L / W * W;
    for (p_tiled = 0; st[1] == 1 && p_tiled + W <= P; p_tiled += W) {
      const int64_t p0 = p_tiled;
      for (int64_t t0 = 0; t0 < Lw; t0 += W) {
        if constexpr (kRead) {
          transpose_tile<acc_t, V, W>(row + p0 * st[3] + t0, st[3], rows + t0 * ld + p0, ld);
        } else {
          transpose_tile<acc_t, V, W>(rows + t0 * ld + p0, ld, row + p0 * st[3] + t0, st[3]);
        }
      }
      for (int64_t t = Lw; t < L; ++t)
        for (int64_t p = p0; p < p0 + W; ++p) move(t, p);
    }
  }
  for (int64_t p = p_tiled; p < P; ++p)
    for (int64_t t = 0; t < L; ++t) move(t, p);
  if constexpr (kRead) {
    for (int64_t t = 0; t < L && ld > P; ++t) std::fill(rows + t * ld + P, rows + (t + 1) * ld, acc_t(0));
  }
}

// Per step t of row (b, h), in time order: Δ_t (softplus applied when asked), the softplus' derivative at
// dt + dt_bias (1 without the softplus) and, for a scalar A, Ā_t = exp(Δ_t A). Buffers of round_steps(L).
// float runs the vector softplus / sigmoid / exp over the row (libm per step was ~15 % of the backward).
inline int64_t round_steps(int64_t L) { return round_up(L, 16); }  // whole vectors of float and double

template <typename acc_t>
QS_INLINE void row_steps(const Direction<acc_t>& d, bool softplus_dt, int64_t b, int64_t h, int64_t L, acc_t* delta,
                         acc_t* dsoftplus, acc_t* decay1) {
  using S = Simd<acc_t>;
  using V = typename S::V;
  const int64_t Lpad = round_steps(L);
  for (int64_t t = 0; t < L; ++t) delta[t] = raw_delta(d, b, t, h);
  std::fill(delta + L, delta + Lpad, acc_t(0));
  const acc_t a = d.A_cols == 1 ? d.A[h] : acc_t(0);
  for (int64_t t = 0; t < Lpad; t += S::W) {
    V v = S::load(delta + t);
    const V one = S::splat(1);
    S::store(dsoftplus + t, softplus_dt ? (v > acc_t(20) ? one : S::sigmoid(v)) : one);  // torch's threshold
    if (softplus_dt) v = S::softplus(v);
    S::store(delta + t, v);
    if (d.A_cols == 1) S::store(decay1 + t, S::exp(v * a));
  }
}

// Ā_t for every state: the row's precomputed scalar-A decay, or exp(Δ_t A[h, n]).
template <typename acc_t>
QS_INLINE void step_decays(const Direction<acc_t>& d, int64_t h, acc_t delta, acc_t decay1, int64_t N, acc_t* decay) {
  if (d.A_cols == 1) {
    std::fill(decay, decay + N, decay1);
  } else {
    fill_decays(d, h, delta, N, decay);
  }
}

// v[0] + ... + v[N-1] in four interleaved partial sums (vectorises without reassociating a serial chain).
template <typename acc_t>
QS_INLINE acc_t sum(const acc_t* v, int64_t N) {
  acc_t part[4] = {0, 0, 0, 0};
  int64_t n = 0;
  for (; n + 4 <= N; n += 4) {
    for (int k = 0; k < 4; ++k) part[k] += v[n + k];
  }
  acc_t total = (part[0] + part[1]) + (part[2] + part[3]);
  for (; n < N; ++n) total += v[n];
  return total;
}

// Rows split into `parts` contiguous ranges (one per thread) so that per-part partial sums never race.
inline int64_t num_parts(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows));
}

// body(part, begin, end) for every part; the parts are handed out whole, first come first served.
template <typename F>
void for_each_part(int64_t rows, int64_t parts, const F& body) {
  dynamic_for_intra(parts, 1, parts, [&](auto take) {
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t part = begin; part < end; ++part) body(part, rows * part / parts, rows * (part + 1) / parts);
    }
  });
}

// The forward's inputs and output as raw pointers with element strides (the backward reads them too).
template <typename scalar_t>
struct FwdArgs {
  using acc_t = at::opmath_type<scalar_t>;
  MixShape s;
  const scalar_t* x;
  int64_t x_s[4];
  Direction<acc_t> fwd, rev;
  const acc_t* gamma;
  int64_t gamma_s[3];
  bool softplus_dt, hydra_shift;
  scalar_t* y;
  int64_t y_s[4];
};

}  // namespace
}  // namespace ssm_plugins
