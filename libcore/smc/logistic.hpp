// Bayesian logistic regression with a hierarchical prior, the marginal-likelihood problem of
// Kuntz, Lim & Johansen (2023) used to compare SOSMC with PGD and SOUL:
//   l_n ~ Bernoulli(sigmoid(f_n . x)),  x ~ N(theta 1, 5 I),  theta scalar.
//   U_theta(x) = -sum_n [l_n log s(f_n.x) + (1 - l_n) log(1 - s(f_n.x))] + |x - theta 1|^2 / 10
#pragma once

#include <Eigen/Core>

#include "smc/problem.hpp"

namespace icmlkit::smc {

/// The problem above.  `features` [n, p] (standardise them first), `labels` [n] in {0, 1}.
class BayesianLogistic final : public Problem {
 public:
  BayesianLogistic(Eigen::MatrixXd features, Eigen::VectorXd labels, double prior_variance = 5.0);
  int dim_x() const override { return static_cast<int>(f_.cols()); }
  int dim_theta() const override { return 1; }
  double energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override;
  Eigen::VectorXd grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override;
  Eigen::VectorXd grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const override;
  /// Fraction of rows of (features, labels) classified correctly by the posterior predictive
  /// mean probability over the weighted particles `xs` [N, p] with weights `w` [N].
  static double accuracy(const Eigen::MatrixXd& features, const Eigen::VectorXd& labels, const Eigen::MatrixXd& xs,
                         const Eigen::ArrayXd& w);

 private:
  Eigen::MatrixXd f_;
  Eigen::VectorXd l_;
  double s2_;
};

/// Standardises columns in place to mean 0, sd 1 using `train` rows' statistics for both
/// matrices.  Columns with zero spread are left centred.
void standardise(Eigen::MatrixXd& train, Eigen::MatrixXd& test);

}  // namespace icmlkit::smc
