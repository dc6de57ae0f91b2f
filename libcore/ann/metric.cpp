#include "ann/metric.hpp"

#include <cmath>
#include <fmt/core.h>

#include "util/error.hpp"

namespace icmlkit::ann {

Metric parse_metric(const std::string& name, const std::string& flag) {
  if (name == "l2") return Metric::l2;
  if (name == "ip") return Metric::ip;
  if (name == "cosine") return Metric::cosine;
  throw UsageError(fmt::format("unknown metric '{}' (l2, ip or cosine)", name), flag);
}

std::string metric_name(Metric m) {
  switch (m) {
    case Metric::l2: return "l2";
    case Metric::ip: return "ip";
    default: return "cosine";
  }
}

// Hot loop.  `omp simd reduction` lets the compiler reassociate the sums (vectorise without
// -ffast-math); function multi-versioning picks an AVX-512 / AVX2 / baseline clone at load.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define ICMLKIT_ANN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ICMLKIT_ANN_CLONES
#endif
ICMLKIT_ANN_CLONES float raw_distance(Metric m, const float* a, const float* b, std::size_t dim) noexcept {
  float acc = 0.0f;
  if (m == Metric::l2) {
#pragma omp simd reduction(+ : acc)
    for (std::size_t k = 0; k < dim; ++k) {
      const float t = a[k] - b[k];
      acc += t * t;
    }
    return acc;
  }
#pragma omp simd reduction(+ : acc)
  for (std::size_t k = 0; k < dim; ++k) acc += a[k] * b[k];
  return m == Metric::ip ? -acc : 1.0f - acc;
}

double report_distance(Metric m, float raw) noexcept {
  if (m == Metric::l2) return raw > 0.0f ? std::sqrt(static_cast<double>(raw)) : 0.0;
  if (m == Metric::cosine) return std::min(2.0, std::max(0.0, static_cast<double>(raw)));
  return raw;
}

namespace {
// Checks finiteness; under cosine normalises in place and rejects zero vectors.
void check_and_normalise(float* x, std::size_t dim, Metric m, const std::string& where) {
  double ss = 0.0;
  for (std::size_t k = 0; k < dim; ++k) {
    if (!std::isfinite(x[k])) throw InputError(fmt::format("non-finite value {} in coordinate {}", x[k], k + 1), where);
    ss += static_cast<double>(x[k]) * x[k];
  }
  if (m != Metric::cosine) return;
  if (ss == 0.0) throw InputError("zero vector: cosine distance is undefined for it", where);
  const float inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (std::size_t k = 0; k < dim; ++k) x[k] *= inv;
}
}  // namespace

Space::Space(Vectors v, Metric m, const std::string& label) : v_(std::move(v)), m_(m) {
  for (std::size_t i = 0; i < v_.n; ++i) check_and_normalise(v_.row(i), v_.dim, m_, fmt::format("{}, item {}", label, i));
}

std::vector<float> Space::prepare_query(const float* q, std::size_t dim, const std::string& where) const {
  if (dim != v_.dim) throw InputError(fmt::format("query has {} coordinates, the items have {}", dim, v_.dim), where);
  std::vector<float> out(q, q + dim);
  check_and_normalise(out.data(), dim, m_, where);
  return out;
}

}  // namespace icmlkit::ann
