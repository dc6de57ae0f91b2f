#include "num/half.hpp"

namespace icmlkit::num {

std::uint16_t f32_to_f16(float f) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;               // NaN -> quiet NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;              // >= 65520 rounds to infinity
  if (abs < 0x38800000u) {                                    // below 2^-14: f16 subnormal
    if (abs < 0x33000000u) return sign;                       // < 2^-25 rounds to zero
    const std::uint32_t exp = abs >> 23;                      // 102 .. 112
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u; // implicit bit
    const std::uint32_t shift = 126 - exp;                    // 14 .. 24
    std::uint32_t half = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return sign | static_cast<std::uint16_t>(half);
  }
  // Normal range: rebias the exponent (127 -> 15) and round 13 mantissa bits away.
  std::uint32_t h = ((abs >> 13) - (112u << 10));
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;     // carry may roll into exponent
  return sign | static_cast<std::uint16_t>(h);
}

float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t u;
  if (exp == 0x1fu) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {                                                    // subnormal: normalise
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
    u = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace icmlkit::num
