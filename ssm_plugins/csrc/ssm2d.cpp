// 2-D SSM kernel (Baron et al., "2-D SSM", arXiv:2306.06635, Sec. 3.2-3.3): op schemas, C++ CPU kernels, CUDA
// glue. Choices beyond the paper: docs/2d-ssm.md, 'Normalisation and edge relaxation', 'Kernel computation',
// 'Backward pass'.
//
// Contract of the raw ops (ssm_plugins/ops/ssm2d.py applies the parameterisation and normalises input):
//   A (4, S, N[, 2])   constrained diagonals of A1..A4; trailing 2 = (re, im) of the complex variant
//   B (2, S, N[, 2])   B1, B2;   C (2, S, N[, 2])   C1, C2.   One dtype: float32 or float64.
//   K (S, height, width) in that dtype: the normalised impulse response of the Roesser system,
//     K[i,j] = e(i,j) / sqrt(N) * Re sum_n (C1 x^h[i,j] + C2 x^v[i,j])
//   with the official halving masks sh, sv and edge factors e (docs/2d-ssm.md, 'Normalisation and edge
//   relaxation').
// ssm2d_kernel_bwd(grad_K, A, B, C, height, width) -> (dA, dB, dC) is the adjoint recurrence ('Backward pass');
// for the complex variant it returns (dL/dRe, dL/dIm) pairs, i.e. the gradient of the (re, im) input layout.
// Both kernels run the impulse recurrence directly ('Kernel computation'): O(S N H W), no coefficient table.
#include "common.h"

#include <c10/util/complex.h>

#include <vector>

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/ssm2d.h"
#endif

namespace ssm_plugins {
namespace {

struct Ssm2dShape {
  int64_t S, N, H, W;
  bool complex;
};

Ssm2dShape check_params(const at::Tensor& A, const at::Tensor& B, const at::Tensor& C, int64_t height,
                        int64_t width) {
  SSM_CHECK(A.dim() == 3 || A.dim() == 4, "ssm2d_kernel: A must be (4, S, N) or (4, S, N, 2)");
  const bool is_complex = A.dim() == 4;
  SSM_CHECK(!is_complex || A.size(3) == 2, "ssm2d_kernel: complex A must be (4, S, N, 2)");
  SSM_CHECK(A.size(0) == 4, "ssm2d_kernel: A must hold 4 matrices (A1..A4) in dim 0");
  const Ssm2dShape s{A.size(1), A.size(2), height, width, is_complex};
  SSM_CHECK(A.scalar_type() == at::kFloat || A.scalar_type() == at::kDouble,
            "ssm2d_kernel: parameters must be float32 or float64");
  for (const at::Tensor* t : {&B, &C}) {
    SSM_CHECK(t->dim() == A.dim() && t->size(0) == 2 && t->size(1) == s.S && t->size(2) == s.N &&
                  (!is_complex || t->size(3) == 2) && t->scalar_type() == A.scalar_type(),
              "ssm2d_kernel: B and C must be (2, S, N[, 2]) matching A");
  }
  SSM_CHECK(height >= 1 && width >= 1, "ssm2d_kernel: height and width must be >= 1");
  return s;
}

// The official normalisation ('Normalisation and edge relaxation'): halve an update exactly when both incoming
// states are non-zero.
inline bool halve_h(int64_t i, int64_t j) { return (i == 0 && j == 1) || (i >= 1 && j >= 2); }
inline bool halve_v(int64_t i, int64_t j) { return (j == 0 && i == 1) || (j >= 1 && i >= 2); }
// Edge relaxation: the first row and column (except the corner) output 2 C x.
inline int edge_factor(int64_t i, int64_t j) { return (i == 0) != (j == 0) ? 2 : 1; }

template <typename T> inline T conj_of(T v) { return v; }
template <typename T> inline c10::complex<T> conj_of(c10::complex<T> v) { return std::conj(v); }
template <typename T> inline T real_of(T v) { return v; }
template <typename T> inline T real_of(c10::complex<T> v) { return v.real(); }

// Parameters of one task: kernel set s, state coordinates [n0, n0 + count). V is acc_t or complex<acc_t>.
template <typename V>
struct TaskParams {
  std::vector<V> a1, a2, a3, a4, b1, b2, c1, c2;
  TaskParams(const V* A, const V* B, const V* C, const Ssm2dShape& s, int64_t set, int64_t n0, int64_t count) {
    auto take = [&](const V* base, int64_t k) {
      const V* p = base + (k * s.S + set) * s.N + n0;
      return std::vector<V>(p, p + count);
    };
    a1 = take(A, 0); a2 = take(A, 1); a3 = take(A, 2); a4 = take(A, 3);
    b1 = take(B, 0); b2 = take(B, 1); c1 = take(C, 0); c2 = take(C, 1);
  }
};

// States of one task on a zero-padded grid: cell (i, j) lives at row i + 1, column j + 1, so the cells
// left of column 0 and above row 0 read as the zero boundary. Layout [(row * (W + 1) + col) * count + k].
template <typename V>
struct StateGrid {
  int64_t W, count;
  std::vector<V> h, v;
  StateGrid(int64_t H, int64_t W_, int64_t count_)
      : W(W_), count(count_), h((H + 1) * (W_ + 1) * count_), v((H + 1) * (W_ + 1) * count_) {}
  int64_t at(int64_t i, int64_t j) const { return ((i + 1) * (W + 1) + (j + 1)) * count; }
};

// Runs the normalised impulse recurrence ('Normalisation and edge relaxation') over the grid in raster order.
template <typename V>
void impulse_states(const TaskParams<V>& p, StateGrid<V>& g, int64_t H, int64_t W) {
  using acc_t = decltype(real_of(V()));
  const int64_t cnt = g.count;
  for (int64_t i = 0; i < H; ++i) {
    for (int64_t j = 0; j < W; ++j) {
      V* xh = &g.h[g.at(i, j)];
      V* xv = &g.v[g.at(i, j)];
      if (i == 0 && j == 0) {
        for (int64_t k = 0; k < cnt; ++k) { xh[k] = p.b1[k]; xv[k] = p.b2[k]; }
        continue;
      }
      // Updates whose source is outside the grid are structurally zero, not recurrences.
      const acc_t fh = j >= 1 ? (halve_h(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
      const acc_t fv = i >= 1 ? (halve_v(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
      const V* left_h = &g.h[g.at(i, j - 1)];
      const V* left_v = &g.v[g.at(i, j - 1)];
      const V* up_h = &g.h[g.at(i - 1, j)];
      const V* up_v = &g.v[g.at(i - 1, j)];
      for (int64_t k = 0; k < cnt; ++k) {
        xh[k] = fh * (p.a1[k] * left_h[k] + p.a2[k] * left_v[k]);
        xv[k] = fv * (p.a3[k] * up_h[k] + p.a4[k] * up_v[k]);
      }
    }
  }
}

// Tasks are (kernel set, chunk of state coordinates): parallel over S x N, as the CUDA kernels are.
constexpr int64_t kChunk = 8;

template <typename V>
void fwd_cpu(const Ssm2dShape& s, const V* A, const V* B, const V* C, decltype(real_of(V()))* partial) {
  using acc_t = decltype(real_of(V()));
  const int64_t chunks = (s.N + kChunk - 1) / kChunk;
  const acc_t scale = acc_t(1) / std::sqrt(acc_t(s.N));
  dynamic_for_intra(s.S * chunks, 1, at::get_num_threads(), [&](auto take) {
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t set = task / chunks, n0 = (task % chunks) * kChunk;
        const int64_t cnt = std::min(kChunk, s.N - n0);
        const TaskParams<V> p(A, B, C, s, set, n0, cnt);
        StateGrid<V> g(s.H, s.W, cnt);
        impulse_states(p, g, s.H, s.W);
        acc_t* out = partial + task * s.H * s.W;
        for (int64_t i = 0; i < s.H; ++i) {
          for (int64_t j = 0; j < s.W; ++j) {
            const V* xh = &g.h[g.at(i, j)];
            const V* xv = &g.v[g.at(i, j)];
            acc_t sum = 0;
            for (int64_t k = 0; k < cnt; ++k) sum += real_of(p.c1[k] * xh[k] + p.c2[k] * xv[k]);
            out[i * s.W + j] = edge_factor(i, j) * scale * sum;
          }
        }
      }
    }
  });
}

// Adjoint recurrence ('Backward pass') in reverse raster order. lam_h / lam_v hold the current row (already
// visited cells, j' > j) and the row below (j' <= j), updated in place; column W is the zero boundary.
template <typename V>
void bwd_cpu(const Ssm2dShape& s, const decltype(real_of(V()))* grad, const V* A, const V* B, const V* C, V* dA,
             V* dB, V* dC) {
  using acc_t = decltype(real_of(V()));
  const int64_t chunks = (s.N + kChunk - 1) / kChunk;
  const acc_t scale = acc_t(1) / std::sqrt(acc_t(s.N));
  dynamic_for_intra(s.S * chunks, 1, at::get_num_threads(), [&](auto take) {
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t set = task / chunks, n0 = (task % chunks) * kChunk;
        const int64_t cnt = std::min(kChunk, s.N - n0);
        const TaskParams<V> p(A, B, C, s, set, n0, cnt);
        StateGrid<V> g(s.H, s.W, cnt);
        impulse_states(p, g, s.H, s.W);
        std::vector<V> lam_h((s.W + 1) * cnt, V(0)), lam_v((s.W + 1) * cnt, V(0));
        std::vector<V> da1(cnt, V(0)), da2(cnt, V(0)), da3(cnt, V(0)), da4(cnt, V(0)), dc1(cnt, V(0)),
            dc2(cnt, V(0));
        const acc_t* G = grad + set * s.H * s.W;
        for (int64_t i = s.H - 1; i >= 0; --i) {
          for (int64_t j = s.W - 1; j >= 0; --j) {
            const acc_t gk = edge_factor(i, j) * scale * G[i * s.W + j];
            // Factors of the updates that consumed this cell: x^h[i, j+1] and x^v[i+1, j].
            const acc_t right = halve_h(i, j + 1) ? acc_t(0.5) : acc_t(1);
            const acc_t below = halve_v(i + 1, j) ? acc_t(0.5) : acc_t(1);
            // Factors of the updates that produced this cell (zero where the state is structural).
            const bool origin = i == 0 && j == 0;
            const acc_t fh = j >= 1 ? (halve_h(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
            const acc_t fv = i >= 1 ? (halve_v(i, j) ? acc_t(0.5) : acc_t(1)) : acc_t(0);
            const V* xh = &g.h[g.at(i, j)];
            const V* xv = &g.v[g.at(i, j)];
            const V* left_h = &g.h[g.at(i, j - 1)];
            const V* left_v = &g.v[g.at(i, j - 1)];
            const V* up_h = &g.h[g.at(i - 1, j)];
            const V* up_v = &g.v[g.at(i - 1, j)];
            V* lh_row = &lam_h[j * cnt];
            const V* lh_right = &lam_h[(j + 1) * cnt];
            V* lv_row = &lam_v[j * cnt];  // holds lam_v[i+1, j] until overwritten below
            for (int64_t k = 0; k < cnt; ++k) {
              const V from_right = right * lh_right[k];
              const V from_below = below * lv_row[k];
              const V lh = conj_of(p.c1[k]) * gk + conj_of(p.a1[k]) * from_right + conj_of(p.a3[k]) * from_below;
              const V lv = conj_of(p.c2[k]) * gk + conj_of(p.a2[k]) * from_right + conj_of(p.a4[k]) * from_below;
              dc1[k] += gk * conj_of(xh[k]);
              dc2[k] += gk * conj_of(xv[k]);
              da1[k] += fh * lh * conj_of(left_h[k]);
              da2[k] += fh * lh * conj_of(left_v[k]);
              da3[k] += fv * lv * conj_of(up_h[k]);
              da4[k] += fv * lv * conj_of(up_v[k]);
              lh_row[k] = lh;
              lv_row[k] = lv;
            }
            if (origin) {
              for (int64_t k = 0; k < cnt; ++k) {
                dB[(0 * s.S + set) * s.N + n0 + k] = lh_row[k];
                dB[(1 * s.S + set) * s.N + n0 + k] = lv_row[k];
              }
            }
          }
        }
        for (int64_t k = 0; k < cnt; ++k) {
          const int64_t n = n0 + k;
          dA[(0 * s.S + set) * s.N + n] = da1[k];
          dA[(1 * s.S + set) * s.N + n] = da2[k];
          dA[(2 * s.S + set) * s.N + n] = da3[k];
          dA[(3 * s.S + set) * s.N + n] = da4[k];
          dC[(0 * s.S + set) * s.N + n] = dc1[k];
          dC[(1 * s.S + set) * s.N + n] = dc2[k];
        }
      }
    }
  });
}

// Runs `fn` with V = scalar_t for real parameters and V = complex<scalar_t> for (re, im) pairs.
template <typename Fn>
void dispatch_variant(const at::Tensor& A, bool is_complex, Fn&& fn) {
  AT_DISPATCH_FLOATING_TYPES(A.scalar_type(), "ssm2d_kernel", [&] {
    if (is_complex) {
      fn(static_cast<c10::complex<scalar_t>*>(nullptr));
    } else {
      fn(static_cast<scalar_t*>(nullptr));
    }
  });
}

at::Tensor ssm2d_kernel_fwd_cpu(const at::Tensor& A_, const at::Tensor& B_, const at::Tensor& C_, int64_t height,
                                int64_t width) {
  const Ssm2dShape s = check_params(A_, B_, C_, height, width);
  auto A = A_.contiguous(), B = B_.contiguous(), C = C_.contiguous();
  const int64_t chunks = (s.N + kChunk - 1) / kChunk;
  auto partial = at::empty({s.S, chunks, s.H, s.W}, A.options());
  dispatch_variant(A, s.complex, [&](auto* tag) {
    using V = std::remove_pointer_t<decltype(tag)>;
    using acc_t = decltype(real_of(V()));
    fwd_cpu<V>(s, reinterpret_cast<const V*>(A.data_ptr<acc_t>()), reinterpret_cast<const V*>(B.data_ptr<acc_t>()),
               reinterpret_cast<const V*>(C.data_ptr<acc_t>()), partial.data_ptr<acc_t>());
  });
  return chunks == 1 ? partial.squeeze(1) : partial.sum(1);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ssm2d_kernel_bwd_cpu(const at::Tensor& grad_, const at::Tensor& A_,
                                                                    const at::Tensor& B_, const at::Tensor& C_,
                                                                    int64_t height, int64_t width) {
  const Ssm2dShape s = check_params(A_, B_, C_, height, width);
  SSM_CHECK(grad_.dim() == 3 && grad_.size(0) == s.S && grad_.size(1) == s.H && grad_.size(2) == s.W,
            "ssm2d_kernel_bwd: grad_K must be (S, height, width)");
  auto A = A_.contiguous(), B = B_.contiguous(), C = C_.contiguous();
  auto grad = grad_.to(A.scalar_type()).contiguous();
  auto dA = at::empty_like(A), dB = at::empty_like(B), dC = at::empty_like(C);
  dispatch_variant(A, s.complex, [&](auto* tag) {
    using V = std::remove_pointer_t<decltype(tag)>;
    using acc_t = decltype(real_of(V()));
    bwd_cpu<V>(s, grad.data_ptr<acc_t>(), reinterpret_cast<const V*>(A.data_ptr<acc_t>()),
               reinterpret_cast<const V*>(B.data_ptr<acc_t>()), reinterpret_cast<const V*>(C.data_ptr<acc_t>()),
               reinterpret_cast<V*>(dA.data_ptr<acc_t>()), reinterpret_cast<V*>(dB.data_ptr<acc_t>()),
               reinterpret_cast<V*>(dC.data_ptr<acc_t>()));
  });
  return {dA, dB, dC};
}

#ifdef WITH_CUDA
at::Tensor ssm2d_kernel_fwd_cuda(const at::Tensor& A_, const at::Tensor& B_, const at::Tensor& C_, int64_t height,
                                 int64_t width) {
  const Ssm2dShape s = check_params(A_, B_, C_, height, width);
  const c10::cuda::CUDAGuard guard(A_.device());
  auto A = A_.contiguous(), B = B_.contiguous(), C = C_.contiguous();
  auto K = at::zeros({s.S, s.H, s.W}, A.options());  // the launcher accumulates over n
  auto rows = at::empty({2, s.W, s.S, s.N * (s.complex ? 2 : 1)}, A.options());
  cuda::ssm2d_kernel_fwd_launch(static_cast<int>(dtype_code(A)), s.complex, s.S, s.N, s.H, s.W, A.data_ptr(),
                                B.data_ptr(), C.data_ptr(), rows.data_ptr(), K.data_ptr(),
                                c10::cuda::getCurrentCUDAStream().stream());
  return K;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ssm2d_kernel_bwd_cuda(const at::Tensor& grad_, const at::Tensor& A_,
                                                                     const at::Tensor& B_, const at::Tensor& C_,
                                                                     int64_t height, int64_t width) {
  const Ssm2dShape s = check_params(A_, B_, C_, height, width);
  SSM_CHECK(grad_.dim() == 3 && grad_.size(0) == s.S && grad_.size(1) == s.H && grad_.size(2) == s.W,
            "ssm2d_kernel_bwd: grad_K must be (S, height, width)");
  const c10::cuda::CUDAGuard guard(A_.device());
  auto A = A_.contiguous(), B = B_.contiguous(), C = C_.contiguous();
  auto grad = grad_.to(A.scalar_type()).contiguous();
  auto dA = at::empty_like(A), dB = at::empty_like(B), dC = at::empty_like(C);
  const int64_t width_v = s.complex ? 2 : 1;
  // Scratch: all states (2, H, W, S, N) for the reverse sweep, plus the adjoint row lam_v (W, S, N).
  auto states = at::empty({2, s.H, s.W, s.S, s.N * width_v}, A.options());
  auto lam_rows = at::empty({s.W, s.S, s.N * width_v}, A.options());
  cuda::ssm2d_kernel_bwd_launch(static_cast<int>(dtype_code(A)), s.complex, s.S, s.N, s.H, s.W, grad.data_ptr(),
                                A.data_ptr(), B.data_ptr(), C.data_ptr(), states.data_ptr(), lam_rows.data_ptr(),
                                dA.data_ptr(), dB.data_ptr(), dC.data_ptr(),
                                c10::cuda::getCurrentCUDAStream().stream());
  return {dA, dB, dC};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(ssm_plugins, m) {
  m.def("ssm2d_kernel_fwd(Tensor A, Tensor B, Tensor C, int height, int width) -> Tensor");
  m.def(
      "ssm2d_kernel_bwd(Tensor grad_K, Tensor A, Tensor B, Tensor C, int height, int width) "
      "-> (Tensor grad_A, Tensor grad_B, Tensor grad_C)");
}

TORCH_LIBRARY_IMPL(ssm_plugins, CPU, m) {
  m.impl("ssm2d_kernel_fwd", &ssm2d_kernel_fwd_cpu);
  m.impl("ssm2d_kernel_bwd", &ssm2d_kernel_bwd_cpu);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(ssm_plugins, CUDA, m) {
  m.impl("ssm2d_kernel_fwd", &ssm2d_kernel_fwd_cuda);
  m.impl("ssm2d_kernel_bwd", &ssm2d_kernel_bwd_cuda);
}
#endif

}  // namespace ssm_plugins
