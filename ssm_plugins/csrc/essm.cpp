// eSSM state kernel (eSSM paper, arXiv 2402.15290; docs/essm.md, 'State kernel', 'Bidirectional kernel'): op
// schemas, C++ CPU kernels, CUDA glue.
//
// Contract of the raw ops (ssm_plugins/ops/essm.py normalises user input to it):
//   g_re, g_im, z_re, z_im  (modes...)  one shape, float32 or float64: per-mode gain g and log discrete
//                                       eigenvalue z (z = λΔ under ZOH), split into real and imaginary parts
//   essm_kernel -> K        (modes..., n_fft), same dtype, n_fft >= 2L:
//       K[j]           = k_j = Re(g e^{jz}) = e^{j z_re} (g_re cos(j z_im) - g_im sin(j z_im)),  j = 0..L-1
//       K[n_fft-1-j]   = k_j                  (bidirectional only: the flipped kernel at the tail)
//       zeros elsewhere, so the buffer is ready for the rFFT of a linear convolution.
//   essm_kernel_bwd(grad_K, ...) -> (grad_g_re, grad_g_im, grad_z_re, grad_z_im), each (modes...):
//       with G_j = grad_K[j] (+ grad_K[n_fft-1-j] if bidirectional), c_j + i s_j = e^{jz}:
//       dg_re = Σ G_j c_j,  dg_im = -Σ G_j s_j,  dz_re = Σ G_j j k_j,  dz_im = -Σ G_j j (g_re s_j + g_im c_j)
// e^{jz} is evaluated directly for every j (docs/essm.md, 'State kernel'), never by repeated multiplication.
#include "common.h"

#ifdef WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include "cuda/essm.h"
#endif

namespace ssm_plugins {
namespace {

void check_modes(const char* op, const at::Tensor& g_re, const at::Tensor& g_im, const at::Tensor& z_re,
                 const at::Tensor& z_im) {
  SSM_CHECK(g_re.scalar_type() == at::kFloat || g_re.scalar_type() == at::kDouble, op,
            ": g_re must be float32 or float64, got ", g_re.scalar_type());
  for (const at::Tensor* t : {&g_im, &z_re, &z_im}) {
    SSM_CHECK(t->sizes() == g_re.sizes() && t->scalar_type() == g_re.scalar_type() && t->device() == g_re.device(),
              op, ": g_re, g_im, z_re and z_im must share shape, dtype and device");
  }
}

void check_lengths(const char* op, int64_t L, int64_t n_fft) {
  SSM_CHECK(L >= 1, op, ": L must be >= 1, got ", L);
  SSM_CHECK(n_fft >= 2 * L, op, ": n_fft must be >= 2L = ", 2 * L, ", got ", n_fft);
}

// Rows per grab: enough kernel elements per grab to pay for the thread hand-off.
int64_t grain(int64_t L) { return std::max<int64_t>(1, at::internal::GRAIN_SIZE / L); }

template <typename T>
void kernel_fwd_cpu(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, const T* g_re, const T* g_im,
                    const T* z_re, const T* z_im, T* K) {
  // One mode (row of the (S*n, n_fft) buffer) per task: every lag is independent.
  dynamic_for_intra(modes, grain(L), at::get_num_threads(), [&](auto take) {
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t row = begin; row < end; ++row) {
        T* out = K + row * n_fft;
        const T a = g_re[row], b = g_im[row], zr = z_re[row], zi = z_im[row];
        std::fill(out + L, out + n_fft - (bidirectional ? L : 0), T(0));
        for (int64_t j = 0; j < L; ++j) {
          const T lag = static_cast<T>(j);
          const T k = std::exp(lag * zr) * (a * std::cos(lag * zi) - b * std::sin(lag * zi));
          out[j] = k;
          if (bidirectional) out[n_fft - 1 - j] = k;
        }
      }
    }
  });
}

template <typename T>
void kernel_bwd_cpu(int64_t modes, int64_t L, int64_t n_fft, bool bidirectional, const T* grad_K, const T* g_re,
                    const T* g_im, const T* z_re, const T* z_im, T* grad_g_re, T* grad_g_im, T* grad_z_re,
                    T* grad_z_im) {
  dynamic_for_intra(modes, grain(L), at::get_num_threads(), [&](auto take) {
    for (int64_t begin, end; take(begin, end);) {
      for (int64_t row = begin; row < end; ++row) {
        const T* G = grad_K + row * n_fft;
        const T a = g_re[row], b = g_im[row], zr = z_re[row], zi = z_im[row];
        T da = 0, db = 0, dzr = 0, dzi = 0;
        for (int64_t j = 0; j < L; ++j) {
          const T lag = static_cast<T>(j);
          const T Gj = bidirectional ? G[j] + G[n_fft - 1 - j] : G[j];
          const T decay = std::exp(lag * zr);
          const T c = decay * std::cos(lag * zi), s = decay * std::sin(lag * zi);
          da += Gj * c;
          db -= Gj * s;
          dzr += Gj * lag * (a * c - b * s);
          dzi -= Gj * lag * (a * s + b * c);
        }
        grad_g_re[row] = da;
        grad_g_im[row] = db;
        grad_z_re[row] = dzr;
        grad_z_im[row] = dzi;
      }
    }
  });
}

std::vector<int64_t> kernel_shape(const at::Tensor& g_re, int64_t n_fft) {
  std::vector<int64_t> shape(g_re.sizes().begin(), g_re.sizes().end());
  shape.push_back(n_fft);
  return shape;
}

at::Tensor essm_kernel_cpu(const at::Tensor& g_re, const at::Tensor& g_im, const at::Tensor& z_re,
                           const at::Tensor& z_im, int64_t L, int64_t n_fft, bool bidirectional) {
  check_modes("essm_kernel", g_re, g_im, z_re, z_im);
  check_lengths("essm_kernel", L, n_fft);
  auto gr = g_re.contiguous(), gi = g_im.contiguous(), zr = z_re.contiguous(), zi = z_im.contiguous();
  auto K = at::empty(kernel_shape(g_re, n_fft), g_re.options());
  AT_DISPATCH_FLOATING_TYPES(g_re.scalar_type(), "essm_kernel_cpu", [&] {
    kernel_fwd_cpu<scalar_t>(gr.numel(), L, n_fft, bidirectional, gr.data_ptr<scalar_t>(), gi.data_ptr<scalar_t>(),
                             zr.data_ptr<scalar_t>(), zi.data_ptr<scalar_t>(), K.data_ptr<scalar_t>());
  });
  return K;
}

void check_grad(const at::Tensor& grad_K, const at::Tensor& g_re) {
  SSM_CHECK(grad_K.dim() == g_re.dim() + 1 && grad_K.sizes().slice(0, g_re.dim()) == g_re.sizes() &&
                grad_K.scalar_type() == g_re.scalar_type() && grad_K.device() == g_re.device(),
            "essm_kernel_bwd: grad_K must be (modes..., n_fft) in g_re's dtype and device");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> essm_kernel_bwd_cpu(
    const at::Tensor& grad_K_, const at::Tensor& g_re, const at::Tensor& g_im, const at::Tensor& z_re,
    const at::Tensor& z_im, int64_t L, bool bidirectional) {
  check_modes("essm_kernel_bwd", g_re, g_im, z_re, z_im);
  check_grad(grad_K_, g_re);
  const int64_t n_fft = grad_K_.size(-1);
  check_lengths("essm_kernel_bwd", L, n_fft);
  auto grad_K = grad_K_.contiguous();
  auto gr = g_re.contiguous(), gi = g_im.contiguous(), zr = z_re.contiguous(), zi = z_im.contiguous();
  auto d_gr = at::empty_like(gr), d_gi = at::empty_like(gr), d_zr = at::empty_like(gr), d_zi = at::empty_like(gr);
  AT_DISPATCH_FLOATING_TYPES(g_re.scalar_type(), "essm_kernel_bwd_cpu", [&] {
    kernel_bwd_cpu<scalar_t>(gr.numel(), L, n_fft, bidirectional, grad_K.data_ptr<scalar_t>(),
                             gr.data_ptr<scalar_t>(), gi.data_ptr<scalar_t>(), zr.data_ptr<scalar_t>(),
                             zi.data_ptr<scalar_t>(), d_gr.data_ptr<scalar_t>(), d_gi.data_ptr<scalar_t>(),
                             d_zr.data_ptr<scalar_t>(), d_zi.data_ptr<scalar_t>());
  });
  return {d_gr, d_gi, d_zr, d_zi};
}

#ifdef WITH_CUDA
at::Tensor essm_kernel_cuda(const at::Tensor& g_re, const at::Tensor& g_im, const at::Tensor& z_re,
                            const at::Tensor& z_im, int64_t L, int64_t n_fft, bool bidirectional) {
  check_modes("essm_kernel", g_re, g_im, z_re, z_im);
  check_lengths("essm_kernel", L, n_fft);
  const c10::cuda::CUDAGuard guard(g_re.device());
  auto gr = g_re.contiguous(), gi = g_im.contiguous(), zr = z_re.contiguous(), zi = z_im.contiguous();
  auto K = at::empty(kernel_shape(g_re, n_fft), g_re.options());
  cuda::essm_kernel_fwd_launch(static_cast<int>(dtype_code(gr)), gr.numel(), L, n_fft, bidirectional, gr.data_ptr(),
                               gi.data_ptr(), zr.data_ptr(), zi.data_ptr(), K.data_ptr(),
                               c10::cuda::getCurrentCUDAStream().stream());
  return K;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> essm_kernel_bwd_cuda(
    const at::Tensor& grad_K_, const at::Tensor& g_re, const at::Tensor& g_im, const at::Tensor& z_re,
    const at::Tensor& z_im, int64_t L, bool bidirectional) {
  check_modes("essm_kernel_bwd", g_re, g_im, z_re, z_im);
  check_grad(grad_K_, g_re);
  const int64_t n_fft = grad_K_.size(-1);
  check_lengths("essm_kernel_bwd", L, n_fft);
  const c10::cuda::CUDAGuard guard(g_re.device());
  auto grad_K = grad_K_.contiguous();
  auto gr = g_re.contiguous(), gi = g_im.contiguous(), zr = z_re.contiguous(), zi = z_im.contiguous();
  auto d_gr = at::empty_like(gr), d_gi = at::empty_like(gr), d_zr = at::empty_like(gr), d_zi = at::empty_like(gr);
  cuda::essm_kernel_bwd_launch(static_cast<int>(dtype_code(gr)), gr.numel(), L, n_fft, bidirectional,
                               grad_K.data_ptr(), gr.data_ptr(), gi.data_ptr(), zr.data_ptr(), zi.data_ptr(),
                               d_gr.data_ptr(), d_gi.data_ptr(), d_zr.data_ptr(), d_zi.data_ptr(),
                               c10::cuda::getCurrentCUDAStream().stream());
  return {d_gr, d_gi, d_zr, d_zi};
}
#endif

}  // namespace

TORCH_LIBRARY_FRAGMENT(ssm_plugins, m) {
  m.def("essm_kernel(Tensor g_re, Tensor g_im, Tensor z_re, Tensor z_im, int L, int n_fft, bool bidirectional) "
        "-> Tensor");
  m.def(
      "essm_kernel_bwd(Tensor grad_K, Tensor g_re, Tensor g_im, Tensor z_re, Tensor z_im, int L, bool bidirectional) "
      "-> (Tensor grad_g_re, Tensor grad_g_im, Tensor grad_z_re, Tensor grad_z_im)");
}

TORCH_LIBRARY_IMPL(ssm_plugins, CPU, m) {
  m.impl("essm_kernel", &essm_kernel_cpu);
  m.impl("essm_kernel_bwd", &essm_kernel_bwd_cpu);
}

#ifdef WITH_CUDA
TORCH_LIBRARY_IMPL(ssm_plugins, CUDA, m) {
  m.impl("essm_kernel", &essm_kernel_cuda);
  m.impl("essm_kernel_bwd", &essm_kernel_bwd_cuda);
}
#endif

}  // namespace ssm_plugins
