#include "num/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace icmlkit::num {
namespace {
void check(const Eigen::ArrayXd& a, const Eigen::ArrayXd& b) {
  if (a.size() != b.size()) throw std::invalid_argument("statistics: length mismatch");
  if (a.size() == 0) throw std::invalid_argument("statistics: empty input");
}
}  // namespace

double r_squared(const Eigen::ArrayXd& truth, const Eigen::ArrayXd& pred) {
  check(truth, pred);
  const double ss_res = (truth - pred).square().sum();
  const double ss_tot = (truth - truth.mean()).square().sum();
  if (ss_tot == 0) return std::numeric_limits<double>::quiet_NaN();
  return 1.0 - ss_res / ss_tot;
}

double mae(const Eigen::ArrayXd& truth, const Eigen::ArrayXd& pred) {
  check(truth, pred);
  return (truth - pred).abs().mean();
}

double mre(const Eigen::ArrayXd& truth, const Eigen::ArrayXd& pred) {
  check(truth, pred);
  return ((truth - pred).abs() / truth.abs()).mean();
}

double rmse(const Eigen::ArrayXd& truth, const Eigen::ArrayXd& pred) {
  check(truth, pred);
  return std::sqrt((truth - pred).square().mean());
}

Eigen::ArrayXd average_ranks(const Eigen::ArrayXd& x) {
  const Eigen::Index n = x.size();
  std::vector<Eigen::Index> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), Eigen::Index{0});
  std::stable_sort(order.begin(), order.end(), [&](Eigen::Index a, Eigen::Index b) { return x[a] < x[b]; });
  Eigen::ArrayXd r(n);
  Eigen::Index i = 0;
  while (i < n) {
    Eigen::Index j = i;
    while (j + 1 < n && x[order[j + 1]] == x[order[i]]) ++j;
    const double avg = 0.5 * static_cast<double>(i + j) + 1.0;
    for (Eigen::Index k = i; k <= j; ++k) r[order[k]] = avg;
    i = j + 1;
  }
  return r;
}

double pearson(const Eigen::ArrayXd& x, const Eigen::ArrayXd& y) {
  check(x, y);
  const Eigen::ArrayXd dx = x - x.mean(), dy = y - y.mean();
  const double sxx = dx.square().sum(), syy = dy.square().sum();
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
  return (dx * dy).sum() / std::sqrt(sxx * syy);
}

double spearman(const Eigen::ArrayXd& x, const Eigen::ArrayXd& y) {
  return pearson(average_ranks(x), average_ranks(y));
}

}  // namespace icmlkit::num
