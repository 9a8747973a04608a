// Myosotis tree solve x = T⁻¹u (Myosotis, arXiv 2509.20503, Sec. 3.3; docs/myosotis.md, 'Scalar Hermitian solve',
// 'Backward pass', 'Kernel'): op schemas, C++ CPU kernel, CUDA glue.
//
// Contract of the raw ops (ssm_plugins/ops/myo.py normalises user input to it):
//   u, x, grad_x  (batch, N, C)   float32 / float64 / float16 / bfloat16 / complex64 / complex128
//   b             (batch_b, Nb, C) accumulation dtype of u (float32; float64 for float64; complex64 /
//                                  complex128 for complex u), batch_b in {1, batch}; node v uses row
//                                  b_index[v] (level-shared "pyramid" form) or row v (per-node form)
//   parent        (N,) int64, level-major: parent[v] > v, -1 at roots
//   skew          C_v = -conj(b_v) instead of conj(b_v)
// T has A_v = 1, B_v = b_v at (v, par v) and C_v = s conj(b_v) at (par v, v). Because parents come after
// their children, one pass in storage order is the up-sweep and one pass in reverse is the down-sweep:
//   up:    y_v = ũ_v / α_v ;   α_p -= s |b_v|² / α_v ;   ũ_p -= s conj(b_v) y_v      (α_v real)
//   down:  x_v = y_v - (b_v / α_v) x_p
// Backward (docs/myosotis.md, 'Backward pass'): grad_u = T⁻ᴴ grad_x is the same solve with b -> s b (Tᴴ is
// again such a tree matrix);
//   grad_b_v = -(grad_u_v conj(x_p) + s conj(grad_u_p) x_v), summed over the nodes sharing a row of b.
#include "common.h"

#include <c10/util/complex.h>

#include <algorithm>
#include <vector>

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/myo.h"
#endif

namespace ssm_plugins {
namespace {

struct TreeShape {
  int64_t batch, N, C, batch_b, Nb;
};

TreeShape check_solve(const at::Tensor& u, const at::Tensor& b, const at::Tensor& parent,
                      const c10::optional<at::Tensor>& b_index) {
  SSM_CHECK(u.dim() == 3, "myo_solve: u must be (batch, N, C)");
  SSM_CHECK(b.dim() == 3 && b.size(2) == u.size(2) && (b.size(0) == 1 || b.size(0) == u.size(0)),
            "myo_solve: b must be (1 or batch, Nb, C)");
  const auto acc = u.is_complex() ? u.scalar_type() : at::toOpMathType(u.scalar_type());
  SSM_CHECK(b.scalar_type() == acc, "myo_solve: b must have dtype ", acc, " for u of dtype ", u.scalar_type());
  SSM_CHECK(parent.dim() == 1 && parent.size(0) == u.size(1) && parent.scalar_type() == at::kLong,
            "myo_solve: parent must be (N,) int64");
  SSM_CHECK(parent.device() == u.device() && b.device() == u.device(), "myo_solve: all tensors on one device");
  if (b_index.has_value()) {
    SSM_CHECK(b_index->dim() == 1 && b_index->size(0) == u.size(1) && b_index->scalar_type() == at::kLong &&
                  b_index->device() == u.device(),
              "myo_solve: b_index must be (N,) int64");
  } else {
    SSM_CHECK(b.size(1) == u.size(1), "myo_solve: without b_index, b must have one row per node");
  }
  return {u.size(0), u.size(1), u.size(2), b.size(0), b.size(1)};
}

template <typename T> struct RealOf { using type = T; };
template <typename T> struct RealOf<c10::complex<T>> { using type = T; };

// Channels handled together by one task, as lanes of fixed width (the tail block is zero-padded), so the
// per-node loops have a compile-time trip count and vectorise. Real and imaginary parts live in separate
// arrays for the same reason.
constexpr int64_t kLanes = 32;

template <typename T> inline T real_of(T v) { return v; }
template <typename T> inline T real_of(c10::complex<T> v) { return v.real(); }
template <typename T> inline T imag_of(T) { return T(0); }
template <typename T> inline T imag_of(c10::complex<T> v) { return v.imag(); }
template <typename S, typename R> inline S make_value(R re, R) { return static_cast<S>(re); }
template <> inline c10::complex<float> make_value<c10::complex<float>, float>(float re, float im) { return {re, im}; }
template <> inline c10::complex<double> make_value<c10::complex<double>, double>(double re, double im) {
  return {re, im};
}

// Per-node steps on one block of lanes. Separate functions with restrict-qualified arguments tell the
// compiler that a node's and its parent's rows never overlap, so the fixed-length loops vectorise.
// For real types the imaginary pointers are unused.
template <bool kComplex, typename R>
inline void divide_by_pivot(R* __restrict__ inv, R* __restrict__ yr, R* __restrict__ yi) {
  for (int64_t j = 0; j < kLanes; ++j) {  // α_v -> 1/α_v ;  ũ_v -> y_v = ũ_v/α_v
    inv[j] = R(1) / inv[j];
    yr[j] *= inv[j];
    if constexpr (kComplex) yi[j] *= inv[j];
  }
}

template <bool kComplex, typename R>
inline void send_to_parent(R* __restrict__ alpha_p, R* __restrict__ pr, R* __restrict__ pi,
                           const R* __restrict__ inv, const R* __restrict__ yr, const R* __restrict__ yi,
                           const R* __restrict__ wr, const R* __restrict__ wi, R sign) {
  for (int64_t j = 0; j < kLanes; ++j) {  // α_p -= s|w|²/α_v ;  ũ_p -= s conj(w) y_v
    if constexpr (kComplex) {
      alpha_p[j] -= sign * (wr[j] * wr[j] + wi[j] * wi[j]) * inv[j];
      pr[j] -= sign * (wr[j] * yr[j] + wi[j] * yi[j]);
      pi[j] -= sign * (wr[j] * yi[j] - wi[j] * yr[j]);
    } else {
      alpha_p[j] -= sign * wr[j] * wr[j] * inv[j];
      pr[j] -= sign * wr[j] * yr[j];
    }
  }
}

template <bool kComplex, typename R>
inline void subtract_parent(R* __restrict__ xr, R* __restrict__ xi, const R* __restrict__ inv,
                            const R* __restrict__ pr, const R* __restrict__ pi, const R* __restrict__ wr,
                            const R* __restrict__ wi) {
  for (int64_t j = 0; j < kLanes; ++j) {  // x_v = y_v - (w/α_v) x_p
    if constexpr (kComplex) {
      xr[j] -= inv[j] * (wr[j] * pr[j] - wi[j] * pi[j]);
      xi[j] -= inv[j] * (wr[j] * pi[j] + wi[j] * pr[j]);
    } else {
      xr[j] -= inv[j] * wr[j] * pr[j];
    }
  }
}

template <bool kComplex, typename R>
inline void add_edge_gradient(R* __restrict__ gr, R* __restrict__ gi, const R* __restrict__ gvr,
                              const R* __restrict__ gvi, const R* __restrict__ gpr, const R* __restrict__ gpi,
                              const R* __restrict__ xvr, const R* __restrict__ xvi, const R* __restrict__ xpr,
                              const R* __restrict__ xpi, R sign) {
  for (int64_t j = 0; j < kLanes; ++j) {  // grad_b_v -= ḡ_v conj(x_p) + s conj(ḡ_p) x_v
    if constexpr (kComplex) {
      gr[j] -= gvr[j] * xpr[j] + gvi[j] * xpi[j] + sign * (gpr[j] * xvr[j] + gpi[j] * xvi[j]);
      gi[j] -= gvi[j] * xpr[j] - gvr[j] * xpi[j] + sign * (gpr[j] * xvi[j] - gpi[j] * xvr[j]);
    } else {
      gr[j] -= gvr[j] * xpr[j] + sign * gpr[j] * xvr[j];
    }
  }
}

// Solves T x = rhs for every (batch, channel block) task; the adjoint solve (Tᴴ) uses weights s·b. With
// grad_b, rhs is grad_x, the result is grad_u, and the edge gradients against the saved output x are
// accumulated as well.
template <typename scalar_t>
void solve_cpu_kernel(const TreeShape& s, const scalar_t* rhs, const at::opmath_type<scalar_t>* b,
                      const int64_t* parent, const int64_t* b_index, bool skew, bool adjoint, scalar_t* out,
                      const scalar_t* x_saved, at::opmath_type<scalar_t>* grad_b) {
  using acc_t = at::opmath_type<scalar_t>;
  using real_t = typename RealOf<acc_t>::type;
  constexpr bool kComplex = c10::is_complex<scalar_t>::value;
  constexpr int64_t W = kLanes;
  const real_t sign = skew ? real_t(-1) : real_t(1);
  const real_t b_scale = adjoint ? sign : real_t(1);  // Tᴴ: B_v -> conj(C_v) = s b_v
  const int64_t blocks = (s.C + W - 1) / W;
  // Tasks are (batch, channel block) pairs: each owns its slice of out and grad_b, so no races. Small
  // solves stay on the calling thread (threads cost more than they save below ~32k node-lanes per chunk).
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, s.N * W));
  at::parallel_for(0, s.batch * blocks, grain, [&](int64_t begin, int64_t end) {
    const int64_t im_nodes = kComplex ? s.N : 0, im_rows = kComplex ? s.Nb : 0;
    const int64_t grad_rows = grad_b ? s.Nb : 0, grad_im_rows = grad_b ? im_rows : 0;
    // Per-thread workspace kept between calls: fresh pages on every solve would cost a page fault per
    // 4 KiB, as much as the solve itself at a few thousand nodes.
    thread_local std::vector<real_t> workspace;
    const int64_t total = W * (2 * s.N + im_nodes + s.Nb + im_rows + grad_rows + grad_im_rows);
    if (static_cast<int64_t>(workspace.size()) < total) workspace.resize(total);
    real_t* next = workspace.data();
    auto take = [&](int64_t rows) {
      real_t* part = next;
      next += rows * W;
      return part;
    };
    real_t* inv = take(s.N);                            // 1/α_v (α_v while it accumulates)
    real_t* re = take(s.N);                             // ũ_v, then y_v, then x_v (real part)
    real_t* im = take(im_nodes);                        // (imaginary part)
    real_t* b_re = take(s.Nb);                          // the task's weights
    real_t* b_im = take(im_rows);
    real_t* g_re = take(grad_rows);                     // the task's edge gradients
    real_t* g_im = take(grad_im_rows);
    auto im_at = [&](int64_t i) { return kComplex ? im + i : nullptr; };
    auto b_im_at = [&](int64_t i) -> const real_t* { return kComplex ? b_im + i : nullptr; };
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bi = task / blocks, c0 = (task % blocks) * W;
      const int64_t cb = std::min(W, s.C - c0);
      const int64_t base = bi * s.N * s.C + c0;
      const acc_t* bb = b + (s.batch_b > 1 ? bi : 0) * s.Nb * s.C + c0;
      for (int64_t r = 0; r < s.Nb; ++r) {
        for (int64_t j = 0; j < W; ++j) {
          const acc_t w = j < cb ? bb[r * s.C + j] : acc_t(0);
          b_re[r * W + j] = b_scale * real_of(w);
          if constexpr (kComplex) b_im[r * W + j] = b_scale * imag_of(w);
        }
      }
      for (int64_t v = 0; v < s.N; ++v) {
        for (int64_t j = 0; j < W; ++j) {
          const acc_t val = j < cb ? static_cast<acc_t>(rhs[base + v * s.C + j]) : acc_t(0);
          re[v * W + j] = real_of(val);
          if constexpr (kComplex) im[v * W + j] = imag_of(val);
          inv[v * W + j] = real_t(1);
        }
      }
      for (int64_t v = 0; v < s.N; ++v) {  // up-sweep, children before parents
        const int64_t node = v * W, p = parent[v];
        divide_by_pivot<kComplex>(inv + node, re + node, im_at(node));
        if (p < 0) continue;
        const int64_t row = (b_index ? b_index[v] : v) * W;  // α_p (not yet inverted: p comes later)
        send_to_parent<kComplex>(inv + p * W, re + p * W, im_at(p * W), inv + node,
                                 re + node, im_at(node), b_re + row, b_im_at(row), sign);
      }
      for (int64_t v = s.N - 1; v >= 0; --v) {  // down-sweep, parents before children
        const int64_t node = v * W, p = parent[v];
        if (p >= 0) {
          const int64_t row = (b_index ? b_index[v] : v) * W;
          subtract_parent<kComplex>(re + node, im_at(node), inv + node, re + p * W,
                                    im_at(p * W), b_re + row, b_im_at(row));
        }
        for (int64_t j = 0; j < cb; ++j) {
          out[base + v * s.C + j] =
              static_cast<scalar_t>(make_value<acc_t>(re[node + j], kComplex ? im[node + j] : real_t(0)));
        }
      }
      if (grad_b == nullptr) continue;
      std::fill(g_re, g_re + grad_rows * W, real_t(0));
      std::fill(g_im, g_im + grad_im_rows * W, real_t(0));
      for (int64_t v = 0; v < s.N; ++v) {  // grad_b_v = -(ḡ_v conj(x_p) + s conj(ḡ_p) x_v)
        const int64_t p = parent[v];
        if (p < 0) continue;
        real_t xvr[W] = {}, xvi[W] = {}, xpr[W] = {}, xpi[W] = {};
        for (int64_t j = 0; j < cb; ++j) {
          const acc_t xv = static_cast<acc_t>(x_saved[base + v * s.C + j]);
          const acc_t xp = static_cast<acc_t>(x_saved[base + p * s.C + j]);
          xvr[j] = real_of(xv);
          xvi[j] = imag_of(xv);
          xpr[j] = real_of(xp);
          xpi[j] = imag_of(xp);
        }
        const int64_t row = (b_index ? b_index[v] : v) * W;
        add_edge_gradient<kComplex>(g_re + row, kComplex ? g_im + row : nullptr, re + v * W,
                                    im_at(v * W), re + p * W, im_at(p * W), xvr, xvi, xpr, xpi, sign);
      }
      acc_t* gb = grad_b + bi * s.Nb * s.C + c0;
      for (int64_t r = 0; r < s.Nb; ++r) {
        for (int64_t j = 0; j < cb; ++j) {
          gb[r * s.C + j] = make_value<acc_t>(g_re[r * W + j], kComplex ? g_im[r * W + j] : real_t(0));
        }
      }
    }
  });
}

template <typename T>
const T* opt_ptr(const c10::optional<at::Tensor>& t) {
  return t.has_value() ? t->data_ptr<T>() : nullptr;
}

#define MYO_DISPATCH(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)

at::Tensor myo_solve_fwd_cpu(const at::Tensor& u_, const at::Tensor& b_, const at::Tensor& parent_,
                             const c10::optional<at::Tensor>& b_index_, bool skew) {
  const TreeShape s = check_solve(u_, b_, parent_, b_index_);
  auto u = u_.contiguous(), b = b_.contiguous(), parent = parent_.contiguous();
  c10::optional<at::Tensor> b_index;
  if (b_index_) b_index = b_index_->contiguous();
  auto x = at::empty_like(u);
  MYO_DISPATCH(u.scalar_type(), "myo_solve_fwd_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    solve_cpu_kernel<scalar_t>(s, u.data_ptr<scalar_t>(), b.data_ptr<acc_t>(), parent.data_ptr<int64_t>(),
                               opt_ptr<int64_t>(b_index), skew, false, x.data_ptr<scalar_t>(), nullptr, nullptr);
  });
  return x;
}

std::tuple<at::Tensor, at::Tensor> myo_solve_bwd_cpu(const at::Tensor& grad_x_, const at::Tensor& x_,
                                                     const at::Tensor& b_, const at::Tensor& parent_,
                                                     const c10::optional<at::Tensor>& b_index_, bool skew) {
  const TreeShape s = check_solve(grad_x_, b_, parent_, b_index_);
  SSM_CHECK(x_.sizes() == grad_x_.sizes() && x_.scalar_type() == grad_x_.scalar_type(),
            "myo_solve_bwd: x must match grad_x");
  auto grad_x = grad_x_.contiguous(), x = x_.contiguous(), b = b_.contiguous(), parent = parent_.contiguous();
  c10::optional<at::Tensor> b_index;
  if (b_index_) b_index = b_index_->contiguous();
  auto grad_u = at::empty_like(grad_x);
  auto grad_b = at::zeros({s.batch, s.Nb, s.C}, b.options());
  MYO_DISPATCH(grad_x.scalar_type(), "myo_solve_bwd_cpu", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    solve_cpu_kernel<scalar_t>(s, grad_x.data_ptr<scalar_t>(), b.data_ptr<acc_t>(), parent.data_ptr<int64_t>(),
                               opt_ptr<int64_t>(b_index), skew, true, grad_u.data_ptr<scalar_t>(),
                               x.data_ptr<scalar_t>(), grad_b.data_ptr<acc_t>());
  });
  return {grad_u, grad_b};
}

#ifdef WITH_CUDA
// dtype code for the launcher: ssm_plugins::DType for real types, then 4 complex64, 5 complex128.
int myo_dtype_code(const at::Tensor& t) {
  if (t.scalar_type() == at::kComplexFloat) return 4;
  if (t.scalar_type() == at::kComplexDouble) return 5;
  return static_cast<int>(dtype_code(t));
}

void solve_cuda(const TreeShape& s, const at::Tensor& rhs, const at::Tensor& b, const at::Tensor& parent,
                const c10::optional<at::Tensor>& b_index, bool skew, bool adjoint, at::Tensor& out,
                const at::Tensor* x_saved, at::Tensor* grad_b) {
  // Scratch in the accumulation dtype, (batch, N, C) like u so that neighbouring threads (channels) coalesce.
  auto work = at::empty({s.batch, s.N, s.C}, b.options());
  auto inv_pivot = at::empty({s.batch, s.N, s.C}, b.options().dtype(c10::toRealValueType(b.scalar_type())));
  cuda::myo_solve_launch(myo_dtype_code(rhs), s.batch, s.N, s.C, s.batch_b, s.Nb, rhs.data_ptr(), b.data_ptr(),
                         parent.data_ptr<int64_t>(), b_index ? b_index->data_ptr<int64_t>() : nullptr, skew, adjoint,
                         out.data_ptr(), work.data_ptr(), inv_pivot.data_ptr(),
                         x_saved ? x_saved->data_ptr() : nullptr, grad_b ? grad_b->data_ptr() : nullptr,
                         c10::cuda::getCurrentCUDAStream().stream());
}

at::Tensor myo_solve_fwd_cuda(const at::Tensor& u_, const at::Tensor& b_, const at::Tensor& parent_,
                              const c10::optional<at::Tensor>& b_index_, bool skew) {
  const TreeShape s = check_solve(u_, b_, parent_, b_index_);
  const c10::cuda::CUDAGuard guard(u_.device());
  auto u = u_.contiguous(), b = b_.contiguous(), parent = parent_.contiguous();
  c10::optional<at::Tensor> b_index;
  if (b_index_) b_index = b_index_->contiguous();
  auto x = at::empty_like(u);
  solve_cuda(s, u, b, parent, b_index, skew, false, x, nullptr, nullptr);
  return x;
}

std::tuple<at::Tensor, at::Tensor> myo_solve_bwd_cuda(const at::Tensor& grad_x_, const at::Tensor& x_,
                                                      const at::Tensor& b_, const at::Tensor& parent_,
                                                      const c10::optional<at::Tensor>& b_index_, bool skew) {
  const TreeShape s = check_solve(grad_x_, b_, parent_, b_index_);
  SSM_CHECK(x_.sizes() == grad_x_.sizes() && x_.scalar_type() == grad_x_.scalar_type(),
            "myo_solve_bwd: x must match grad_x");
  const c10::cuda::CUDAGuard guard(grad_x_.device());
  auto grad_x = grad_x_.contiguous(), x = x_.contiguous(), b = b_.contiguous(), parent = parent_.contiguous();
  c10::optional<at::Tensor> b_index;
  if (b_index_) b_index = b_index_->contiguous();
  auto grad_u = at::empty_like(grad_x);
  auto grad_b = at::zeros({s.batch, s.Nb, s.C}, b.options());
  solve_cuda(s, grad_x, b, parent, b_index, skew, true, grad_u, &x, &grad_b);
  return {grad_u, grad_b};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(ssm_plugins, m) {
  m.def("myo_solve_fwd(Tensor u, Tensor b, Tensor parent, Tensor? b_index, bool skew) -> Tensor");
  m.def(
      "myo_solve_bwd(Tensor grad_x, Tensor x, Tensor b, Tensor parent, Tensor? b_index, bool skew) "
      "-> (Tensor grad_u, Tensor grad_b)");
}

TORCH_LIBRARY_IMPL(ssm_plugins, CPU, m) {
  m.impl("myo_solve_fwd", &myo_solve_fwd_cpu);
  m.impl("myo_solve_bwd", &myo_solve_bwd_cpu);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(ssm_plugins, CUDA, m) {
  m.impl("myo_solve_fwd", &myo_solve_fwd_cuda);
  m.impl("myo_solve_bwd", &myo_solve_bwd_cuda);
}
#endif

}  // namespace ssm_plugins
