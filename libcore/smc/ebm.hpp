// Reward tuning of a 2-D energy-based model (Cuin et al., ICML 2026, EBM experiments; the
// reference code's reward_tuning/ebms_2D): the energy is a multilayer perceptron
//   E_theta(x) = w_out . a_L + b_out,  a_l = SiLU(W_l a_{l-1} + b_l),  a_0 = x,
// first trained by persistent contrastive divergence on a 2-D data set (the base model E_0),
// then fine-tuned by maximising
//   J(theta) = E_pi[R] - beta KL(pi_theta || pi_0),   pi_theta ~ exp(-E_theta),
// whose gradient is an expectation under pi_theta:
//   grad J = -Cov_pi(R, grad_theta E) - beta Cov_pi(E_theta - E_0, grad_theta E).
// The 2-D reward is the lower half-plane indicator R(x) = 1[x_1 < 0]; the optimum of J over all
// densities is pi* ~ pi_0 exp(R / beta), whose mean reward is p e^{1/b} / (p e^{1/b} + 1 - p)
// with p = pi_0(R = 1).  The image version (the paper's MNIST EBM, here 8x8 digits) uses the
// reference's "bright" reward, the mean pixel value clamped to [-1, 1].
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <functional>

#include "smc/problem.hpp"
#include "util/rng.hpp"

namespace icmlkit::smc {

/// The multilayer-perceptron energy above: `dim` -> `hidden` (SiLU) x `depth` -> 1.  All
/// weights and biases live in one parameter vector theta, layer by layer, each layer as its
/// row-major weight matrix [out, in] followed by its bias [out].  Stateless and thread-safe.
class MlpEnergy {
 public:
  /// Throws std::invalid_argument unless dim, hidden, depth >= 1.
  MlpEnergy(int dim, int hidden, int depth);
  /// Input dimension d.
  int dim() const { return dim_; }
  /// Number of parameters (length of theta).
  int n_params() const { return n_params_; }
  /// Parameters with weights ~ N(0, init_std^2) and zero biases (the reference's initialiser).
  Eigen::VectorXd init(double init_std, Rng& rng) const;
  /// E_theta(x) for x [d].
  double energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const;
  /// E_theta(x); writes grad_x E [d] to `gx` and, when `gtheta` is not null, grad_theta E
  /// [n_params] to `gtheta` (one backward pass for both).
  double backward(const Eigen::VectorXd& theta, const Eigen::VectorXd& x, Eigen::VectorXd* gx,
                  Eigen::VectorXd* gtheta) const;
  /// Batched over the rows of `X` [N, d]: energies [N] to `e` and, when `gx` is not null,
  /// grad_x E [N, d] to `gx`.  Rows are processed in fixed chunks in parallel (GEMMs per
  /// layer); results do not depend on the thread count.
  void energy_grad_x_batch(const Eigen::VectorXd& theta, const Eigen::MatrixXd& X, Eigen::VectorXd& e,
                           Eigen::MatrixXd* gx) const;
  /// sum_i c_i grad_theta E(x_i) [n_params] over the rows x_i of `X` [N, d] with coefficients
  /// `c` [N] (one batched backward pass with upstream gradient c).  Deterministic per input.
  Eigen::VectorXd weighted_param_grad(const Eigen::VectorXd& theta, const Eigen::MatrixXd& X, const Eigen::VectorXd& c) const;

 private:
  // Forward and backward over rows [r0, r0 + n) of X; `c` (may be null = all ones) scales each
  // row's upstream gradient; writes energies, grad_x rows and/or accumulates parameter grads.
  void chunk(const Eigen::VectorXd& theta, const Eigen::MatrixXd& X, Eigen::Index r0, Eigen::Index n, const double* c,
             double* e, Eigen::MatrixXd* gx, Eigen::VectorXd* gtheta) const;
  int dim_, hidden_, depth_, n_params_;
};

/// Options of `train_ebm`: persistent contrastive divergence with a replay buffer, as the
/// reference code trains its base EBM (loss E(data) - E(model) + decay (E(data)^2 + E(model)^2),
/// Adam, gradient-norm clipping, Langevin negatives clamped to [-clamp, clamp]).  The
/// reference's gradient penalty on the data is not used (it needs second derivatives).
struct EbmTrainOptions {
  int iterations = 600;            ///< Adam steps
  int batch = 128;                 ///< data and negative samples per step
  int langevin_steps = 20;         ///< ULA steps per negative batch
  double step_size = 0.005;        ///< ULA step
  double clamp = 6.0;              ///< box for negatives
  double init_lim = 4.5;           ///< replay buffer initialised uniform on [-lim, lim]^2
  double reinit_prob = 0.05;       ///< chance a buffer draw restarts uniformly
  double learning_rate = 1e-2;     ///< Adam step
  double energy_decay = 1e-3;      ///< weight of the squared-energy penalty
  double grad_clip = 10.0;         ///< parameter-gradient norm clip
  double init_std = 0.02;          ///< weight initialisation
  std::uint64_t seed = 0;
};

/// Trains `net` on `data` [n, d] and returns theta.  Throws std::invalid_argument on empty
/// data, a dimension mismatch or non-positive sizes.
Eigen::VectorXd train_ebm(const MlpEnergy& net, const Eigen::MatrixXd& data, const EbmTrainOptions& opt);

/// `n` points of scikit-learn's make_circles (two concentric circles, radii 1 and `factor`,
/// Gaussian noise sd `noise`), standardised per column and multiplied by `scale` (the
/// reference's circles data: noise 0.02, factor 0.5, scale 2.5).  Returns [n, 2].
Eigen::MatrixXd make_circles(int n, double noise, double factor, double scale, Rng& rng);

/// Grid quadrature of a 2-D density ~ exp(-E) on [-lim, lim]^2 with `res` x `res` nodes.
struct Grid2d {
  Eigen::MatrixXd x;   ///< [res^2, 2] nodes
  double cell = 0;     ///< area per node
};
/// The nodes of the grid above (throws std::invalid_argument unless res >= 2, lim > 0).
Grid2d make_grid(double lim, int res);

/// The EBM reward-tuning problem.  theta = the MLP parameters; x in R^dim.
class EbmRewardTuning final : public Problem {
 public:
  /// `net` the architecture, `theta0` the base model's parameters, KL weight `beta` >= 0,
  /// reward R (default: the lower half-plane indicator, 2-D).  Throws std::invalid_argument
  /// on a parameter-count mismatch or beta < 0.
  EbmRewardTuning(MlpEnergy net, Eigen::VectorXd theta0, double beta,
                  std::function<double(const Eigen::VectorXd&)> reward = lower_half_plane);

  int dim_x() const override { return net_.dim(); }
  int dim_theta() const override { return net_.n_params(); }
  double energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override { return net_.energy(theta, x); }
  Eigen::VectorXd grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override;
  double energy_grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x, Eigen::VectorXd& g) const override {
    return net_.backward(theta, x, &g, nullptr);
  }
  void energy_grad_x_batch(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::VectorXd& e,
                           Eigen::MatrixXd& g) const override {
    net_.energy_grad_x_batch(theta, xs, e, &g);
  }
  Eigen::VectorXd grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override;
  /// Ascent direction -Cov_w(R, grad_theta E) - beta Cov_w(E_theta - E_0, grad_theta E) from
  /// particles `xs` [N, 2] with normalised weights `w` [N].
  Eigen::VectorXd gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const override;
  /// Weighted mean reward sum_i w_i R(x_i).
  double estimate(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const override;
  /// R(x) = 1[x_1 < 0] (the reference's reward_lower_halfplane).
  static double lower_half_plane(const Eigen::VectorXd& x) { return x[1] < 0 ? 1.0 : 0.0; }
  /// R(x) = mean_j clamp(x_j, -1, 1) (the reference's MNIST reward_bright).
  static double mean_brightness(const Eigen::VectorXd& x) { return x.cwiseMax(-1.0).cwiseMin(1.0).mean(); }
  /// The reward of one point.
  double reward(const Eigen::VectorXd& x) const { return reward_(x); }

  /// Quadrature summary of pi_theta on a grid (2-D problems only; throws
  /// std::invalid_argument otherwise): mean reward E_pi[R], KL(pi_theta || pi_0), and the
  /// objective E[R] - beta KL.
  struct Summary {
    double mean_reward = 0, kl = 0, objective = 0;
  };
  Summary summarise(const Eigen::VectorXd& theta, const Grid2d& grid) const;
  /// Normalised quadrature weights [res^2] of pi_theta on the grid.
  Eigen::ArrayXd grid_weights(const Eigen::VectorXd& theta, const Grid2d& grid) const;
  /// `n` draws from pi_theta's grid approximation (a node by its weight, then uniform within
  /// its cell).  Returns [n, 2].
  Eigen::MatrixXd sample_grid(const Eigen::VectorXd& theta, const Grid2d& grid, int n, Rng& rng) const;
  /// Mean reward of the optimum pi* ~ pi_0 exp(R / beta) given p = pi_0(R = 1) (beta > 0).
  static double optimal_reward(double p0, double beta);

  /// The base model's parameters.
  const Eigen::VectorXd& theta0() const { return theta0_; }
  /// The architecture.
  const MlpEnergy& net() const { return net_; }

 private:
  MlpEnergy net_;
  Eigen::VectorXd theta0_;
  double beta_;
  std::function<double(const Eigen::VectorXd&)> reward_;
};

/// Moves every row of `x` [C, d] by `steps` ULA steps of size `step_size` under theta (chains
/// independent and seeded per row).  Returns the final states [C, d].
Eigen::MatrixXd ula_chains(const Problem& p, const Eigen::VectorXd& theta, const Eigen::MatrixXd& x, int steps,
                           double step_size, std::uint64_t seed);

/// Mean reward of pi_theta estimated by `chains` independent ULA chains of `steps` steps of
/// size `step_size` from `x_init` [chains, d], averaging R over the last `steps - burn_in`
/// states of every chain (the reference's warm-started, time-averaged evaluation).  Seeded.
double chain_mean_reward(const EbmRewardTuning& p, const Eigen::VectorXd& theta, const Eigen::MatrixXd& x_init,
                         int steps, int burn_in, double step_size, std::uint64_t seed);

}  // namespace icmlkit::smc
