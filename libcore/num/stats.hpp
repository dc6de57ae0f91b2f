// Goodness-of-fit statistics used in every paper's tables.
#pragma once

#include <Eigen/Core>

namespace icmlkit::num {

/// Coefficient of determination 1 - SS_res/SS_tot of `pred` against `truth` (same length n >= 2).
/// Returns NaN when truth is constant.  Throws std::invalid_argument on length mismatch.
double r_squared(const Eigen::ArrayXd& truth, const Eigen::ArrayXd& pred);
/// Mean absolute error.
double mae(const Eigen::ArrayXd& truth, const Eigen::ArrayXd& pred);
/// Mean relative error mean(|pred - truth| / |truth|) (a fraction, not a percentage).
double mre(const Eigen::ArrayXd& truth, const Eigen::ArrayXd& pred);
/// Root mean squared error.
double rmse(const Eigen::ArrayXd& truth, const Eigen::ArrayXd& pred);
/// Ranks 1..n with ties given their average rank (as scipy.stats.rankdata "average").
Eigen::ArrayXd average_ranks(const Eigen::ArrayXd& x);
/// Pearson correlation; NaN when either side is constant.
double pearson(const Eigen::ArrayXd& x, const Eigen::ArrayXd& y);
/// Spearman rank correlation = Pearson correlation of average ranks (tie-corrected).
double spearman(const Eigen::ArrayXd& x, const Eigen::ArrayXd& y);

}  // namespace icmlkit::num
