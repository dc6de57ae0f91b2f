#include "nn/adamw.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "nn/layers.hpp"
#include "nn/vecmath.hpp"
#include "util/threads.hpp"

namespace icmlkit::nn {

template <class T>
void adamw_update(T* w, const T* g, T* m, T* v, std::size_t n, std::int64_t t, double lr, const AdamWOptions& opt,
                  bool decay) {
  const double bc1 = 1.0 - std::pow(opt.beta1, double(t));
  const double bc2 = 1.0 - std::pow(opt.beta2, double(t));
  const T b1 = static_cast<T>(opt.beta1), b2 = static_cast<T>(opt.beta2);
  const T step_size = static_cast<T>(lr / bc1);
  const T sqrt_bc2 = static_cast<T>(std::sqrt(bc2));
  const T eps = static_cast<T>(opt.eps);
  const T keep = decay ? static_cast<T>(1.0 - lr * opt.weight_decay) : T(1);
  const std::int64_t len = static_cast<std::int64_t>(n);
  if constexpr (std::is_same_v<T, float>) {
    if (train_kernels() == TrainKernels::fast) {  // vectorised (nn/vecmath.hpp), chunks in parallel
      vec::parallel_chunks(len, 1 << 15, 8, [&](std::int64_t a, std::int64_t b) {
        vec::adamw(w + a, g + a, m + a, v + a, b - a, b1, b2, keep, step_size, sqrt_bc2, eps);
      });
      return;
    }
  }
#pragma omp parallel for schedule(static) num_threads(threads()) if (len >= (1 << 20))
  for (std::int64_t j = 0; j < len; ++j) {
    m[j] = b1 * m[j] + (T(1) - b1) * g[j];
    v[j] = b2 * v[j] + (T(1) - b2) * g[j] * g[j];
    w[j] *= keep;
    w[j] -= step_size * m[j] / (std::sqrt(v[j]) / sqrt_bc2 + eps);
  }
}

template void adamw_update<float>(float*, const float*, float*, float*, std::size_t, std::int64_t, double,
                                  const AdamWOptions&, bool);
template void adamw_update<double>(double*, const double*, double*, double*, std::size_t, std::int64_t, double,
                                   const AdamWOptions&, bool);

AdamW::AdamW(const ParamStore<float>& store, AdamWOptions opt) : opt_(opt) {
  for (const auto& p : store.params) {
    names_.push_back(p.name);
    m_.emplace_back(p.numel(), 0.0f);
    v_.emplace_back(p.numel(), 0.0f);
  }
}

void AdamW::step(ParamStore<float>& store, double lr) {
  ++t_;
  for (std::size_t i = 0; i < store.params.size(); ++i) {
    auto& p = store.params[i];
    adamw_update(p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(), p.numel(), t_, lr, opt_, p.decay);
  }
}

std::vector<StateBuffer> moment_buffers(const std::vector<std::string>& names, std::vector<std::vector<float>>& m,
                                        std::vector<std::vector<float>>& v) {
  std::vector<StateBuffer> s;
  for (std::size_t i = 0; i < names.size(); ++i) {
    s.push_back({"m/" + names[i], &m[i]});
    s.push_back({"v/" + names[i], &v[i]});
  }
  return s;
}

std::vector<StateBuffer> AdamW::state() { return moment_buffers(names_, m_, v_); }

ViewAdamW::ViewAdamW(std::vector<ParamRef> params, double lr_, AdamWOptions opt)
    : lr(lr_), params_(std::move(params)), opt_(opt) {
  for (const auto& p : params_) {
    m_.emplace_back(static_cast<std::size_t>(p.size), 0.0);
    v_.emplace_back(static_cast<std::size_t>(p.size), 0.0);
  }
}

void ViewAdamW::step() {
  ++t_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    adamw_update(p.value, p.grad, m_[i].data(), v_[i].data(), static_cast<std::size_t>(p.size), t_, lr, opt_,
                 opt_.weight_decay != 0.0);
  }
}

}  // namespace icmlkit::nn
