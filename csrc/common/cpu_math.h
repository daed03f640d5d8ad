// Vectorisable float helpers for the CPU kernels (header only; every function has internal linkage, so each
// translation unit of the _C extension gets its own multiversioned copy).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

// Hot loops are compiled for AVX-512, AVX2 and the baseline ISA and picked at load time (GCC/Clang function
// multiversioning), so the wheel stays portable while the loops run at full vector width.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TTRL_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TTRL_MULTIVERSION
#endif

namespace ttrl {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// exp(x) for x <= 0 (small positive x are fine too) by range reduction 2^n * e^r, |r| <= ln2/2, and a degree-6
// polynomial; branch-free and without libm calls, so loops that call it vectorise. Relative error ~2e-7.
// NaN propagates (inf - inf from overflowing logits) so callers can detect it.
static inline __attribute__((always_inline)) float exp_nonpos(float x_in) {
  const bool is_nan = x_in != x_in;
  const float x = is_nan ? 0.0f : (x_in < -87.0f ? -87.0f : x_in);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest, vectorisable
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return is_nan ? x_in : p * scale;
}

TTRL_MULTIVERSION
static float row_max(const float* z, int64_t n) {
  float mx = kNegInf;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, z[j]);
  return mx;
}

}  // namespace ttrl
