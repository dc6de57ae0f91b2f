// InfoLaw (Liu et al., ICML 2026, arXiv 2605.02364): loss from the information a model
// accumulates from a quality-bucketed, possibly repeated data mixture.
//
// For a run with N parameters, K consumed tokens, a deduplicated source of S tokens split
// into buckets d = 0..B-1 with source shares s_d, and mixture weights w_d (sum 1):
//   K_d = w_d K,  M_d = min(K_d, s_d S)  (unique tokens),  R_d = K_d / M_d  (repetition)
//   info = sum_d f_d M_d ln K (1 - exp(-lambda(N) R_d / ln K)),  f_d = exp(-theta d)
//   lambda(N) = a ln N + b,   L = alpha * info^(-beta)
// Natural logarithms; N, K, S in whatever units the table uses (the paper does not state
// them, so the published constants theta*=0.922, a*=0.140, b*=0.018, alpha=3.7373,
// beta=0.0441 cannot be checked against runs).  Buckets with w_d = 0 contribute nothing.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <vector>

namespace icmlkit {
class Progress;
}

namespace icmlkit::fit {

/// The five global InfoLaw scalars.
struct InfoLawParams {
  double theta = 0;  ///< quality decay per bucket, f_d = exp(-theta d) (dimensionless)
  double a = 0;      ///< slope of lambda(N) = a ln N + b
  double b = 0;      ///< intercept of lambda(N)
  double alpha = 1;  ///< loss scale, L = alpha info^-beta (nats/token)
  double beta = 0;   ///< loss exponent (dimensionless, > 0 when loss falls with information)
};

/// Training runs for InfoLaw, all arrays with one entry per run.
struct InfoLawData {
  Eigen::ArrayXd params;   ///< N [n] > 0
  Eigen::ArrayXd tokens;   ///< K [n] > 1 (ln K > 0)
  Eigen::ArrayXd source;   ///< S [n] > 0, deduplicated source size in tokens
  Eigen::ArrayXXd weights; ///< w [n, B], rows >= 0 summing to 1
  Eigen::ArrayXd shares;   ///< s [B] > 0, bucket shares of the source (paper: 0.05, 0.15, 0.2 x4)
  Eigen::ArrayXd loss;     ///< L [n] > 0 (empty when only predicting)
};

/// The paper's bucket shares B = [0.05, 0.15, 0.20, 0.20, 0.20, 0.20].
Eigen::ArrayXd infolaw_default_shares();

/// Information of run `i` for quality decay `theta` and repetition rate `lambda`; writes
/// d info/d theta and d info/d lambda when the pointers are not null.
double infolaw_information(const InfoLawData& d, Eigen::Index i, double theta, double lambda,
                           double* d_theta = nullptr, double* d_lambda = nullptr);

/// Predicted loss for every run [n].  Runs whose information is <= 0 (lambda(N) <= 0)
/// predict NaN.
Eigen::ArrayXd infolaw_predict(const InfoLawParams& p, const InfoLawData& d);

/// Options of the staged fit.
struct InfoLawFitOptions {
  int samples = 100000;             ///< random (theta, lambda_N) samples in stage 1
  double theta_lo = 0, theta_hi = 3;       ///< uniform range of theta
  double lambda_lo = 1e-3, lambda_hi = 10; ///< log-uniform range of each lambda_N
  bool refine = true;               ///< joint L-BFGS refinement of all five scalars
  std::uint64_t seed = 0;
};

/// Result of the staged fit.
struct InfoLawFitResult {
  InfoLawParams staged;             ///< after stages 1-3
  InfoLawParams params;             ///< final (refined when requested and better)
  double spearman = 0;              ///< stage-1 Spearman rho(info, -L) of the best sample
  std::vector<double> sizes;        ///< distinct N, ascending
  std::vector<double> lambda_per_size;  ///< stage-1 lambda_N* for each size
  double sse_log_staged = 0;        ///< sum (ln L_hat - ln L)^2 after stage 3
  double sse_log = 0;               ///< ... for the final parameters
  bool refined = false;             ///< the refinement ran and improved sse_log
  bool refine_converged = false;
};

/// Fits InfoLaw in the paper's stages: (1) random search over theta and one lambda per
/// model size maximising Spearman rho(info, -L); (2) least squares lambda_N = a ln N + b;
/// (3) least squares ln L = ln alpha - beta ln info; then optionally (4) a joint L-BFGS
/// refinement of (theta, a, b, ln alpha, beta) on squared log residuals.  Throws
/// InputError when fewer than 3 runs are given.
InfoLawFitResult fit_infolaw(const InfoLawData& d, const InfoLawFitOptions& opt, Progress* progress = nullptr);

}  // namespace icmlkit::fit
