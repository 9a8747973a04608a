// The harness build's <cuda_runtime.h>: the host-side built-ins instead of the CUDA runtime.
#pragma once
#include "../cuda_harness.h"
