// Seeded random numbers that are reproducible bit for bit on every platform.
//
// The generator is std::mt19937_64 (fully specified by the standard); the distributions
// are our own (the standard library's are implementation-defined), so a seed gives the
// same stream with any compiler.
#pragma once

#include <cstdint>
#include <random>

namespace icmlkit {

/// Default value of every tool's --seed.
inline constexpr std::uint64_t default_seed = 20260701;

/// SplitMix64 finaliser: derives independent sub-seeds (per start, per resample, per thread)
/// from one user seed, so results do not depend on thread scheduling.
std::uint64_t derive_seed(std::uint64_t seed, std::uint64_t stream) noexcept;

/// A seeded generator with portable uniform and normal draws.
class Rng {
 public:
  explicit Rng(std::uint64_t seed = default_seed) : engine_(seed) {}
  /// Uniform double in [0, 1) with 53 random bits.
  double uniform() noexcept { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Uniform double in [lo, hi).
  double uniform(double lo, double hi) noexcept { return lo + (hi - lo) * uniform(); }
  /// Uniform integer in [0, n); n must be > 0.  Unbiased (rejection sampling).
  std::uint64_t below(std::uint64_t n) noexcept;
  /// Standard normal draw (Box-Muller, one value per call).
  double normal() noexcept;
  /// Raw 64 random bits.
  std::uint64_t bits() noexcept { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

}  // namespace icmlkit
