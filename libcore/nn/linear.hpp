// Dense layers with explicit forward/backward on batches (llm.c style), shared by the CDE
// and training modules.
//
// Batches are column-major Eigen matrices with one sample per column: an input batch is
// [in, n], the output [out, n].  Backward *accumulates* into the parameter gradients, so a
// caller sums gradients over samples or threads and zeroes them with zero_grad().
#pragma once

#include <Eigen/Dense>
#include <string>
#include <vector>

#include "util/rng.hpp"

namespace icmlkit::nn {

/// A view of one parameter tensor and its gradient (both contiguous doubles), for optimizers
/// and checkpoints.
struct ParamRef {
  std::string name;  ///< "initial.weight", "head0.f1.bias", ...
  double* value;     ///< parameter storage
  double* grad;      ///< gradient storage, same size
  Eigen::Index size;
  Eigen::Index rows, cols;  ///< shape (cols = 1 for vectors)
};

/// y = W x + b.  W is [out, in], b is [out].
struct Linear {
  Eigen::MatrixXd W, gW;
  Eigen::VectorXd b, gb;

  Linear() = default;
  /// Zero-initialised layer with in -> out.
  Linear(Eigen::Index in, Eigen::Index out);
  Eigen::Index in() const { return W.cols(); }
  Eigen::Index out() const { return W.rows(); }

  /// PyTorch's default nn.Linear initialisation: W and b uniform in [-1/sqrt(in), 1/sqrt(in)]
  /// (kaiming_uniform with a = sqrt(5) gives the same bound for W).
  void init(Rng& rng);
  /// Y [out, n] = W X [in, n] + b.  Y must already have the right shape (no allocation).
  void forward(const Eigen::Ref<const Eigen::MatrixXd>& X, Eigen::Ref<Eigen::MatrixXd> Y) const;
  /// Given dL/dY [out, n] and the forward input X [in, n]: gW += dY X^T, gb += rowsum(dY),
  /// and, when dX is non-null, *dX [in, n] = W^T dY.
  void backward(const Eigen::Ref<const Eigen::MatrixXd>& X, const Eigen::Ref<const Eigen::MatrixXd>& dY,
                Eigen::Ref<Eigen::MatrixXd>* dX);
  /// Sets gW and gb to zero.
  void zero_grad();
  /// Appends views of W and b (named prefix.weight, prefix.bias) to `out`.
  void params(const std::string& prefix, std::vector<ParamRef>& out);
};

/// In-place ReLU on a block.
template <class M>
inline void relu_inplace(M&& x) {
  x = x.cwiseMax(0.0);
}
/// dX = dY * (y > 0) for ReLU output y (in place on dY).
template <class G, class Y>
inline void relu_backward(G&& dy, const Y& y) {
  dy = (y.array() > 0.0).select(dy, 0.0);
}
/// Vectorised tanh for doubles, tanh(x) = 1 - 2 / (exp(2x) + 1) on Eigen's packet exp
/// (libm's scalar tanh dominated CDE training profiles).  Absolute error ~1e-16; saturates to
/// +-1 without overflow.
template <class M>
inline void tanh_inplace(M&& x) {
  x = 1.0 - 2.0 / ((2.0 * x.array()).exp() + 1.0);
}
/// dX = dY * (1 - y^2) for tanh output y (in place on dY).
template <class G, class Y>
inline void tanh_backward(G&& dy, const Y& y) {
  dy.array() *= (1.0 - y.array().square());
}

/// Row-wise numerically stable softmax cross-entropy for one sample: logits [k], label in
/// [0, k).  Returns the loss and writes dL/dlogits into `grad` (softmax - onehot).
double softmax_cross_entropy(const Eigen::Ref<const Eigen::VectorXd>& logits, int label,
                             Eigen::Ref<Eigen::VectorXd> grad);

}  // namespace icmlkit::nn
