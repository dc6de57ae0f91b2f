// Euclidean projection onto a box-bounded probability simplex.
#pragma once

#include <Eigen/Core>

namespace icmlkit::num {

/// argmin_h ||h - y||_2 subject to sum h = 1 and lo <= h <= hi (all [K]).  The solution is
/// h_i = clip(y_i - tau, lo_i, hi_i) with tau found by bisection on the monotone sum.
/// Throws std::invalid_argument when sum(lo) > 1 or sum(hi) < 1.
Eigen::ArrayXd project_bounded_simplex(const Eigen::ArrayXd& y, const Eigen::ArrayXd& lo, const Eigen::ArrayXd& hi);

}  // namespace icmlkit::num
