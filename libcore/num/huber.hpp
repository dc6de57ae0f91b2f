// The Huber loss used by Chinchilla approach 3 and its replications.
#pragma once

#include <cmath>

namespace icmlkit::num {

/// Huber loss: 0.5 r^2 for |r| <= delta, else delta (|r| - delta/2)  (Huber 1964; the
/// form used by Hoffmann et al. 2022 and torch.nn.HuberLoss).  delta > 0.
inline double huber(double r, double delta) noexcept {
  const double a = std::abs(r);
  return a <= delta ? 0.5 * r * r : delta * (a - 0.5 * delta);
}
/// Derivative of `huber` with respect to r: r clipped to [-delta, delta].
inline double huber_grad(double r, double delta) noexcept {
  return r > delta ? delta : (r < -delta ? -delta : r);
}

}  // namespace icmlkit::num
