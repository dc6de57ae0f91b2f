// Small recorded SGD runs of linear models with exact answers (issue 34): the test bed on which
// LMCleaner's correction is checked against retraining.  A model scores sample i by the margin
// z_i = a_i . theta; step s takes
//   theta[s+1] = theta[s] - eta_s (g_s(theta[s]) + lambda theta[s]),
//   g_s(theta) = (1 / |B_s|) sum_{i in B_s} l'(z_i, b_i) a_i,
// over its recorded batch B_s, and the exact Hessian of the batch loss is
// (1 / |B_s|) sum_i l''(z_i, b_i) a_i a_i^T.  Least squares (l = (z - b)^2 / 2) has a step map
// that is affine in theta, so LMCleaner with K = infinity and mode exact reproduces retraining up
// to rounding; logistic regression is the non-quadratic case with a small linearisation error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "unlearn/run.hpp"

namespace icmlkit::unlearn {

/// A recorded SGD run of a linear model over a fixed design, in double precision.  The
/// constructor of a derived class takes the whole run once (storing theta at every multiple of
/// the checkpoint interval and at tau); seek replays from the nearest stored state.  Replays are
/// bit-identical to the recorded pass (single-threaded, the same operations in the same order).
class LinearModelRun : public Run {
 public:
  std::size_t dim() const override { return static_cast<std::size_t>(At_.rows()); }
  std::int64_t end_step() const override { return static_cast<std::int64_t>(batches_.size()); }
  double lr(std::int64_t s) const override;
  /// Throws InputError for s outside [0, tau].
  void seek(std::int64_t s) override;
  std::int64_t at() const noexcept override { return pos_; }
  /// Throws RuntimeError at the end of the run.
  void advance(bool skip = false) override;
  void params(std::vector<double>& theta) override;
  /// Throws InputError for a vector of another length.
  void set_params(const std::vector<double>& theta) override;
  /// exact and ggn: -eta_s ((1/|B|) sum_i l''_i a_i (a_i . v) + lambda v) (the GGN of a linear
  /// model is its Hessian: the loss's curvature in the margin is the only curvature); fisher:
  /// -eta_s (g (g . v) + lambda v), g the batch mean gradient at the current parameters (cached
  /// per position).  v and out: [dim()].
  void jacobian_product(HvpMode mode, const std::vector<double>& v, std::vector<double>& out) override;
  /// u_s(theta) - u_s(theta - v), both by evaluating the step map.  v and out: [dim()].
  void update_difference(const std::vector<double>& v, std::vector<double>& out) override;
  /// g_s(theta) at the current parameters (without weight decay).  g: [dim()].
  void gradient(std::vector<double>& g) override;
  std::string assumption() const override;
  /// 4 |B| p (margins forward, gradient backward).
  double step_flop() const override;
  /// exact/ggn: 4 |B| p; fisher: 4 p with a cached gradient.
  double hvp_flop(HvpMode mode) const override;
  /// lambda, the L2 weight decay in every step's update.
  double weight_decay() const noexcept { return lambda_; }

 protected:
  /// A: the design [n, p] (row i = a_i); b: targets [n]; theta0: theta[0] [p]; batches: per step
  /// the sample ids (each in [0, n), non-empty); lrs: eta_s per step (as many as batches);
  /// weight_decay: lambda >= 0; checkpoint_every: C >= 1, theta stored at multiples of C.  Throws
  /// InputError for inconsistent shapes or ids.  Derived constructors then call record().
  LinearModelRun(const Eigen::MatrixXd& A, Eigen::VectorXd b, Eigen::VectorXd theta0,
                 std::vector<std::vector<int>> batches, std::vector<double> lrs, double weight_decay,
                 std::int64_t checkpoint_every);
  /// The recorded pass: runs every step from theta[0], storing the checkpoints and theta[tau],
  /// and leaves the run at 0.  Called once by the derived constructor (the loss must be known).
  void record();
  /// The per-sample loss l(z, y) of margin z and target y: its first and second derivatives in z.
  virtual void loss_derivatives(double z, double y, double& d1, double& d2) const = 0;

 private:
  // u_s(theta) for the current step s = pos_ into `u`; also its batch gradient into `g`.
  void update_at(const Eigen::VectorXd& theta, Eigen::VectorXd& u, Eigen::VectorXd& g) const;
  const Eigen::VectorXd& cached_gradient();

  Eigen::MatrixXd At_;  // [p, n]: column i = a_i
  Eigen::VectorXd b_;
  std::vector<std::vector<int>> batches_;
  std::vector<double> lrs_;
  double lambda_;
  std::int64_t every_;
  std::map<std::int64_t, Eigen::VectorXd> states_;  // theta[s] at multiples of C, and at tau
  Eigen::VectorXd theta_, u_, g_, u2_, g2_, hv_;  // parameters and scratch
  std::int64_t pos_ = 0;
  bool on_trajectory_ = true;  // theta_ == theta[pos_] of the recorded run
  bool g_valid_ = false;       // g_ is the batch gradient at theta_ for step pos_
};

/// Least squares: l(z, b) = (z - b)^2 / 2 (l' = z - b, l'' = 1).
class LeastSquaresRun final : public LinearModelRun {
 public:
  /// See LinearModelRun's constructor; records the run.
  LeastSquaresRun(const Eigen::MatrixXd& A, Eigen::VectorXd b, Eigen::VectorXd theta0,
                  std::vector<std::vector<int>> batches, std::vector<double> lrs, double weight_decay,
                  std::int64_t checkpoint_every);

 protected:
  void loss_derivatives(double z, double y, double& d1, double& d2) const override;
};

/// Binary logistic regression with labels b in {0, 1}: l(z, b) = log(1 + e^z) - b z
/// (l' = p - b, l'' = p (1 - p), p = sigmoid(z)).  With the canonical link the GGN equals the
/// exact Hessian, so modes ggn and exact agree here too.
class LogisticRun final : public LinearModelRun {
 public:
  /// See LinearModelRun's constructor; records the run.  Throws InputError for a label not 0 or 1.
  LogisticRun(const Eigen::MatrixXd& A, Eigen::VectorXd b, Eigen::VectorXd theta0,
              std::vector<std::vector<int>> batches, std::vector<double> lrs, double weight_decay,
              std::int64_t checkpoint_every);

 protected:
  void loss_derivatives(double z, double y, double& d1, double& d2) const override;
};

}  // namespace icmlkit::unlearn
