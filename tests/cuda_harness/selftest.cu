// Small kernels that pin down the harness's own semantics (tests/ops/test_cuda_harness.py): warp intrinsics
// lane by lane, a barrier-ordered block reduction in static shared memory, and the errors it must report.
// Built only into the test variant of the harness library (harness.load(extra=[...])).
#include <cuda_runtime.h>

#include "device.h"

namespace {
using ssm_plugins::cuda::global_ptr;
using ssm_plugins::cuda::launch_kernel;

// out has 6 rows of blockDim.x ints.
__global__ void intrinsics(global_ptr<int> out) {
  const int i = threadIdx.x, lane = i % 32, n = blockDim.x;
  out[i] = __shfl_sync(0xffffffffu, i * 10, 3);             // lane 3 of the warp
  out[n + i] = __shfl_up_sync(0xffffffffu, i, 2);            // lane - 2, own value in lanes 0, 1
  out[2 * n + i] = __shfl_down_sync(0xffffffffu, i, 5, 16);  // lane + 5 within 16-lane segments
  out[3 * n + i] = __shfl_xor_sync(0xffffffffu, i, 1);       // neighbour pairs swapped
  out[4 * n + i] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  __shared__ int total;
  if (i == 0) total = 0;
  __syncthreads();
  atomicAdd(&total, i);
  __syncthreads();
  out[5 * n + i] = total;
}

__global__ void shuffle_after_exit(global_ptr<int> out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1, 1);
}

__global__ void shared_overrun(global_ptr<int> out) {
  SSM_DYNAMIC_SHARED(int, buffer);
  buffer[threadIdx.x + 1] = 1;  // the last thread writes one past the dynamic shared memory
  __syncthreads();
  out[threadIdx.x] = buffer[threadIdx.x];
}
}  // namespace

extern "C" int selftest(int which, int* out, int threads) {
  switch (which) {
    case 0: launch_kernel(intrinsics, 1, threads, 0, nullptr, out); break;
    case 1: launch_kernel(shuffle_after_exit, 1, threads, 0, nullptr, out); break;
    case 2: launch_kernel(shared_overrun, 1, threads, threads * sizeof(int), nullptr, out); break;
    default: return -1;
  }
  return static_cast<int>(cudaGetLastError());
}

extern "C" const char* selftest_message() { return cudaGetErrorString(cudaErrorIllegalAddress); }
