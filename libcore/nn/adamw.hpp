// Optimizer interface over the parameter store, and AdamW (Loshchilov & Hutter 2019,
// decoupled weight decay; the update of torch.optim.AdamW).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/params.hpp"

namespace icmlkit::nn {

/// A named state buffer of an optimizer (saved in training checkpoints).
struct StateBuffer {
  std::string name;          ///< e.g. "m/blk.0.attn_q.weight"
  std::vector<float>* data;  ///< the optimizer's own storage
};

/// What every optimizer offers: one update from the gradients, and its state for checkpoints.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Short name ("adamw").
  virtual std::string name() const = 0;
  /// Updates every parameter of `store` from its gradient with learning rate `lr`.
  virtual void step(ParamStore<float>& store, double lr) = 0;
  /// Number of steps taken (the bias-correction counter).
  virtual std::int64_t steps() const noexcept = 0;
  virtual void set_steps(std::int64_t t) noexcept = 0;
  /// State buffers, sized for the store given at construction (read and written in place).
  virtual std::vector<StateBuffer> state() = 0;
};

/// AdamW hyperparameters.
struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;  ///< decoupled: w ← w·(1 − lr·wd), only for Param::decay tensors
};

/// AdamW:  m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;  w ← w(1 − lr·wd);
///         w ← w − (lr / (1−β1^t)) · m / (sqrt(v) / sqrt(1−β2^t) + eps)   (torch.optim.AdamW).
class AdamW final : public Optimizer {
 public:
  /// State (m, v) zero-initialised with the shapes of `store`.
  AdamW(const ParamStore<float>& store, AdamWOptions opt);
  std::string name() const override { return "adamw"; }
  void step(ParamStore<float>& store, double lr) override;
  std::int64_t steps() const noexcept override { return t_; }
  void set_steps(std::int64_t t) noexcept override { t_ = t; }
  std::vector<StateBuffer> state() override;

 private:
  AdamWOptions opt_;
  std::int64_t t_ = 0;
  std::vector<std::string> names_;
  std::vector<std::vector<float>> m_, v_;
};

}  // namespace icmlkit::nn
