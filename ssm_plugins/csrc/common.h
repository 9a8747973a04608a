// Helpers shared by the op sources (torch side only; the .cu files never include this).
#pragma once
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>

#define SSM_CHECK(cond, ...) TORCH_CHECK(cond, "ssm_plugins: ", __VA_ARGS__)

namespace ssm_plugins {

// softplus with torch's default threshold (beta=1, threshold=20)
template <typename T>
inline T softplus(T x) {
  return x > T(20) ? x : std::log1p(std::exp(x));
}

template <typename T>
inline T silu(T x) {
  return x / (T(1) + std::exp(-x));
}

// The CPU kernels' A (the state rates), clamped to +-max/2 of its dtype (NaN stays NaN): a step with Δ = 0 then
// decays by exp(0 * A) = 1 exactly where A = -inf gave 0 * -inf = NaN (the CUDA kernels clamp in their decay);
// half the range keeps A * log2(e), the AVX-512 exp's change of base, finite.
inline at::Tensor finite_rates(const at::Tensor& A) {
  const double bound = (A.scalar_type() == at::kDouble ? std::numeric_limits<double>::max()
                                                       : double(std::numeric_limits<float>::max())) / 2;
  return A.clamp(-bound, bound);
}

// Numeric type code passed to the CUDA launchers, which see no torch headers.
enum class DType : int { Float32 = 0, Float64 = 1, Float16 = 2, BFloat16 = 3 };

inline DType dtype_code(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return DType::Float32;
    case at::kDouble: return DType::Float64;
    case at::kHalf: return DType::Float16;
    case at::kBFloat16: return DType::BFloat16;
    default: SSM_CHECK(false, "unsupported dtype ", t.scalar_type());
  }
  return DType::Float32;
}

// `out` (a CUDA kernel's contiguous result) in `like`'s layout and dtype, as the CPU kernels write such outputs
// (at::empty_like) and the fake kernels declare them; out itself when it already is.
inline at::Tensor in_layout_of(const at::Tensor& like, const at::Tensor& out) {
  auto dst = at::empty_like(like);
  if (dst.strides() == out.strides() && out.scalar_type() == like.scalar_type()) return out;
  return dst.copy_(out);
}

// Work shared by the calling thread and its helpers: items [0, n) handed out in grabs.
struct SharedWork {
  int64_t n, grab;
  std::atomic<int64_t> next{0}, done{0};
  std::mutex mutex;
  std::condition_variable all_done;
  SharedWork(int64_t n_, int64_t grab_) : n(n_), grab(grab_) {}
};

// take(begin, end) for one thread: the next grab, first come first served; false when none is left.
// A grab counts as done when its thread asks for the next one.
class Taker {
 public:
  Taker(SharedWork* work, int64_t first_begin = -1) : w_(work), first_(first_begin) {}
  bool operator()(int64_t& begin, int64_t& end) {
    if (pending_ > 0 && w_->done.fetch_add(pending_) + pending_ == w_->n) {
      std::lock_guard<std::mutex> lock(w_->mutex);
      w_->all_done.notify_all();
    }
    begin = first_ >= 0 ? first_ : w_->next.fetch_add(w_->grab);
    first_ = -1;
    end = std::min(begin + w_->grab, w_->n);
    pending_ = std::max<int64_t>(0, end - begin);
    return begin < w_->n;
  }

 private:
  SharedWork* w_;
  int64_t first_, pending_ = 0;
};

// Runs per_thread(take) on the calling thread and on up to threads - 1 helpers from ATen's inter-op
// pool, over items [0, n) in grabs of `grab`. The caller waits only for grabs that a helper has
// taken: a helper that the OS starts late (a busy machine) finds nothing left and never touches the
// caller's state, where an OpenMP region would wait for every thread to arrive.
// per_thread(take) must call take(begin, end) until it returns false (that call marks its last grab
// done) and process [begin, end) after each true one; grab >= 1. Per-thread state belongs in
// per_thread, before its take loop (one call per thread; thread ids are not OpenMP's).
template <typename F>
void dynamic_for(int64_t n, int64_t grab, int64_t threads, const F& per_thread) {
  threads = std::min<int64_t>(threads, (n + grab - 1) / grab);
  auto work = std::make_shared<SharedWork>(n, grab);
  if (threads > 1 && !at::in_parallel_region()) {
    for (int64_t i = 1; i < threads; ++i) {
      at::launch([work, fn = &per_thread] {
        const int64_t begin = work->next.fetch_add(work->grab);
        if (begin >= work->n) return;  // all taken: the caller may be gone, touch nothing of it
        Taker take(work.get(), begin);  // the caller now waits for this grab
        (*fn)(take);
      });
    }
  }
  Taker take(work.get());
  per_thread(take);
  std::unique_lock<std::mutex> lock(work->mutex);
  work->all_done.wait(lock, [&] { return work->done.load() >= n; });
}

// dynamic_for's schedule on ATen's intra-op (OpenMP) pool: the threads of one parallel region take grabs
// first come first served, so a thread the OS starts late or preempts does less of the work; only the
// region's end waits for every thread to arrive. Same per_thread(take) contract as dynamic_for.
// Kernels called between other ATen ops use this one: inter-op helpers would compete with the intra-op
// workers still spinning after the previous op's region.
template <typename F>
void dynamic_for_intra(int64_t n, int64_t grab, int64_t threads, const F& per_thread) {
  threads = std::min<int64_t>(threads, (n + grab - 1) / grab);
  std::atomic<int64_t> next{0};
  auto take = [&next, n, grab](int64_t& begin, int64_t& end) {
    begin = next.fetch_add(grab);
    end = std::min(begin + grab, n);
    return begin < n;
  };
  if (threads <= 1 || at::in_parallel_region()) {
    per_thread(take);
    return;
  }
  at::parallel_for(0, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t slot = begin; slot < end; ++slot) per_thread(take);
  });
}

}  // namespace ssm_plugins
