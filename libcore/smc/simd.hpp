// SIMD kernels of the SOSMC hot loop on the Gaussian mixture: plain loops over particles that
// the compiler vectorises, built for several x86-64 levels (SSE2, AVX2 + FMA, AVX-512) with
// the best one picked at run time (GCC target_clones), so a portable build still runs at the
// host's vector width.  Results agree across levels to rounding (the polynomial exp below is
// the same code in every clone; FMA contraction may change the last bits).
#pragma once

#include <Eigen/Core>

#include <cstdint>

namespace icmlkit::smc {

/// y_i = exp(x_i) for x_i <= 0 (x_i > 0 is not allowed): Cody-Waite reduction by ln 2 and a
/// degree-12 Taylor polynomial, relative error below 1e-15; 0 for x_i < -708.  In place is
/// allowed (x == y).
void exp_nonpositive(const double* x, double* y, Eigen::Index n);

/// y_i = log(x_i) for positive normal x_i (exponent split and an atanh series, relative error
/// below 1e-15).  In place is allowed.
void log_positive(const double* x, double* y, Eigen::Index n);

/// Candidate pairs of Marsaglia's polar method from a counter-based stream: candidate k uses
/// the 64-bit word z_k = SplitMix64(key + (counter + k + 1) * golden gamma) (the SplitMix64
/// sequence started at `key`), split into two signed 32-bit halves a, b; v1 = a 2^-31,
/// v2 = b 2^-31.  The pair is accepted (acc[k] = 1, else 0) when 0 < a^2 + b^2 < 2^62, tested
/// exactly in integers (the same decision on every SIMD level), and then f[k] =
/// sqrt(-2 log(s) / s) (to 1 ulp), s = v1^2 + v2^2, so v1 f and v2 f are two independent
/// N(0, 1) draws.  Rejected candidates leave f[k] meaningless.  All arrays have n entries.
void polar_candidates(std::uint64_t key, std::uint64_t counter, Eigen::Index n, double* v1, double* v2, double* f,
                      double* acc);

/// Mixture responsibilities of n points: with a_m(i) = lp_m - |x_i - mu_m|^2 inv2s,
///   R[m * ldr + i] = softmax_m a_m(i)  and  lse[i] = log sum_m exp a_m(i).
/// `xcols` [d] points at the n coordinates of each dimension (column-major data), `mu` [M, d]
/// column-major, `lp` [M], `R` column-major with leading dimension ldr >= n, `scratch` [n].
void mixture_responsibilities(const double* const* xcols, int d, Eigen::Index n, const double* mu, const double* lp,
                              int M, double inv2s, double* R, Eigen::Index ldr, double* lse, double* scratch);

/// Gradient of the mixture energy from the responsibilities: g[j * ldg + i] = scale (x_j(i) -
/// sum_m R[m * ldr + i] mu[j * M + m]) for n points (scale = 1 / s gives grad_x U); layouts as
/// in mixture_responsibilities, `g` column-major with leading dimension ldg >= n.
void mixture_grad(const double* const* xcols, int d, Eigen::Index n, const double* mu, int M, const double* R,
                  Eigen::Index ldr, double scale, double* g, Eigen::Index ldg);

}  // namespace icmlkit::smc
