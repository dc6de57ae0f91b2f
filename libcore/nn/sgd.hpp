// Plain mini-batch SGD (no momentum), the optimizer of LMCleaner's analysis (issue 34):
// theta <- theta - lr (g + wd theta) on tensors with decay, theta <- theta - lr g on the others
// (torch.optim.SGD with momentum 0; its L2 term equals decoupled decay here).  Stateless.
#pragma once

#include <string>
#include <vector>

#include "nn/adamw.hpp"

namespace icmlkit::nn {

/// SGD over the parameter store (float): no state buffers, only the step count.
class Sgd final : public CountedOptimizer {
 public:
  /// `weight_decay` >= 0 applies to Param::decay tensors.
  explicit Sgd(double weight_decay) : wd_(weight_decay) {}
  std::string name() const override { return "sgd"; }
  /// w <- w - lr (g + wd w) (decay tensors) or w - lr g; frozen tensors skipped.  Elementwise in
  /// float with the coefficients rounded once, so the result is independent of the thread count.
  void step(ParamStore<float>& store, double lr) override;
  std::vector<StateBuffer> state() override { return {}; }
  double weight_decay() const noexcept { return wd_; }

 private:
  double wd_;
};

}  // namespace icmlkit::nn
