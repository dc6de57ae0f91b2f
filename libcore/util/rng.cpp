#include "util/rng.hpp"

#include <cmath>
#include <numbers>

namespace icmlkit {

std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) noexcept {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::uint64_t Rng::below(std::uint64_t n) noexcept {
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  std::uint64_t r;
  do { r = engine_(); } while (r >= limit);
  return r % n;
}

double Rng::normal() noexcept {
  double u1 = uniform();
  while (u1 <= 0.0) u1 = uniform();
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

}  // namespace icmlkit
