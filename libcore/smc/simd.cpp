#include "smc/simd.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

// Function multi-versioning: GCC on x86-64 builds each kernel for x86-64-v4 (AVX-512),
// x86-64-v3 (AVX2, FMA) and the baseline, dispatched once at load time.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define ICMLKIT_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ICMLKIT_SIMD_CLONES
#endif

namespace icmlkit::smc {
namespace {

// exp(x) for x in [-708, 0]: n = round(x / ln 2) by the 1.5 * 2^52 shift (its low bits then
// hold n), r = x - n ln 2 in two parts (|r| <= ln 2 / 2), exp(r) by Taylor to r^12 (truncation
// < 2e-16 relative), times 2^n assembled in the exponent field.  Branch-free: vectorises.
inline double exp_np(double x) {
  constexpr double shifter = 0x1.8p52, log2e = 1.4426950408889634, ln2_hi = 0x1.62e42fee00000p-1,
                   ln2_lo = 0x1.a39ef35793c76p-33;
  const double xc = x < -708.0 ? -708.0 : x;
  const double t = xc * log2e + shifter;
  const double nf = t - shifter;
  const double r = (xc - nf * ln2_hi) - nf * ln2_lo;
  double p = 1.0 / 479001600.0;  // 1/12!
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  std::uint64_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits + 1023) << 52;  // low 12 bits of t's pattern are n mod 4096
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -708.0 ? 0.0 : p * scale;
}

// log(x) for positive normal x: x = 2^e m with m in [sqrt(1/2), sqrt(2)), log m =
// 2 atanh(f), f = (m - 1) / (m + 1), |f| <= 0.1716, by its odd series to f^21 (truncation
// < 1e-17 relative).  The exponent is read as a double through the 2^52 shift.  Branch-free.
inline double log_pos(double x) {
  constexpr double ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  std::uint64_t eb = (b >> 52) | 0x4330000000000000ULL;
  double ed;
  std::memcpy(&ed, &eb, sizeof ed);
  double e = ed - 0x1.0p52 - 1023.0;
  const std::uint64_t mb = (b & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL;
  double m;
  std::memcpy(&m, &mb, sizeof m);
  const bool big = m > 1.4142135623730951;
  m = big ? 0.5 * m : m;
  e = big ? e + 1.0 : e;
  const double f = (m - 1.0) / (m + 1.0), f2 = f * f;
  double p = 1.0 / 21;
  p = p * f2 + 1.0 / 19;
  p = p * f2 + 1.0 / 17;
  p = p * f2 + 1.0 / 15;
  p = p * f2 + 1.0 / 13;
  p = p * f2 + 1.0 / 11;
  p = p * f2 + 1.0 / 9;
  p = p * f2 + 1.0 / 7;
  p = p * f2 + 1.0 / 5;
  p = p * f2 + 1.0 / 3;
  p = p * f2 + 1.0;
  return e * ln2_hi + (e * ln2_lo + 2.0 * f * p);
}

// sqrt(y) for positive normal y, within 1 ulp: an inverse-square-root estimate from the
// exponent bits (relative error < 0.035), four Newton steps (error < 1e-20), then one Heron
// step on y r.  Branch-free, unlike std::sqrt, whose errno path stops vectorisation.
inline double sqrt_pos(double y) {
  std::uint64_t b;
  std::memcpy(&b, &y, sizeof b);
  b = 0x5FE6EB50C7B537A9ULL - (b >> 1);
  double r;
  std::memcpy(&r, &b, sizeof r);
  const double h = 0.5 * y;
  r = r * (1.5 - h * r * r);
  r = r * (1.5 - h * r * r);
  r = r * (1.5 - h * r * r);
  r = r * (1.5 - h * r * r);
  const double q = y * r;
  return 0.5 * (q + y / q);
}

}  // namespace

ICMLKIT_SIMD_CLONES
void log_positive(const double* x, double* y, Eigen::Index n) {
  for (Eigen::Index i = 0; i < n; ++i) y[i] = log_pos(x[i]);
}

ICMLKIT_SIMD_CLONES
void polar_candidates(std::uint64_t key, std::uint64_t counter, Eigen::Index n, double* __restrict v1,
                      double* __restrict v2, double* __restrict f, double* __restrict acc) {
  constexpr std::uint64_t golden = 0x9E3779B97F4A7C15ULL;
  for (Eigen::Index k = 0; k < n; ++k) {
    std::uint64_t z = key + (counter + static_cast<std::uint64_t>(k) + 1) * golden;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    const auto a = static_cast<std::int64_t>(static_cast<std::int32_t>(static_cast<std::uint32_t>(z >> 32)));
    const auto b = static_cast<std::int64_t>(static_cast<std::int32_t>(static_cast<std::uint32_t>(z)));
    const std::uint64_t q = static_cast<std::uint64_t>(a * a) + static_cast<std::uint64_t>(b * b);  // exact, < 2^63
    // 0 < q < 2^62 (q = 0 wraps around), as a mask: no control flow, so the loop vectorises.
    const std::uint64_t ok = static_cast<std::uint64_t>(q - 1 < (std::uint64_t{1} << 62) - 1);
    const std::uint64_t mask = 0 - ok;
    const double s = static_cast<double>(static_cast<std::int64_t>((q & mask) | ((std::uint64_t{1} << 61) & ~mask))) * 0x1.0p-62;
    v1[k] = static_cast<double>(a) * 0x1.0p-31;
    v2[k] = static_cast<double>(b) * 0x1.0p-31;
    f[k] = sqrt_pos(-2.0 * log_pos(s) / s);
    acc[k] = static_cast<double>(static_cast<std::int64_t>(ok));
  }
}

ICMLKIT_SIMD_CLONES
void exp_nonpositive(const double* x, double* y, Eigen::Index n) {
  for (Eigen::Index i = 0; i < n; ++i) y[i] = exp_np(x[i]);
}

ICMLKIT_SIMD_CLONES
void mixture_responsibilities(const double* const* xcols, int d, Eigen::Index n, const double* mu, const double* lp,
                              int M, double inv2s, double* R, Eigen::Index ldr, double* __restrict lse,
                              double* __restrict z) {
  // a_m = lp_m - |x - mu_m|^2 / (2 s) per column m; lse holds the row maximum meanwhile.
  for (int m = 0; m < M; ++m) {
    double* __restrict c = R + m * ldr;
    for (int j = 0; j < d; ++j) {
      const double* __restrict xj = xcols[j];
      const double mj = mu[j * M + m];
      if (j == 0) {
        for (Eigen::Index i = 0; i < n; ++i) c[i] = (xj[i] - mj) * (xj[i] - mj);
      } else {
        for (Eigen::Index i = 0; i < n; ++i) c[i] += (xj[i] - mj) * (xj[i] - mj);
      }
    }
    const double l = lp[m];
    for (Eigen::Index i = 0; i < n; ++i) c[i] = l - c[i] * inv2s;
    if (m == 0)
      for (Eigen::Index i = 0; i < n; ++i) lse[i] = c[i];
    else
      for (Eigen::Index i = 0; i < n; ++i) lse[i] = c[i] > lse[i] ? c[i] : lse[i];
  }
  // exp(a_m - max), their sum z, then R = exp / z and lse = max + log z.
  for (Eigen::Index i = 0; i < n; ++i) z[i] = 0;
  for (int m = 0; m < M; ++m) {
    double* __restrict c = R + m * ldr;
    for (Eigen::Index i = 0; i < n; ++i) {
      c[i] = exp_np(c[i] - lse[i]);
      z[i] += c[i];
    }
  }
  for (Eigen::Index i = 0; i < n; ++i) lse[i] += log_pos(z[i]);
  for (Eigen::Index i = 0; i < n; ++i) z[i] = 1.0 / z[i];
  for (int m = 0; m < M; ++m) {
    double* __restrict c = R + m * ldr;
    for (Eigen::Index i = 0; i < n; ++i) c[i] *= z[i];
  }
}

ICMLKIT_SIMD_CLONES
void mixture_grad(const double* const* xcols, int d, Eigen::Index n, const double* mu, int M, const double* R,
                  Eigen::Index ldr, double scale, double* g, Eigen::Index ldg) {
  for (int j = 0; j < d; ++j) {
    double* __restrict gj = g + j * ldg;
    const double* __restrict xj = xcols[j];
    for (Eigen::Index i = 0; i < n; ++i) gj[i] = xj[i];
    for (int m = 0; m < M; ++m) {
      const double* __restrict c = R + m * ldr;
      const double mj = mu[j * M + m];
      for (Eigen::Index i = 0; i < n; ++i) gj[i] -= c[i] * mj;
    }
    for (Eigen::Index i = 0; i < n; ++i) gj[i] *= scale;
  }
}

}  // namespace icmlkit::smc
