// Quasi-separable mixing CUDA kernels (math and layouts in ssm_plugins/csrc/qs_mix.cpp). One thread per
// (batch, head, feature) column runs both strict scans over L with its N-state in registers (N <= 16; local
// memory up to 256) and accumulates in fp32 (fp64 for double); neighbouring threads are neighbouring
// features, so the loads of x coalesce. The backward keeps one state per chunk of ~sqrt(L) steps in a
// global workspace, recomputes each chunk's states, and reduces the gradients shared by several columns
// (dB, dC per group; ddt, dgamma per head; dA per head) with segmented warp sums and one atomicAdd per
// segment. No torch headers here (see setup.py).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "device.h"
#include "qs_mix.h"

namespace ssm_plugins {
namespace cuda {
namespace {

constexpr int kMaxState = 256;

// Loops over the state dimension. Kernels are built for kN = 16 and kN = kMaxState: with kN = 16 the loop has a
// constant trip count and unrolls (guarded by the run-time N), so the per-column state arrays live in
// registers; with kN = kMaxState it runs N times, not unrolled (the arrays stay in local memory).
#define SSM_FOR_STATE(n) \
  _Pragma("unroll") for (int n = 0; n < (kN <= 16 ? kN : static_cast<int>(s.N)); ++n) if (kN > 16 || n < s.N)
constexpr int kThreads = 128;  // a multiple of the warp size: every warp is full (see bwd_kernel)
constexpr unsigned kFullMask = 0xffffffffu;

template <typename T> struct Acc { using type = float; };
template <> struct Acc<double> { using type = double; };

template <typename T> __device__ inline typename Acc<T>::type to_acc(T v) { return static_cast<typename Acc<T>::type>(v); }
template <> __device__ inline float to_acc<__half>(__half v) { return __half2float(v); }
template <> __device__ inline float to_acc<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

struct Shape {
  int64_t batch, L, H, P, N, G;
};

// Where column `col` = (b, h, p) reads its direction's parameters.
template <typename acc_t>
struct ColumnDirection {
  global_ptr<const acc_t> dt, A, B, C;
  acc_t bias;
  int64_t a_step, dt_s1, B_s1, B_s3, C_s1, C_s3;  // A[h, n] = A[n * a_step]: a_step 0 for scalar A

  __device__ ColumnDirection(const QsMixDirection& d, int64_t b, int64_t h, int64_t g, int64_t N) {
    dt = global_ptr<const acc_t>(static_cast<const acc_t*>(d.dt)) + b * d.dt_s[0] + h * d.dt_s[2];
    A = global_ptr<const acc_t>(static_cast<const acc_t*>(d.A)) + h * d.A_cols;
    a_step = d.A_cols == 1 ? 0 : 1;
    B = global_ptr<const acc_t>(static_cast<const acc_t*>(d.B)) + b * d.B_s[0] + g * d.B_s[2];
    C = global_ptr<const acc_t>(static_cast<const acc_t*>(d.C)) + b * d.C_s[0] + g * d.C_s[2];
    bias = d.bias ? global_ptr<const acc_t>(static_cast<const acc_t*>(d.bias))[h] : acc_t(0);
    dt_s1 = d.dt_s[1], B_s1 = d.B_s[1], B_s3 = d.B_s[3], C_s1 = d.C_s[1], C_s3 = d.C_s[3];
  }
  __device__ acc_t raw_delta(int64_t t) const { return dt[t * dt_s1] + bias; }
  __device__ acc_t Av(int64_t n) const { return A[n * a_step]; }
  __device__ acc_t Bv(int64_t t, int64_t n) const { return B[t * B_s1 + n * B_s3]; }
  __device__ acc_t Cv(int64_t t, int64_t n) const { return C[t * C_s1 + n * C_s3]; }
};

template <typename acc_t>
__device__ inline acc_t softplus(acc_t v) {
  return v > acc_t(20) ? v : log1p(exp(v));
}

template <typename acc_t>
__device__ inline acc_t softplus_grad(acc_t v) {
  return v > acc_t(20) ? acc_t(1) : acc_t(1) / (acc_t(1) + exp(-v));
}

template <typename T, int kN>
__global__ void fwd_kernel(Shape s, QsMixTensors tensors, bool softplus_dt, bool hydra_shift,
                           global_ptr<typename Acc<T>::type> y, int64_t y_s0, int64_t y_s1, int64_t y_s2, int64_t y_s3) {
  using acc_t = typename Acc<T>::type;
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (col >= s.batch * s.H * s.P) return;
  const int64_t p = col % s.P, h = (col / s.P) % s.H, b = col / (s.P * s.H), g = h / (s.H / s.G);
  const global_ptr<const T> x = global_ptr<const T>(static_cast<const T*>(tensors.x)) + b * tensors.x_s[0] + h * tensors.x_s[2] + p * tensors.x_s[3];
  const global_ptr<const acc_t> gamma = global_ptr<const acc_t>(static_cast<const acc_t*>(tensors.gamma)) + b * tensors.gamma_s[0] + h * tensors.gamma_s[2];
  const global_ptr<acc_t> yc = y + b * y_s0 + h * y_s2 + p * y_s3;
  acc_t state[kN];
  for (int dir = 0; dir < 2; ++dir) {
    const ColumnDirection<acc_t> d(tensors.dir[dir], b, h, g, s.N);
    SSM_FOR_STATE(n) state[n] = 0;
    for (int64_t i = 0; i < s.L; ++i) {
      const int64_t t = dir ? s.L - 1 - i : i;
      const int64_t t_prev = dir ? t + 1 : t - 1;
      acc_t delta = d.raw_delta(t);
      if (softplus_dt) delta = softplus(delta);
      const acc_t xv = to_acc(x[t * tensors.x_s[1]]);
      const acc_t decay0 = exp(delta * d.Av(0));  // the only one for scalar A
      acc_t out = 0;
      SSM_FOR_STATE(n) {
        const acc_t decay = d.a_step ? exp(delta * d.Av(n)) : decay0;
        if (hydra_shift) {
          if (i > 0) out += d.Cv(t_prev, n) * state[n];
          state[n] = decay * state[n] + delta * d.Bv(t, n) * xv;
        } else {
          const acc_t z = decay * state[n];
          out += d.Cv(t, n) * z;
          state[n] = z + delta * d.Bv(t, n) * xv;
        }
      }
      // Each column owns its outputs: the reverse pass reads back what this thread wrote.
      if (dir == 0) {
        yc[t * y_s1] = out + gamma[t * tensors.gamma_s[1]] * xv;
      } else {
        yc[t * y_s1] += out;
      }
    }
  }
}

// Sum of v over the lanes from this one up to the end of its segment (lanes with an equal key form one
// contiguous segment); `same` bit k says lane + 2^k has this lane's key. The segment's first lane ends up
// with the segment's total.
template <typename acc_t>
__device__ inline acc_t segment_sum(acc_t v, unsigned same) {
  for (int k = 0; k < 5; ++k) {
    const acc_t other = __shfl_down_sync(kFullMask, v, 1 << k);
    if (same & (1u << k)) v += other;
  }
  return v;
}

__device__ inline unsigned same_key_bits(int64_t key, unsigned lane) {
  unsigned bits = 0;
  for (int k = 0; k < 5; ++k) {
    const int64_t other = __shfl_down_sync(kFullMask, key, 1 << k);
    if (lane + (1u << k) < 32 && other == key) bits |= 1u << k;
  }
  return bits;
}

__device__ inline bool segment_head(int64_t key, unsigned lane) {
  const int64_t prev = __shfl_up_sync(kFullMask, key, 1);
  return lane == 0 || prev != key;
}

template <typename acc_t>
struct BwdOut {
  global_ptr<acc_t> dx, ddt[2], dA[2], dB[2], dC[2], dgamma;
};

template <typename T, int kN>
__global__ void bwd_kernel(Shape s, QsMixTensors tensors, bool softplus_dt, bool hydra_shift, global_ptr<const T> grad,
                           int64_t g_s0, int64_t g_s1, int64_t g_s2, int64_t g_s3, int64_t chunk, int64_t columns,
                           global_ptr<typename Acc<T>::type> ckpt, global_ptr<typename Acc<T>::type> chunk_states,
                           BwdOut<typename Acc<T>::type> out) {
  using acc_t = typename Acc<T>::type;
  // Threads past the last column replay the last column with a zero gradient: every lane of a warp must
  // take part in the shuffles, and a zero gradient makes all their contributions zero.
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t n_real = s.batch * s.H * s.P;
  const bool active = idx < n_real;
  const int64_t col = active ? idx : n_real - 1;
  const int64_t p = col % s.P, h = (col / s.P) % s.H, b = col / (s.P * s.H), g = h / (s.H / s.G);
  const unsigned lane = threadIdx.x & 31u;
  const int64_t key_head = b * s.H + h, key_group = b * s.G + g;
  const unsigned same_head = same_key_bits(key_head, lane), same_group = same_key_bits(key_group, lane);
  const bool head_lead = segment_head(key_head, lane), group_lead = segment_head(key_group, lane);

  const global_ptr<const T> x = global_ptr<const T>(static_cast<const T*>(tensors.x)) + b * tensors.x_s[0] + h * tensors.x_s[2] + p * tensors.x_s[3];
  const global_ptr<const T> gy = grad + b * g_s0 + h * g_s2 + p * g_s3;
  const global_ptr<const acc_t> gamma = global_ptr<const acc_t>(static_cast<const acc_t*>(tensors.gamma)) + b * tensors.gamma_s[0] + h * tensors.gamma_s[2];
  auto grad_at = [&](int64_t t) { return active ? to_acc(gy[t * g_s1]) : acc_t(0); };
  const global_ptr<acc_t> dx = out.dx + (b * s.L * s.H + h) * s.P + p;  // contiguous (batch, L, H, P); t stride H * P
  const int64_t n_chunks = (s.L + chunk - 1) / chunk;

  acc_t lam[kN], dA_acc[kN];
  for (int dir = 0; dir < 2; ++dir) {
    const ColumnDirection<acc_t> d(tensors.dir[dir], b, h, g, s.N);
    auto order = [&](int64_t i) { return dir ? s.L - 1 - i : i; };
    auto delta_at = [&](int64_t t) {
      const acc_t v = d.raw_delta(t);
      return softplus_dt ? softplus(v) : v;
    };
    auto step = [&](int64_t t, auto state, int64_t stride) {  // state <- Ā_t state + B̄_t x_t
      const acc_t delta = delta_at(t), xv = to_acc(x[t * tensors.x_s[1]]), decay0 = exp(delta * d.Av(0));
      SSM_FOR_STATE(n) {
        const acc_t decay = d.a_step ? exp(delta * d.Av(n)) : decay0;
        state[n * stride] = decay * state[n * stride] + delta * d.Bv(t, n) * xv;
      }
    };
    // Pass 1: the state entering each chunk (lam is free until pass 2).
    SSM_FOR_STATE(n) lam[n] = 0;
    for (int64_t i = 0; i < s.L; ++i) {
      if (i % chunk == 0) {
        SSM_FOR_STATE(n) ckpt[((i / chunk) * s.N + n) * columns + idx] = lam[n];
      }
      step(order(i), lam, 1);
    }
    // Pass 2: chunks from last to first; lam is the adjoint of the state after the current step.
    SSM_FOR_STATE(n) lam[n] = 0, dA_acc[n] = 0;
    for (int64_t c = n_chunks - 1; c >= 0; --c) {
      const int64_t i0 = c * chunk, i1 = i0 + chunk < s.L ? i0 + chunk : s.L;
      SSM_FOR_STATE(n) {
        chunk_states[n * columns + idx] = ckpt[(c * s.N + n) * columns + idx];
      }
      for (int64_t i = i0; i + 1 < i1; ++i) {
        const global_ptr<acc_t> next = chunk_states + (i - i0 + 1) * s.N * columns + idx;
        SSM_FOR_STATE(n) next[n * columns] = next[(n - s.N) * columns];
        step(order(i), next, columns);
      }
      for (int64_t i = i1 - 1; i >= i0; --i) {
        const int64_t t = order(i);
        const global_ptr<const acc_t> hprev = chunk_states + (i - i0) * s.N * columns + idx;  // state before step t
        const acc_t v = d.raw_delta(t);
        const acc_t delta = softplus_dt ? softplus(v) : v;
        const acc_t xv = to_acc(x[t * tensors.x_s[1]]), gv = grad_at(t);
        const bool has_next = i + 1 < s.L;
        const acc_t g_next = hydra_shift && has_next ? grad_at(order(i + 1)) : acc_t(0);
        const int64_t bc = ((b * s.L + t) * s.G + g) * s.N;
        acc_t ddelta = 0, dx_t = 0;
        const acc_t decay0 = exp(delta * d.Av(0));
        SSM_FOR_STATE(n) {
          const acc_t decay = d.a_step ? exp(delta * d.Av(n)) : decay0, Bn = d.Bv(t, n), Cn = d.Cv(t, n), hp = hprev[n * columns];
          acc_t dCn, mu;
          if (hydra_shift) {
            // y_next = C_t · h_t: h_t feeds the next output through C_t.
            dCn = g_next * (decay * hp + delta * Bn * xv);
            lam[n] += Cn * g_next;
            mu = lam[n];
          } else {
            // y_t = C_t · (Ā_t h_{t-1}): the decayed state's adjoint is mu = lam + C_t g_t.
            dCn = gv * decay * hp;
            mu = lam[n] + Cn * gv;
          }
          const acc_t lam_x = lam[n] * xv;
          dx_t += delta * Bn * lam[n];
          const acc_t d_logdecay = mu * hp * decay;  // d/d(Δ A_n)
          ddelta += Bn * lam_x + d_logdecay * d.Av(n);
          dA_acc[n] += d_logdecay * delta;
          lam[n] = decay * mu;
          const acc_t dB_sum = segment_sum(delta * lam_x, same_group);
          const acc_t dC_sum = segment_sum(dCn, same_group);
          if (group_lead) {
            atomicAdd(out.dB[dir] + bc + n, dB_sum);
            atomicAdd(out.dC[dir] + bc + n, dC_sum);
          }
        }
        const acc_t ddt_sum = segment_sum(softplus_dt ? ddelta * softplus_grad(v) : ddelta, same_head);
        if (head_lead) atomicAdd(out.ddt[dir] + (b * s.L + t) * s.H + h, ddt_sum);
        if (dir == 0) {
          const acc_t dgamma_sum = segment_sum(gv * xv, same_head);
          if (head_lead) atomicAdd(out.dgamma + (b * s.L + t) * s.H + h, dgamma_sum);
          if (active) dx[t * s.H * s.P] = dx_t + gamma[t * tensors.gamma_s[1]] * gv;
        } else if (active) {
          dx[t * s.H * s.P] += dx_t;
        }
      }
    }
    SSM_FOR_STATE(n) {
      const acc_t sum = segment_sum(dA_acc[n], same_head);
      if (head_lead) atomicAdd(out.dA[dir] + h * tensors.dir[dir].A_cols + n * d.a_step, sum);
    }
  }
}

template <typename T>
void launch_fwd(const Shape& s, const QsMixTensors& t, bool softplus_dt, bool hydra_shift, void* y,
                const int64_t* y_s, cudaStream_t stream) {
  using acc_t = typename Acc<T>::type;
  const int64_t blocks = (s.batch * s.H * s.P + kThreads - 1) / kThreads;
  launch_kernel(s.N <= 16 ? fwd_kernel<T, 16> : fwd_kernel<T, kMaxState>, static_cast<unsigned>(blocks), kThreads, 0,
                stream, s, t, softplus_dt, hydra_shift, static_cast<acc_t*>(y), y_s[0], y_s[1], y_s[2], y_s[3]);
}

template <typename T>
void launch_bwd(const Shape& s, const QsMixTensors& t, bool softplus_dt, bool hydra_shift, const void* grad,
                const int64_t* g_s, int64_t chunk, void* ckpt, void* chunk_states, void* dx, void* const* ddt,
                void* const* dA, void* const* dB, void* const* dC, void* dgamma, cudaStream_t stream) {
  using acc_t = typename Acc<T>::type;
  const int64_t columns = qs_mix_bwd_columns(s.batch, s.H, s.P);
  BwdOut<acc_t> out{static_cast<acc_t*>(dx), {}, {}, {}, {}, static_cast<acc_t*>(dgamma)};
  for (int dir = 0; dir < 2; ++dir) {
    out.ddt[dir] = static_cast<acc_t*>(ddt[dir]);
    out.dA[dir] = static_cast<acc_t*>(dA[dir]);
    out.dB[dir] = static_cast<acc_t*>(dB[dir]);
    out.dC[dir] = static_cast<acc_t*>(dC[dir]);
  }
  launch_kernel(s.N <= 16 ? bwd_kernel<T, 16> : bwd_kernel<T, kMaxState>, static_cast<unsigned>(columns / kThreads),
                kThreads, 0, stream, s, t, softplus_dt, hydra_shift, static_cast<const T*>(grad), g_s[0], g_s[1],
                g_s[2], g_s[3], chunk, columns, static_cast<acc_t*>(ckpt), static_cast<acc_t*>(chunk_states), out);
}

void check_sizes(int64_t N) {
  if (N > kMaxState) throw std::invalid_argument("ssm_plugins: qs_mix CUDA kernel supports N <= 256");
}

}  // namespace

int64_t qs_mix_bwd_chunk(int64_t L) {
  int64_t chunk = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(L))));
  return chunk > 0 ? chunk : 1;
}

int64_t qs_mix_bwd_columns(int64_t batch, int64_t H, int64_t P) {
  return (batch * H * P + kThreads - 1) / kThreads * kThreads;
}

void qs_mix_fwd_launch(int dtype, int64_t batch, int64_t L, int64_t H, int64_t P, int64_t N, int64_t G,
                       const QsMixTensors& t, bool dt_softplus, bool hydra_shift, void* y_acc, const int64_t* y_s,
                       cudaStream_t stream) {
  check_sizes(N);
  if (batch * H * P == 0 || L == 0) return;
  const Shape s{batch, L, H, P, N, G};
  switch (dtype) {
    case 0: launch_fwd<float>(s, t, dt_softplus, hydra_shift, y_acc, y_s, stream); break;
    case 1: launch_fwd<double>(s, t, dt_softplus, hydra_shift, y_acc, y_s, stream); break;
    case 2: launch_fwd<__half>(s, t, dt_softplus, hydra_shift, y_acc, y_s, stream); break;
    case 3: launch_fwd<__nv_bfloat16>(s, t, dt_softplus, hydra_shift, y_acc, y_s, stream); break;
    default: throw std::invalid_argument("ssm_plugins: qs_mix: unsupported dtype code");
  }
  check_launch("qs_mix_fwd");
}

void qs_mix_bwd_launch(int dtype, int64_t batch, int64_t L, int64_t H, int64_t P, int64_t N, int64_t G,
                       const QsMixTensors& t, bool dt_softplus, bool hydra_shift, const void* grad_y,
                       const int64_t* grad_s, int64_t chunk, void* ckpt, void* chunk_states, void* dx_acc,
                       void* const* ddt, void* const* dA, void* const* dB, void* const* dC, void* dgamma,
                       cudaStream_t stream) {
  check_sizes(N);
  if (batch * H * P == 0 || L == 0) return;
  const Shape s{batch, L, H, P, N, G};
  switch (dtype) {
    case 0: launch_bwd<float>(s, t, dt_softplus, hydra_shift, grad_y, grad_s, chunk, ckpt, chunk_states, dx_acc, ddt, dA, dB, dC, dgamma, stream); break;
    case 1: launch_bwd<double>(s, t, dt_softplus, hydra_shift, grad_y, grad_s, chunk, ckpt, chunk_states, dx_acc, ddt, dA, dB, dC, dgamma, stream); break;
    case 2: launch_bwd<__half>(s, t, dt_softplus, hydra_shift, grad_y, grad_s, chunk, ckpt, chunk_states, dx_acc, ddt, dA, dB, dC, dgamma, stream); break;
    case 3: launch_bwd<__nv_bfloat16>(s, t, dt_softplus, hydra_shift, grad_y, grad_s, chunk, ckpt, chunk_states, dx_acc, ddt, dA, dB, dC, dgamma, stream); break;
    default: throw std::invalid_argument("ssm_plugins: qs_mix: unsupported dtype code");
  }
  check_launch("qs_mix_bwd");
}

}  // namespace cuda
}  // namespace ssm_plugins
