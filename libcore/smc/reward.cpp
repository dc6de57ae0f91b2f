#include "smc/reward.hpp"

#include "smc/simd.hpp"

#include <algorithm>
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
                                         std::uint64_t seed, BatchReward reward_batch)
    : mu_(std::move(means)), s_(s), ref_(std::move(ref_logits)), beta_(beta), reward_(std::move(reward)),
      reward_batch_(std::move(reward_batch)), inv2s_(0.5 / s) {
  if (!(s_ > 0) || ref_.size() != mu_.rows() || !(beta_ >= 0) || n_ref < 1)
    throw std::invalid_argument("mixture reward tuning: need s > 0, one logit per mean, beta >= 0, n_ref >= 1");
  Rng rng(seed);
  ref_samples_ = sample(ref_, n_ref, rng);
  // Responsibilities under equal weights (log pi = 0) give K up to the row factor
  // 1 / sum_m exp(a_im - max): dividing by the row maximum of R recovers exp(a_im - max_m a_im).
  const Eigen::Index M = mu_.rows();
  ref_kernel_.resize(n_ref, M);
  Eigen::VectorXd lse(n_ref);
  resp_block(Eigen::VectorXd::Zero(M), ref_samples_, 0, n_ref, ref_kernel_, lse);
  const Eigen::VectorXd rmax = ref_kernel_.rowwise().maxCoeff();
  ref_kernel_ = rmax.cwiseInverse().asDiagonal() * ref_kernel_;
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
  // The same reward over many rows, vectorised over the columns of xs.
  auto batch = [](const Eigen::MatrixXd& xs, Eigen::Index lo, Eigen::Index n, double* out) {
    const auto x0 = xs.col(0).segment(lo, n).array(), x1 = xs.col(1).segment(lo, n).array();
    Eigen::Map<Eigen::ArrayXd> r(out, n);
    r = -((x0 - 10).square() + (x1 - 3.8).square()) / 20;
    exp_nonpositive(out, out, n);
    r = (x0 < 0).select(0.0, r / 2.5);
  };
  // Variance 1: the reference's hex_sparse_sig2 configuration passes sig_sq = 0.5 * 2.0.
  return MixtureRewardTuning(mu, 1.0, ref, beta, reward, n_ref, seed, batch);
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
                                     Eigen::Ref<Eigen::MatrixXd> R, Eigen::Ref<Eigen::VectorXd> lse) const {
  // resp_into for rows [lo, lo + n), vectorised over rows (smc/simd.hpp).
  const Eigen::Index d = mu_.cols();
  std::vector<const double*> xcols(static_cast<std::size_t>(d));
  for (Eigen::Index j = 0; j < d; ++j) xcols[static_cast<std::size_t>(j)] = X.col(j).data() + lo;
  Eigen::VectorXd z(n);
  mixture_responsibilities(xcols.data(), static_cast<int>(d), n, mu_.data(), lp.data(), static_cast<int>(mu_.rows()), inv2s_,
                           R.data(), R.outerStride(), lse.data(), z.data());
}

void MixtureRewardTuning::rewards(const Eigen::MatrixXd& xs, Eigen::Index lo, Eigen::Index n, double* out) const {
  if (reward_batch_) {
    reward_batch_(xs, lo, n, out);
    return;
  }
  Eigen::VectorXd x(xs.cols());
  for (Eigen::Index i = 0; i < n; ++i) {
    x = xs.row(lo + i).transpose();
    out[i] = reward_(x);
  }
}

void MixtureRewardTuning::evaluate_rows(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::Index lo,
                                        Eigen::Index n, Evaluation& ev) const {
  // grad U(x) = sum_m r_m (x - mu_m) / s = (x - sum_m r_m mu_m) / s.
  const Eigen::Index M = mu_.rows();
  const Eigen::VectorXd lp = log_weights(theta);
  auto R = ev.aux.block(lo, 0, n, M);
  resp_block(lp, xs, lo, n, R, ev.e.segment(lo, n));
  ev.e.segment(lo, n) *= -1.0;
  const Eigen::Index d = mu_.cols();
  std::vector<const double*> xcols(static_cast<std::size_t>(d));
  for (Eigen::Index j = 0; j < d; ++j) xcols[static_cast<std::size_t>(j)] = xs.col(j).data() + lo;
  mixture_grad(xcols.data(), static_cast<int>(d), n, mu_.data(), static_cast<int>(M), R.data(), R.outerStride(),
               2 * inv2s_, ev.g.data() + lo, ev.g.outerStride());
  rewards(xs, lo, n, ev.aux.col(M).data() + lo);
}

void MixtureRewardTuning::energy_grad_x_batch(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::VectorXd& e,
                                              Eigen::MatrixXd& g) const {
  Evaluation ev;
  evaluate(theta, xs, ev);
  e.swap(ev.e);
  g.swap(ev.g);
}

Eigen::VectorXd MixtureRewardTuning::grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  return softmax(theta) - responsibilities(theta, x, nullptr);
}

Eigen::VectorXd MixtureRewardTuning::gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs,
                                              const Eigen::ArrayXd& w) const {
  Evaluation ev;
  evaluate(theta, xs, ev);
  return gradient_at(theta, xs, w, ev);
}

Eigen::VectorXd MixtureRewardTuning::gradient_at(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs,
                                                 const Eigen::ArrayXd& w, const Evaluation& ev) const {
  // -Cov_w(R, grad_theta U) - beta (E_ref[grad_theta U] - E_w[grad_theta U]); grad_theta U =
  // softmax(theta) - r(x), so only weighted sums of the responsibilities are needed:
  // S1 = sum w r(x), S2 = sum w R r(x), ER = sum w R (from the evaluation's aux), and the
  // reference mean of r (computed here: it depends on theta).
  const Eigen::Index M = mu_.rows(), N = xs.rows(), Nr = ref_samples_.rows();
  if (!ev.covers(N) || ev.aux.cols() != M + 1) return gradient(theta, xs, w);
  const Eigen::VectorXd lp = log_weights(theta), pi = lp.array().exp().matrix();
  const auto R = ev.aux.leftCols(M);
  const Eigen::ArrayXd wr = w * ev.aux.col(M).array();
  const double wsum = w.sum(), er = wr.sum();
  const Eigen::VectorXd s1 = R.transpose() * w.matrix(), s2 = R.transpose() * wr.matrix();
  const Eigen::VectorXd eg = wsum * pi - s1, erg = er * pi - s2;
  Eigen::VectorXd out = -(erg - er * eg);
  if (beta_ > 0) {
    // E_ref[r_m] = pi_m mean_i K[i, m] / z_i with z = K pi: two products over the cached
    // kernel (exact up to rounding).  Far-off logits could underflow every pi_m K[i, m] of a
    // row; then the responsibilities are recomputed in the log domain.
    const Eigen::VectorXd z = ref_kernel_ * pi;
    Eigen::VectorXd mean_r;
    if (z.minCoeff() > 1e-250) {
      mean_r = pi.cwiseProduct(ref_kernel_.transpose() * z.cwiseInverse()) / static_cast<double>(Nr);
    } else {
      Eigen::MatrixXd Rb(Nr, M);
      Eigen::VectorXd lse(Nr);
      resp_block(lp, ref_samples_, 0, Nr, Rb, lse);
      mean_r = Rb.colwise().sum().transpose() / static_cast<double>(Nr);
    }
    const Eigen::VectorXd eref = pi - mean_r;
    out -= beta_ * (eref - eg);
  }
  return out;
}

double MixtureRewardTuning::estimate(const Eigen::VectorXd& /*theta*/, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const {
  Eigen::ArrayXd r(xs.rows());
  rewards(xs, 0, xs.rows(), r.data());
  return (w * r).sum();
}

double MixtureRewardTuning::estimate_at(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w,
                                        const Evaluation& ev) const {
  if (!ev.covers(xs.rows()) || ev.aux.cols() != mu_.rows() + 1) return estimate(theta, xs, w);
  return (w * ev.aux.col(mu_.rows()).array()).sum();
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
