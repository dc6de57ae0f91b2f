#include "nn/adam.hpp"

#include <cmath>

namespace icmlkit::nn {

Adam::Adam(std::vector<ParamRef> params, double lr_, double beta1, double beta2, double eps, double weight_decay)
    : lr(lr_), params_(std::move(params)), b1_(beta1), b2_(beta2), eps_(eps), wd_(weight_decay) {
  for (const auto& p : params_) {
    m_.emplace_back(static_cast<size_t>(p.size), 0.0);
    v_.emplace_back(static_cast<size_t>(p.size), 0.0);
  }
}

void Adam::step() {
  ++k_;
  const double c1 = 1.0 - std::pow(b1_, static_cast<double>(k_));
  const double c2 = 1.0 - std::pow(b2_, static_cast<double>(k_));
  for (size_t j = 0; j < params_.size(); ++j) {
    auto& p = params_[j];
    auto& m = m_[j];
    auto& v = v_[j];
    for (Eigen::Index i = 0; i < p.size; ++i) {
      const double g = p.grad[i];
      m[i] = b1_ * m[i] + (1.0 - b1_) * g;
      v[i] = b2_ * v[i] + (1.0 - b2_) * g * g;
      if (wd_ != 0.0) p.value[i] -= lr * wd_ * p.value[i];
      p.value[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + eps_);
    }
  }
}

}  // namespace icmlkit::nn
