#include "nn/linear.hpp"

#include <cmath>

namespace icmlkit::nn {

Linear::Linear(Eigen::Index in, Eigen::Index out)
    : W(Eigen::MatrixXd::Zero(out, in)), gW(Eigen::MatrixXd::Zero(out, in)),
      b(Eigen::VectorXd::Zero(out)), gb(Eigen::VectorXd::Zero(out)) {}

void Linear::init(Rng& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in()));
  for (Eigen::Index j = 0; j < W.cols(); ++j)
    for (Eigen::Index i = 0; i < W.rows(); ++i) W(i, j) = rng.uniform(-bound, bound);
  for (Eigen::Index i = 0; i < b.size(); ++i) b(i) = rng.uniform(-bound, bound);
}

void Linear::forward(const Eigen::Ref<const Eigen::MatrixXd>& X, Eigen::Ref<Eigen::MatrixXd> Y) const {
  Y.noalias() = W * X;
  Y.colwise() += b;
}

void Linear::backward(const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::Ref<const Eigen::MatrixXd>& dY,
                      Eigen::Ref<Eigen::MatrixXd>* dX) {
  if (X.cols() == 1) {
    gW.noalias() += dY.col(0) * X.col(0).transpose();  // rank-1 update, no GEMM packing for one sample
    gb += dY.col(0);
  } else {
    gW.noalias() += dY * X.transpose();
    gb += dY.rowwise().sum();
  }
  if (dX) dX->noalias() = W.transpose() * dY;
}

void Linear::zero_grad() {
  gW.setZero();
  gb.setZero();
}

void Linear::params(const std::string& prefix, std::vector<ParamRef>& out) {
  out.push_back({prefix + ".weight", W.data(), gW.data(), W.size(), W.rows(), W.cols()});
  out.push_back({prefix + ".bias", b.data(), gb.data(), b.size(), b.size(), 1});
}

double softmax_cross_entropy(const Eigen::Ref<const Eigen::VectorXd>& logits, int label,
                             Eigen::Ref<Eigen::VectorXd> grad) {
  const double m = logits.maxCoeff();
  grad = (logits.array() - m).exp();
  const double s = grad.sum();
  grad /= s;
  const double loss = -(logits(label) - m - std::log(s));
  grad(label) -= 1.0;
  return loss;
}

}  // namespace icmlkit::nn
