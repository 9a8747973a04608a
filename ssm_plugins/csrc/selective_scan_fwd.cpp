// Selective scan, CPU forward: the per-row core, its instruction-set variants and the driver that hands
// (batch, channel) rows to threads. Shared pieces in selective_scan_cpu.h.
#include "selective_scan_cpu.h"

namespace ssm_plugins {
namespace {

// In: x (u), dt (delta, raw; unread with a low-rank delta, p.rank > 0), z (or null).
// Out: y = out before the cast, hlast (nv*W), dt (dt), dx (dt * x).
template <typename acc_t, int NV, bool kAvx512>
SSM_INLINE void fwd_core(const RowParams<acc_t>& p, const acc_t* x, acc_t* dt, acc_t* dx, const acc_t* z,
                         acc_t* y, acc_t* hlast, acc_t* ring, typename Simd<acc_t>::V* scratch) {
  using S = Simd<acc_t>;
  using V = typename S::V;
  using E = Decay<acc_t, kAvx512>;
  constexpr int W = S::W;
  const int64_t nv = NV ? NV : p.nv, L = p.L, Lpad = round_up(L, W), stride = nv * W;
  for (int64_t t = 0; t < Lpad; t += W) {
    V v = p.rank ? V{} : S::load(dt + t);
    for (int64_t j = 0; j < p.rank; ++j) v += p.proj[j] * S::load(p.low + j * Lpad + t);
    v = v + p.bias;
    v = p.softplus_dt ? S::softplus(v) : v;
    S::store(dt + t, v);
    S::store(dx + t, v * S::load(x + t));
  }
  V h_local[NV ? 2 * NV : 1];
  V* h = NV ? h_local : scratch;
  V* Av = h + nv;
  for (int64_t j = 0; j < nv; ++j) {
    h[j] = V{};
    Av[j] = S::load(p.A + j * W) * E::scale;
  }
  const acc_t *BT = p.BT, *CT = p.CT;  // local copies: the ring's stores cannot move them
  for (int64_t tb = 0; tb < L; tb += W) {
    const int64_t te = std::min<int64_t>(tb + W, L);
    if (te - tb < W) std::fill(ring, ring + W * W, acc_t(0));
    for (int64_t t = tb; t < te; ++t) {
      const acc_t d = dt[t], dxt = dx[t];
      const acc_t* Bt = BT + t * stride;
      const acc_t* Ct = CT + t * stride;
      V acc{};
      for (int64_t j = 0; j < nv; ++j) {
        h[j] = E::of(Av[j] * d) * h[j] + dxt * S::load(Bt + j * W);
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

// ---- ISA variants of the core, picked at run time ---------------------------------------------------

template <typename acc_t>
struct FwdRow {
  RowParams<acc_t> p;
  const acc_t* x;
  acc_t* dt;
  acc_t* dx;
  const acc_t* z;
  acc_t* y;
  acc_t* hlast;
  acc_t* ring;
  typename Simd<acc_t>::V* scratch;
};

template <typename acc_t>
using FwdFn = void (*)(const FwdRow<acc_t>&);

#define SSM_SCAN_FWD_VARIANT(NAME, ATTR, AVX512)                                                       \
  template <typename acc_t, int NV>                                                                    \
  ATTR void fwd_##NAME(const FwdRow<acc_t>& r) {                                                       \
    fwd_core<acc_t, NV, AVX512>(r.p, r.x, r.dt, r.dx, r.z, r.y, r.hlast, r.ring, r.scratch);           \
  }                                                                                                    \
  template <typename acc_t>                                                                            \
  FwdFn<acc_t> pick_fwd_##NAME(int64_t nv) {                                                           \
    if (nv == 1) return &fwd_##NAME<acc_t, 1>;                                                         \
    if (nv == 2) return &fwd_##NAME<acc_t, 2>;                                                         \
    return &fwd_##NAME<acc_t, 0>;                                                                      \
  }

SSM_SCAN_FWD_VARIANT(generic, , false)
#ifdef SSM_X86_VARIANTS
SSM_SCAN_FWD_VARIANT(avx2, SSM_TARGET_AVX2, false)
SSM_SCAN_FWD_VARIANT(avx512, SSM_TARGET_AVX512, true)
#endif

template <typename acc_t>
FwdFn<acc_t> pick_fwd_core(int64_t nv) {
#ifdef SSM_X86_VARIANTS
  const Isa isa = cpu_isa();
  if (isa == Isa::avx512) return pick_fwd_avx512<acc_t>(nv);
  if (isa == Isa::avx2) return pick_fwd_avx2<acc_t>(nv);
#endif
  return pick_fwd_generic<acc_t>(nv);
}

// ---- driver ----------------------------------------------------------------------------------------

template <typename scalar_t>
void fwd_cpu_kernel(const ScanShape& s, const at::Tensor& u, const at::Tensor& delta,
                    const c10::optional<at::Tensor>& z, const at::Tensor& A, const at::Tensor& B,
                    const at::Tensor& C, const c10::optional<at::Tensor>& D,
                    const c10::optional<at::Tensor>& delta_bias, bool softplus_dt,
                    const c10::optional<at::Tensor>& delta_proj, at::Tensor& out, at::Tensor& last_state) {
  using acc_t = at::opmath_type<scalar_t>;
  using S = Simd<acc_t>;
  constexpr int W = S::W;
  const int64_t Npad = round_up(s.N, W), nv = Npad / W, Lpad = round_up(s.L, W);
  const int64_t per_group = s.dim / s.groups;
  Prepared<acc_t> prep(s, Npad, A, B, C);
  const FwdFn<acc_t> core = pick_fwd_core<acc_t>(nv);
  const scalar_t *u_p = u.data_ptr<scalar_t>(), *delta_p = delta.data_ptr<scalar_t>();
  const scalar_t* z_p = opt_ptr<scalar_t>(z);
  const acc_t *A_p = prep.A.data(), *B_p = prep.BT.data(), *C_p = prep.CT.data();
  const acc_t *D_p = opt_ptr<acc_t>(D), *bias_p = opt_ptr<acc_t>(delta_bias);
  // A low-rank delta in the accumulation dtype, its rows padded to Lpad: (batch * delta_groups * rank, Lpad).
  const int64_t low_rows = s.batch * s.delta_groups * s.rank, per_delta_group = s.rank ? s.dim / s.delta_groups : 1;
  AlignedBuffer<acc_t> low(low_rows * Lpad);
  for (int64_t i = 0; i < low_rows; ++i) load_row(low.data() + i * Lpad, delta_p + i * s.L, s.L, Lpad, s.reverse);
  const acc_t* proj_p = opt_ptr<acc_t>(delta_proj);
  scalar_t* out_p = out.data_ptr<scalar_t>();
  acc_t* last_p = last_state.data_ptr<acc_t>();
  const int64_t updates = s.batch * s.dim * s.L * s.N;
  dynamic_for(s.batch * s.dim, row_grab(s), threads_for(updates), [&](auto take) {
    AlignedBuffer<acc_t> buf(5 * Lpad + Npad), ring(W * W), scratch(2 * nv * W);
    FwdRow<acc_t> r;
    acc_t* x = buf.data();
    acc_t* zb = x + 2 * Lpad;
    r.x = x;
    r.dt = x + Lpad;
    r.z = z_p ? zb : nullptr;
    r.y = x + 3 * Lpad;
    r.dx = x + 4 * Lpad;
    r.hlast = x + 5 * Lpad;
    r.ring = ring.data();
    r.scratch = scratch.template as<typename S::V>();
    r.p.L = s.L;
    r.p.nv = nv;
    r.p.chunk = s.L;
    r.p.softplus_dt = softplus_dt;
    r.p.rank = s.rank;
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t row = begin; row < end; ++row) {
        const int64_t b = row / s.dim, d = row % s.dim, g = d / per_group;
        const int64_t off = row * s.L;
        r.p.A = A_p + d * Npad;
        r.p.BT = B_p + (b * s.groups + g) * s.L * Npad;
        r.p.CT = C_p + (b * s.groups + g) * s.L * Npad;
        r.p.bias = bias_p ? bias_p[d] : acc_t(0);
        r.p.skip = D_p ? D_p[d] : acc_t(0);
        load_row(x, u_p + off, s.L, Lpad, s.reverse);
        if (s.rank) {
          r.p.proj = proj_p + d * s.rank;
          r.p.low = low.data() + (b * s.delta_groups + d / per_delta_group) * s.rank * Lpad;
        } else {
          load_row(r.dt, delta_p + off, s.L, Lpad, s.reverse);
        }
        if (z_p) load_row(zb, z_p + off, s.L, Lpad, s.reverse);
        core(r);
        store_row(out_p + off, r.y, s.L, s.reverse);
        std::copy(r.hlast, r.hlast + s.N, last_p + row * s.N);
      }
    }
  });
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> selective_scan_fwd_cpu(const at::Tensor& u_, const at::Tensor& delta_,
                                                          const at::Tensor& A, const at::Tensor& B,
                                                          const at::Tensor& C, const c10::optional<at::Tensor>& D_,
                                                          const c10::optional<at::Tensor>& z_,
                                                          const c10::optional<at::Tensor>& delta_bias_,
                                                          bool delta_softplus,
                                                          const c10::optional<at::Tensor>& delta_proj_, bool reverse) {
  ScanShape s = check_fwd(u_, delta_, A, B, C, D_, z_, delta_bias_, delta_proj_);
  s.reverse = reverse;
  auto u = u_.contiguous(), delta = delta_.contiguous();
  auto D = opt_contiguous(D_), z = opt_contiguous(z_), bias = opt_contiguous(delta_bias_);
  auto proj = opt_contiguous(delta_proj_);
  auto out = at::empty_like(u, at::MemoryFormat::Contiguous);
  if (s.batch * s.dim == 0 || s.L == 0) return {out, at::zeros({s.batch, s.dim, s.N}, A.options())};
  auto last_state = at::empty({s.batch, s.dim, s.N}, A.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, u.scalar_type(), "selective_scan_fwd_cpu", [&] {
    fwd_cpu_kernel<scalar_t>(s, u, delta, z, A, B, C, D, bias, delta_softplus, proj, out, last_state);
  });
  return {out, last_state};
}

}  // namespace ssm_plugins
