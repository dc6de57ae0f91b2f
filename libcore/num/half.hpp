// IEEE binary16 ("f16") and bfloat16 ("bf16") <-> float32 conversions.
//
// Both narrowings round to nearest, ties to even, keep infinities, and keep NaN as a quiet
// NaN; f16 overflow gives infinity and small values become f16 subnormals.  Widenings are
// exact.  These define how half-precision checkpoint tensors are stored (as uint16 bit
// patterns, see libcore/lm/README.md) since HDF5 1.10 has no half type.
#pragma once

#include <cstdint>
#include <cstring>

namespace icmlkit::num {

/// float32 -> bfloat16 bits (round to nearest even; NaN stays a quiet NaN).
inline std::uint16_t f32_to_bf16(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<std::uint16_t>(u >> 16);
}

/// bfloat16 bits -> float32 (exact).
inline float bf16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// float32 -> IEEE binary16 bits (round to nearest even, overflow to infinity, subnormals).
std::uint16_t f32_to_f16(float f) noexcept;

/// IEEE binary16 bits -> float32 (exact, subnormals included).
float f16_to_f32(std::uint16_t h) noexcept;

}  // namespace icmlkit::num
