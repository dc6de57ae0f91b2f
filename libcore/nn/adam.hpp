// Adam (Kingma & Ba 2015) over a list of parameter views, with PyTorch's defaults and bias
// correction, so a C++ run and a torch.optim.Adam run with the same lr step alike.
#pragma once

#include <vector>

#include "nn/linear.hpp"

namespace icmlkit::nn {

/// Adam: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * mhat / (sqrt(vhat) + eps)
/// with mhat = m/(1-b1^k), vhat = v/(1-b2^k); optional decoupled weight decay (AdamW).
class Adam {
 public:
  /// `params`: the views to update (their storage must outlive the optimizer).
  explicit Adam(std::vector<ParamRef> params, double lr = 1e-3, double beta1 = 0.9, double beta2 = 0.999,
                double eps = 1e-8, double weight_decay = 0.0);
  /// One update from the gradients currently stored in the views.
  void step();
  /// Steps taken so far.
  long steps() const { return k_; }
  double lr;  ///< learning rate (may be changed between steps)

 private:
  std::vector<ParamRef> params_;
  std::vector<std::vector<double>> m_, v_;
  double b1_, b2_, eps_, wd_;
  long k_ = 0;
};

}  // namespace icmlkit::nn
