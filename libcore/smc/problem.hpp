// The problem interface of SMC optimisation with intractable gradients (Cuin, Carbone, Tang &
// Akyildiz, ICML 2026): an energy U_theta(x) defines pi_theta(x) ~ exp(-U_theta(x)), and the
// objective's gradient is an expectation under pi_theta.  For maximum marginal likelihood,
// l(theta) = log int exp(-U_theta(x)) dx and grad l(theta) = E_pi[-dU/dtheta].
#pragma once

#include <Eigen/Core>

#include <limits>

namespace icmlkit::smc {

struct Population;

/// A user-implementable problem.  All methods must be thread-safe.
class Problem {
 public:
  virtual ~Problem() = default;
  /// Dimension of the latent x.
  virtual int dim_x() const = 0;
  /// Dimension of the parameter theta.
  virtual int dim_theta() const = 0;
  /// U_theta(x).
  virtual double energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const = 0;
  /// grad_x U_theta(x) [dim_x].
  virtual Eigen::VectorXd grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const = 0;
  /// U_theta(x), writing grad_x U_theta(x) [dim_x] to `g`.  Default: energy() and grad_x();
  /// problems override it when one pass gives both (SOSMC-ULA needs both per particle).
  virtual double energy_grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x, Eigen::VectorXd& g) const {
    g = grad_x(theta, x);
    return energy(theta, x);
  }
  /// Batched energy_grad_x over the rows of `xs` [N, dim_x]: writes U [N] to `e` and grad_x U
  /// [N, dim_x] to `g`.  Default: energy_grad_x per row (rows in parallel when N >= 2048).
  virtual void energy_grad_x_batch(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::VectorXd& e,
                                   Eigen::MatrixXd& g) const;
  /// grad_theta U_theta(x) [dim_theta].
  virtual Eigen::VectorXd grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const = 0;
  /// The ascent direction estimated from particles `xs` [N, dim_x] with normalised weights
  /// `w` [N].  Default (maximum marginal likelihood): sum_i w_i (-grad_theta U(x_i)).
  virtual Eigen::VectorXd gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const;
  /// A scalar progress estimate from the same weighted particles (reward problems: the
  /// weighted mean reward sum_i w_i R(x_i)); NaN when the problem has none.
  virtual double estimate(const Eigen::VectorXd& /*theta*/, const Eigen::MatrixXd& /*xs*/, const Eigen::ArrayXd& /*w*/) const {
    return std::numeric_limits<double>::quiet_NaN();
  }
};

/// Kuntz, Lim & Johansen (2023)'s toy hierarchical model: y_d ~ N(x_d, 1), x_d ~ N(theta, 1),
/// d = 1..D, so U_theta(x) = sum_d (y_d - x_d)^2 / 2 + (x_d - theta)^2 / 2 (up to constants).
/// The marginal-likelihood maximiser is mean(y); EM iterates theta <- theta/2 + mean(y)/2.
class ToyHierarchical final : public Problem {
 public:
  /// `y` [D] observations.
  explicit ToyHierarchical(Eigen::VectorXd y) : y_(std::move(y)) {}
  int dim_x() const override { return static_cast<int>(y_.size()); }
  int dim_theta() const override { return 1; }
  double energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override {
    return 0.5 * (y_ - x).squaredNorm() + 0.5 * (x.array() - theta[0]).matrix().squaredNorm();
  }
  Eigen::VectorXd grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override {
    return (x - y_) + (x.array() - theta[0]).matrix();
  }
  Eigen::VectorXd grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override {
    return Eigen::VectorXd::Constant(1, -(x.array() - theta[0]).sum());
  }
  /// The observations.
  const Eigen::VectorXd& y() const { return y_; }
  /// One exact EM update theta/2 + mean(y)/2.
  double em_step(double theta) const { return 0.5 * theta + 0.5 * y_.mean(); }

 private:
  Eigen::VectorXd y_;
};

}  // namespace icmlkit::smc
