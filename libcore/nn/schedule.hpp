// Learning-rate schedule: linear warmup then cosine decay (as in Llama / FOAM / SMET recipes).
#pragma once

#include <cstdint>

namespace icmlkit::nn {

/// lr(step) for optimizer steps 0, 1, ...: lr_max·(step+1)/warmup during the first `warmup`
/// steps, then min_lr + (lr_max − min_lr)·(1 + cos(π·p))/2 with p = (step − warmup) /
/// (total − warmup) clamped to [0, 1]; constant lr_max when total <= warmup.
struct WarmupCosine {
  double lr_max = 1e-3;
  double min_lr = 0.0;
  std::int64_t warmup = 0;
  std::int64_t total = 1;
  /// The learning rate of optimizer step `step` (0-based).
  double operator()(std::int64_t step) const noexcept;
};

}  // namespace icmlkit::nn
