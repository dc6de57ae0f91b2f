#include "nn/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace icmlkit::nn {

double WarmupCosine::operator()(std::int64_t step) const noexcept {
  if (step < warmup) return lr_max * double(step + 1) / double(warmup);
  if (total <= warmup) return lr_max;
  const double p = std::clamp(double(step - warmup) / double(total - warmup), 0.0, 1.0);
  return min_lr + (lr_max - min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
}

}  // namespace icmlkit::nn
