#include "smc/reward.hpp"

#include <cmath>
#include <numbers>
#include <limits>
#include <stdexcept>
#include <vector>

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

double MixtureRewardTuning::energy_grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x, Eigen::VectorXd& g) const {
  // One pass: log-weights lk_m = log pi_m - |x - mu_m|^2 / (2s), U = -logsumexp(lk),
  // grad U = sum_m r_m (x - mu_m) / s with r = softmax(lk).  No heap use after warm-up.
  const Eigen::Index M = mu_.rows(), d = mu_.cols();
  thread_local std::vector<double> lk;
  lk.resize(static_cast<std::size_t>(M));
  const double tm = theta.maxCoeff();
  double tz = 0;
  for (Eigen::Index m = 0; m < M; ++m) tz += std::exp(theta[m] - tm);
  const double log_norm = tm + std::log(tz);
  double mx = -std::numeric_limits<double>::infinity();
  for (Eigen::Index m = 0; m < M; ++m) {
    double q = 0;
    for (Eigen::Index j = 0; j < d; ++j) q += (x[j] - mu_(m, j)) * (x[j] - mu_(m, j));
    lk[static_cast<std::size_t>(m)] = theta[m] - log_norm - q / (2 * s_);
    mx = std::max(mx, lk[static_cast<std::size_t>(m)]);
  }
  double z = 0;
  for (auto& v : lk) z += (v = std::exp(v - mx));
  g.resize(d);
  g.setZero();
  for (Eigen::Index m = 0; m < M; ++m) {
    const double r = lk[static_cast<std::size_t>(m)] / z;
    for (Eigen::Index j = 0; j < d; ++j) g[j] += r * (x[j] - mu_(m, j)) / s_;
  }
  return -(mx + std::log(z));
}

Eigen::VectorXd MixtureRewardTuning::grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  return softmax(theta) - responsibilities(theta, x, nullptr);
}

Eigen::VectorXd MixtureRewardTuning::gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs,
                                              const Eigen::ArrayXd& w) const {
  // -Cov_w(R, grad_theta U) - beta (E_ref[grad_theta U] - E_w[grad_theta U]); grad_theta U =
  // softmax(theta) - r(x), so only the weighted responsibilities are needed.
  const Eigen::Index M = mu_.rows();
  const Eigen::VectorXd pi = softmax(theta);
  Eigen::VectorXd er_ = Eigen::VectorXd::Zero(M), err = Eigen::VectorXd::Zero(M);
  double er = 0;
#pragma omp parallel
  {
    Eigen::VectorXd l_r = Eigen::VectorXd::Zero(M), l_rr = Eigen::VectorXd::Zero(M), resp(M);
    double l_er = 0;
    Eigen::VectorXd x(xs.cols());
#pragma omp for schedule(static)
    for (Eigen::Index i = 0; i < xs.rows(); ++i) {
      x = xs.row(i).transpose();
      resp = responsibilities(theta, x, nullptr);
      const double r = reward_(x);
      l_r += w[i] * resp;
      l_rr += (w[i] * r) * resp;
      l_er += w[i] * r;
    }
#pragma omp critical
    {
      er_ += l_r;
      err += l_rr;
      er += l_er;
    }
  }
  const double wsum = w.sum();
  const Eigen::VectorXd eg = wsum * pi - er_, erg = er * pi - err;
  Eigen::VectorXd out = -(erg - er * eg);
  if (beta_ > 0) {
    Eigen::VectorXd eref = Eigen::VectorXd::Zero(M);
    for (Eigen::Index i = 0; i < ref_samples_.rows(); ++i) eref += grad_theta(theta, ref_samples_.row(i).transpose());
    eref /= static_cast<double>(ref_samples_.rows());
    out -= beta_ * (eref - eg);
  }
  return out;
}

double MixtureRewardTuning::estimate(const Eigen::VectorXd& /*theta*/, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const {
  double s = 0;
  for (Eigen::Index i = 0; i < xs.rows(); ++i) s += w[i] * reward_(xs.row(i).transpose());
  return s;
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
