// Shared by the nn/ unit tests: central finite differences (the independent truth of every gradient
// check) and the tiny Llama shape most of them train.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>

#include "lm/config.hpp"
#include "nn/params.hpp"

namespace icmlkit::nn::testing {

/// Central difference of f at x[i] with step h; f reads x.  Exact to O(h²) for smooth f, so with
/// h = 1e-5 in double the truncation error is ~1e-10 relative and rounding ~1e-11 / h = 1e-6
/// absolute at most for O(1) losses; the tests' tolerances are set accordingly.
inline double fd(const std::function<double()>& f, double& xi, double h = 1e-5) {
  const double keep = xi;
  xi = keep + h;
  const double fp = f();
  xi = keep - h;
  const double fm = f();
  xi = keep;
  return (fp - fm) / (2 * h);
}

/// The largest relative gap (over max(1, |numeric|)) between p's gradient and central
/// differences of f over p's values.
inline double worst_fd_error(const std::function<double()>& f, Param<double>& p) {
  double worst = 0;
  for (std::size_t i = 0; i < p.value.size(); ++i) {
    const double num = fd(f, p.value[i]);
    worst = std::max(worst, std::abs(num - p.grad[i]) / std::max(1.0, std::abs(num)));
  }
  return worst;
}

/// The tiny decoder of the gradient tests: vocab 23, d_model 12 (head_dim 4), 2 layers, 3 query /
/// 1 KV heads, d_ff 10, n_ctx 16, rope_theta 100 (fast rotation, so positions matter at small S).
inline lm::ModelConfig tiny_config(lm::RopeStyle style, bool tied) {
  lm::ModelConfig c;
  c.vocab_size = 23;
  c.d_model = 12;
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.d_ff = 10;
  c.n_ctx = 16;
  c.rope_theta = 100.0;
  c.rope_style = style;
  c.tied = tied;
  return c;
}

}  // namespace icmlkit::nn::testing
