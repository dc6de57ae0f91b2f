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
    : mu_(std::move(means)), s_(s), ref_(std::move(ref_logits)), beta_(beta), reward_(std::move(reward)), inv2s_(0.5 / s) {
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

Eigen::VectorXd MixtureRewardTuning::log_weights(const Eigen::VectorXd& theta) const {
  const double tm = theta.maxCoeff();
  return (theta.array() - (tm + std::log((theta.array() - tm).exp().sum()))).matrix();
}

double MixtureRewardTuning::resp_into(const double* logpi, const double* x, double* r) const {
  // lk_m = log pi_m - |x - mu_m|^2 / (2s); r = softmax(lk); returns logsumexp(lk) = -U(x).
  const Eigen::Index M = mu_.rows(), d = mu_.cols();
  double mx = -std::numeric_limits<double>::infinity();
  for (Eigen::Index m = 0; m < M; ++m) {
    double q = 0;
    for (Eigen::Index j = 0; j < d; ++j) {
      const double t = x[j] - mu_(m, j);
      q += t * t;
    }
    r[m] = logpi[m] - q * inv2s_;
    mx = std::max(mx, r[m]);
  }
  double z = 0;
  for (Eigen::Index m = 0; m < M; ++m) z += (r[m] = std::exp(r[m] - mx));
  const double iz = 1 / z;
  for (Eigen::Index m = 0; m < M; ++m) r[m] *= iz;
  return mx + std::log(z);
}

Eigen::VectorXd MixtureRewardTuning::responsibilities(const Eigen::VectorXd& theta, const Eigen::VectorXd& x,
                                                      double* log_mix) const {
  const Eigen::VectorXd lp = log_weights(theta);
  Eigen::VectorXd r(mu_.rows());
  const double lm = resp_into(lp.data(), x.data(), r.data());
  if (log_mix) *log_mix = lm;
  return r;
}

double MixtureRewardTuning::energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  double lm = 0;
  responsibilities(theta, x, &lm);
  return -lm;
}

Eigen::VectorXd MixtureRewardTuning::grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  Eigen::VectorXd g;
  energy_grad_x(theta, x, g);
  return g;
}

double MixtureRewardTuning::energy_grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x, Eigen::VectorXd& g) const {
  // grad U(x) = sum_m r_m (x - mu_m) / s
  double lm = 0;
  const Eigen::VectorXd r = responsibilities(theta, x, &lm);
  g = Eigen::VectorXd::Zero(x.size());
  for (Eigen::Index m = 0; m < mu_.rows(); ++m)
    for (Eigen::Index j = 0; j < x.size(); ++j) g[j] += r[m] * (x[j] - mu_(m, j)) * 2 * inv2s_;
  return -lm;
}

void MixtureRewardTuning::resp_block(const Eigen::VectorXd& lp, const Eigen::MatrixXd& X, Eigen::Index lo, Eigen::Index n,
                                     Eigen::ArrayXXd& R, Eigen::ArrayXd& lse) const {
  // Column-wise (SIMD) form of resp_into for rows [lo, lo + n): R(i, m) = r_m(x_i),
  // lse(i) = log sum_m pi_m exp(-|x_i - mu_m|^2 / (2s)).
  const Eigen::Index M = mu_.rows(), d = mu_.cols();
  R.resize(n, M);
  for (Eigen::Index m = 0; m < M; ++m) {
    Eigen::ArrayXd q = Eigen::ArrayXd::Zero(n);
    for (Eigen::Index j = 0; j < d; ++j) q += (X.col(j).segment(lo, n).array() - mu_(m, j)).square();
    R.col(m) = lp[m] - q * inv2s_;
  }
  const Eigen::ArrayXd mx = R.rowwise().maxCoeff();
  R.colwise() -= mx;
  R = R.exp();
  const Eigen::ArrayXd z = R.rowwise().sum();
  R.colwise() /= z;
  lse = mx + z.log();
}

void MixtureRewardTuning::energy_grad_x_batch(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::VectorXd& e,
                                              Eigen::MatrixXd& g) const {
  // grad U(x) = sum_m r_m (x - mu_m) / s = (x - sum_m r_m mu_m) / s, in fixed blocks of rows.
  const Eigen::Index N = xs.rows(), B = 2048;
  const Eigen::VectorXd lp = log_weights(theta);
  e.resize(N);
  g.resize(N, mu_.cols());
  const Eigen::Index blocks = (N + B - 1) / B;
#pragma omp parallel if (blocks > 1)
  {
    Eigen::ArrayXXd R;
    Eigen::ArrayXd lse;
#pragma omp for schedule(static)
    for (Eigen::Index b = 0; b < blocks; ++b) {
      const Eigen::Index lo = b * B, n = std::min(B, N - lo);
      resp_block(lp, xs, lo, n, R, lse);
      e.segment(lo, n) = -lse.matrix();
      g.middleRows(lo, n).noalias() = (xs.middleRows(lo, n) - R.matrix().lazyProduct(mu_)) * (2 * inv2s_);
    }
  }
}

Eigen::VectorXd MixtureRewardTuning::grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  return softmax(theta) - responsibilities(theta, x, nullptr);
}

Eigen::VectorXd MixtureRewardTuning::gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs,
                                              const Eigen::ArrayXd& w) const {
  // -Cov_w(R, grad_theta U) - beta (E_ref[grad_theta U] - E_w[grad_theta U]); grad_theta U =
  // softmax(theta) - r(x), so only weighted sums of the responsibilities are needed:
  // S1 = sum w r(x), S2 = sum w R r(x), ER = sum w R, and the reference mean of r.
  const Eigen::Index M = mu_.rows(), N = xs.rows(), Nr = ref_samples_.rows();
  const Eigen::VectorXd lp = log_weights(theta), pi = lp.array().exp().matrix();
  // Fixed blocks summed in order: the result does not depend on the thread count.
  const Eigen::Index B = 2048, nb = (N + B - 1) / B, nbr = beta_ > 0 ? (Nr + B - 1) / B : 0;
  Eigen::MatrixXd parts = Eigen::MatrixXd::Zero(3 * M + 1, nb + nbr);
#pragma omp parallel if (nb + nbr > 1)
  {
    Eigen::ArrayXXd R;
    Eigen::ArrayXd lse, wr;
#pragma omp for schedule(dynamic, 1)
    for (Eigen::Index b = 0; b < nb + nbr; ++b) {
      const bool ref = b >= nb;
      const Eigen::MatrixXd& X = ref ? ref_samples_ : xs;
      const Eigen::Index lo = (ref ? b - nb : b) * B, n = std::min(B, X.rows() - lo);
      resp_block(lp, X, lo, n, R, lse);
      if (ref) {
        parts.col(b).segment(2 * M, M) = R.colwise().sum().transpose().matrix();
      } else {
        wr.resize(n);
        for (Eigen::Index i = 0; i < n; ++i) wr[i] = w[lo + i] * reward_(xs.row(lo + i).transpose());
        parts.col(b).head(M).noalias() = R.matrix().transpose() * w.segment(lo, n).matrix();
        parts.col(b).segment(M, M).noalias() = R.matrix().transpose() * wr.matrix();
        parts(3 * M, b) = wr.sum();
      }
    }
  }
  const Eigen::VectorXd tot = parts.rowwise().sum();
  const double wsum = w.sum(), er = tot[3 * M];
  const Eigen::VectorXd eg = wsum * pi - tot.head(M), erg = er * pi - tot.segment(M, M);
  Eigen::VectorXd out = -(erg - er * eg);
  if (beta_ > 0) {
    const Eigen::VectorXd eref = pi - tot.segment(2 * M, M) / static_cast<double>(Nr);
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
