#include "smc/logistic.hpp"

#include <cmath>

namespace icmlkit::smc {
namespace {
// log(1 + e^z) without overflow.
inline double softplus(double z) { return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z)); }
inline double sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }
}  // namespace

BayesianLogistic::BayesianLogistic(Eigen::MatrixXd features, Eigen::VectorXd labels, double prior_variance)
    : f_(std::move(features)), l_(std::move(labels)), s2_(prior_variance) {}

double BayesianLogistic::energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  const Eigen::VectorXd z = f_ * x;
  double nll = 0;
  // -[l log s(z) + (1-l) log(1-s(z))] = softplus(z) - l z
  for (Eigen::Index n = 0; n < z.size(); ++n) nll += softplus(z[n]) - l_[n] * z[n];
  return nll + (x.array() - theta[0]).square().sum() / (2 * s2_);
}

Eigen::VectorXd BayesianLogistic::grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  const Eigen::VectorXd z = f_ * x;
  Eigen::VectorXd r(z.size());
  for (Eigen::Index n = 0; n < z.size(); ++n) r[n] = sigmoid(z[n]) - l_[n];
  return f_.transpose() * r + (x.array() - theta[0]).matrix() / s2_;
}

Eigen::VectorXd BayesianLogistic::grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  return Eigen::VectorXd::Constant(1, -(x.array() - theta[0]).sum() / s2_);
}

double BayesianLogistic::accuracy(const Eigen::MatrixXd& features, const Eigen::VectorXd& labels, const Eigen::MatrixXd& xs,
                                  const Eigen::ArrayXd& w) {
  const Eigen::MatrixXd z = features * xs.transpose();  // [n, N]
  int correct = 0;
  for (Eigen::Index n = 0; n < z.rows(); ++n) {
    double p = 0;
    for (Eigen::Index i = 0; i < z.cols(); ++i) p += w[i] * sigmoid(z(n, i));
    correct += ((p > 0.5) == (labels[n] > 0.5)) ? 1 : 0;
  }
  return static_cast<double>(correct) / static_cast<double>(z.rows());
}

void standardise(Eigen::MatrixXd& train, Eigen::MatrixXd& test) {
  for (Eigen::Index c = 0; c < train.cols(); ++c) {
    const double m = train.col(c).mean();
    const double sd = std::sqrt((train.col(c).array() - m).square().mean());
    train.col(c).array() -= m;
    test.col(c).array() -= m;
    if (sd > 0) {
      train.col(c) /= sd;
      test.col(c) /= sd;
    }
  }
}

}  // namespace icmlkit::smc
