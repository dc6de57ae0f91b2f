#include "num/simplex.hpp"

#include <stdexcept>

namespace icmlkit::num {

Eigen::ArrayXd project_bounded_simplex(const Eigen::ArrayXd& y, const Eigen::ArrayXd& lo, const Eigen::ArrayXd& hi) {
  if (lo.sum() > 1 + 1e-12 || hi.sum() < 1 - 1e-12 || (lo > hi).any())
    throw std::invalid_argument("the bounds admit no mixture (need sum(lower) <= 1 <= sum(upper), lower <= upper)");
  auto total = [&](double tau) { return (y - tau).max(lo).min(hi).sum(); };
  // total(tau) decreases from sum(hi) to sum(lo) as tau goes from min(y - hi) to max(y - lo).
  double a = (y - hi).minCoeff() - 1, b = (y - lo).maxCoeff() + 1;
  for (int it = 0; it < 200 && b - a > 1e-16 * (1 + std::abs(a) + std::abs(b)); ++it) {
    const double m = 0.5 * (a + b);
    (total(m) > 1 ? a : b) = m;
  }
  Eigen::ArrayXd h = (y - 0.5 * (a + b)).max(lo).min(hi);
  // Remove the last rounding error on a free coordinate so the sum is 1 to machine precision.
  const double err = h.sum() - 1;
  for (Eigen::Index i = 0; i < h.size(); ++i)
    if (h[i] - err >= lo[i] && h[i] - err <= hi[i]) { h[i] -= err; break; }
  return h;
}

}  // namespace icmlkit::num
