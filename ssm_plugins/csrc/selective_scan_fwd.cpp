// Selective scan, CPU forward: W channels of one (batch, group) at a time, one channel per SIMD lane, the
// state axis a loop (per step and state: one decay, one state update, one broadcast-FMA into the output; no
// sums across lanes). The backward keeps the per-row design of selective_scan_cpu.h. Shared pieces there.
#include "selective_scan_cpu.h"

namespace ssm_plugins {
namespace {

// A (lanes, L) slice of a (batch, dim, L) tensor with any strides.
template <typename T>
struct Rows {
  T* at = nullptr;
  int64_t stride_c = 0, stride_l = 0;
  explicit operator bool() const { return at != nullptr; }
};

// One task: W channels c0 .. c0 + W - 1 of one (batch, group), channel c0 + l in lane l; `lanes` of them real
// (padding lanes: x = 0, raw delta 0, A 0, so their state stays 0; their output is dropped).
template <typename scalar_t, typename acc_t>
struct FwdTask {
  int64_t L, Lpad, N, Npad, lanes;
  bool softplus_dt, reverse;
  // channel c0's row of u, delta (unread with a low-rank delta, rank > 0), z (or null) and out; channel c0 + l,
  // step t at + l * stride_c + t * stride_l (each tensor its own strides: u and out may be token-major)
  Rows<const scalar_t> u, delta, z;
  Rows<scalar_t> out;
  const acc_t* A;  // (lanes, Npad) rows
  const acc_t* bias;  // (lanes) or null; likewise skip (D)
  const acc_t* skip;
  const acc_t* BT;  // (L, Npad): the (batch, group)'s B, transposed (shared by the lanes: broadcast)
  const acc_t* CT;
  int64_t rank, per_delta_group, c0_in_group;  // low-rank delta: channel c0 + l's (R, Lpad) rows are
  const acc_t* low;   // low + ((c0_in_group + l) / per_delta_group) * R * Lpad (c0_in_group: c0 in its group)
  const acc_t* proj;  // (lanes, R) rows of delta_proj
  acc_t* last;        // (lanes, N) rows of last_state
  acc_t* saved;       // (lanes, saved_states(L), N) rows of chunk_states
  // the thread's buffers: rows (W, Lpad); x, dt, z, y (Lpad, W); lane parameters ((N + 2) * W); state (N * W)
  acc_t *rows, *x, *dt, *zl, *y, *params, *h;
};

// (W, Lpad) rows <-> (Lpad, W) lane layout, W x W tiles at a time.
template <typename acc_t>
SSM_INLINE void rows_to_lanes(acc_t* lanes, const acc_t* rows, int64_t Lpad) {
  using S = Simd<acc_t>;
  for (int64_t t = 0; t < Lpad; t += S::W)
    transpose_tile<acc_t, typename S::V, S::W>(rows + t, Lpad, lanes + t * S::W, S::W);
}

template <typename acc_t>
SSM_INLINE void lanes_to_rows(acc_t* rows, const acc_t* lanes, int64_t Lpad) {
  using S = Simd<acc_t>;
  for (int64_t t = 0; t < Lpad; t += S::W)
    transpose_tile<acc_t, typename S::V, S::W>(lanes + t * S::W, S::W, rows + t, Lpad);
}

// The task's rows -> lane layout `dst`; row(l, dst_row) fills real lane l's row (Lpad entries), the rest are 0.
template <typename acc_t, typename RowFn>
SSM_INLINE void gather_lanes(acc_t* dst, acc_t* rows, int64_t lanes, int64_t Lpad, const RowFn& row) {
  constexpr int W = Simd<acc_t>::W;
  for (int64_t l = 0; l < W; ++l) {
    if (l < lanes) {
      row(l, rows + l * Lpad);
    } else {
      std::fill(rows + l * Lpad, rows + (l + 1) * Lpad, acc_t(0));
    }
  }
  rows_to_lanes(dst, rows, Lpad);
}

constexpr int64_t kStepsAhead = 16;  // software prefetch distance of the token-major loads and stores

// A (lanes, L) slice in the accumulation dtype, lane layout (Lpad, W), the rest zero: rows along L converted one
// at a time and transposed in tiles, or a token-major slice (channels adjacent) read step by step.
template <typename scalar_t, typename acc_t>
SSM_INLINE void load_lanes(acc_t* dst, acc_t* rows, const Rows<const scalar_t>& src, int64_t lanes, int64_t L,
                           int64_t Lpad, bool reverse) {
  constexpr int W = Simd<acc_t>::W;
  if (src.stride_l == 1) {
    return gather_lanes(dst, rows, lanes, Lpad, [&](int64_t l, acc_t* row) {
      load_row(row, src.at + l * src.stride_c, L, Lpad, reverse);
    });
  }
  const bool whole = src.stride_c == 1 && lanes == W;
  for (int64_t t = 0; t < L; ++t) {
    const scalar_t* step = src.at + (reverse ? L - 1 - t : t) * src.stride_l;
    // one cache line a step, a row apart: the hardware prefetcher loses such a stream at every page
    if (t + kStepsAhead < L) __builtin_prefetch(step + (reverse ? -kStepsAhead : kStepsAhead) * src.stride_l);
    acc_t* d = dst + t * W;
    if (std::is_same<scalar_t, acc_t>::value && whole) {
      std::memcpy(d, step, sizeof(acc_t) * W);
    } else if (whole) {
      for (int l = 0; l < W; ++l) d[l] = static_cast<acc_t>(step[l]);
    } else {
      for (int64_t l = 0; l < W; ++l) d[l] = l < lanes ? static_cast<acc_t>(step[l * src.stride_c]) : acc_t(0);
    }
  }
  std::fill(dst + L * W, dst + Lpad * W, acc_t(0));
}

template <typename scalar_t, typename acc_t>
SSM_INLINE void store_lanes(const Rows<scalar_t>& dst, acc_t* rows, const acc_t* src, int64_t lanes, int64_t L,
                            int64_t Lpad, bool reverse) {
  constexpr int W = Simd<acc_t>::W;
  if (dst.stride_l == 1) {
    lanes_to_rows(rows, src, Lpad);
    for (int64_t l = 0; l < lanes; ++l) store_row(dst.at + l * dst.stride_c, rows + l * Lpad, L, reverse);
    return;
  }
  const bool whole = dst.stride_c == 1 && lanes == W;
  for (int64_t t = 0; t < L; ++t) {
    scalar_t* step = dst.at + (reverse ? L - 1 - t : t) * dst.stride_l;
    if (t + kStepsAhead < L) __builtin_prefetch(step + (reverse ? -kStepsAhead : kStepsAhead) * dst.stride_l, 1);
    const acc_t* v = src + t * W;
    if (std::is_same<scalar_t, acc_t>::value && whole) {
      std::memcpy(step, v, sizeof(acc_t) * W);
    } else if (whole) {
      for (int l = 0; l < W; ++l) step[l] = static_cast<scalar_t>(v[l]);
    } else {
      for (int64_t l = 0; l < lanes; ++l) step[l * dst.stride_c] = static_cast<scalar_t>(v[l]);
    }
  }
}

// NS > 0: N == NS known at compile time, the state held in registers.
template <typename scalar_t, typename acc_t, int NS, bool kAvx512>
SSM_INLINE void fwd_block(const FwdTask<scalar_t, acc_t>& k) {
  using S = Simd<acc_t>;
  using V = typename S::V;
  using E = Decay<acc_t, kAvx512>;
  constexpr int W = S::W;
  const int64_t N = NS ? NS : k.N, L = k.L, Lpad = k.Lpad, Npad = k.Npad;
  acc_t *A = k.params, *bias = A + N * W, *skip = bias + W;
  for (int64_t l = 0; l < W; ++l) {
    const bool on = l < k.lanes;
    for (int64_t n = 0; n < N; ++n) A[n * W + l] = on ? k.A[l * Npad + n] * E::scale : acc_t(0);
    bias[l] = on && k.bias ? k.bias[l] : acc_t(0);
    skip[l] = on && k.skip ? k.skip[l] : acc_t(0);
  }
  load_lanes(k.x, k.rows, k.u, k.lanes, L, Lpad, k.reverse);
  if (!k.rank) {
    load_lanes(k.dt, k.rows, k.delta, k.lanes, L, Lpad, k.reverse);
  } else {  // the low-rank delta's rows: delta_proj's row of the channel times its delta group's (R, Lpad) rows
    gather_lanes(k.dt, k.rows, k.lanes, Lpad, [&](int64_t l, acc_t* dst) {
      const acc_t* proj = k.proj + l * k.rank;
      const acc_t* low = k.low + ((k.c0_in_group + l) / k.per_delta_group) * k.rank * Lpad;
      int64_t t = 0;
      for (; t + 4 * W <= Lpad; t += 4 * W) {  // four independent sums: one would wait on each FMA's latency
        V v[4] = {};
        for (int64_t j = 0; j < k.rank; ++j)
          for (int i = 0; i < 4; ++i) v[i] += proj[j] * S::load(low + j * Lpad + t + i * W);
        for (int i = 0; i < 4; ++i) S::store(dst + t + i * W, v[i]);
      }
      for (; t < Lpad; t += W) {
        V v{};
        for (int64_t j = 0; j < k.rank; ++j) v += proj[j] * S::load(low + j * Lpad + t);
        S::store(dst + t, v);
      }
    });
  }
  if (k.z) load_lanes(k.zl, k.rows, k.z, k.lanes, L, Lpad, k.reverse);

  // delta = softplus(raw + bias) in a pass of its own (inside the recurrence it spills the state's registers)
  const V bias_v = S::load(bias);
  for (int64_t t = 0; t < L; ++t) {
    const V d = S::load(k.dt + t * W) + bias_v;
    S::store(k.dt + t * W, k.softplus_dt ? S::softplus(d) : d);
  }

  V h_reg[NS ? NS : 1];
  V* h = NS ? h_reg : reinterpret_cast<V*>(k.h);
  for (int64_t n = 0; n < N; ++n) h[n] = V{};
  const V skip_v = S::load(skip);
  const acc_t *BT = k.BT, *CT = k.CT, *x = k.x, *dt = k.dt, *z = k.z ? k.zl : nullptr;
  acc_t* y = k.y;
  const int64_t saves = saved_states(L);
  auto store_state = [&](acc_t* dst, int64_t stride) {  // lane l's state to dst + l * stride
    for (int64_t l = 0; l < k.lanes; ++l)
      for (int64_t n = 0; n < N; ++n) dst[l * stride + n] = h[n][l];
  };
  // Spans of scan steps between the saved boundaries, which lie before time steps kStateEvery s (scan step t of a
  // reverse scan is time step L - 1 - t): after span i, the state at boundary s goes to index s - 1.
  for (int64_t i = 0, t = 0; i <= saves; ++i) {
    const int64_t s = k.reverse ? saves - i : i + 1;
    const int64_t end = i == saves ? L : (k.reverse ? L - kStateEvery * s : kStateEvery * s);
    for (; t < end; ++t) {
      const V d = S::load(dt + t * W), xv = S::load(x + t * W), dx = d * xv;
      const acc_t* Bt = BT + t * Npad;
      const acc_t* Ct = CT + t * Npad;
      V acc = skip_v * xv;
#pragma GCC unroll 16
      for (int64_t n = 0; n < N; ++n) {
        h[n] = E::of(d * S::load(A + n * W)) * h[n] + dx * Bt[n];
        acc += Ct[n] * h[n];
      }
      if (z) {
        const V zv = S::load(z + t * W);
        acc = acc * zv * S::sigmoid(zv);
      }
      S::store(y + t * W, acc);
    }
    if (i < saves) store_state(k.saved + (s - 1) * N, saves * N);
  }

  store_lanes(k.out, k.rows, y, k.lanes, L, Lpad, k.reverse);
  store_state(k.last, N);
}

// ---- ISA variants of the block, picked at run time --------------------------------------------------

template <typename scalar_t, typename acc_t>
using FwdFn = void (*)(const FwdTask<scalar_t, acc_t>&);

#define SSM_SCAN_FWD_VARIANT(NAME, ATTR, AVX512)                                                       \
  template <typename scalar_t, typename acc_t, int NS>                                                 \
  ATTR void fwd_##NAME(const FwdTask<scalar_t, acc_t>& k) {                                            \
    fwd_block<scalar_t, acc_t, NS, AVX512>(k);                                                         \
  }                                                                                                    \
  template <typename scalar_t, typename acc_t>                                                         \
  FwdFn<scalar_t, acc_t> pick_fwd_##NAME(int64_t N) {                                                  \
    return N == 16 ? &fwd_##NAME<scalar_t, acc_t, 16> : &fwd_##NAME<scalar_t, acc_t, 0>;               \
  }

SSM_SCAN_FWD_VARIANT(generic, , false)
#ifdef SSM_X86_VARIANTS
SSM_SCAN_FWD_VARIANT(avx2, SSM_TARGET_AVX2, false)
SSM_SCAN_FWD_VARIANT(avx512, SSM_TARGET_AVX512, true)
#endif

template <typename scalar_t, typename acc_t>
FwdFn<scalar_t, acc_t> pick_fwd_block(int64_t N) {
#ifdef SSM_X86_VARIANTS
  const Isa isa = cpu_isa();
  if (isa == Isa::avx512) return pick_fwd_avx512<scalar_t, acc_t>(N);
  if (isa == Isa::avx2) return pick_fwd_avx2<scalar_t, acc_t>(N);
#endif
  return pick_fwd_generic<scalar_t, acc_t>(N);
}

// ---- driver ----------------------------------------------------------------------------------------

template <typename scalar_t>
void fwd_cpu_kernel(const ScanShape& s, const at::Tensor& u, const at::Tensor& delta,
                    const c10::optional<at::Tensor>& z, const at::Tensor& A, const at::Tensor& B,
                    const at::Tensor& C, const c10::optional<at::Tensor>& D,
                    const c10::optional<at::Tensor>& delta_bias, bool softplus_dt,
                    const c10::optional<at::Tensor>& delta_proj, at::Tensor& out, at::Tensor& last_state,
                    at::Tensor& chunk_states) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int W = Simd<acc_t>::W;
  const int64_t Npad = round_up(s.N, W), Lpad = round_up(s.L, W);
  const int64_t per_group = s.dim / s.groups, blocks = (per_group + W - 1) / W;
  Prepared<scalar_t, acc_t> prep(s, Npad, A, B, C);
  const FwdFn<scalar_t, acc_t> block = pick_fwd_block<scalar_t, acc_t>(s.N);
  const scalar_t *u_p = u.data_ptr<scalar_t>(), *delta_p = delta.data_ptr<scalar_t>();
  const scalar_t* z_p = opt_ptr<scalar_t>(z);
  const acc_t *D_p = opt_ptr<acc_t>(D), *bias_p = opt_ptr<acc_t>(delta_bias);
  // A low-rank delta in the accumulation dtype, its rows padded to Lpad: (batch * delta_groups * rank, Lpad).
  const int64_t low_rows = s.batch * s.delta_groups * s.rank, per_delta_group = s.rank ? s.dim / s.delta_groups : 1;
  AlignedBuffer<acc_t> low(low_rows * Lpad);
  for (int64_t i = 0; i < low_rows; ++i) load_row(low.data() + i * Lpad, delta_p + i * s.L, s.L, Lpad, s.reverse);
  const acc_t* proj_p = opt_ptr<acc_t>(delta_proj);
  scalar_t* out_p = out.data_ptr<scalar_t>();
  auto rows_of = [](const at::Tensor& t, auto* base, int64_t b, int64_t c) {  // channel c of batch b onward
    using T = std::remove_pointer_t<decltype(base)>;
    return Rows<T>{base + b * t.stride(0) + c * t.stride(1), t.stride(1), t.stride(2)};
  };
  acc_t* last_p = last_state.data_ptr<acc_t>();
  acc_t* saved_p = chunk_states.data_ptr<acc_t>();
  const int64_t saves = saved_states(s.L);
  const int64_t updates = s.batch * s.dim * s.L * s.N;
  dynamic_for(s.batch * s.groups * blocks, 1, threads_for(updates), [&](auto take) {
    AlignedBuffer<acc_t> buf(5 * W * Lpad + (2 * s.N + 2) * W);
    FwdTask<scalar_t, acc_t> k;
    k.L = s.L;
    k.Lpad = Lpad;
    k.N = s.N;
    k.Npad = Npad;
    k.softplus_dt = softplus_dt;
    k.reverse = s.reverse;
    k.rank = s.rank;
    k.per_delta_group = per_delta_group;
    k.rows = buf.data();
    k.x = k.rows + W * Lpad;
    k.dt = k.x + W * Lpad;
    k.zl = k.dt + W * Lpad;
    k.y = k.zl + W * Lpad;
    k.h = k.y + W * Lpad;
    k.params = k.h + s.N * W;
    for (int64_t task, task_end; take(task, task_end);) {
      for (; task < task_end; ++task) {
        const int64_t bg = task / blocks, b = bg / s.groups, g = bg % s.groups;
        const int64_t c0 = g * per_group + (task % blocks) * W, row0 = b * s.dim + c0;
        k.lanes = std::min<int64_t>(W, (g + 1) * per_group - c0);
        k.u = rows_of(u, u_p, b, c0);
        k.delta = s.rank ? Rows<const scalar_t>{} : rows_of(delta, delta_p, b, c0);
        k.z = z_p ? rows_of(*z, z_p, b, c0) : Rows<const scalar_t>{};
        k.out = rows_of(out, out_p, b, c0);
        k.A = prep.A.data() + c0 * Npad;
        k.bias = bias_p ? bias_p + c0 : nullptr;
        k.skip = D_p ? D_p + c0 : nullptr;
        k.BT = prep.BT.data() + bg * s.L * Npad;
        k.CT = prep.CT.data() + bg * s.L * Npad;
        if (s.rank) {
          k.c0_in_group = c0 % per_delta_group;
          k.low = low.data() + (b * s.delta_groups + c0 / per_delta_group) * s.rank * Lpad;
          k.proj = proj_p + c0 * s.rank;
        }
        k.last = last_p + row0 * s.N;
        k.saved = saved_p + row0 * saves * s.N;
        block(k);
      }
    }
  });
}

}  // namespace

FwdResult selective_scan_fwd_cpu(const at::Tensor& u_, const at::Tensor& delta_, const at::Tensor& A,
                                 const at::Tensor& B, const at::Tensor& C, const c10::optional<at::Tensor>& D_,
                                 const c10::optional<at::Tensor>& z_, const c10::optional<at::Tensor>& delta_bias_,
                                 bool delta_softplus, const c10::optional<at::Tensor>& delta_proj_, bool reverse) {
  ScanShape s = check_fwd(u_, delta_, A, B, C, D_, z_, delta_bias_, delta_proj_);
  s.reverse = reverse;
  // u, a full delta, z and out are read and written through their strides (token-major ones too: lane loads);
  // out has u's layout (empty_like, as the fake kernel declares)
  const at::Tensor& u = u_;
  auto delta = s.rank ? delta_.contiguous() : delta_;
  const c10::optional<at::Tensor>& z = z_;
  auto D = opt_contiguous(D_), bias = opt_contiguous(delta_bias_), proj = opt_contiguous(delta_proj_);
  auto out = at::empty_like(u);
  auto chunk_states = at::empty(chunk_states_shape(s), A.options());
  if (s.batch * s.dim == 0 || s.L == 0) return {out, at::zeros({s.batch, s.dim, s.N}, A.options()), chunk_states};
  auto last_state = at::empty({s.batch, s.dim, s.N}, A.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, u.scalar_type(), "selective_scan_fwd_cpu", [&] {
    fwd_cpu_kernel<scalar_t>(s, u, delta, z, A, B, C, D, bias, delta_softplus, proj, out, last_state, chunk_states);
  });
  return {out, last_state, chunk_states};
}

}  // namespace ssm_plugins
