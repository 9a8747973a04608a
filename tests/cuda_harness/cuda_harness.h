// Host-side CUDA execution harness: CUDA's built-ins on the CPU, so that ssm_plugins/csrc/cuda/*.cu compile
// with the host C++ compiler (C++20) and their kernels run on CPU memory. What it models and what it does not:
// tests/cuda_harness/README.md. Force-included (-include cuda_harness.h) before every .cu of the harness build.
//
// Execution model
//   * blocks of a grid run one after another;
//   * by default a block's warps run one at a time between two __syncthreads() (barrier phases), the warp order
//     alternating between phases: ascending warp index in even phases, descending in odd ones, so a missing
//     __syncthreads() between a write in one warp and a read in another shows up as a wrong value
//     deterministically. The lanes of the running warp are fibers of the launching thread (ucontext), run in
//     lane order, each up to its next warp intrinsic, barrier or return: a warp intrinsic is a rendezvous of the
//     warp's live lanes;
//   * cuda_harness_set_schedule(1) lets all warps run concurrently instead: every CUDA thread an OS thread
//     (std::thread), in whatever interleaving the OS picks;
//   * a thread that returns drops out of later barriers (like an exited CUDA thread);
//   * global memory is reached through ssm::global_ptr<T> (ssm_plugins/csrc/cuda/device.h), which in this
//     build is cuda_harness::checked_ptr<T>: every dereference is checked against the allocations the caller
//     registered (cuda_harness_register); an access outside them records cudaErrorIllegalAddress, reported
//     by the next cudaGetLastError(), and reads/writes a dummy cell instead of memory;
//   * static __shared__ arrays are function statics (one per kernel instantiation; blocks are sequential);
//     dynamic shared memory (SSM_DYNAMIC_SHARED) is a per-launch buffer, bounds-checked, refilled with
//     0xFF bytes (NaN for floats) before every block.
#pragma once

#ifdef __CUDACC__
#error "cuda_harness.h is for the host compiler only"
#endif

#define __host__
#define __device__
#define __global__
#define __shared__ static
#define __constant__ static
#define __launch_bounds__(...)
#define __CUDA_HARNESS__ 1

#include <cuda_bf16.h>  // host-side half / bfloat16 conversions; dim3, uint3 and the runtime API's declarations
#include <cuda_fp16.h>

#include <math.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <memory>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

namespace cuda_harness {

constexpr int kWarpSize = 32;

// First error of the running launch (cudaGetLastError semantics: read and reset).
struct ErrorState {
  std::mutex mutex;
  cudaError_t code = cudaSuccess;
  std::string message;
};
inline ErrorState g_error;

inline void record_error(cudaError_t code, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_error.mutex);
  if (g_error.code == cudaSuccess) {
    g_error.code = code;
    g_error.message = message;
  }
}

// Allocations a kernel may touch: [begin, end) in bytes, registered by the caller before a launch.
struct Region {
  std::uintptr_t begin, end;
};
inline std::vector<Region> g_regions;

inline const Region* find_region(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const Region& r : g_regions) {
    if (a >= r.begin && a < r.end) return &r;
  }
  return nullptr;
}

// ---- built-in variables, per thread ---------------------------------------------------------------------
}  // namespace cuda_harness

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = cuda_harness::kWarpSize;

namespace cuda_harness {

inline std::string where() {
  std::ostringstream s;
  s << "block (" << blockIdx.x << "," << blockIdx.y << "," << blockIdx.z << ") thread (" << threadIdx.x << ","
    << threadIdx.y << "," << threadIdx.z << ")";
  return s.str();
}

// A cell that an illegal access reads or writes instead of memory (zeroed before each use).
alignas(64) inline thread_local unsigned char t_dummy[64];

template <typename T>
T* dummy_cell() {
  static_assert(sizeof(T) <= sizeof(t_dummy), "dummy cell too small");
  std::memset(t_dummy, 0, sizeof(t_dummy));
  return reinterpret_cast<T*>(t_dummy);
}

// Bounds-checked pointer into global (or dynamic shared) memory. Arithmetic is free, like a raw pointer;
// every dereference must fall inside the region the pointer was made from.
template <typename T>
class checked_ptr {
 public:
  using element_type = T;
  checked_ptr() = default;
  checked_ptr(std::nullptr_t) {}
  checked_ptr(T* p) : p_(p), region_(p ? find_region(p) : nullptr) {
    if (p && !region_) {
      std::ostringstream s;
      s << "illegal address: pointer " << static_cast<const void*>(p) << " lies in no registered allocation ("
        << where() << ")";
      record_error(cudaErrorIllegalAddress, s.str());
    }
  }
  checked_ptr(T* p, const Region* region) : p_(p), region_(region) {}
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U*, T*>>>
  checked_ptr(const checked_ptr<U>& o) : p_(o.raw()), region_(o.region()) {}

  T* raw() const { return p_; }
  const Region* region() const { return region_; }
  T& operator*() const { return *check(p_); }
  T* operator->() const { return check(p_); }
  T& operator[](std::int64_t i) const { return *check(p_ + i); }
  checked_ptr operator+(std::int64_t i) const { return {p_ + i, region_}; }
  checked_ptr operator-(std::int64_t i) const { return {p_ - i, region_}; }
  std::ptrdiff_t operator-(const checked_ptr& o) const { return p_ - o.p_; }
  checked_ptr& operator+=(std::int64_t i) { p_ += i; return *this; }
  checked_ptr& operator-=(std::int64_t i) { p_ -= i; return *this; }
  checked_ptr& operator++() { ++p_; return *this; }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator==(const checked_ptr& o) const { return p_ == o.p_; }
  bool operator==(std::nullptr_t) const { return p_ == nullptr; }

 private:
  T* check(T* q) const {
    const auto a = reinterpret_cast<std::uintptr_t>(q);
    if (region_ && a >= region_->begin && a + sizeof(T) <= region_->end) return q;
    std::ostringstream s;
    s << "illegal address: " << sizeof(T) << "-byte access at " << static_cast<const void*>(q);
    if (region_) {
      s << ", element " << (static_cast<std::int64_t>(a) - static_cast<std::int64_t>(region_->begin)) /
                               static_cast<std::int64_t>(sizeof(T))
        << " of an allocation of " << (region_->end - region_->begin) / sizeof(T) << " elements";
    } else {
      s << " through a null or unregistered pointer";
    }
    s << " (" << where() << ")";
    record_error(cudaErrorIllegalAddress, s.str());
    return dummy_cell<std::remove_cv_t<T>>();
  }

  T* p_ = nullptr;
  const Region* region_ = nullptr;
};

template <typename T> checked_ptr<T> operator+(std::int64_t i, const checked_ptr<T>& p) { return p + i; }

// A vector access of `bytes` (device.h's load_vectors: LDG.128) needs an address aligned to them; on a GPU a
// misaligned one faults with cudaErrorMisalignedAddress, here it is recorded as that error (the access itself
// then goes element by element through the checked pointer, which checks the bounds).
template <typename T>
void check_aligned(const checked_ptr<T>& p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p.raw());
  if (a % bytes == 0) return;
  std::ostringstream s;
  s << "misaligned address: " << bytes << "-byte vector access at " << static_cast<const void*>(p.raw()) << " ("
    << where() << ")";
  record_error(cudaErrorMisalignedAddress, s.str());
}

// ---- one block: its threads, its barrier phases, its warps ----------------------------------------------
// Schedule of a block's warps between barriers: 0 ordered (one warp at a time, alternating ascending and
// descending order: a missing barrier between warps gives a wrong value every time), 1 concurrent (all warps
// free-running OS threads: any interleaving the OS picks). Set with cuda_harness_set_schedule.
inline std::atomic<int> g_schedule{0};

struct Block {
  int threads = 0, warps = 0;
  bool concurrent = g_schedule.load() == 1;
  std::mutex mutex;
  std::vector<std::condition_variable> wake;  // per warp
  std::vector<int> live, arrived, sync_arrived;  // per warp
  std::vector<std::uint64_t> sync_gen;
  std::vector<int> order;
  int pos = 0, running = -1;
  std::uint64_t phase = 0;
  // Shuffle slots: per warp, two generations x 32 lanes x 16 bytes.
  std::vector<std::array<unsigned char, 2 * kWarpSize * 16>> slots;
  // Dynamic shared memory of the launch.
  unsigned char* dynamic_smem = nullptr;
  const Region* dynamic_region = nullptr;

  explicit Block(int n) : threads(n), warps((n + kWarpSize - 1) / kWarpSize), wake(warps), live(warps),
                          arrived(warps), sync_arrived(warps), sync_gen(warps), order(warps), slots(warps) {
    for (int w = 0; w < warps; ++w) live[w] = std::min(kWarpSize, n - w * kWarpSize);
    start_phase();
  }
  int lanes(int w) const { return std::min(kWarpSize, threads - w * kWarpSize); }

  // Called with the mutex held.
  void start_phase() {
    for (int w = 0; w < warps; ++w) order[w] = phase % 2 == 0 ? w : warps - 1 - w;
    std::fill(arrived.begin(), arrived.end(), 0);
    if (concurrent) {
      for (auto& cv : wake) cv.notify_all();
      return;
    }
    pos = -1;
    next_warp();
  }
  void next_warp() {
    for (++pos; pos < warps; ++pos) {
      if (live[order[pos]] > 0) {
        running = order[pos];
        wake[running].notify_all();
        return;
      }
    }
    running = -1;
    bool any = false;
    for (int w = 0; w < warps; ++w) any = any || live[w] > 0;
    if (any) {
      ++phase;
      start_phase();
    }
  }
  // The running warp has finished its phase when all its live lanes wait at the barrier (or exited).
  void maybe_advance(int w) {
    if (!concurrent) {
      if (w == running && arrived[w] >= live[w]) next_warp();
      return;
    }
    int waiting = 0, alive = 0;
    for (int k = 0; k < warps; ++k) waiting += arrived[k], alive += live[k];
    if (alive > 0 && waiting >= alive) {
      ++phase;
      start_phase();
    }
  }
  void maybe_release_sync(int w) {
    if (sync_arrived[w] > 0 && sync_arrived[w] >= live[w]) {
      sync_arrived[w] = 0;
      ++sync_gen[w];
      wake[w].notify_all();
    }
  }
};

inline thread_local Block* t_block = nullptr;
inline thread_local int t_warp = 0, t_lane = 0;
inline thread_local std::uint64_t t_shuffles = 0;

// A wait that lasts minutes is a deadlock (a barrier some threads never reach): say so and abort, rather
// than hang the test run.
template <typename P>
void wait_or_abort(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, P ready, const char* what) {
  if (!cv.wait_for(lock, std::chrono::seconds(300), ready)) {
    std::fprintf(stderr, "cuda_harness: deadlock: %s waited 300 s (%s)\n", what, where().c_str());
    std::abort();
  }
}

inline void wait_turn(std::unique_lock<std::mutex>& lock, std::uint64_t after_phase) {
  Block& b = *t_block;
  wait_or_abort(b.wake[t_warp], lock,
                [&] { return b.phase >= after_phase && (b.concurrent || b.running == t_warp); },
                "__syncthreads()");
}

// ---- the ordered schedule on fibers ------------------------------------------------------------------
// One warp runs at a time in the ordered schedule, so its lanes need not be OS threads: each CUDA thread is a
// fiber of the launching thread, switched at its sync points (a switch costs a system call, where an OS-thread
// rendezvous of 32 lanes cost 32 futex wake-ups and context switches: most of the harness's time).
struct Lane {
  enum class State { ready, at_warp_sync, at_barrier, exited };
  ucontext_t context{};
  void* stack = nullptr;
  uint3 thread_idx{};
  int warp = 0, lane = 0;
  std::uint64_t shuffles = 0;
  State state = State::ready;
};

struct Fibers {
  ucontext_t scheduler{};
  std::vector<Lane> lanes;
  Lane* current = nullptr;
  std::function<void()> kernel;
};
inline thread_local Fibers* t_fibers = nullptr;

// Stacks are kept for the process (a launch of 1024 threads maps 1024 of them; pages are committed as touched),
// each with a guard page below it, so an overflow faults instead of corrupting its neighbour.
constexpr std::size_t kFiberStack = 1 << 20;
inline void* fiber_stack(std::size_t index) {
  static thread_local std::vector<void*> pool;
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  while (pool.size() <= index) {
    void* base = mmap(nullptr, kFiberStack + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
    if (base == MAP_FAILED) {
      std::fprintf(stderr, "cuda_harness: cannot map a fiber stack\n");
      std::abort();
    }
    mprotect(base, page, PROT_NONE);
    pool.push_back(static_cast<unsigned char*>(base) + page);
  }
  return pool[index];
}

// Back to the scheduler; it resumes this lane (restoring the per-thread built-ins) when the lane may go on.
inline void fiber_yield(Lane::State state) {
  Fibers& f = *t_fibers;
  Lane& me = *f.current;
  me.state = state;
  me.shuffles = t_shuffles;
  swapcontext(&me.context, &f.scheduler);
}

inline void fiber_entry() {
  Fibers& f = *t_fibers;
  try {
    f.kernel();
  } catch (const std::exception& e) {
    record_error(cudaErrorLaunchFailure, std::string("exception in kernel: ") + e.what());
  }
  Lane& me = *f.current;
  --t_block->live[me.warp];
  me.state = Lane::State::exited;
  setcontext(&f.scheduler);
}

inline void fiber_resume(Fibers& f, Lane& lane) {
  threadIdx = lane.thread_idx;
  t_warp = lane.warp;
  t_lane = lane.lane;
  t_shuffles = lane.shuffles;
  f.current = &lane;
  swapcontext(&f.scheduler, &lane.context);
}

// Runs warp w's lanes until each has reached the barrier or returned; a warp intrinsic releases once every live
// lane of the warp has reached one.
inline void fiber_run_warp(Fibers& f, int w) {
  Lane* first = f.lanes.data() + w * kWarpSize;
  const int n = t_block->lanes(w);
  for (;;) {
    for (int k = 0; k < n; ++k) {
      if (first[k].state == Lane::State::ready) fiber_resume(f, first[k]);
    }
    int waiting = 0, live = 0;
    for (int k = 0; k < n; ++k) {
      waiting += first[k].state == Lane::State::at_warp_sync;
      live += first[k].state != Lane::State::exited;
    }
    if (waiting == 0) return;
    if (waiting < live) {
      std::fprintf(stderr, "cuda_harness: deadlock: %d lanes of warp %d wait at a warp intrinsic, %d at "
                   "__syncthreads() (block (%u,%u,%u))\n", waiting, w, live - waiting, blockIdx.x, blockIdx.y,
                   blockIdx.z);
      std::abort();
    }
    for (int k = 0; k < n; ++k) {
      if (first[k].state == Lane::State::at_warp_sync) first[k].state = Lane::State::ready;
    }
  }
}

// One block: barrier phases until every thread has returned, the warps of a phase in the alternating order.
inline void fiber_run_block(Fibers& f) {
  Block& b = *t_block;
  for (std::uint64_t phase = 0;; ++phase) {
    for (int pos = 0; pos < b.warps; ++pos) fiber_run_warp(f, phase % 2 == 0 ? pos : b.warps - 1 - pos);
    bool waiting = false;
    for (Lane& lane : f.lanes) {
      if (lane.state == Lane::State::at_barrier) lane.state = Lane::State::ready, waiting = true;
    }
    if (!waiting) return;
  }
}

inline void syncthreads() {
  if (t_fibers) return fiber_yield(Lane::State::at_barrier);
  Block& b = *t_block;
  std::unique_lock<std::mutex> lock(b.mutex);
  const std::uint64_t phase = b.phase;
  ++b.arrived[t_warp];
  b.maybe_advance(t_warp);
  wait_turn(lock, phase + 1);
}

inline void thread_exit() {
  Block& b = *t_block;
  std::lock_guard<std::mutex> lock(b.mutex);
  --b.live[t_warp];
  b.maybe_release_sync(t_warp);
  b.maybe_advance(t_warp);
}

inline void syncwarp() {
  if (t_fibers) return fiber_yield(Lane::State::at_warp_sync);
  Block& b = *t_block;
  std::unique_lock<std::mutex> lock(b.mutex);
  const std::uint64_t gen = b.sync_gen[t_warp];
  ++b.sync_arrived[t_warp];
  b.maybe_release_sync(t_warp);
  wait_or_abort(b.wake[t_warp], lock, [&] { return b.sync_gen[t_warp] != gen; }, "a warp intrinsic");
}

// Every lane publishes v, the warp synchronises, each lane reads lane src_of(lane)'s value. Two slot
// generations alternate, so one synchronisation per exchange suffices.
template <typename T, typename F>
T exchange(unsigned mask, T v, F src_of) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable_v<T>, "warp exchange of a type over 16 bytes");
  Block& b = *t_block;
  if (mask != 0xffffffffu) record_error(cudaErrorLaunchFailure, "warp intrinsic with a partial mask: not modelled");
  const int n = b.lanes(t_warp);
  if (n != kWarpSize || b.live[t_warp] != n) {
    record_error(cudaErrorLaunchFailure, "warp intrinsic with a full mask in a warp with missing or exited lanes (" +
                                             where() + ")");
  }
  unsigned char* slots = b.slots[t_warp].data() + (t_shuffles++ % 2) * kWarpSize * 16;
  std::memcpy(slots + t_lane * 16, &v, sizeof(T));
  syncwarp();
  int src = src_of(t_lane);
  if (src < 0 || src >= n) src = t_lane;
  T out;
  std::memcpy(&out, slots + src * 16, sizeof(T));
  return out;
}

inline int segment_start(int lane, int width) { return lane - lane % width; }

// ---- the launch -----------------------------------------------------------------------------------------
inline std::vector<Region> g_dynamic_regions;  // kept apart from g_regions: global pointers must not hit it

template <typename... KArgs, typename... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t, Args&&... args) {
  const std::uint64_t threads = std::uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535) {
    record_error(cudaErrorInvalidValue, "invalid launch configuration");
    return;
  }
  // Kernel parameters are converted once, in the launching thread; every thread gets its own copy.
  const std::tuple<std::decay_t<KArgs>...> params(std::forward<Args>(args)...);
  std::vector<unsigned char> smem_buffer(std::max<std::size_t>(smem, 1));
  const Region smem_region{reinterpret_cast<std::uintptr_t>(smem_buffer.data()),
                           reinterpret_cast<std::uintptr_t>(smem_buffer.data()) + smem};
  // One OS thread per CUDA thread for the whole launch; the blocks run one after another, separated by a
  // barrier whose completion step sets up the next block.
  const std::uint64_t blocks = std::uint64_t(grid.x) * grid.y * grid.z;
  std::uint64_t block_id = 0;
  std::unique_ptr<Block> state;
  auto setup = [&]() noexcept {
    std::memset(smem_buffer.data(), 0xff, smem_buffer.size());
    state = std::make_unique<Block>(static_cast<int>(threads));
    state->dynamic_smem = smem_buffer.data();
    state->dynamic_region = &smem_region;
  };
  setup();
  if (!state->concurrent) {
    Fibers fibers;
    fibers.kernel = [&] { std::apply(kernel, params); };
    fibers.lanes.resize(threads);
    t_fibers = &fibers;
    blockDim = block;
    gridDim = grid;
    for (; block_id < blocks; ++block_id) {
      if (block_id > 0) setup();
      t_block = state.get();
      blockIdx = uint3{static_cast<unsigned>(block_id % grid.x), static_cast<unsigned>(block_id / grid.x % grid.y),
                       static_cast<unsigned>(block_id / (std::uint64_t(grid.x) * grid.y))};
      for (unsigned t = 0; t < threads; ++t) {
        Lane& lane = fibers.lanes[t];
        lane = Lane{};
        lane.thread_idx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        lane.warp = static_cast<int>(t / kWarpSize);
        lane.lane = static_cast<int>(t % kWarpSize);
        getcontext(&lane.context);
        lane.context.uc_stack.ss_sp = fiber_stack(t);
        lane.context.uc_stack.ss_size = kFiberStack;
        lane.context.uc_link = nullptr;
        makecontext(&lane.context, fiber_entry, 0);
      }
      fiber_run_block(fibers);
    }
    t_fibers = nullptr;
    t_block = nullptr;
    return;
  }
  std::barrier between_blocks(static_cast<std::ptrdiff_t>(threads), [&]() noexcept {
    if (++block_id < blocks) setup();
  });
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      t_warp = static_cast<int>(t / kWarpSize);
      t_lane = static_cast<int>(t % kWarpSize);
      threadIdx = uint3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      blockDim = block;
      gridDim = grid;
      while (block_id < blocks) {
        t_block = state.get();
        t_shuffles = 0;
        blockIdx = uint3{static_cast<unsigned>(block_id % grid.x), static_cast<unsigned>(block_id / grid.x % grid.y),
                         static_cast<unsigned>(block_id / (std::uint64_t(grid.x) * grid.y))};
        {
          std::unique_lock<std::mutex> lock(t_block->mutex);
          wait_turn(lock, 0);
        }
        try {
          std::apply(kernel, params);
        } catch (const std::exception& e) {
          record_error(cudaErrorLaunchFailure, std::string("exception in kernel: ") + e.what());
        }
        thread_exit();
        between_blocks.arrive_and_wait();
      }
    });
  }
  for (std::thread& th : pool) th.join();
}

template <typename T>
checked_ptr<T> dynamic_shared() {
  return checked_ptr<T>(reinterpret_cast<T*>(t_block->dynamic_smem), t_block->dynamic_region);
}

}  // namespace cuda_harness

// ---- CUDA's device functions ----------------------------------------------------------------------------
inline void __syncthreads() { cuda_harness::syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { cuda_harness::syncwarp(); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned __activemask() { return 0xffffffffu; }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = warpSize) {
  return cuda_harness::exchange(mask, v, [&](int lane) {
    return cuda_harness::segment_start(lane, width) + (src % width + width) % width;
  });
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return cuda_harness::exchange(mask, v, [&](int lane) {
    return lane % width >= static_cast<int>(delta) ? lane - static_cast<int>(delta) : lane;
  });
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize) {
  return cuda_harness::exchange(mask, v, [&](int lane) {
    return lane % width + static_cast<int>(delta) < width ? lane + static_cast<int>(delta) : lane;
  });
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize) {
  return cuda_harness::exchange(mask, v, [&](int lane) {
    const int src = lane ^ lane_mask;
    return cuda_harness::segment_start(src, width) == cuda_harness::segment_start(lane, width) ? src : lane;
  });
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  unsigned bits = 0;
  for (int k = 0; k < warpSize; ++k) {  // one exchange per source lane keeps exchange() simple
    const int bit = __shfl_sync(mask, predicate ? 1 : 0, k);
    bits |= static_cast<unsigned>(bit) << k;
  }
  return bits;
}
inline int __any_sync(unsigned mask, int p) { return __ballot_sync(mask, p) != 0; }
inline int __all_sync(unsigned mask, int p) { return __ballot_sync(mask, p) == 0xffffffffu; }

template <typename T>
T atomicAdd(T* address, T v) {
  return std::atomic_ref<T>(*address).fetch_add(v);
}
template <typename T, typename V>
T atomicAdd(const cuda_harness::checked_ptr<T>& address, V v) {
  return atomicAdd(&*address, static_cast<T>(v));
}
template <typename T>
T atomicMax(T* address, T v) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (old < v && !a.compare_exchange_weak(old, v)) {
  }
  return old;
}

// Fast-math and rounding intrinsics: the host's libm at full precision.
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __exp10f(float x) { return powf(10.f, x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { sincosf(x, s, c); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.f / sqrtf(x); }
inline float rsqrtf(float x) { return 1.f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
template <typename T> T __ldg(const T* p) { return *p; }
template <typename T> T __ldg(const cuda_harness::checked_ptr<const T>& p) { return *p; }

// CUDA's integer and mixed min/max overloads (device code calls them unqualified).
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) { return b < a ? b : a; }
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) { return a < b ? b : a; }

// ---- runtime API ----------------------------------------------------------------------------------------
// cudaGetLastError, cudaGetErrorString and cudaMemsetAsync (declared by the CUDA headers) are defined in
// api.cpp, the harness library's one C++ source.
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute, int) {
  return cudaSuccess;
}
