// Helpers shared by the op sources (torch side only; the .cu files never include this).
#pragma once
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>

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

}  // namespace ssm_plugins
