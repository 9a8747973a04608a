// Quasi-separable mixing, CPU forward: y = out + out_rev + gamma x, one strict scan per direction for each
// (batch, head) row. Shared pieces in qs_mix_cpu.h.
#include "qs_mix_cpu.h"

#include <type_traits>

namespace ssm_plugins {
namespace {

// Per-task scratch of the forward: the state (N, P), and per step x_t (P) and Ā_t, B̄_t, C (N each); for the
// register-blocked path the whole row's x (L, P padded to kLanes) and its steps' Ā, B̄, C (L, N each).
template <typename acc_t>
struct FwdScratch {
  std::vector<acc_t> state, xt, decay, dB, c, term, xrow, steps, rowbuf;
  FwdScratch(int64_t N, int64_t P, int64_t L, bool blocked)
      : state(blocked ? 0 : N * P), xt(P), decay(N), dB(N), c(N), term(N), xrow(blocked ? L * padded(P) : 0),
        steps(blocked ? 3 * L * N : 0), rowbuf(blocked ? 3 * round_steps(L) : 0) {}
};

// ---- the register-blocked path: float32, N = 16, P > 1 ---------------------------------------------------
// kLanes features at a time keep their (N, kLanes) state in N vector registers for the whole row (the loop
// over p inside n re-reads and re-writes the state from memory at every step): per state and step one
// multiply and two FMAs on registers. The steps' scalars (Ā, Δ B, the C the output reads) are computed once
// per direction.
static_assert(kLanes == Simd<float>::W, "one float vector per feature block");

template <typename acc_t>
bool uses_blocked_path(const MixShape& s) {
  return std::is_same<acc_t, float>::value && s.N == 16 && s.P > 1;
}

// Ā_t, Δ_t B_t and the C that out_t reads, for the steps of one direction in scan order, as (L, N) each.
template <typename scalar_t>
QS_INLINE void step_scalars(const FwdArgs<scalar_t>& a, const Direction<float>& d, bool reverse, int64_t b, int64_t h,
                            float* rowbuf, float* decay, float* dB, float* c) {
  const MixShape& s = a.s;
  const int64_t g = h / (s.H / s.G), N = s.N;
  const float* C_prev = nullptr;
  float *deltas = rowbuf, *decay1 = rowbuf + 2 * round_steps(s.L);
  row_steps(d, a.softplus_dt, b, h, s.L, deltas, rowbuf + round_steps(s.L), decay1);
  for (int64_t i = 0; i < s.L; ++i) {
    const int64_t t = reverse ? s.L - 1 - i : i;
    const float delta = deltas[t];
    const float* Bt = d.B + b * d.B_s[0] + t * d.B_s[1] + g * d.B_s[2];
    const float* Ct = d.C + b * d.C_s[0] + t * d.C_s[1] + g * d.C_s[2];
    const float* C_read = a.hydra_shift ? C_prev : Ct;
    step_decays(d, h, delta, decay1[t], N, decay + i * N);
    for (int64_t n = 0; n < N; ++n) {
      dB[i * N + n] = delta * Bt[n];
      c[i * N + n] = C_read ? C_read[n] : 0.0f;
    }
    C_prev = Ct;
  }
}

// One direction's strict scan added to out (L, Ppad) from xrow (L, Ppad), NS = N states.
template <int NS, typename scalar_t>
QS_INLINE void scan_direction_blocked(const FwdArgs<scalar_t>& a, const Direction<float>& d, bool reverse,
                                      int64_t b, int64_t h, FwdScratch<float>& w, float* out) {
  const MixShape& s = a.s;
  const int64_t L = s.L, Ppad = padded(s.P);
  float *decay = w.steps.data(), *dB = decay + L * NS, *c = dB + L * NS;
  step_scalars(a, d, reverse, b, h, w.rowbuf.data(), decay, dB, c);
  using V = Simd<float>::V;
  const float* xrow = w.xrow.data();
  const bool hydra = a.hydra_shift;
  for (int64_t p0 = 0; p0 < Ppad; p0 += kLanes) {
    V state[NS] = {};
    for (int64_t i = 0; i < L; ++i) {
      const int64_t t = reverse ? L - 1 - i : i;
      const V xv = Simd<float>::load(xrow + t * Ppad + p0);
      const float *decay_i = decay + i * NS, *dB_i = dB + i * NS, *c_i = c + i * NS;
      V acc = {};
#pragma GCC unroll 16
      for (int n = 0; n < NS; ++n) {
        const V z = decay_i[n] * state[n];
        acc += c_i[n] * (hydra ? state[n] : z);
        state[n] = z + dB_i[n] * xv;
      }
      float* yt = out + t * Ppad + p0;
      Simd<float>::store(yt, Simd<float>::load(yt) + acc);
    }
  }
}

// Adds one direction's strict-scan output for row (b, h) to out[t * P + p].
template <typename scalar_t>
QS_INLINE void scan_direction(const FwdArgs<scalar_t>& a, const Direction<at::opmath_type<scalar_t>>& d, bool reverse,
                    int64_t b, int64_t h, FwdScratch<at::opmath_type<scalar_t>>& w,
                    std::vector<at::opmath_type<scalar_t>>& out) {
  using acc_t = at::opmath_type<scalar_t>;
  const MixShape& s = a.s;
  const int64_t g = h / (s.H / s.G), N = s.N, P = s.P;
  acc_t* state = w.state.data();
  std::fill(w.state.begin(), w.state.end(), acc_t(0));
  const acc_t* C_prev = nullptr;  // hydra: C of the previous step in scan order
  for (int64_t i = 0; i < s.L; ++i) {
    const int64_t t = reverse ? s.L - 1 - i : i;
    acc_t delta = raw_delta(d, b, t, h);
    if (a.softplus_dt) delta = softplus(delta);
    const scalar_t* xrow = a.x + b * a.x_s[0] + t * a.x_s[1] + h * a.x_s[2];
    for (int64_t p = 0; p < P; ++p) w.xt[p] = static_cast<acc_t>(xrow[p * a.x_s[3]]);
    const acc_t* Bt = d.B + b * d.B_s[0] + t * d.B_s[1] + g * d.B_s[2];
    const acc_t* Ct = d.C + b * d.C_s[0] + t * d.C_s[1] + g * d.C_s[2];
    const acc_t* C_read = a.hydra_shift ? C_prev : Ct;  // the C this step's output reads (none: hydra, first step)
    fill_decays(d, h, delta, N, w.decay.data());
    for (int64_t n = 0; n < N; ++n) {
      w.dB[n] = delta * Bt[n];
      w.c[n] = C_read ? C_read[n] : acc_t(0);
    }
    // exact: out_t = C_t · (Ā_t h_{t-1});  hydra: out_t = C_{t-1} · h_{t-1} (the state before its decay)
    const bool hydra = a.hydra_shift;
    acc_t* yt = out.data() + t * P;
    if (P == 1) {  // the Mamba layout (one channel per head): a loop over N that vectorises, then its sum
      const acc_t xv = w.xt[0];
      for (int64_t n = 0; n < N; ++n) {
        const acc_t z = w.decay[n] * state[n];
        w.term[n] = w.c[n] * (hydra ? state[n] : z);
        state[n] = z + w.dB[n] * xv;
      }
      yt[0] += sum(w.term.data(), N);
    } else {
      // Blocks of kBlock features: the block's outputs stay in registers across the N states (a loop over p
      // inside n, as before, re-read and re-wrote y_t N times and ran its short loop's alias checks per n).
      const acc_t* xt = w.xt.data();
      int64_t p0 = 0;
      for (; p0 + kBlock <= P; p0 += kBlock) {
        acc_t acc[kBlock] = {};
        for (int64_t n = 0; n < N; ++n) {
          const acc_t decay = w.decay[n], dB = w.dB[n], c = w.c[n];
          acc_t* hn = state + n * P + p0;
#pragma omp simd
          for (int64_t p = 0; p < kBlock; ++p) {
            const acc_t z = decay * hn[p];
            acc[p] += c * (hydra ? hn[p] : z);
            hn[p] = z + dB * xt[p0 + p];
          }
        }
#pragma omp simd
        for (int64_t p = 0; p < kBlock; ++p) yt[p0 + p] += acc[p];
      }
      for (int64_t n = 0; n < N && p0 < P; ++n) {  // the last P % kBlock features
        const acc_t decay = w.decay[n], dB = w.dB[n], c = w.c[n];
        acc_t* hn = state + n * P;
        for (int64_t p = p0; p < P; ++p) {
          const acc_t z = decay * hn[p];
          yt[p] += c * (hydra ? hn[p] : z);
          hn[p] = z + dB * xt[p];
        }
      }
    }
    C_prev = Ct;
  }
}

// Rows [begin, end): both strict scans, then the free diagonal, written to y.
template <typename scalar_t>
QS_INLINE void fwd_rows(const FwdArgs<scalar_t>& a, int64_t begin, int64_t end,
                        FwdScratch<at::opmath_type<scalar_t>>& scratch, std::vector<at::opmath_type<scalar_t>>& out) {
  using acc_t = at::opmath_type<scalar_t>;
  const MixShape& s = a.s;
  const bool blocked = uses_blocked_path<acc_t>(s);
  const int64_t stride = blocked ? padded(s.P) : s.P;  // of out and xrow: (L, stride)
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / s.H, h = row % s.H;
    std::fill(out.begin(), out.end(), acc_t(0));
    if constexpr (std::is_same<acc_t, float>::value) {
      if (blocked) {
        transfer_row<true>(a.x, a.x_s, b, h, s.L, s.P, stride, scratch.xrow.data());
        scan_direction_blocked<16>(a, a.fwd, false, b, h, scratch, out.data());
        scan_direction_blocked<16>(a, a.rev, true, b, h, scratch, out.data());
      }
    }
    if (!blocked) {
      scan_direction(a, a.fwd, false, b, h, scratch, out);
      scan_direction(a, a.rev, true, b, h, scratch, out);
    }
    // the free diagonal, y = out + gamma x; the blocked path adds x's row copy (x is often a view with features
    // far apart) in place and writes the row through y's strides in one pass (y has x's layout)
    if (blocked) {
      for (int64_t t = 0; t < s.L; ++t) {
        const acc_t gam = a.gamma[b * a.gamma_s[0] + t * a.gamma_s[1] + h * a.gamma_s[2]];
        acc_t* __restrict out_t = out.data() + t * stride;
        const acc_t* __restrict x_t = scratch.xrow.data() + t * stride;
        for (int64_t p = 0; p < s.P; ++p) out_t[p] += gam * x_t[p];
      }
      transfer_row<false>(a.y, a.y_s, b, h, s.L, s.P, stride, out.data());
      continue;
    }
    for (int64_t t = 0; t < s.L; ++t) {
      const acc_t gam = a.gamma[b * a.gamma_s[0] + t * a.gamma_s[1] + h * a.gamma_s[2]];
      const scalar_t* xrow = a.x + b * a.x_s[0] + t * a.x_s[1] + h * a.x_s[2];
      scalar_t* yrow = a.y + b * a.y_s[0] + t * a.y_s[1] + h * a.y_s[2];
      for (int64_t p = 0; p < s.P; ++p) {
        yrow[p * a.y_s[3]] = static_cast<scalar_t>(out[t * stride + p] + gam * static_cast<acc_t>(xrow[p * a.x_s[3]]));
      }
    }
  }
}

template <typename scalar_t>
using FwdRowsFn = void (*)(const FwdArgs<scalar_t>&, int64_t, int64_t, FwdScratch<at::opmath_type<scalar_t>>&,
                           std::vector<at::opmath_type<scalar_t>>&);

template <typename scalar_t>
void fwd_rows_generic(const FwdArgs<scalar_t>& a, int64_t begin, int64_t end,
                      FwdScratch<at::opmath_type<scalar_t>>& scratch, std::vector<at::opmath_type<scalar_t>>& out) {
  fwd_rows(a, begin, end, scratch, out);
}

#ifdef SSM_X86_VARIANTS
template <typename scalar_t>
SSM_TARGET_AVX2 void fwd_rows_avx2(const FwdArgs<scalar_t>& a, int64_t begin, int64_t end,
                                  FwdScratch<at::opmath_type<scalar_t>>& scratch,
                                  std::vector<at::opmath_type<scalar_t>>& out) {
  fwd_rows(a, begin, end, scratch, out);
}

template <typename scalar_t>
SSM_TARGET_AVX512 void fwd_rows_avx512(const FwdArgs<scalar_t>& a, int64_t begin, int64_t end,
                                      FwdScratch<at::opmath_type<scalar_t>>& scratch,
                                      std::vector<at::opmath_type<scalar_t>>& out) {
  fwd_rows(a, begin, end, scratch, out);
}
#endif

template <typename scalar_t>
FwdRowsFn<scalar_t> pick_fwd_rows() {
#ifdef SSM_X86_VARIANTS
  switch (cpu_isa()) {
    case Isa::avx512: return fwd_rows_avx512<scalar_t>;
    case Isa::avx2: return fwd_rows_avx2<scalar_t>;
    default: break;
  }
#endif
  return fwd_rows_generic<scalar_t>;
}

template <typename scalar_t>
void fwd_cpu_kernel(const FwdArgs<scalar_t>& a) {
  using acc_t = at::opmath_type<scalar_t>;
  const MixShape& s = a.s;
  const FwdRowsFn<scalar_t> rows = pick_fwd_rows<scalar_t>();
  // One (batch, head) row per task: both scans are sequential in L and independent across rows. Rows are
  // handed out in grabs of about 32k state updates (one row at the head layout's P = 64).
  const int64_t grab = std::max<int64_t>(1, 32768 / (2 * s.L * s.N * s.P + 1));
  dynamic_for_intra(s.batch * s.H, grab, at::get_num_threads(), [&](auto take) {
    const bool blocked = uses_blocked_path<acc_t>(s);
    FwdScratch<acc_t> scratch(s.N, s.P, s.L, blocked);
    std::vector<acc_t> out(s.L * (blocked ? padded(s.P) : s.P));
    for (int64_t begin, end; take(begin, end);) rows(a, begin, end, scratch, out);
  });
}

}  // namespace

at::Tensor qs_mix_fwd_cpu(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                          const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                          const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                          const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                          bool dt_softplus, bool hydra_shift) {
  const MixShape s = check_inputs(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev);
  const DirectionTensors fwd(dt, finite_rates(A), B, C, dt_bias, true),
      rev(dt_rev, finite_rates(A_rev), B_rev, C_rev, dt_bias_rev, true);
  auto y = at::empty_like(x);  // keeps x's layout: a transposed (strided) x gives a transposed y
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "qs_mix_fwd_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    FwdArgs<scalar_t> a{s, x.data_ptr<scalar_t>(), {}, fwd.view<acc_t>(), rev.view<acc_t>(), gamma.data_ptr<acc_t>(),
                        {}, dt_softplus, hydra_shift, y.data_ptr<scalar_t>(), {}};
    copy_strides(x, a.x_s);
    copy_strides(gamma, a.gamma_s);
    copy_strides(y, a.y_s);
    fwd_cpu_kernel(a);
  });
  return y;
}

}  // namespace ssm_plugins
