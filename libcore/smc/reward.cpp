#include "smc/reward.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace icmlkit::smc {
namespace {
Eigen::VectorXd softmax(const Eigen::VectorXd& t) {
  const Eigen::ArrayXd e = (t.array() - t.maxCoeff()).exp();
  return (e / e.sum()).matrix();
}
}  // namespace

MixtureRewardTuning::MixtureRewardTuning(Eigen::MatrixXd means, double s, Eigen::VectorXd ref_logits, double beta,
                                         std::function<double(const Eigen::VectorXd&)> reward, int n_ref,
                                         std::uint64_t seed)
    : mu_(std::move(means)), s_(s), ref_(std::move(ref_logits)), beta_(beta), reward_(std::move(reward)) {
  if (!(s_ > 0) || ref_.size() != mu_.rows() || !(beta_ >= 0) || n_ref < 1)
    throw std::invalid_argument("mixture reward tuning: need s > 0, one logit per mean, beta >= 0, n_ref >= 1");
  Rng rng(seed);
  ref_samples_ = sample(ref_, n_ref, rng);
}

MixtureRewardTuning MixtureRewardTuning::hexagon(double beta, int n_ref, std::uint64_t seed) {
  Eigen::MatrixXd mu(6, 2);
  Eigen::VectorXd ref(6);
  for (int m = 0; m < 6; ++m) {
    mu(m, 0) = 4 * std::cos(2 * std::numbers::pi * m / 6);
    mu(m, 1) = 4 * std::sin(2 * std::numbers::pi * m / 6);
    ref[m] = m % 2 == 0 ? 1.5 : -1.5;
  }
  auto reward = [](const Eigen::VectorXd& x) {
    if (x[0] < 0) return 0.0;
    const double d0 = x[0] - 10, d1 = x[1] - 3.8;
    return std::exp(-(d0 * d0 + d1 * d1) / 20) / 2.5;
  };
  return MixtureRewardTuning(mu, 2.0, ref, beta, reward, n_ref, seed);
}

Eigen::VectorXd MixtureRewardTuning::responsibilities(const Eigen::VectorXd& theta, const Eigen::VectorXd& x,
                                                      double* log_mix) const {
  const Eigen::VectorXd pi = softmax(theta);
  Eigen::VectorXd lk(mu_.rows());
  for (Eigen::Index m = 0; m < mu_.rows(); ++m) lk[m] = std::log(pi[m]) - (x.transpose() - mu_.row(m)).squaredNorm() / (2 * s_);
  const double mx = lk.maxCoeff();
  const Eigen::ArrayXd e = (lk.array() - mx).exp();
  if (log_mix) *log_mix = mx + std::log(e.sum());
  return (e / e.sum()).matrix();
}

double MixtureRewardTuning::energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  double lm = 0;
  responsibilities(theta, x, &lm);
  return -lm;
}

Eigen::VectorXd MixtureRewardTuning::grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  const Eigen::VectorXd r = responsibilities(theta, x, nullptr);
  Eigen::VectorXd g = Eigen::VectorXd::Zero(x.size());
  for (Eigen::Index m = 0; m < mu_.rows(); ++m) g += r[m] * (x - mu_.row(m).transpose()) / s_;
  return g;
}

Eigen::VectorXd MixtureRewardTuning::grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  return softmax(theta) - responsibilities(theta, x, nullptr);
}

Eigen::VectorXd MixtureRewardTuning::gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs,
                                              const Eigen::ArrayXd& w) const {
  // -Cov_w(R, grad_theta U) - beta (E_ref[grad_theta U] - E_w[grad_theta U])
  const Eigen::Index M = mu_.rows();
  Eigen::VectorXd eg = Eigen::VectorXd::Zero(M), erg = Eigen::VectorXd::Zero(M);
  double er = 0;
  for (Eigen::Index i = 0; i < xs.rows(); ++i) {
    const Eigen::VectorXd x = xs.row(i).transpose();
    const Eigen::VectorXd g = grad_theta(theta, x);
    const double r = reward_(x);
    eg += w[i] * g;
    erg += w[i] * r * g;
    er += w[i] * r;
  }
  Eigen::VectorXd out = -(erg - er * eg);
  if (beta_ > 0) {
    Eigen::VectorXd eref = Eigen::VectorXd::Zero(M);
    for (Eigen::Index i = 0; i < ref_samples_.rows(); ++i) eref += grad_theta(theta, ref_samples_.row(i).transpose());
    eref /= static_cast<double>(ref_samples_.rows());
    out -= beta_ * (eref - eg);
  }
  return out;
}

Eigen::MatrixXd MixtureRewardTuning::sample(const Eigen::VectorXd& theta, int n, Rng& rng) const {
  const Eigen::VectorXd pi = softmax(theta);
  Eigen::MatrixXd xs(n, mu_.cols());
  for (int i = 0; i < n; ++i) {
    double u = rng.uniform(), c = 0;
    Eigen::Index m = 0;
    for (; m < pi.size() - 1; ++m) {
      c += pi[m];
      if (u < c) break;
    }
    for (Eigen::Index d = 0; d < mu_.cols(); ++d) xs(i, d) = mu_(m, d) + std::sqrt(s_) * rng.normal();
  }
  return xs;
}

double MixtureRewardTuning::mean_reward(const Eigen::VectorXd& theta, int n, Rng& rng) const {
  const Eigen::MatrixXd xs = sample(theta, n, rng);
  double s = 0;
  for (int i = 0; i < n; ++i) s += reward_(xs.row(i).transpose());
  return s / n;
}

}  // namespace icmlkit::smc
