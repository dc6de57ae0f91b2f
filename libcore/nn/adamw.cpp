#include "nn/adamw.hpp"

#include <omp.h>

#include <cmath>

#include "util/threads.hpp"

namespace icmlkit::nn {

AdamW::AdamW(const ParamStore<float>& store, AdamWOptions opt) : opt_(opt) {
  for (const auto& p : store.params) {
    names_.push_back(p.name);
    m_.emplace_back(p.numel(), 0.0f);
    v_.emplace_back(p.numel(), 0.0f);
  }
}

void AdamW::step(ParamStore<float>& store, double lr) {
  ++t_;
  const double bc1 = 1.0 - std::pow(opt_.beta1, double(t_));
  const double bc2 = 1.0 - std::pow(opt_.beta2, double(t_));
  const float b1 = static_cast<float>(opt_.beta1), b2 = static_cast<float>(opt_.beta2);
  const float step_size = static_cast<float>(lr / bc1);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(opt_.eps);
  for (std::size_t i = 0; i < store.params.size(); ++i) {
    auto& p = store.params[i];
    float* w = p.value.data();
    const float* g = p.grad.data();
    float* m = m_[i].data();
    float* v = v_[i].data();
    const float keep = p.decay ? static_cast<float>(1.0 - lr * opt_.weight_decay) : 1.0f;
    const std::int64_t n = static_cast<std::int64_t>(p.numel());
    // Elementwise: the result does not depend on the thread count.
#pragma omp parallel for schedule(static) num_threads(threads()) if (n >= (1 << 20))
    for (std::int64_t j = 0; j < n; ++j) {
      m[j] = b1 * m[j] + (1.0f - b1) * g[j];
      v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
      w[j] *= keep;
      w[j] -= step_size * m[j] / (std::sqrt(v[j]) / sqrt_bc2 + eps);
    }
  }
}

std::vector<StateBuffer> AdamW::state() {
  std::vector<StateBuffer> s;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    s.push_back({"m/" + names_[i], &m_[i]});
    s.push_back({"v/" + names_[i], &v_[i]});
  }
  return s;
}

}  // namespace icmlkit::nn
