// Reward tuning of a Gaussian-mixture energy (Cuin et al., ICML 2026, Langevin experiments,
// after ImpDiff): maximise J(theta) = E_pi[R] - beta KL(p_ref || pi_theta) over the mixture
// logits theta, with
//   U_theta(x) = -log sum_m softmax(theta)_m exp(-|x - mu_m|^2 / (2 s))
//   grad J = -Cov_pi(R, grad_theta U) - beta (E_ref[grad_theta U] - E_pi[grad_theta U]),
//   grad_theta U(x) = softmax(theta) - r(x)  (r = the component responsibilities).
// The hexagon setting: 6 means on a circle of radius 4, s = 1 (the reference code's
// hex_sparse_sig2 passes sig_sq = 0.5 * 2.0 to its energy and sampler), reference logits
// (+1.5, -1.5, ...), reward R(x) = 1[x_0 >= 0] exp(-|x - (10, 3.8)|^2 / 20) / 2.5.
#pragma once

#include <Eigen/Core>

#include <functional>

#include "smc/problem.hpp"
#include "util/rng.hpp"

namespace icmlkit::smc {

/// A batched reward: writes R(x) of rows [lo, lo + n) of `xs` [N, d] to out[0 .. n).
using BatchReward = std::function<void(const Eigen::MatrixXd& xs, Eigen::Index lo, Eigen::Index n, double* out)>;

/// The reward-tuning problem above (x in R^2 for the hexagon; any dimension in general).
/// evaluate() keeps each particle's responsibilities r [M] and reward in Evaluation::aux
/// [N, M + 1], so one SOSMC step evaluates the mixture once per particle (plus the reference
/// samples for the KL term).
class MixtureRewardTuning final : public Problem {
 public:
  /// `means` [M, d], kernel variance `s` > 0, reference logits [M], KL weight `beta` >= 0,
  /// `reward` R(x), and `n_ref` exact reference samples drawn with `seed`; `reward_batch`
  /// (optional) computes the same R for many rows at once.  Throws std::invalid_argument on
  /// s <= 0, a logit count other than M, beta < 0 or n_ref < 1.
  MixtureRewardTuning(Eigen::MatrixXd means, double s, Eigen::VectorXd ref_logits, double beta,
                      std::function<double(const Eigen::VectorXd&)> reward, int n_ref, std::uint64_t seed,
                      BatchReward reward_batch = {});
  /// The paper's hexagon setting with the hard half-plane reward.
  static MixtureRewardTuning hexagon(double beta, int n_ref, std::uint64_t seed);

  int dim_x() const override { return static_cast<int>(mu_.cols()); }
  int dim_theta() const override { return static_cast<int>(mu_.rows()); }
  double energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override;
  Eigen::VectorXd grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override;
  double energy_grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x, Eigen::VectorXd& g) const override;
  void energy_grad_x_batch(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::VectorXd& e,
                           Eigen::MatrixXd& g) const override;
  Eigen::VectorXd grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override;
  Eigen::VectorXd gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const override;
  /// Weighted mean reward sum_i w_i R(x_i).
  double estimate(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const override;
  /// M + 1: aux = [responsibilities r(x) (M columns), R(x)] per particle.
  Eigen::Index aux_cols() const override { return mu_.rows() + 1; }
  /// U, grad_x U and aux of rows [lo, lo + n) (SIMD over rows).
  void evaluate_rows(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::Index lo, Eigen::Index n,
                     Evaluation& ev) const override;
  Eigen::VectorXd gradient_at(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w,
                              const Evaluation& ev) const override;
  double estimate_at(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w,
                     const Evaluation& ev) const override;
  /// The reward of one point.
  double reward(const Eigen::VectorXd& x) const { return reward_(x); }
  /// E_pi_theta[R] by `n` exact draws from the mixture (the model is tractable).
  double mean_reward(const Eigen::VectorXd& theta, int n, Rng& rng) const;
  /// Exact draws [n, d] from the mixture with logits theta.
  Eigen::MatrixXd sample(const Eigen::VectorXd& theta, int n, Rng& rng) const;
  /// The reference logits.
  const Eigen::VectorXd& reference_logits() const { return ref_; }
  /// The fixed reference samples [n_ref, d] of the KL term's E_ref[grad_theta U].
  const Eigen::MatrixXd& reference_samples() const { return ref_samples_; }

 private:
  Eigen::VectorXd responsibilities(const Eigen::VectorXd& theta, const Eigen::VectorXd& x, double* log_mix) const;
  // log softmax(theta) [M].
  Eigen::VectorXd log_weights(const Eigen::VectorXd& theta) const;
  // Responsibilities r [M] of x [d] given log weights; returns log sum_m pi_m N(x; mu_m) (+ const).
  double resp_into(const double* logpi, const double* x, double* r) const;
  // Responsibilities R [n, M] and log-mixture lse [n] of rows [lo, lo + n) of X, column-wise
  // (SIMD over rows); R may be a block of a larger matrix.
  void resp_block(const Eigen::VectorXd& lp, const Eigen::MatrixXd& X, Eigen::Index lo, Eigen::Index n,
                  Eigen::Ref<Eigen::MatrixXd> R, Eigen::Ref<Eigen::VectorXd> lse) const;
  // R(x) of rows [lo, lo + n) of xs to out.
  void rewards(const Eigen::MatrixXd& xs, Eigen::Index lo, Eigen::Index n, double* out) const;
  Eigen::MatrixXd mu_;
  double s_;
  Eigen::VectorXd ref_;
  double beta_;
  std::function<double(const Eigen::VectorXd&)> reward_;
  BatchReward reward_batch_;
  Eigen::MatrixXd ref_samples_;
  // Kernel values of the fixed reference samples, K[i, m] = exp(a_im - max_m a_im) with
  // a_im = -|x_i - mu_m|^2 / (2 s) [n_ref, M]: the responsibilities under any theta are then
  // pi_m K[i, m] / sum_j pi_j K[i, j] (no exponentials per step).
  Eigen::MatrixXd ref_kernel_;
  double inv2s_ = 0;  // 1 / (2 s)
};

}  // namespace icmlkit::smc
