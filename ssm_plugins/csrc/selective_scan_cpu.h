// Selective scan, CPU side: what the forward (selective_scan_fwd.cpp) and the backward
// (selective_scan_bwd.cpp) kernels share.
//
// CPU design. Rows (batch, channel) are sequential in L and independent of each other, and handed out to threads
// dynamically (a busy machine may deschedule one). Inputs are first converted to the accumulation type in
// thread-local buffers, with B and C transposed to (L, Npad) (N padded to a whole number of vectors, the padding
// zero). The forward (selective_scan_fwd.cpp) puts W channels of a (batch, group), which share B and C, in the
// lanes of its vectors and loops over the states: per step and state one decay, one state update and one FMA
// of the broadcast C into the output, no sums across lanes. The backward works on one row at a time with its
// vectors spanning the state axis (the per-row cores below): it re-runs the forward recurrence of a row,
// keeping (exp(dt A), h) of every step, or for a long row a checkpoint every 64 steps and one recomputed chunk
// at a time, then runs the reverse recurrence; its sums over N are reduced W steps at a time. Both compile
// for AVX-512, AVX2 and baseline x86-64 (GCC vector extensions) and pick one at run time. float uses a
// polynomial exp/log1p that vectorises; double (the gradcheck precision) calls libm. Gradients shared across
// rows are summed without races: A, D and delta_bias per (batch, channel), then over batch; B and C per task
// (batch, group, chunk of its channels) in a thread-local buffer, added to the (batch, group) sum under that
// sum's lock.
#pragma once
#include "selective_scan.h"
#include "simd_cpu.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ssm_plugins {
namespace {  // the op's private helpers keep internal linkage, as when the op was one file

// Zeroed thread-local buffer whose data() is 64-byte aligned (the vectors' alignment).
template <typename T>
class AlignedBuffer {
 public:
  explicit AlignedBuffer(int64_t n) : store_(static_cast<size_t>(n) + 64 / sizeof(T), T(0)) {}
  T* data() {
    const auto addr = reinterpret_cast<uintptr_t>(store_.data());
    return reinterpret_cast<T*>((addr + 63) & ~uintptr_t(63));
  }
  template <typename V>
  V* as() {
    return reinterpret_cast<V*>(data());
  }

 private:
  std::vector<T> store_;
};

// ---- per-row cores (the backward) -----------------------------------------------------------------
// All row buffers hold Lpad = round_up(L, W) entries, the padding zeroed. B/C rows are (L, nv*W),
// A and the state are nv*W wide. NV > 0 fixes the vector count at compile time (registers).
// Sums over the state axis are not reduced per step: each step stores its vector of partial sums in
// a ring of W vectors (`ring`, W*W entries), reduced W steps at a time (block_sums).
// The backward walks a row back in time with the states (exp(dt A), h) of every step at hand. A short
// row keeps them all from the forward pass; a long one keeps the state every `chunk` steps and
// recomputes one chunk at a time (one more exp per step, but a working set that stays in cache).

constexpr int64_t kChunk = 64;             // a multiple of both vector widths
constexpr int64_t kKeepAllBytes = 512 << 10;  // states of a row up to this size are all kept

template <typename acc_t>
int64_t bwd_chunk(int64_t L, int64_t Npad) {
  return L * 2 * Npad * int64_t(sizeof(acc_t)) <= kKeepAllBytes ? std::max<int64_t>(L, 1) : kChunk;
}

template <typename acc_t>
struct RowParams {
  int64_t L, nv, chunk;  // chunk: the backward's checkpoint spacing (bwd_chunk)
  bool softplus_dt;
  acc_t bias, skip;
  const acc_t* A;   // (nv*W)
  const acc_t* BT;  // (L, nv*W)
  const acc_t* CT;
};

// ---- driver helpers --------------------------------------------------------------------------------

// The drivers below do their own copies and reductions (serial, small next to the scan) rather than
// calling ATen ops: every ATen op above its grain size opens a parallel region, and on a busy machine
// each region waits for a descheduled thread.

// Contiguous (rows, n) -> (rows, npad), zero padded.
template <typename acc_t>
void pad_rows(acc_t* dst, const acc_t* src, int64_t rows, int64_t n, int64_t npad) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * n, src + (r + 1) * n, dst + r * npad);
    std::fill(dst + r * npad + n, dst + (r + 1) * npad, acc_t(0));
  }
}

// Contiguous (mats, N, L) -> (mats, L, Npad), zero padded, converted to the accumulation type.
template <typename src_t, typename acc_t>
void transpose_pad(acc_t* dst, const src_t* src, int64_t mats, int64_t N, int64_t L, int64_t Npad, bool reverse) {
  for (int64_t m = 0; m < mats; ++m) {
    const src_t* sm = src + m * N * L;
    acc_t* dm = dst + m * L * Npad;
    for (int64_t t = 0; t < L; ++t) {
      const int64_t from = reverse ? L - 1 - t : t;
      for (int64_t n = 0; n < N; ++n) dm[t * Npad + n] = static_cast<acc_t>(sm[n * L + from]);
      std::fill(dm + t * Npad + N, dm + (t + 1) * Npad, acc_t(0));
    }
  }
}

// Row of a (.., L) tensor into an accumulation buffer of Lpad entries, padding zeroed; `reverse` (a reverse
// scan) reads it back to front, and store_row writes it so.
template <typename scalar_t, typename acc_t>
inline void load_row(acc_t* dst, const scalar_t* src, int64_t L, int64_t Lpad, bool reverse = false) {
  if (reverse) {
    for (int64_t t = 0; t < L; ++t) dst[t] = static_cast<acc_t>(src[L - 1 - t]);
  } else {
    for (int64_t t = 0; t < L; ++t) dst[t] = static_cast<acc_t>(src[t]);
  }
  std::fill(dst + L, dst + Lpad, acc_t(0));
}

template <typename scalar_t, typename acc_t>
inline void store_row(scalar_t* dst, const acc_t* src, int64_t L, bool reverse = false) {
  if (reverse) {
    for (int64_t t = 0; t < L; ++t) dst[L - 1 - t] = static_cast<scalar_t>(src[t]);
  } else {
    for (int64_t t = 0; t < L; ++t) dst[t] = static_cast<scalar_t>(src[t]);
  }
}

// Rows per grab: about 32k state updates.
inline int64_t row_grab(const ScanShape& s) {
  return std::max<int64_t>(1, 32768 / (s.L * std::max<int64_t>(s.N, 1) + 1));
}

// Threads for a call of `updates` state updates (batch * dim * L * N, times ~2.5 for the backward):
// each gets at least kMinUpdatesPerThread (about a millisecond of work).
constexpr int64_t kMinUpdatesPerThread = int64_t(2) << 20;

inline int64_t threads_for(int64_t updates) {
  return std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), updates / kMinUpdatesPerThread));
}

// A, B and C in the cores' layout: A (dim, Npad), B and C (batch * groups, L, Npad), all in acc_t (B and C come in
// acc_t or in u's scalar_t).
template <typename scalar_t, typename acc_t>
struct Prepared {
  AlignedBuffer<acc_t> A, BT, CT;
  Prepared(const ScanShape& s, int64_t Npad, const at::Tensor& A_, const at::Tensor& B_, const at::Tensor& C_)
      : A(s.dim * Npad), BT(s.batch * s.groups * s.L * Npad), CT(s.batch * s.groups * s.L * Npad) {
    const at::Tensor Ac = finite_rates(A_).contiguous(), Bc = B_.contiguous(), Cc = C_.contiguous();
    pad_rows(A.data(), Ac.data_ptr<acc_t>(), s.dim, s.N, Npad);
    auto prepare = [&](acc_t* dst, const at::Tensor& src) {
      if (src.scalar_type() == Ac.scalar_type()) {
        transpose_pad(dst, src.data_ptr<acc_t>(), s.batch * s.groups, s.N, s.L, Npad, s.reverse);
      } else {
        transpose_pad(dst, src.data_ptr<scalar_t>(), s.batch * s.groups, s.N, s.L, Npad, s.reverse);
      }
    };
    prepare(BT.data(), Bc);
    prepare(CT.data(), Cc);
  }
};

}  // namespace
}  // namespace ssm_plugins
