#include "nn/sgd.hpp"

#include <cstddef>

namespace icmlkit::nn {

void Sgd::step(ParamStore<float>& store, double lr) {
  ++t_;
  for (auto& p : store.params) {
    if (p.frozen || p.grad.empty()) continue;
    const float a = static_cast<float>(lr), keep = static_cast<float>(1.0 - lr * (p.decay ? wd_ : 0.0));
    float* w = p.value.data();
    const float* g = p.grad.data();
    const std::ptrdiff_t n = static_cast<std::ptrdiff_t>(p.value.size());
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (std::ptrdiff_t i = 0; i < n; ++i) w[i] = keep * w[i] - a * g[i];
  }
}

}  // namespace icmlkit::nn
