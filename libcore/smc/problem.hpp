// The problem interface of SMC optimisation with intractable gradients (Cuin, Carbone, Tang &
// Akyildiz, ICML 2026): an energy U_theta(x) defines pi_theta(x) ~ exp(-U_theta(x)), and the
// objective's gradient is an expectation under pi_theta.  For maximum marginal likelihood,
// l(theta) = log int exp(-U_theta(x)) dx and grad l(theta) = E_pi[-dU/dtheta].
#pragma once

#include <Eigen/Core>

#include <limits>
#include <vector>

namespace icmlkit::smc {

struct Population;

/// One batched evaluation of a population `xs` [N, dim_x] at a parameter theta: U [N],
/// grad_x U [N, dim_x], and problem-defined per-particle statistics `aux` [N, k] (k may be 0;
/// the Gaussian mixture keeps its responsibilities and rewards there) that
/// Problem::gradient_at() and estimate_at() reuse instead of recomputing.  SOSMC-ULA evaluates
/// the moved particles under theta_{k+1} for the weight increment; the same evaluation then
/// serves step k+1's gradient and move, so each step evaluates the population once.
struct Evaluation {
  /// Sizes e [n], g [n, d] and aux [n, k] (contents unspecified).
  void resize(Eigen::Index n, Eigen::Index d, Eigen::Index k) {
    e.resize(n);
    g.resize(n, d);
    aux.resize(n, k);
  }
  Eigen::VectorXd e;    ///< [N] U_theta(x_i)
  Eigen::MatrixXd g;    ///< [N, dim_x] grad_x U_theta(x_i)
  Eigen::MatrixXd aux;  ///< [N, k] problem-defined
  /// Whether this evaluation holds `n` particles (callers pass an empty one when they have none).
  bool covers(Eigen::Index n) const { return e.size() == n && n > 0; }
  /// Keeps rows `idx` in that order (resampling); throws nothing, idx entries must be < N.
  void gather(const std::vector<Eigen::Index>& idx);
};

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
  /// Number of columns of Evaluation::aux that evaluate() fills (default 0).
  virtual Eigen::Index aux_cols() const { return 0; }
  /// Fills rows [lo, lo + n) of `ev` (already sized: e [N], g [N, dim_x], aux [N, aux_cols()])
  /// from rows [lo, lo + n) of `xs` [N, dim_x] at theta.  May run concurrently for disjoint row
  /// ranges of one `ev`.  Default: energy_grad_x_batch on a copy of the rows.
  virtual void evaluate_rows(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Eigen::Index lo, Eigen::Index n,
                             Evaluation& ev) const;
  /// Fills `ev` for particles `xs` [N, dim_x] at theta: sizes it, then evaluate_rows() over
  /// fixed blocks of rows in parallel (results do not depend on the thread count).
  virtual void evaluate(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, Evaluation& ev) const;
  /// gradient() given `ev`, an evaluate() of the same theta and xs, or an empty Evaluation
  /// (then it must equal gradient()).  Default: gradient().
  virtual Eigen::VectorXd gradient_at(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w,
                                      const Evaluation& /*ev*/) const {
    return gradient(theta, xs, w);
  }
  /// estimate() given `ev` as in gradient_at().  Default: estimate().
  virtual double estimate_at(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w,
                             const Evaluation& /*ev*/) const {
    return estimate(theta, xs, w);
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
