// Quasi-separable mixing, CPU backward: per (batch, head) row and direction, the adjoint recursion over
// chunks whose states are recomputed from checkpoints; dB and dC summed per work part. Shared pieces in
// qs_mix_cpu.h.
#include "qs_mix_cpu.h"

#include <type_traits>

namespace ssm_plugins {
namespace {

template <typename scalar_t>
struct BwdArgs {
  using acc_t = at::opmath_type<scalar_t>;
  FwdArgs<scalar_t> f;  // the forward's inputs (f.y unused)
  const scalar_t* grad;
  int64_t grad_s[4];
  // outputs: dx in x's layout (dx_s); contiguous: ddt, dgamma (batch, L, H); dA per (batch, H, A_cols) row;
  // dB, dC per work part (parts, batch, L, G, N), summed by the caller.
  scalar_t* dx;
  int64_t dx_s[4];
  acc_t *ddt[2], *dA[2], *dB[2], *dC[2], *dgamma;
};

// Per-task scratch of the backward: state checkpoints (one per chunk), one chunk's recomputed states and
// decays, the adjoint λ (N, P), per-step rows of x, grad_y (P), B, C and per-n terms (N), dx for the row.
template <typename acc_t>
struct BwdScratch {
  int64_t chunk;
  std::vector<acc_t> ckpt, chunk_states, chunk_decays, lam, zeros, bv, cv, dx_terms, ddelta_terms,
      dlogdecay, dx_acc, x_row, g_row, rowbuf;  // x_row, g_row: the row's x and grad_y, (L, P) contiguous
  BwdScratch(const MixShape& s, int64_t chunk_)
      : chunk(chunk_), ckpt((s.L + chunk_ - 1) / chunk_ * s.N * s.P), chunk_states(chunk_ * s.N * s.P),
        chunk_decays(chunk_ * s.N), lam(s.N * s.P), zeros(s.P), bv(s.N), cv(s.N),
        dx_terms(s.N), ddelta_terms(s.N), dlogdecay(s.N), dx_acc(s.L * s.P), x_row(s.L * s.P), g_row(s.L * s.P),
        rowbuf(3 * round_steps(s.L)) {}
};

// One backward step of the head layout (P > 1) for N = 16 float states: the block loop of
// scan_direction_bwd with the per-state sums over p (dC, λ·x, μ·h) kept as one vector per state and summed
// across lanes by one transposed tree for all 16 states (an `omp simd` reduction ends each (state, block) with
// a serial sum over the lanes: ~50 cycles of latency, 96 of them per step at P = 64). Adds Δ Bᵀλ to dx_t.
template <typename acc_t>
QS_INLINE void bwd_step16(const acc_t* hprev, acc_t* lam, const acc_t* g, const acc_t* x, const acc_t* Bv,
                          const acc_t* Cv, const acc_t* decay, acc_t delta, int64_t P, bool hydra, acc_t* dx_t,
                          acc_t* dC_sum, acc_t* lamx_sum, acc_t* muh_sum) {
  using S = Simd<acc_t>;
  using V = typename S::V;
  constexpr int W = S::W;
  V part[3][W];
  acc_t tail[3][W] = {};
  const int64_t Pv = P / W * W;
  // Two states per pass over p: g, x and dx are read (and dx written) once for both.
  for (int n = 0; n < W; n += 2) {
    const acc_t C0 = Cv[n], d0 = decay[n], dB0 = delta * Bv[n];
    const acc_t C1 = Cv[n + 1], d1 = decay[n + 1], dB1 = delta * Bv[n + 1];
    const acc_t *hp0 = hprev + n * P, *hp1 = hp0 + P;
    acc_t *ln0 = lam + n * P, *ln1 = ln0 + P;
    V dC0{}, lx0{}, mh0{}, dC1{}, lx1{}, mh1{};
    for (int64_t p = 0; p < Pv; p += W) {
      const V gv = S::load(g + p), xv = S::load(x + p);
      const V h0 = S::load(hp0 + p), l0 = S::load(ln0 + p), h1 = S::load(hp1 + p), l1 = S::load(ln1 + p);
      const V mu0 = l0 + C0 * gv, mu1 = l1 + C1 * gv;  // exact: adjoint of Ā_t h_{t-1}; hydra: λ_t += C_t g_{t+1}
      V dxv = S::load(dx_t + p);
      if (hydra) {
        dC0 += gv * (d0 * h0 + dB0 * xv);  // g_{t+1} · h_t
        dC1 += gv * (d1 * h1 + dB1 * xv);
        lx0 += mu0 * xv;
        lx1 += mu1 * xv;
        dxv += dB0 * mu0 + dB1 * mu1;
      } else {
        dC0 += gv * h0;  // g_t · (Ā_t h_{t-1}) = Ā_t (g_t · h_{t-1}): Ā_t applied once, after the sum
        dC1 += gv * h1;
        lx0 += l0 * xv;
        lx1 += l1 * xv;
        dxv += dB0 * l0 + dB1 * l1;
      }
      mh0 += mu0 * h0;
      mh1 += mu1 * h1;
      S::store(dx_t + p, dxv);
      S::store(ln0 + p, d0 * mu0);
      S::store(ln1 + p, d1 * mu1);
    }
    part[0][n] = hydra ? dC0 : d0 * dC0;
    part[0][n + 1] = hydra ? dC1 : d1 * dC1;
    part[1][n] = lx0;
    part[1][n + 1] = lx1;
    part[2][n] = mh0;
    part[2][n + 1] = mh1;
  }
  for (int n = 0; n < W; ++n) {  // the last P % W features
    const acc_t Cn = Cv[n], dn = decay[n], dBn = delta * Bv[n];
    const acc_t* hp = hprev + n * P;
    acc_t* ln = lam + n * P;
    for (int64_t p = Pv; p < P; ++p) {
      const acc_t mu = ln[p] + Cn * g[p];
      tail[0][n] += g[p] * (hydra ? dn * hp[p] + dBn * x[p] : dn * hp[p]);
      tail[1][n] += (hydra ? mu : ln[p]) * x[p];
      tail[2][n] += mu * hp[p];
      dx_t[p] += dBn * (hydra ? mu : ln[p]);
      ln[p] = dn * mu;
    }
  }
  S::store(dC_sum, TreeSum<V, W, W>::run(part[0]) + S::load(tail[0]));
  S::store(lamx_sum, TreeSum<V, W, W>::run(part[1]) + S::load(tail[1]));
  S::store(muh_sum, TreeSum<V, W, W>::run(part[2]) + S::load(tail[2]));
}

// Gradient of one direction for row (b, h): adds to w.dx_acc[t * P + p] and to this part's dB/dC partial
// sums, writes ddt and adds the row's dA. Adjoint recursion, with λ_t the adjoint of h_t and g_t = dL/dy_t:
//   exact: μ_t = λ_t + C_t g_tᵀ (adjoint of Ā_t h_{t-1});   hydra: λ_t += C_t g_{t+1}ᵀ, μ_t = λ_t
//   λ_{t-1} = Ā_t μ_t;  dB̄_t = λ_t x_t;  dx_t = B̄_tᵀ λ_t;  d(Δ_t A) = Ā_t Σ_p μ_t h_{t-1}
template <typename scalar_t>
QS_INLINE void scan_direction_bwd(const BwdArgs<scalar_t>& a, int dir, int64_t part, int64_t b, int64_t h,
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
  auto order = [&](int64_t i) QS_LAMBDA_INLINE { return reverse ? s.L - 1 - i : i; };
  const int64_t Lpad = round_steps(s.L);
  acc_t *deltas = w.rowbuf.data(), *dsoftplus = deltas + Lpad, *decay1 = deltas + 2 * Lpad;
  row_steps(d, f.softplus_dt, b, h, s.L, deltas, dsoftplus, decay1);
  auto delta_at = [&](int64_t t) QS_LAMBDA_INLINE { return deltas[t]; };
  // step t's x and grad_y: P contiguous values in the row's copies (bwd_rows)
  auto x_at = [&](int64_t t) QS_LAMBDA_INLINE { return w.x_row.data() + t * P; };
  auto g_at = [&](int64_t t) QS_LAMBDA_INLINE { return w.g_row.data() + t * P; };
  auto B_row = [&](int64_t t) QS_LAMBDA_INLINE { return d.B + b * d.B_s[0] + t * d.B_s[1] + g * d.B_s[2]; };
  auto C_row = [&](int64_t t) QS_LAMBDA_INLINE { return d.C + b * d.C_s[0] + t * d.C_s[1] + g * d.C_s[2]; };
  // state <- Ā_t state + B̄_t x_t, leaving Ā_t in `decay`
  // next <- Ā_t state + B̄_t x_t (next may be state), leaving Ā_t in `decay`
  auto step = [&](int64_t t, const acc_t* state, acc_t* next, acc_t* decay) QS_LAMBDA_INLINE {
    const acc_t delta = delta_at(t);
    step_decays(d, h, delta, decay1[t], N, decay);
    const acc_t* Bt = B_row(t);
    using S = Simd<acc_t>;
    const int64_t Pv = P / S::W * S::W;
    const acc_t* xt = x_at(t);
    for (int64_t n = 0; n < N; ++n) {  // explicit vectors: the auto-vectorised loop re-checked aliasing per state
      const acc_t dB = delta * Bt[n], dn = decay[n];
      const acc_t* sn = state + n * P;
      acc_t* nn = next + n * P;
      for (int64_t p = 0; p < Pv; p += S::W) S::store(nn + p, dn * S::load(sn + p) + dB * S::load(xt + p));
      for (int64_t p = Pv; p < P; ++p) nn[p] = dn * sn[p] + dB * xt[p];
    }
  };
  // Pass 1: the state entering each chunk, stepped between lam and the first chunk state (both free until
  // pass 2). One chunk (a row short enough to keep all its states) starts from zero: no pass 1.
  acc_t* lam = w.lam.data();
  std::fill(w.lam.begin(), w.lam.end(), acc_t(0));
  std::copy(lam, lam + NP, w.ckpt.begin());
  acc_t *cur = lam, *spare = w.chunk_states.data();
  for (int64_t i = 0; n_chunks > 1 && i < s.L; ++i) {
    if (i % chunk == 0) std::copy(cur, cur + NP, w.ckpt.begin() + (i / chunk) * NP);
    step(order(i), cur, spare, w.chunk_decays.data());
    std::swap(cur, spare);
  }
  // Pass 2: chunks from last to first, each replayed from its checkpoint, then walked back.
  std::fill(w.lam.begin(), w.lam.end(), acc_t(0));
  const acc_t* g_next = w.zeros.data();  // hydra: the next output's gradient, none after the last step
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
        step(order(i), next - NP, next, decay);
      } else {
        step_decays(d, h, delta_at(order(i)), decay1[order(i)], N, decay);
      }
    }
    for (int64_t i = i1 - 1; i >= i0; --i) {
      const int64_t t = order(i);
      const acc_t* hprev = w.chunk_states.data() + (i - i0) * NP;  // state before step t
      const acc_t* decay = w.chunk_decays.data() + (i - i0) * N;
      const acc_t delta = delta_at(t);
      const acc_t *xt = x_at(t), *gt = g_at(t);
      const acc_t* Bt = B_row(t);
      const acc_t* Ct = C_row(t);
      for (int64_t n = 0; n < N; ++n) w.bv[n] = Bt[n], w.cv[n] = Ct[n];
      acc_t* dB_t = dB_part + ((b * s.L + t) * s.G + g) * N;  // contiguous (batch, L, G, N)
      acc_t* dC_t = dC_part + ((b * s.L + t) * s.G + g) * N;
      acc_t* dx_t = w.dx_acc.data() + t * P;
      // out_t reads g_t (exact) or the next output's gradient (hydra); the other one is zero here.
      const acc_t* g_read = hydra ? g_next : gt;
      acc_t ddelta = 0;
      if (P == 1) {  // the Mamba layout: loops over N that vectorise, then their sums
        const acc_t x0 = xt[0], g0 = g_read[0];
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
        // Blocks of kBlock features outer, states inner: the block's dx stays in registers across the N
        // states; the per-state sums over p (dC, λ·x, μ·h) are accumulated over the blocks.
        acc_t* dC_sum = w.dx_terms.data();
        acc_t* lamx_sum = w.ddelta_terms.data();
        acc_t* muh_sum = w.dlogdecay.data();
        std::fill(dC_sum, dC_sum + N, acc_t(0));
        std::fill(lamx_sum, lamx_sum + N, acc_t(0));
        std::fill(muh_sum, muh_sum + N, acc_t(0));
        bool vectorised = false;
        if constexpr (std::is_same<acc_t, float>::value) {
          if (N == Simd<float>::W) {
            bwd_step16(hprev, lam, g_read, xt, w.bv.data(), w.cv.data(), decay, delta, P, hydra, dx_t, dC_sum,
                       lamx_sum, muh_sum);
            vectorised = true;
          }
        }
        // The sums over p are reductions: without `omp simd reduction` the compiler may not reorder them
        // and leaves the loop scalar (the backward ran at 12x its forward on K2's heads of 64).
        auto block = [&](int64_t p0, int64_t width, acc_t* dx_block) QS_LAMBDA_INLINE {
          for (int64_t n = 0; n < N; ++n) {
            const acc_t* hp = hprev + n * P + p0;
            acc_t* ln = lam + n * P + p0;
            const acc_t* gp = g_read + p0;
            const acc_t* xp = xt + p0;
            const acc_t Bn = w.bv[n], Cn = w.cv[n], dn = decay[n];
            acc_t dCn = 0, lam_x = 0, mu_h = 0;
            if (hydra) {
#pragma omp simd reduction(+ : dCn, lam_x, mu_h)
              for (int64_t p = 0; p < width; ++p) {
                dCn += gp[p] * (dn * hp[p] + delta * Bn * xp[p]);  // g_{t+1} · h_t
                const acc_t mu = ln[p] + Cn * gp[p];  // λ_t += C_t g_{t+1}, μ_t = λ_t
                lam_x += mu * xp[p];
                mu_h += mu * hp[p];
                dx_block[p] += Bn * mu;
                ln[p] = dn * mu;
              }
            } else {
#pragma omp simd reduction(+ : dCn, lam_x, mu_h)
              for (int64_t p = 0; p < width; ++p) {
                dCn += gp[p] * dn * hp[p];  // g_t · (Ā_t h_{t-1})
                const acc_t mu = ln[p] + Cn * gp[p];
                lam_x += ln[p] * xp[p];
                mu_h += mu * hp[p];
                dx_block[p] += Bn * ln[p];
                ln[p] = dn * mu;
              }
            }
            dC_sum[n] += dCn;
            lamx_sum[n] += lam_x;
            muh_sum[n] += mu_h;
          }
        };
        int64_t p0 = vectorised ? P : 0;
        for (; p0 + kBlock <= P; p0 += kBlock) {
          acc_t dx_block[kBlock] = {};
          block(p0, kBlock, dx_block);
#pragma omp simd
          for (int64_t p = 0; p < kBlock; ++p) dx_t[p0 + p] += delta * dx_block[p];
        }
        if (p0 < P) {  // the last P % kBlock features
          acc_t dx_block[kBlock] = {};
          block(p0, P - p0, dx_block);
          for (int64_t p = 0; p < P - p0; ++p) dx_t[p0 + p] += delta * dx_block[p];
        }
        // Per state n; the sums over n in partial sums (a serial sum, and a scalar A's dA_row[0] added to
        // through memory once per state, were a latency chain of ~100 cycles per step).
        acc_t* d_logdecay = muh_sum;  // d/d(Δ A_n) = Ā_t Σ_p μ h, in place
        for (int64_t n = 0; n < N; ++n) {
          dC_t[n] += dC_sum[n];
          dB_t[n] += delta * lamx_sum[n];
          d_logdecay[n] *= decay[n];
        }
        acc_t* ddelta_terms = dC_sum;
        for (int64_t n = 0; n < N; ++n) ddelta_terms[n] = w.bv[n] * lamx_sum[n] + d_logdecay[n] * Arow[n * a_step];
        ddelta += sum(ddelta_terms, N);
        if (a_step == 0) {
          dA_row[0] += delta * sum(d_logdecay, N);
        } else {
          for (int64_t n = 0; n < N; ++n) dA_row[n] += d_logdecay[n] * delta;
        }
      }
      a.ddt[dir][(b * s.L + t) * s.H + h] = ddelta * dsoftplus[t];
      g_next = gt;  // step i-1's next output is t
    }
  }
}

// Rows [begin, end) of work part `part`: both directions' adjoints, then the free diagonal's gradients.
template <typename scalar_t>
QS_INLINE void bwd_rows(const BwdArgs<scalar_t>& a, int64_t part, int64_t begin, int64_t end,
                        BwdScratch<at::opmath_type<scalar_t>>& w) {
  using acc_t = at::opmath_type<scalar_t>;
  const FwdArgs<scalar_t>& f = a.f;
  const MixShape& s = f.s;
  for (int64_t row = begin; row < end; ++row) {
    const int64_t b = row / s.H, h = row % s.H;
    std::fill(w.dx_acc.begin(), w.dx_acc.end(), acc_t(0));
    transfer_row<true>(f.x, f.x_s, b, h, s.L, s.P, s.P, w.x_row.data());
    transfer_row<true>(a.grad, a.grad_s, b, h, s.L, s.P, s.P, w.g_row.data());
    for (int dir = 0; dir < 2; ++dir) scan_direction_bwd(a, dir, part, b, h, w);
    // The free diagonal: y_t += gamma_t x_t. dx is added in the row buffer, then written through its strides in
    // one pass (x's layout: a view of (batch, dim, L) activations takes its gradient without a transposed copy).
    for (int64_t t = 0; t < s.L; ++t) {
      const acc_t gam = f.gamma[b * f.gamma_s[0] + t * f.gamma_s[1] + h * f.gamma_s[2]];
      const acc_t* __restrict xrow = w.x_row.data() + t * s.P;
      const acc_t* __restrict grow = w.g_row.data() + t * s.P;
      acc_t* __restrict dx_acc = w.dx_acc.data() + t * s.P;
      acc_t dgam = 0;
#pragma omp simd reduction(+ : dgam)
      for (int64_t p = 0; p < s.P; ++p) dgam += grow[p] * xrow[p];
      for (int64_t p = 0; p < s.P; ++p) dx_acc[p] += gam * grow[p];
      a.dgamma[(b * s.L + t) * s.H + h] = dgam;
    }
    transfer_row<false>(a.dx, a.dx_s, b, h, s.L, s.P, s.P, w.dx_acc.data());
  }
}

template <typename scalar_t>
using BwdRowsFn = void (*)(const BwdArgs<scalar_t>&, int64_t, int64_t, int64_t, BwdScratch<at::opmath_type<scalar_t>>&);

template <typename scalar_t>
void bwd_rows_generic(const BwdArgs<scalar_t>& a, int64_t part, int64_t begin, int64_t end,
                      BwdScratch<at::opmath_type<scalar_t>>& w) {
  bwd_rows(a, part, begin, end, w);
}

#ifdef SSM_X86_VARIANTS
template <typename scalar_t>
SSM_TARGET_AVX2 void bwd_rows_avx2(const BwdArgs<scalar_t>& a, int64_t part, int64_t begin, int64_t end,
                                  BwdScratch<at::opmath_type<scalar_t>>& w) {
  bwd_rows(a, part, begin, end, w);
}

template <typename scalar_t>
SSM_TARGET_AVX512 void bwd_rows_avx512(const BwdArgs<scalar_t>& a, int64_t part, int64_t begin, int64_t end,
                                      BwdScratch<at::opmath_type<scalar_t>>& w) {
  bwd_rows(a, part, begin, end, w);
}
#endif

template <typename scalar_t>
BwdRowsFn<scalar_t> pick_bwd_rows() {
#ifdef SSM_X86_VARIANTS
  switch (cpu_isa()) {
    case Isa::avx512: return bwd_rows_avx512<scalar_t>;
    case Isa::avx2: return bwd_rows_avx2<scalar_t>;
    default: break;
  }
#endif
  return bwd_rows_generic<scalar_t>;
}

template <typename scalar_t>
void bwd_cpu_kernel(const BwdArgs<scalar_t>& a, int64_t parts) {
  using acc_t = at::opmath_type<scalar_t>;
  const MixShape& s = a.f.s;
  const BwdRowsFn<scalar_t> rows = pick_bwd_rows<scalar_t>();
  // Chunks of ~sqrt(L) steps, or the whole row when its states fit in kWholeRowStates (per thread): then the
  // backward re-runs each scan once instead of twice (checkpoints, then each chunk replayed).
  constexpr int64_t kWholeRowStates = int64_t(1) << 20;  // 4 MB of float states
  const int64_t chunk = s.L * s.N * s.P <= kWholeRowStates
                            ? std::max<int64_t>(1, s.L)
                            : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(s.L)))));
  for_each_part(s.batch * s.H, parts, [&](int64_t part, int64_t begin, int64_t end) {
    BwdScratch<acc_t> w(s, chunk);
    rows(a, part, begin, end, w);
  });
}

}  // namespace

BwdResult qs_mix_bwd_cpu(const at::Tensor& grad_y, const at::Tensor& x, const at::Tensor& dt, const at::Tensor& A,
                         const at::Tensor& B, const at::Tensor& C, const at::Tensor& dt_rev, const at::Tensor& A_rev,
                         const at::Tensor& B_rev, const at::Tensor& C_rev, const at::Tensor& gamma,
                         const c10::optional<at::Tensor>& dt_bias, const c10::optional<at::Tensor>& dt_bias_rev,
                         bool dt_softplus, bool hydra_shift) {
  const MixShape s = check_inputs(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev);
  SSM_CHECK(grad_y.sizes() == x.sizes() && grad_y.scalar_type() == x.scalar_type(),
            "qs_mix_bwd: grad_y must match x in shape and dtype");
  const DirectionTensors fwd(dt, finite_rates(A), B, C, dt_bias, true),
      rev(dt_rev, finite_rates(A_rev), B_rev, C_rev, dt_bias_rev, true);
  const auto acc_opts = A.options();
  const int64_t parts = num_parts(s.batch * s.H);
  auto dx = at::empty_like(x);  // x's layout (the fake kernel declares the same)
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
    copy_strides(dx, a.dx_s);
    a.dgamma = dgamma.data_ptr<acc_t>();
    for (int dir = 0; dir < 2; ++dir) {
      a.ddt[dir] = ddt[dir].data_ptr<acc_t>();
      a.dA[dir] = dA[dir].data_ptr<acc_t>();
      a.dB[dir] = dB[dir].data_ptr<acc_t>();
      a.dC[dir] = dC[dir].data_ptr<acc_t>();
    }
    bwd_cpu_kernel(a, parts);
  });
  const at::Tensor dA_sum[2] = {dA[0].sum(0), dA[1].sum(0)}, dB_sum[2] = {dB[0].sum(0), dB[1].sum(0)},
                   dC_sum[2] = {dC[0].sum(0), dC[1].sum(0)};
  return bwd_result(dx, ddt, dA_sum, dB_sum, dC_sum, dgamma, dt.scalar_type());
}

}  // namespace ssm_plugins
