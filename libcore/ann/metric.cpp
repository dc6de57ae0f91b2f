#include "ann/metric.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#endif
#include <fmt/core.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

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

// Hot loop.  One kernel computes every distance (single or batch, so the two agree to the
// bit): explicit AVX-512 / AVX2 code chosen once at run time from the CPU, with two
// accumulators per row (AVX-512: four rows at a time, reduced together); a portable loop
// otherwise (and under the sanitizers).  Batches prefetch a few rows (AVX-512: two groups
// of four) ahead of the ones being summed.
namespace {

using BatchKernel = void (*)(Metric, const float*, const float*, std::size_t, const std::uint32_t*, std::size_t, float*);

inline float finish(Metric m, float acc) noexcept { return m == Metric::l2 ? acc : m == Metric::ip ? -acc : 1.0f - acc; }
constexpr std::size_t kAhead = 4;  // rows prefetched ahead of the current one

inline void prefetch_row(const float* r, std::size_t dim) noexcept {
  for (std::size_t k = 0; k < dim; k += 16) __builtin_prefetch(r + k);
}

void batch_portable(Metric m, const float* q, const float* base, std::size_t dim, const std::uint32_t* ids, std::size_t count,
                    float* out) {
  for (std::size_t t = 0; t < count; ++t) {
    if (t + kAhead < count) prefetch_row(base + static_cast<std::size_t>(ids[t + kAhead]) * dim, dim);
    const float* b = base + static_cast<std::size_t>(ids[t]) * dim;
    float acc = 0.0f;
    if (m == Metric::l2) {
      for (std::size_t k = 0; k < dim; ++k) {
        const float x = q[k] - b[k];
        acc += x * x;
      }
    } else {
      for (std::size_t k = 0; k < dim; ++k) acc += q[k] * b[k];
    }
    out[t] = finish(m, acc);
  }
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(ICMLKIT_SANITIZE)
#define ICMLKIT_ANN_X86 1
__attribute__((target("avx"))) inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

// Sums one row's two accumulators into 8 lanes (the 512-bit halves added).
__attribute__((target("avx512f"))) inline __m256 halves(__m512 a0, __m512 a1) {
  const __m512 v = _mm512_add_ps(a0, a1);
  // The two halves (masked forms: the plain ones trip GCC 12's -Wmaybe-uninitialized).
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(v), 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xFF, _mm512_castps_pd(v), 1));
  return _mm256_add_ps(lo, hi);
}

// One 16-float chunk of a row into accumulator acc: squared difference or product with q.
__attribute__((target("avx512f"))) inline __m512 chunk(bool l2, __m512 qk, __m512 x, __m512 acc) {
  if (l2) {
    const __m512 d = _mm512_sub_ps(qk, x);
    return _mm512_fmadd_ps(d, d, acc);
  }
  return _mm512_fmadd_ps(qk, x, acc);
}

// Four rows at a time: each row's dot or squared difference with q in two accumulators
// (16-float chunks alternating), then the four rows' 8-lane sums reduced together by three
// horizontal adds, so the reduction costs a quarter per row and the four rows' loads
// overlap.  Every row goes through this same arithmetic (a short batch repeats its last
// row), so a distance does not depend on the batch it is computed in.
__attribute__((target("avx512f"))) inline __m128 four_rows(bool l2, const float* q, const float* b0, const float* b1, const float* b2,
                                                           const float* b3, std::size_t full, __mmask16 tail) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, c0 = a0, c1 = a0, e0 = a0, e1 = a0, g0 = a0, g1 = a0;
  std::size_t k = 0;
  for (; k + 32 <= full; k += 32) {
    const __m512 q0 = _mm512_loadu_ps(q + k), q1 = _mm512_loadu_ps(q + k + 16);
    a0 = chunk(l2, q0, _mm512_loadu_ps(b0 + k), a0);
    c0 = chunk(l2, q0, _mm512_loadu_ps(b1 + k), c0);
    e0 = chunk(l2, q0, _mm512_loadu_ps(b2 + k), e0);
    g0 = chunk(l2, q0, _mm512_loadu_ps(b3 + k), g0);
    a1 = chunk(l2, q1, _mm512_loadu_ps(b0 + k + 16), a1);
    c1 = chunk(l2, q1, _mm512_loadu_ps(b1 + k + 16), c1);
    e1 = chunk(l2, q1, _mm512_loadu_ps(b2 + k + 16), e1);
    g1 = chunk(l2, q1, _mm512_loadu_ps(b3 + k + 16), g1);
  }
  if (k < full) {  // one more full chunk: first accumulators
    const __m512 q0 = _mm512_loadu_ps(q + k);
    a0 = chunk(l2, q0, _mm512_loadu_ps(b0 + k), a0);
    c0 = chunk(l2, q0, _mm512_loadu_ps(b1 + k), c0);
    e0 = chunk(l2, q0, _mm512_loadu_ps(b2 + k), e0);
    g0 = chunk(l2, q0, _mm512_loadu_ps(b3 + k), g0);
    k += 16;
  }
  if (tail) {  // the last dim % 16 coordinates: second accumulators
    const __m512 q1 = _mm512_maskz_loadu_ps(tail, q + k);
    a1 = chunk(l2, q1, _mm512_maskz_loadu_ps(tail, b0 + k), a1);
    c1 = chunk(l2, q1, _mm512_maskz_loadu_ps(tail, b1 + k), c1);
    e1 = chunk(l2, q1, _mm512_maskz_loadu_ps(tail, b2 + k), e1);
    g1 = chunk(l2, q1, _mm512_maskz_loadu_ps(tail, b3 + k), g1);
  }
  const __m256 h01 = _mm256_hadd_ps(halves(a0, a1), halves(c0, c1));
  const __m256 h23 = _mm256_hadd_ps(halves(e0, e1), halves(g0, g1));
  const __m256 h = _mm256_hadd_ps(h01, h23);  // per 128-bit half: rows 0..3
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

__attribute__((target("avx512f"))) void batch_avx512(Metric m, const float* q, const float* base, std::size_t dim,
                                                     const std::uint32_t* ids, std::size_t count, float* out) {
  const std::size_t full = dim & ~std::size_t{15};
  const __mmask16 tail = static_cast<__mmask16>((1u << (dim - full)) - 1u);
  const bool l2 = m == Metric::l2;
  const auto row = [&](std::size_t t) { return base + static_cast<std::size_t>(ids[t]) * dim; };
  for (std::size_t t = 0; t < 2 * kAhead && t < count; ++t) prefetch_row(row(t), dim);
  for (std::size_t t = 0; t < count; t += 4) {
    for (std::size_t u = t + 2 * kAhead; u < t + 2 * kAhead + 4 && u < count; ++u) prefetch_row(row(u), dim);
    const std::size_t last = count - 1;
    const __m128 r = four_rows(l2, q, row(t), row(std::min(t + 1, last)), row(std::min(t + 2, last)), row(std::min(t + 3, last)), full, tail);
    alignas(16) float v[4];
    _mm_store_ps(v, r);
    for (std::size_t u = 0; u < 4 && t + u < count; ++u) out[t + u] = finish(m, v[u]);
  }
}

__attribute__((target("avx2,fma"))) void batch_avx2(Metric m, const float* q, const float* base, std::size_t dim,
                                                    const std::uint32_t* ids, std::size_t count, float* out) {
  const std::size_t full = dim & ~std::size_t{7};
  const bool l2 = m == Metric::l2;
  for (std::size_t t = 0; t < kAhead && t < count; ++t) prefetch_row(base + static_cast<std::size_t>(ids[t]) * dim, dim);
  for (std::size_t t = 0; t < count; ++t) {
    if (t + kAhead < count) prefetch_row(base + static_cast<std::size_t>(ids[t + kAhead]) * dim, dim);
    const float* b = base + static_cast<std::size_t>(ids[t]) * dim;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    std::size_t k = 0;
    if (l2) {
      for (; k + 16 <= full; k += 16) {
        const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(q + k), _mm256_loadu_ps(b + k));
        const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(q + k + 8), _mm256_loadu_ps(b + k + 8));
        a0 = _mm256_fmadd_ps(d0, d0, a0);
        a1 = _mm256_fmadd_ps(d1, d1, a1);
      }
      for (; k < full; k += 8) {
        const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(q + k), _mm256_loadu_ps(b + k));
        a0 = _mm256_fmadd_ps(d0, d0, a0);
      }
    } else {
      for (; k + 16 <= full; k += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + k), _mm256_loadu_ps(b + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + k + 8), _mm256_loadu_ps(b + k + 8), a1);
      }
      for (; k < full; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + k), _mm256_loadu_ps(b + k), a0);
    }
    float acc = hsum256(_mm256_add_ps(a0, a1));
    for (; k < dim; ++k) acc += l2 ? (q[k] - b[k]) * (q[k] - b[k]) : q[k] * b[k];
    out[t] = finish(m, acc);
  }
}
#endif

BatchKernel pick_kernel() noexcept {
#ifdef ICMLKIT_ANN_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return batch_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return batch_avx2;
#endif
  return batch_portable;
}

// Chosen on first use (thread-safe local static; no static-initialisation order issue).
BatchKernel kernel() noexcept {
  static const BatchKernel k = pick_kernel();
  return k;
}

}  // namespace

void huge_page_advice(void* p, std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const std::uintptr_t lo = (reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const std::uintptr_t hi = (reinterpret_cast<std::uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (hi > lo) (void)madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

float raw_distance(Metric m, const float* a, const float* b, std::size_t dim) noexcept {
  // One row through the batch kernel: item 0 of a "matrix" that starts at b.
  const std::uint32_t zero = 0;
  float out = 0.0f;
  kernel()(m, a, b, dim, &zero, 1, &out);
  return out;
}

void raw_distances(Metric m, const float* q, const float* base, std::size_t dim, const std::uint32_t* ids, std::size_t count,
                   float* out) noexcept {
  kernel()(m, q, base, dim, ids, count, out);
}

double max_abs_value(std::size_t dim) noexcept {
  // |x - y|^2 <= dim (2a)^2 and |<x, y>| <= dim a^2 stay below FLT_MAX / 4 for |x|, |y| <= a.
  return std::sqrt(static_cast<double>(std::numeric_limits<float>::max()) / 16.0 / static_cast<double>(std::max<std::size_t>(dim, 1)));
}

double report_distance(Metric m, float raw) noexcept {
  if (m == Metric::l2) return raw > 0.0f ? std::sqrt(static_cast<double>(raw)) : 0.0;
  if (m == Metric::cosine) return std::min(2.0, std::max(0.0, static_cast<double>(raw)));
  return raw;
}

namespace {
// Checks finiteness; under cosine normalises in place (in double: a vector of subnormal
// values has a reciprocal norm beyond float) and rejects zero vectors; under l2 and ip
// rejects values so large that a float32 distance could overflow (|x| > max_abs_value(dim)).
void check_and_normalise(float* x, std::size_t dim, Metric m, const std::string& where) {
  double ss = 0.0;
  const double limit = max_abs_value(dim);
  for (std::size_t k = 0; k < dim; ++k) {
    if (!std::isfinite(x[k])) throw InputError(fmt::format("non-finite value {} in coordinate {}", x[k], k + 1), where);
    if (m != Metric::cosine && std::abs(static_cast<double>(x[k])) > limit)
      throw InputError(fmt::format("value {:g} in coordinate {} is too large: float32 distances between {}-d vectors overflow beyond |x| = {:.3g} (rescale the data)",
                                   x[k], k + 1, dim, limit),
                       where);
    ss += static_cast<double>(x[k]) * x[k];
  }
  if (m != Metric::cosine) return;
  if (ss == 0.0) throw InputError("zero vector: cosine distance is undefined for it", where);
  const double norm = std::sqrt(ss);
  for (std::size_t k = 0; k < dim; ++k) x[k] = static_cast<float>(static_cast<double>(x[k]) / norm);
}
}  // namespace

Space::Space(Vectors v, Metric m, const std::string& label) : v_(std::move(v)), m_(m) {
  for (std::size_t i = 0; i < v_.n; ++i) check_and_normalise(v_.row(i), v_.dim, m_, fmt::format("{}, item {}, data row {}", label, i, i + 1));
}

std::vector<float> Space::prepare_query(const float* q, std::size_t dim, const std::string& where) const {
  if (dim != v_.dim) throw InputError(fmt::format("query has {} coordinates, the items have {}", dim, v_.dim), where);
  std::vector<float> out(q, q + dim);
  check_and_normalise(out.data(), dim, m_, where);
  return out;
}

}  // namespace icmlkit::ann
