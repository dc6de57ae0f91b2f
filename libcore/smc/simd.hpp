// SIMD kernels of the SOSMC hot loop on the Gaussian mixture: plain loops over particles that
// the compiler vectorises, built for several x86-64 levels (SSE2, AVX2 + FMA, AVX-512) with
// the best one picked at run time (GCC target_clones), so a portable build still runs at the
// host's vector width.  Results agree across levels to rounding (the polynomial exp below is
// the same code in every clone; FMA contraction may change the last bits).
#pragma once

#include <Eigen/Core>

namespace icmlkit::smc {

/// y_i = exp(x_i) for x_i <= 0 (x_i > 0 is not allowed): Cody-Waite reduction by ln 2 and a
/// degree-12 Taylor polynomial, relative error below 1e-15; 0 for x_i < -708.  In place is
/// allowed (x == y).
void exp_nonpositive(const double* x, double* y, Eigen::Index n);

/// y_i = log(x_i) for positive normal x_i (exponent split and an atanh series, relative error
/// below 1e-15).  In place is allowed.
void log_positive(const double* x, double* y, Eigen::Index n);

/// f_i = -2 log(s_i) / s_i, the squared factor of Marsaglia's polar method, for s_i in (0, 1);
/// other s_i give meaningless values (the caller rejects them).
void polar_factors(const double* s, double* f, Eigen::Index n);

/// Mixture responsibilities of n points: with a_m(i) = lp_m - |x_i - mu_m|^2 inv2s,
///   R[m * ldr + i] = softmax_m a_m(i)  and  lse[i] = log sum_m exp a_m(i).
/// `xcols` [d] points at the n coordinates of each dimension (column-major data), `mu` [M, d]
/// column-major, `lp` [M], `R` column-major with leading dimension ldr >= n, `scratch` [n].
void mixture_responsibilities(const double* const* xcols, int d, Eigen::Index n, const double* mu, const double* lp,
                              int M, double inv2s, double* R, Eigen::Index ldr, double* lse, double* scratch);

}  // namespace icmlkit::smc
