#include "smc/particles.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace icmlkit::smc {

Eigen::ArrayXd Population::weights() const {
  const double m = logw.maxCoeff();
  if (!std::isfinite(m)) return Eigen::ArrayXd::Constant(logw.size(), 1.0 / static_cast<double>(logw.size()));
  Eigen::ArrayXd w = (logw - m).exp();
  return w / w.sum();
}

double Population::ess() const {
  const Eigen::ArrayXd w = weights();
  return 1.0 / w.square().sum();
}

Eigen::VectorXd Population::weighted_mean(const Eigen::MatrixXd& f) const {
  return f.transpose() * weights().matrix();
}

std::vector<Eigen::Index> resample_indices(const Eigen::ArrayXd& w, Resampling scheme, Rng& rng) {
  const Eigen::Index n = w.size();
  if (n == 0) throw std::invalid_argument("cannot resample an empty population");
  std::vector<Eigen::Index> idx(static_cast<std::size_t>(n));
  if (scheme == Resampling::systematic) {
    const double u0 = rng.uniform() / static_cast<double>(n);
    double cum = w[0];
    Eigen::Index j = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double u = u0 + static_cast<double>(i) / static_cast<double>(n);
      while (u > cum && j < n - 1) cum += w[++j];
      idx[static_cast<std::size_t>(i)] = j;
    }
  } else {
    // Sorted uniforms by the exponential-spacings trick, then one merge pass: O(N).
    std::vector<double> u(static_cast<std::size_t>(n) + 1);
    double acc = 0;
    for (auto& e : u) { acc += -std::log(1 - rng.uniform()); e = acc; }
    double cum = w[0];
    Eigen::Index j = 0;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double ui = u[static_cast<std::size_t>(i)] / acc;
      while (ui > cum && j < n - 1) cum += w[++j];
      idx[static_cast<std::size_t>(i)] = j;
    }
  }
  return idx;
}

void resample(Population& pop, Resampling scheme, Rng& rng) {
  const auto idx = resample_indices(pop.weights(), scheme, rng);
  Eigen::MatrixXd x(pop.x.rows(), pop.x.cols());
  for (std::size_t i = 0; i < idx.size(); ++i) x.row(static_cast<Eigen::Index>(i)) = pop.x.row(idx[i]);
  pop.x = std::move(x);
  pop.logw.setZero();
}

}  // namespace icmlkit::smc
