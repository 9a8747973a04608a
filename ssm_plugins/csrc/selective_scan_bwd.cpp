// Selective scan, CPU backward: the per-row core (a forward pass keeping states or checkpoints, then the
// reverse recurrence), its instruction-set variants and the driver that hands (batch, group, chunk of
// channels) tasks to threads and sums the shared gradients. Shared pieces in selective_scan_cpu.h.
#include "selective_scan_cpu.h"

#include <mutex>

namespace ssm_plugins {
namespace {

// In: x (u), dt (delta, raw), z (or null), g (grad_out), glast (nv*W or null).
// Out: gx (grad u), g (grad delta), gz (grad z), gA (nv*W), *gD, *gbias. Accumulates into dB, dC
// ((L, nv*W)). Scratch: gy, dsp (Lpad each), ring1, ring2 (W*W each), states (chunk*2*nv*W),
// ckpt (ceil(L/chunk)*nv*W).
template <typename acc_t, int NV, bool kAvx512>
SSM_INLINE void bwd_core(const RowParams<acc_t>& p, const acc_t* x, acc_t* dt, const acc_t* z, acc_t* g,
                         const acc_t* glast, acc_t* gx, acc_t* gz, acc_t* gA, acc_t* gD, acc_t* gbias,
                         acc_t* dB, acc_t* dC, acc_t* gy, acc_t* dsp, acc_t* ring1, acc_t* ring2,
                         acc_t* states, acc_t* ckpt, typename Simd<acc_t>::V* scratch) {
  using S = Simd<acc_t>;
  using V = typename S::V;
  using E = Decay<acc_t, kAvx512>;
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

  V local[NV ? 5 * NV : 1];
  V* h = NV ? local : scratch;
  V* Av = h + nv;
  V* gh = h + 2 * nv;
  V* gAv = h + 3 * nv;
  V* Ae = h + 4 * nv;  // A in the decay's scale
  for (int64_t j = 0; j < nv; ++j) {
    h[j] = V{};
    Av[j] = S::load(p.A + j * W);
    Ae[j] = Av[j] * E::scale;
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
        const V a = E::of(Ae[j] * d);
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
        const V a = E::of(Ae[j] * d);
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

// ---- ISA variants of the core, picked at run time ---------------------------------------------------

template <typename acc_t>
struct BwdRow {
  RowParams<acc_t> p;
  const acc_t *x, *z, *glast;
  acc_t *dt, *g, *gx, *gz, *gA, *gD, *gbias, *dB, *dC, *gy, *dsp, *ring1, *ring2, *states, *ckpt;
  typename Simd<acc_t>::V* scratch;
};

template <typename acc_t>
using BwdFn = void (*)(const BwdRow<acc_t>&);

#define SSM_SCAN_BWD_VARIANT(NAME, ATTR, AVX512)                                                       \
  template <typename acc_t, int NV>                                                                    \
  ATTR void bwd_##NAME(const BwdRow<acc_t>& r) {                                                       \
    bwd_core<acc_t, NV, AVX512>(r.p, r.x, r.dt, r.z, r.g, r.glast, r.gx, r.gz, r.gA, r.gD, r.gbias, r.dB, r.dC, \
                        r.gy, r.dsp, r.ring1, r.ring2, r.states, r.ckpt, r.scratch);                   \
  }                                                                                                    \
  template <typename acc_t>                                                                            \
  BwdFn<acc_t> pick_bwd_##NAME(int64_t nv) {                                                           \
    if (nv == 1) return &bwd_##NAME<acc_t, 1>;                                                         \
    if (nv == 2) return &bwd_##NAME<acc_t, 2>;                                                         \
    return &bwd_##NAME<acc_t, 0>;                                                                      \
  }

SSM_SCAN_BWD_VARIANT(generic, , false)
#ifdef SSM_X86_VARIANTS
SSM_SCAN_BWD_VARIANT(avx2, SSM_TARGET_AVX2, false)
SSM_SCAN_BWD_VARIANT(avx512, SSM_TARGET_AVX512, true)
#endif

template <typename acc_t>
BwdFn<acc_t> pick_bwd_core(int64_t nv) {
#ifdef SSM_X86_VARIANTS
  const Isa isa = cpu_isa();
  if (isa == Isa::avx512) return pick_bwd_avx512<acc_t>(nv);
  if (isa == Isa::avx2) return pick_bwd_avx2<acc_t>(nv);
#endif
  return pick_bwd_generic<acc_t>(nv);
}

// ---- driver ----------------------------------------------------------------------------------------

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
  Prepared<scalar_t, acc_t> prep(s, Npad, A, B, C);
  const BwdFn<acc_t> core = pick_bwd_core<acc_t>(nv);

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
        ckpt((s.L + chunk - 1) / chunk * Npad), scratch(5 * nv * W), glast(Npad), dBC(2 * bc_size);
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
          load_row(x, u_p + off, s.L, Lpad, s.reverse);
          load_row(r.dt, delta_p + off, s.L, Lpad, s.reverse);
          if (z_p) load_row(zb, z_p + off, s.L, Lpad, s.reverse);
          load_row(r.g, go_p + off, s.L, Lpad, s.reverse);
          core(r);
          store_row(du_p + off, r.gx, s.L, s.reverse);
          store_row(ddelta_p + off, r.g, s.L, s.reverse);
          if (z_p) store_row(dz_p + off, r.gz, s.L, s.reverse);
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
        for (int64_t t = 0; t < s.L; ++t)
          o[(m * s.N + n) * s.L + (s.reverse ? s.L - 1 - t : t)] = src[(m * s.L + t) * Npad + n];
  };
  unpad(dB, dB_sum.data());
  unpad(dC, dC_sum.data());
  c10::optional<at::Tensor> dD, dbias;
  if (D) dD = fold_rows(gD_rows.data());
  if (delta_bias) dbias = fold_rows(gbias_rows.data());
  return {du, ddelta, dA, dB.to(B.scalar_type()), dC.to(C.scalar_type()), dD, dz, dbias};
}

}  // namespace

BwdResult selective_scan_bwd_cpu(const at::Tensor& u_, const at::Tensor& delta_, const at::Tensor& A,
                                 const at::Tensor& B, const at::Tensor& C, const c10::optional<at::Tensor>& D_,
                                 const c10::optional<at::Tensor>& z_, const c10::optional<at::Tensor>& delta_bias_,
                                 bool delta_softplus, const at::Tensor& grad_out_,
                                 const c10::optional<at::Tensor>& grad_last_state_, bool reverse,
                                 const c10::optional<at::Tensor>& chunk_states) {
  ScanShape s = check_fwd(u_, delta_, A, B, C, D_, z_, delta_bias_);
  s.reverse = reverse;
  check_bwd(s, u_, grad_out_, grad_last_state_, chunk_states, A);  // checked, not read: the CPU rows checkpoint
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

}  // namespace ssm_plugins
