// util/: RNG reproducibility, error formatting.
#include <doctest/doctest.h>

#include <set>

#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;

TEST_CASE("util: Rng wraps the standard mt19937_64 stream") {
  // Truth: the C++ standard ([rand.predef]) fixes the 10000th output of a
  // default-constructed mt19937_64 (seed 5489) at 9981545732273789042.
  Rng rng(5489);
  std::uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = rng.bits();
  CHECK(v == 9981545732273789042ULL);
}

TEST_CASE("util: uniform draws lie in 0..1 and are reproducible per seed") {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const double x = a.uniform();
    CHECK(x >= 0.0);
    CHECK(x < 1.0);
    CHECK(x == b.uniform());
    differs |= x != c.uniform();
  }
  CHECK(differs);
}

TEST_CASE("util: below(n) covers 0..n-1 only, normal() has mean ~0 and variance ~1") {
  Rng rng(1);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 2000; ++i) {
    const auto k = rng.below(7);
    CHECK(k < 7);
    seen.insert(k);
  }
  CHECK(seen.size() == 7);
  // 20,000 draws: the standard error of the mean is 0.007, of the variance 0.01; 5 sigma bounds.
  double s = 0, s2 = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double z = rng.normal();
    s += z;
    s2 += z * z;
  }
  CHECK(std::abs(s / n) < 0.035);
  CHECK(std::abs(s2 / n - 1) < 0.05);
}

TEST_CASE("util: derive_seed gives distinct streams") {
  std::set<std::uint64_t> s;
  for (std::uint64_t k = 0; k < 1000; ++k) s.insert(derive_seed(7, k));
  CHECK(s.size() == 1000);
  CHECK(derive_seed(7, 3) != derive_seed(8, 3));
}

TEST_CASE("util: errors carry exit codes and a one-line message with location") {
  InputError e("not a number: 'x' in column 'loss'", "runs.csv, row 3, line 4");
  CHECK(static_cast<int>(e.code()) == 1);
  CHECK(e.message() == "not a number: 'x' in column 'loss' (runs.csv, row 3, line 4)");
  CHECK(static_cast<int>(UsageError("bad flag").code()) == 2);
  CHECK(UsageError("bad flag").message() == "bad flag");
}
