// Quasi-separable (non-causal) mixing, spec mambamixer.md §1.2-1.4 (kernels K2/K3): op schemas, C++ CPU
// kernels (forward and backward), CUDA glue.
//
// Contract of the raw ops (ssm_plugins/ops/qs_mix.py normalises user input to it). Any strides are allowed
// (the channel mixer scans along a strided axis); `acc` is float64 for float64 x, float32 otherwise.
//   x                     (batch, L, H, P)  float32 / float64 / float16 / bfloat16
//   dt, dt_rev, gamma     (batch, L, H)     acc
//   A, A_rev              (H, N) or (H, 1)  acc (diagonal A per head, or scalar A per head)
//   B, C, B_rev, C_rev    (batch, L, G, N)  acc, H % G == 0 (head h reads group h / (H / G))
//   dt_bias, dt_bias_rev  (H,)              acc, optional
//   y                     (batch, L, H, P)  x's dtype and memory layout
// Per (batch, head, feature), with Δ = softplus?(dt + dt_bias), Ā_t = exp(Δ_t A), B̄_t = Δ_t B_t:
//   forward direction:  h_t = Ā_t h_{t-1} + B̄_t x_t,  out_t = C_t·(Ā_t h_{t-1})   (exact strict scan)
//                                                     or C_{t-1}·h_{t-1}         (hydra_shift)
//   reverse direction:  the same recursion run from t = L-1 down to 0 with the *_rev parameters
//   y_t = out_t + out_rev_t + gamma_t x_t
// The backward re-runs each scan, keeping one state per chunk of ~sqrt(L) steps, then walks back through
// each chunk with its states recomputed: O(L) time, O(sqrt(L) N P) memory per (batch, head).
#include "common.h"

#include <algorithm>
#include <cstring>
#include <vector>

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/qs_mix.h"
#endif

namespace ssm_plugins {
namespace {

struct MixShape {
  int64_t batch, L, H, P, N, G;
};

// One scan direction's parameters with element strides (batch, L, H) for dt and (batch, L, G, N) for B, C
// (whose N stride is 1: DirectionTensors makes them contiguous).
// A is (H, A_cols) contiguous with A_cols = N (diagonal) or 1 (scalar: one exp per step instead of N).
template <typename acc_t>
struct Direction {
  const acc_t *dt, *A, *B, *C, *bias;
  int64_t A_cols, dt_s[3], B_s[4], C_s[4];
};

MixShape check_inputs(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                      const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                      const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                      const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev) {
  SSM_CHECK(x.dim() == 4, "qs_mix: x must be (batch, L, H, P)");
  SSM_CHECK(A.dim() == 2 && B.dim() == 4, "qs_mix: A must be (H, N) and B (batch, L, G, N)");
  MixShape s{x.size(0), x.size(1), x.size(2), x.size(3), B.size(3), B.size(2)};
  const auto acc = A.scalar_type();
  SSM_CHECK(acc == (x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat),
            "qs_mix: A must be float64 for float64 x, float32 otherwise");
  for (const at::Tensor* t : {&dt, &dt_rev, &gamma}) {
    SSM_CHECK(t->dim() == 3 && t->size(0) == s.batch && t->size(1) == s.L && t->size(2) == s.H &&
                  t->scalar_type() == acc,
              "qs_mix: dt, dt_rev and gamma must be (batch, L, H) in A's dtype");
  }
  for (const at::Tensor* t : {&A, &A_rev}) {
    SSM_CHECK(t->dim() == 2 && t->size(0) == s.H && (t->size(1) == s.N || t->size(1) == 1) &&
                  t->scalar_type() == acc,
              "qs_mix: A and A_rev must be (H, N) or (H, 1)");
  }
  for (const at::Tensor* t : {&B, &C, &B_rev, &C_rev}) {
    SSM_CHECK(t->dim() == 4 && t->size(0) == s.batch && t->size(1) == s.L && t->size(2) == s.G &&
                  t->size(3) == s.N && t->scalar_type() == acc,
              "qs_mix: B, C, B_rev and C_rev must be (batch, L, G, N) in A's dtype");
  }
  SSM_CHECK(s.G > 0 && s.H % s.G == 0, "qs_mix: H must be a multiple of the number of groups G");
  for (const auto* t : {&dt_bias, &dt_bias_rev}) {
    if (t->has_value()) {
      SSM_CHECK((*t)->dim() == 1 && (*t)->size(0) == s.H && (*t)->scalar_type() == acc,
                "qs_mix: dt_bias and dt_bias_rev must be (H,) in A's dtype");
    }
  }
  return s;
}

// The per-op tensors behind a Direction. dt keeps its strides (it is as long as x's sequence axis); A, the
// bias, B and C are made contiguous: B and C are small (no head or feature axis), and a Mamba-layout
// (batch, N, L) B read N values L elements apart per step, 32 pages per step with C, which ran 4x slower.
struct DirectionTensors {
  at::Tensor dt, A, B, C;
  c10::optional<at::Tensor> bias;
  DirectionTensors(const at::Tensor& dt_, const at::Tensor& A_, const at::Tensor& B_, const at::Tensor& C_,
                   const c10::optional<at::Tensor>& bias_)
      : dt(dt_), A(A_.contiguous()), B(B_.contiguous()), C(C_.contiguous()) {
    if (bias_) bias = bias_->contiguous();
  }
  template <typename acc_t>
  Direction<acc_t> view() const {
    Direction<acc_t> d{dt.data_ptr<acc_t>(), A.data_ptr<acc_t>(), B.data_ptr<acc_t>(), C.data_ptr<acc_t>(),
                       bias ? bias->data_ptr<acc_t>() : nullptr, A.size(1), {}, {}, {}};
    for (int i = 0; i < 3; ++i) d.dt_s[i] = dt.stride(i);
    for (int i = 0; i < 4; ++i) d.B_s[i] = B.stride(i), d.C_s[i] = C.stride(i);
    return d;
  }
};

// Δ before the softplus: dt + dt_bias.
template <typename acc_t>
inline acc_t raw_delta(const Direction<acc_t>& d, int64_t b, int64_t t, int64_t h) {
  return d.dt[b * d.dt_s[0] + t * d.dt_s[1] + h * d.dt_s[2]] + (d.bias ? d.bias[h] : acc_t(0));
}

// v[n] <- exp(v[n]) for float32 in two loops the compiler vectorises (libm's expf is a scalar call, and a
// clamp inside the polynomial loop defeats the vectoriser): clamp to [-87, 88] (below -87 the result is
// ~1e-38 instead of a subnormal or 0), then 2^k e^r with k = round(v / ln 2), |r| <= ln2 / 2 and e^r by its
// Taylor polynomial to r^7 (truncation < 6e-9; measured max relative error 2.1e-7 over the range).
inline void exp_in_place(float* v, int64_t N) {
  for (int64_t n = 0; n < N; ++n) v[n] = v[n] < -87.0f ? -87.0f : (v[n] > 88.0f ? 88.0f : v[n]);
  for (int64_t n = 0; n < N; ++n) {
    const float round_magic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
    const float k = (v[n] * 1.44269504088896341f + round_magic) - round_magic;
    const float r = (v[n] - k * 0.693145751953125f) - k * 1.42860682030941723212e-6f;  // ln 2 split hi + lo
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    v[n] = p * scale;
  }
}

inline void exp_in_place(double* v, int64_t N) {  // float64 stays libm-exact
  for (int64_t n = 0; n < N; ++n) v[n] = std::exp(v[n]);
}

// Ā_t per state index n for head h: exp(Δ A[h, n]).
template <typename acc_t>
inline void fill_decays(const Direction<acc_t>& d, int64_t h, acc_t delta, int64_t N, acc_t* decay) {
  const acc_t* Arow = d.A + h * d.A_cols;
  if (d.A_cols == 1) {
    std::fill(decay, decay + N, std::exp(delta * Arow[0]));
  } else {
    for (int64_t n = 0; n < N; ++n) decay[n] = delta * Arow[n];
    exp_in_place(decay, N);
  }
}

// v[0] + ... + v[N-1] in four interleaved partial sums (vectorises without reassociating a serial chain).
template <typename acc_t>
inline acc_t sum(const acc_t* v, int64_t N) {
  acc_t part[4] = {0, 0, 0, 0};
  int64_t n = 0;
  for (; n + 4 <= N; n += 4) {
    for (int k = 0; k < 4; ++k) part[k] += v[n + k];
  }
  acc_t total = (part[0] + part[1]) + (part[2] + part[3]);
  for (; n < N; ++n) total += v[n];
  return total;
}

template <typename acc_t>
inline acc_t softplus_grad(acc_t v) {
  return v > acc_t(20) ? acc_t(1) : acc_t(1) / (acc_t(1) + std::exp(-v));
}

// Rows split into `parts` contiguous ranges (one per thread) so that per-part partial sums never race.
inline int64_t num_parts(int64_t rows) { return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows)); }

// body(part, begin, end) for every part; the parts are handed out whole, first come first served.
template <typename F>
void for_each_part(int64_t rows, int64_t parts, const F& body) {
  dynamic_for_intra(parts, 1, parts, [&](auto take) {
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t part = begin; part < end; ++part) body(part, rows * part / parts, rows * (part + 1) / parts);
    }
  });
}

// ---- forward ------------------------------------------------------------------------------------------

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

// Per-task scratch of the forward: the state (N, P), and per step x_t (P) and Ā_t, B̄_t, C (N each).
template <typename acc_t>
struct FwdScratch {
  std::vector<acc_t> state, xt, decay, dB, c, term;
  FwdScratch(int64_t N, int64_t P) : state(N * P), xt(P), decay(N), dB(N), c(N), term(N) {}
};

// Adds one direction's strict-scan output for row (b, h) to out[t * P + p].
template <typename scalar_t>
void scan_direction(const FwdArgs<scalar_t>& a, const Direction<at::opmath_type<scalar_t>>& d, bool reverse,
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
      for (int64_t n = 0; n < N; ++n) {
        const acc_t decay = w.decay[n], dB = w.dB[n], c = w.c[n];
        acc_t* hn = state + n * P;
        for (int64_t p = 0; p < P; ++p) {
          const acc_t z = decay * hn[p];
          yt[p] += c * (hydra ? hn[p] : z);
          hn[p] = z + dB * w.xt[p];
        }
      }
    }
    C_prev = Ct;
  }
}

template <typename scalar_t>
void fwd_cpu_kernel(const FwdArgs<scalar_t>& a) {
  using acc_t = at::opmath_type<scalar_t>;
  const MixShape& s = a.s;
  // One (batch, head) row per task: both scans are sequential in L and independent across rows. Rows are
  // handed out in grabs of about 32k state updates (one row at the head layout's P = 64).
  const int64_t grab = std::max<int64_t>(1, 32768 / (2 * s.L * s.N * s.P + 1));
  dynamic_for_intra(s.batch * s.H, grab, at::get_num_threads(), [&](auto take) {
    FwdScratch<acc_t> scratch(s.N, s.P);
    std::vector<acc_t> out(s.L * s.P);
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / s.H, h = row % s.H;
        std::fill(out.begin(), out.end(), acc_t(0));
        scan_direction(a, a.fwd, false, b, h, scratch, out);
        scan_direction(a, a.rev, true, b, h, scratch, out);
        for (int64_t t = 0; t < s.L; ++t) {
          const acc_t gam = a.gamma[b * a.gamma_s[0] + t * a.gamma_s[1] + h * a.gamma_s[2]];
          const scalar_t* xrow = a.x + b * a.x_s[0] + t * a.x_s[1] + h * a.x_s[2];
          scalar_t* yrow = a.y + b * a.y_s[0] + t * a.y_s[1] + h * a.y_s[2];
          for (int64_t p = 0; p < s.P; ++p) {
            yrow[p * a.y_s[3]] = static_cast<scalar_t>(out[t * s.P + p] + gam * static_cast<acc_t>(xrow[p * a.x_s[3]]));
          }
        }
      }
    }
  });
}

template <int D>
void copy_strides(const at::Tensor& t, int64_t (&out)[D]) {
  for (int i = 0; i < D; ++i) out[i] = t.stride(i);
}

at::Tensor qs_mix_fwd_cpu(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                          const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                          const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                          const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                          bool dt_softplus, bool hydra_shift) {
  const MixShape s = check_inputs(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev);
  const DirectionTensors fwd(dt, A, B, C, dt_bias), rev(dt_rev, A_rev, B_rev, C_rev, dt_bias_rev);
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

// ---- backward -----------------------------------------------------------------------------------------

template <typename scalar_t>
struct BwdArgs {
  using acc_t = at::opmath_type<scalar_t>;
  FwdArgs<scalar_t> f;  // the forward's inputs (f.y unused)
  const scalar_t* grad;
  int64_t grad_s[4];
  // outputs, contiguous: dx (batch, L, H, P); ddt, dgamma (batch, L, H); dA per (batch, H, A_cols) row;
  // dB, dC per work part (parts, batch, L, G, N), summed by the caller.
  scalar_t* dx;
  acc_t *ddt[2], *dA[2], *dB[2], *dC[2], *dgamma;
};

// Per-task scratch of the backward: state checkpoints (one per chunk), one chunk's recomputed states and
// decays, the adjoint λ (N, P), per-step rows of x, grad_y (P), B, C and per-n terms (N), dx for the row.
template <typename acc_t>
struct BwdScratch {
  int64_t chunk;
  std::vector<acc_t> ckpt, chunk_states, chunk_decays, lam, xt, gt, g_next, bv, cv, dx_terms, ddelta_terms,
      dlogdecay, dx_acc;
  BwdScratch(const MixShape& s, int64_t chunk_)
      : chunk(chunk_), ckpt((s.L + chunk_ - 1) / chunk_ * s.N * s.P), chunk_states(chunk_ * s.N * s.P),
        chunk_decays(chunk_ * s.N), lam(s.N * s.P), xt(s.P), gt(s.P), g_next(s.P), bv(s.N), cv(s.N),
        dx_terms(s.N), ddelta_terms(s.N), dlogdecay(s.N), dx_acc(s.L * s.P) {}
};

// Gradient of one direction for row (b, h): adds to w.dx_acc[t * P + p] and to this part's dB/dC partial
// sums, writes ddt and adds the row's dA. Adjoint recursion, with λ_t the adjoint of h_t and g_t = dL/dy_t:
//   exact: μ_t = λ_t + C_t g_tᵀ (adjoint of Ā_t h_{t-1});   hydra: λ_t += C_t g_{t+1}ᵀ, μ_t = λ_t
//   λ_{t-1} = Ā_t μ_t;  dB̄_t = λ_t x_t;  dx_t = B̄_tᵀ λ_t;  d(Δ_t A) = Ā_t Σ_p μ_t h_{t-1}
template <typename scalar_t>
void scan_direction_bwd(const BwdArgs<scalar_t>& a, int dir, int64_t part, int64_t b, int64_t h,
                        BwdScratch<at::opmath_type<scalar_t>>& w) {
  using acc_t = at::opmath_type<scalar_t>;
  const FwdArgs<scalar_t>& f = a.f;
  const MixShape& s = f.s;
  const Direction<acc_t>& d = dir == 0 ? f.fwd : f.rev;
  const bool reverse = dir == 1, hydra = f.hydra_shift;
  const int64_t g = h / (s.H / s.G), N = s.N, P = s.P, NP = N * P, chunk = w.chunk;
  const int64_t n_chunks = (s.L + chunk - 1) / chunk;
  const acc_t* Arow = d.A + h * d.A_cols;
  const int64_t a_step = d.A_cols == 1 ? 0 : 1;  // Arow[n * a_step] is A[h, n]
  auto order = [&](int64_t i) { return reverse ? s.L - 1 - i : i; };
  auto delta_at = [&](int64_t t) {
    const acc_t v = raw_delta(d, b, t, h);
    return f.softplus_dt ? softplus(v) : v;
  };
  auto load = [&](const scalar_t* base, const int64_t* st, int64_t t, std::vector<acc_t>& dst) {
    const scalar_t* row = base + b * st[0] + t * st[1] + h * st[2];
    for (int64_t p = 0; p < P; ++p) dst[p] = static_cast<acc_t>(row[p * st[3]]);
  };
  auto B_row = [&](int64_t t) { return d.B + b * d.B_s[0] + t * d.B_s[1] + g * d.B_s[2]; };
  auto C_row = [&](int64_t t) { return d.C + b * d.C_s[0] + t * d.C_s[1] + g * d.C_s[2]; };
  // state <- Ā_t state + B̄_t x_t, leaving Ā_t in `decay`
  auto step = [&](int64_t t, acc_t* state, acc_t* decay) {
    const acc_t delta = delta_at(t);
    load(f.x, f.x_s, t, w.xt);
    fill_decays(d, h, delta, N, decay);
    const acc_t* Bt = B_row(t);
    for (int64_t n = 0; n < N; ++n) {
      const acc_t dB = delta * Bt[n];
      for (int64_t p = 0; p < P; ++p) state[n * P + p] = decay[n] * state[n * P + p] + dB * w.xt[p];
    }
  };
  // Pass 1: the state entering each chunk (lam is free until pass 2).
  acc_t* lam = w.lam.data();
  std::fill(w.lam.begin(), w.lam.end(), acc_t(0));
  for (int64_t i = 0; i < s.L; ++i) {
    if (i % chunk == 0) std::copy(lam, lam + NP, w.ckpt.begin() + (i / chunk) * NP);
    step(order(i), lam, w.chunk_decays.data());
  }
  // Pass 2: chunks from last to first, each replayed from its checkpoint, then walked back.
  std::fill(w.lam.begin(), w.lam.end(), acc_t(0));
  std::fill(w.g_next.begin(), w.g_next.end(), acc_t(0));  // hydra: no output after the last step
  acc_t* dA_row = a.dA[dir] + (b * s.H + h) * d.A_cols;
  acc_t* dB_part = a.dB[dir] + part * s.batch * s.L * s.G * N;
  acc_t* dC_part = a.dC[dir] + part * s.batch * s.L * s.G * N;
  for (int64_t c = n_chunks - 1; c >= 0; --c) {
    const int64_t i0 = c * chunk, i1 = std::min(s.L, i0 + chunk);
    std::copy(w.ckpt.begin() + c * NP, w.ckpt.begin() + (c + 1) * NP, w.chunk_states.begin());
    for (int64_t i = i0; i < i1; ++i) {  // states before each step, and each step's decays
      acc_t* decay = w.chunk_decays.data() + (i - i0) * N;
      if (i + 1 < i1) {
        acc_t* next = w.chunk_states.data() + (i - i0 + 1) * NP;
        std::copy(next - NP, next, next);
        step(order(i), next, decay);
      } else {
        fill_decays(d, h, delta_at(order(i)), N, decay);
      }
    }
    for (int64_t i = i1 - 1; i >= i0; --i) {
      const int64_t t = order(i);
      const acc_t* hprev = w.chunk_states.data() + (i - i0) * NP;  // state before step t
      const acc_t* decay = w.chunk_decays.data() + (i - i0) * N;
      const acc_t v = raw_delta(d, b, t, h);
      const acc_t delta = f.softplus_dt ? softplus(v) : v;
      load(f.x, f.x_s, t, w.xt);
      load(a.grad, a.grad_s, t, w.gt);
      const acc_t* Bt = B_row(t);
      const acc_t* Ct = C_row(t);
      for (int64_t n = 0; n < N; ++n) w.bv[n] = Bt[n], w.cv[n] = Ct[n];
      acc_t* dB_t = dB_part + ((b * s.L + t) * s.G + g) * N;  // contiguous (batch, L, G, N)
      acc_t* dC_t = dC_part + ((b * s.L + t) * s.G + g) * N;
      acc_t* dx_t = w.dx_acc.data() + t * P;
      // out_t reads g_t (exact) or the next output's gradient (hydra); the other one is zero here.
      const acc_t* g_read = hydra ? w.g_next.data() : w.gt.data();
      acc_t ddelta = 0;
      if (P == 1) {  // the Mamba layout: loops over N that vectorise, then their sums
        const acc_t x0 = w.xt[0], g0 = g_read[0];
        for (int64_t n = 0; n < N; ++n) {
          const acc_t hp = hprev[n], Bn = w.bv[n], Cn = w.cv[n];
          const acc_t l = hydra ? lam[n] + Cn * g0 : lam[n];
          const acc_t mu = hydra ? l : l + Cn * g0;
          dC_t[n] += g0 * (hydra ? decay[n] * hp + delta * Bn * x0 : decay[n] * hp);
          dB_t[n] += delta * l * x0;
          w.dx_terms[n] = Bn * l;
          const acc_t d_logdecay = mu * hp * decay[n];  // d/d(Δ A_n)
          w.ddelta_terms[n] = Bn * l * x0 + d_logdecay * Arow[n * a_step];
          w.dlogdecay[n] = d_logdecay;
          lam[n] = decay[n] * mu;
        }
        dx_t[0] += delta * sum(w.dx_terms.data(), N);
        ddelta = sum(w.ddelta_terms.data(), N);
        if (a_step == 0) {
          dA_row[0] += delta * sum(w.dlogdecay.data(), N);
        } else {
          for (int64_t n = 0; n < N; ++n) dA_row[n] += delta * w.dlogdecay[n];
        }
      } else {
        for (int64_t n = 0; n < N; ++n) {
          const acc_t* hp = hprev + n * P;
          acc_t* ln = lam + n * P;
          const acc_t Bn = w.bv[n], Cn = w.cv[n], dn = decay[n];
          acc_t dCn = 0, lam_x = 0, mu_h = 0;
          for (int64_t p = 0; p < P; ++p) {
            if (hydra) {
              dCn += g_read[p] * (dn * hp[p] + delta * Bn * w.xt[p]);  // g_{t+1} · h_t
              ln[p] += Cn * g_read[p];
            } else {
              dCn += g_read[p] * dn * hp[p];  // g_t · (Ā_t h_{t-1})
            }
            const acc_t mu = hydra ? ln[p] : ln[p] + Cn * g_read[p];
            lam_x += ln[p] * w.xt[p];
            mu_h += mu * hp[p];
            dx_t[p] += delta * Bn * ln[p];
            ln[p] = dn * mu;
          }
          dC_t[n] += dCn;
          dB_t[n] += delta * lam_x;
          const acc_t d_logdecay = mu_h * dn;
          ddelta += Bn * lam_x + d_logdecay * Arow[n * a_step];
          dA_row[n * a_step] += d_logdecay * delta;
        }
      }
      a.ddt[dir][(b * s.L + t) * s.H + h] = f.softplus_dt ? ddelta * softplus_grad(v) : ddelta;
      if (hydra) std::copy(w.gt.begin(), w.gt.end(), w.g_next.begin());  // step i-1's next output is t
    }
  }
}

template <typename scalar_t>
void bwd_cpu_kernel(const BwdArgs<scalar_t>& a, int64_t parts) {
  using acc_t = at::opmath_type<scalar_t>;
  const FwdArgs<scalar_t>& f = a.f;
  const MixShape& s = f.s;
  const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(s.L)))));
  for_each_part(s.batch * s.H, parts, [&](int64_t part, int64_t begin, int64_t end) {
    BwdScratch<acc_t> w(s, chunk);
    for (int64_t row = begin; row < end; ++row) {
      const int64_t b = row / s.H, h = row % s.H;
      std::fill(w.dx_acc.begin(), w.dx_acc.end(), acc_t(0));
      for (int dir = 0; dir < 2; ++dir) scan_direction_bwd(a, dir, part, b, h, w);
      // The free diagonal: y_t += gamma_t x_t.
      for (int64_t t = 0; t < s.L; ++t) {
        const acc_t gam = f.gamma[b * f.gamma_s[0] + t * f.gamma_s[1] + h * f.gamma_s[2]];
        const scalar_t* xrow = f.x + b * f.x_s[0] + t * f.x_s[1] + h * f.x_s[2];
        const scalar_t* grow = a.grad + b * a.grad_s[0] + t * a.grad_s[1] + h * a.grad_s[2];
        scalar_t* dxrow = a.dx + ((b * s.L + t) * s.H + h) * s.P;
        acc_t dgam = 0;
        for (int64_t p = 0; p < s.P; ++p) {
          const acc_t gv = static_cast<acc_t>(grow[p * a.grad_s[3]]);
          dgam += gv * static_cast<acc_t>(xrow[p * f.x_s[3]]);
          dxrow[p] = static_cast<scalar_t>(w.dx_acc[t * s.P + p] + gam * gv);
        }
        a.dgamma[(b * s.L + t) * s.H + h] = dgam;
      }
    }
  });
}

using BwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor, at::Tensor>;

BwdResult qs_mix_bwd_cpu(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                         const at::Tensor& B, const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                         const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                         const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                         bool dt_softplus, bool hydra_shift) {
  const MixShape s = check_inputs(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev);
  SSM_CHECK(grad_y.sizes() == x.sizes() && grad_y.scalar_type() == x.scalar_type(),
            "qs_mix_bwd: grad_y must match x in shape and dtype");
  const DirectionTensors fwd(dt, A, B, C, dt_bias), rev(dt_rev, A_rev, B_rev, C_rev, dt_bias_rev);
  const auto acc_opts = A.options();
  const int64_t parts = num_parts(s.batch * s.H);
  auto dx = at::empty(x.sizes(), x.options());
  auto dgamma = at::empty({s.batch, s.L, s.H}, acc_opts);
  at::Tensor ddt[2], dA[2], dB[2], dC[2];
  for (int dir = 0; dir < 2; ++dir) {
    ddt[dir] = at::empty({s.batch, s.L, s.H}, acc_opts);
    dA[dir] = at::zeros({s.batch, s.H, (dir == 0 ? A : A_rev).size(1)}, acc_opts);
    dB[dir] = at::zeros({parts, s.batch, s.L, s.G, s.N}, acc_opts);
    dC[dir] = at::zeros({parts, s.batch, s.L, s.G, s.N}, acc_opts);
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "qs_mix_bwd_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    BwdArgs<scalar_t> a{};
    a.f = FwdArgs<scalar_t>{s, x.data_ptr<scalar_t>(), {}, fwd.view<acc_t>(), rev.view<acc_t>(),
                            gamma.data_ptr<acc_t>(), {}, dt_softplus, hydra_shift, nullptr, {}};
    copy_strides(x, a.f.x_s);
    copy_strides(gamma, a.f.gamma_s);
    a.grad = grad_y.data_ptr<scalar_t>();
    copy_strides(grad_y, a.grad_s);
    a.dx = dx.data_ptr<scalar_t>();
    a.dgamma = dgamma.data_ptr<acc_t>();
    for (int dir = 0; dir < 2; ++dir) {
      a.ddt[dir] = ddt[dir].data_ptr<acc_t>();
      a.dA[dir] = dA[dir].data_ptr<acc_t>();
      a.dB[dir] = dB[dir].data_ptr<acc_t>();
      a.dC[dir] = dC[dir].data_ptr<acc_t>();
    }
    bwd_cpu_kernel(a, parts);
  });
  return {dx,          ddt[0], dA[0].sum(0), dB[0].sum(0), dC[0].sum(0), ddt[1], dA[1].sum(0),
          dB[1].sum(0), dC[1].sum(0), dgamma};
}

#ifdef WITH_CUDA
// Element strides of the tensors the CUDA kernels read, in the launcher's fixed order (see cuda/qs_mix.h).
cuda::QsMixTensors cuda_tensors(const at::Tensor& x, const DirectionTensors& fwd, const DirectionTensors& rev,
                                const at::Tensor& gamma) {
  cuda::QsMixTensors t{};
  t.x = x.data_ptr();
  copy_strides(x, t.x_s);
  t.gamma = gamma.data_ptr();
  copy_strides(gamma, t.gamma_s);
  const DirectionTensors* dirs[2] = {&fwd, &rev};
  for (int dir = 0; dir < 2; ++dir) {
    const DirectionTensors& d = *dirs[dir];
    t.dir[dir].dt = d.dt.data_ptr();
    t.dir[dir].A = d.A.data_ptr();
    t.dir[dir].B = d.B.data_ptr();
    t.dir[dir].C = d.C.data_ptr();
    t.dir[dir].bias = d.bias ? d.bias->data_ptr() : nullptr;
    t.dir[dir].A_cols = d.A.size(1);
    copy_strides(d.dt, t.dir[dir].dt_s);
    copy_strides(d.B, t.dir[dir].B_s);
    copy_strides(d.C, t.dir[dir].C_s);
  }
  return t;
}

at::Tensor qs_mix_fwd_cuda(const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A, const at::Tensor& B,
                           const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                           const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                           const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                           bool dt_softplus, bool hydra_shift) {
  const MixShape s = check_inputs(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev);
  const c10::cuda::CUDAGuard guard(x.device());
  const DirectionTensors fwd(dt, A, B, C, dt_bias), rev(dt_rev, A_rev, B_rev, C_rev, dt_bias_rev);
  // The kernel accumulates both directions in the accumulation dtype, then y is cast to x's dtype.
  auto y_acc = at::empty_like(x, x.options().dtype(A.scalar_type()));
  cuda::QsMixTensors t = cuda_tensors(x, fwd, rev, gamma);
  int64_t y_s[4];
  copy_strides(y_acc, y_s);
  cuda::qs_mix_fwd_launch(static_cast<int>(dtype_code(x)), s.batch, s.L, s.H, s.P, s.N, s.G, t, dt_softplus,
                          hydra_shift, y_acc.data_ptr(), y_s, c10::cuda::getCurrentCUDAStream().stream());
  return y_acc.to(x.scalar_type());
}

BwdResult qs_mix_bwd_cuda(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                          const at::Tensor& B, const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                          const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                          const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                          bool dt_softplus, bool hydra_shift) {
  const MixShape s = check_inputs(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev);
  SSM_CHECK(grad_y.sizes() == x.sizes() && grad_y.scalar_type() == x.scalar_type(),
            "qs_mix_bwd: grad_y must match x in shape and dtype");
  const c10::cuda::CUDAGuard guard(x.device());
  const DirectionTensors fwd(dt, A, B, C, dt_bias), rev(dt_rev, A_rev, B_rev, C_rev, dt_bias_rev);
  const auto acc_opts = A.options();
  const int64_t chunk = cuda::qs_mix_bwd_chunk(s.L);
  const int64_t columns = cuda::qs_mix_bwd_columns(s.batch, s.H, s.P);
  // Per-column state checkpoints and one chunk of recomputed states (column index fastest, for coalescing).
  auto ckpt = at::empty({(s.L + chunk - 1) / chunk, s.N, columns}, acc_opts);
  auto chunk_states = at::empty({chunk, s.N, columns}, acc_opts);
  auto dx_acc = at::empty({s.batch, s.L, s.H, s.P}, acc_opts);
  auto dgamma = at::zeros({s.batch, s.L, s.H}, acc_opts);
  at::Tensor ddt[2], dA[2], dB[2], dC[2];
  void *ddt_p[2], *dA_p[2], *dB_p[2], *dC_p[2];
  for (int dir = 0; dir < 2; ++dir) {
    ddt[dir] = at::zeros({s.batch, s.L, s.H}, acc_opts);
    dA[dir] = at::zeros({s.H, (dir == 0 ? A : A_rev).size(1)}, acc_opts);
    dB[dir] = at::zeros({s.batch, s.L, s.G, s.N}, acc_opts);
    dC[dir] = at::zeros({s.batch, s.L, s.G, s.N}, acc_opts);
    ddt_p[dir] = ddt[dir].data_ptr(), dA_p[dir] = dA[dir].data_ptr();
    dB_p[dir] = dB[dir].data_ptr(), dC_p[dir] = dC[dir].data_ptr();
  }
  cuda::QsMixTensors t = cuda_tensors(x, fwd, rev, gamma);
  int64_t grad_s[4];
  copy_strides(grad_y, grad_s);
  cuda::qs_mix_bwd_launch(static_cast<int>(dtype_code(x)), s.batch, s.L, s.H, s.P, s.N, s.G, t, dt_softplus,
                          hydra_shift, grad_y.data_ptr(), grad_s, chunk, ckpt.data_ptr(), chunk_states.data_ptr(),
                          dx_acc.data_ptr(), ddt_p, dA_p, dB_p, dC_p, dgamma.data_ptr(),
                          c10::cuda::getCurrentCUDAStream().stream());
  return {dx_acc.to(x.scalar_type()), ddt[0], dA[0], dB[0], dC[0], ddt[1], dA[1], dB[1], dC[1], dgamma};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(ssm_plugins, m) {
  m.def(
      "qs_mix_fwd(Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor dt_rev, Tensor A_rev, Tensor B_rev, "
      "Tensor C_rev, Tensor gamma, Tensor? dt_bias, Tensor? dt_bias_rev, bool dt_softplus, bool hydra_shift) "
      "-> Tensor");
  m.def(
      "qs_mix_bwd(Tensor grad_y, Tensor x, Tensor dt, Tensor A, Tensor B, Tensor C, Tensor dt_rev, Tensor A_rev, "
      "Tensor B_rev, Tensor C_rev, Tensor gamma, Tensor? dt_bias, Tensor? dt_bias_rev, bool dt_softplus, "
      "bool hydra_shift) -> (Tensor dx, Tensor ddt, Tensor dA, Tensor dB, Tensor dC, Tensor ddt_rev, "
      "Tensor dA_rev, Tensor dB_rev, Tensor dC_rev, Tensor dgamma)");
}

TORCH_LIBRARY_IMPL(ssm_plugins, CPU, m) {
  m.impl("qs_mix_fwd", &qs_mix_fwd_cpu);
  m.impl("qs_mix_bwd", &qs_mix_bwd_cpu);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(ssm_plugins, CUDA, m) {
  m.impl("qs_mix_fwd", &qs_mix_fwd_cuda);
  m.impl("qs_mix_bwd", &qs_mix_bwd_cuda);
}
#endif

}  // namespace ssm_plugins
