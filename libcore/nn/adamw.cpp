#include "nn/adamw.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "nn/layers.hpp"
#include "util/error.hpp"
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
  sparse_.assign(store.params.size(), 0);
  for (const auto& p : store.params) dense_size_.push_back(p.numel());
  idx_.resize(store.params.size());
  tloc_.resize(store.params.size());
  lr_scale_.assign(store.params.size(), 1.0);
}

void AdamW::set_per_entry_steps(bool on) {
  per_entry_steps_ = on;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (!sparse_[i]) continue;
    if (on && tloc_[i].size() != idx_[i].size()) tloc_[i].assign(idx_[i].size(), static_cast<std::int32_t>(t_));
    if (!on) std::vector<std::int32_t>().swap(tloc_[i]);
  }
}

void AdamW::set_lr_scale(int param, double scale) {
  if (param < 0 || std::size_t(param) >= names_.size() || !(scale > 0) || !std::isfinite(scale))
    throw UsageError(fmt::format("learning-rate scale {} of tensor {}: must be a positive number", scale, param));
  lr_scale_[std::size_t(param)] = scale;
}

void AdamW::step(ParamStore<float>& store, double lr) {
  ++t_;
  if (inv_bc1_.size() <= std::size_t(t_) && (per_entry_steps_ || std::any_of(sparse_.begin(), sparse_.end(), [](char c) { return c; }))) {
    // the bias corrections of every step count so far (the sparse entries' own counts look them up)
    for (std::int64_t t = std::int64_t(inv_bc1_.size()); t <= t_; ++t) {
      inv_bc1_.push_back(t == 0 ? 0.0f : static_cast<float>(1.0 / (1.0 - std::pow(opt_.beta1, double(t)))));
      sqrt_bc2_.push_back(static_cast<float>(std::sqrt(1.0 - std::pow(opt_.beta2, double(t)))));
    }
  }
  for (std::size_t i = 0; i < store.params.size(); ++i) {
    auto& p = store.params[i];
    if (p.frozen) continue;
    const double lr_i = lr * lr_scale_[i];
    if (sparse_[i])
      sparse_step(p, i, lr_i);
    else if (warmup_ > 1 && warmup_code_ && t_ < warmup_)
      dense_warmup_step(p, i, lr_i);
    else
      adamw_update(p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(), p.numel(), t_, lr_i, opt_, p.decay);
  }
}

void AdamW::dense_warmup_step(Param<float>& p, std::size_t i, double lr) {
  // Adam_block's update of a dense tensor while t < decay_steps: m is scaled by t / W after the
  // moment update and stored so (the warm-up the reference applies to every parameter)
  const double bc1 = 1.0 - std::pow(opt_.beta1, double(t_)), bc2 = 1.0 - std::pow(opt_.beta2, double(t_));
  const float b1 = static_cast<float>(opt_.beta1), b2 = static_cast<float>(opt_.beta2), eps = static_cast<float>(opt_.eps);
  const float step_size = static_cast<float>(lr / bc1), sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float keep = p.decay ? static_cast<float>(1.0 - lr * opt_.weight_decay) : 1.0f;
  const float f = static_cast<float>(double(t_) / double(warmup_));
  const float c1 = static_cast<float>(1.0 - opt_.beta1), c2 = static_cast<float>(1.0 - opt_.beta2);
  float *w = p.value.data(), *m = m_[i].data(), *v = v_[i].data();
  const float* g = p.grad.data();
  const std::int64_t n = static_cast<std::int64_t>(p.numel());
#pragma omp parallel for schedule(static) num_threads(threads()) if (n >= (1 << 18))
  for (std::int64_t j = 0; j < n; ++j) {
    m[j] = (b1 * m[j] + c1 * g[j]) * f;
    v[j] = b2 * v[j] + c2 * g[j] * g[j];
    w[j] = w[j] * keep - step_size * m[j] / (std::sqrt(v[j]) / sqrt_bc2 + eps);
  }
}

void AdamW::sparse_step(Param<float>& p, std::size_t i, double lr) {
  // adamw_update's arithmetic per active entry, its bias corrections from the entry's own count
  // (or the optimizer's), looked up in the tables of the counts so far
  const std::vector<std::int32_t>& idx = idx_[i];
  std::vector<std::int32_t>& tl = tloc_[i];
  if (p.grad.size() != idx.size())
    throw UsageError(fmt::format("sparse state of {}: {} gradient entries for {} active entries", names_[i], p.grad.size(), idx.size()));
  const float b1 = static_cast<float>(opt_.beta1), b2 = static_cast<float>(opt_.beta2), eps = static_cast<float>(opt_.eps);
  // 1 - beta rounded once from double (as torch's lerp_ / addcmul_ weights): 1.0f - 0.999f would be
  // 1.3e-5 off in relative terms
  const float c1 = static_cast<float>(1.0 - opt_.beta1), c2 = static_cast<float>(1.0 - opt_.beta2);
  const float keep = p.decay ? static_cast<float>(1.0 - lr * opt_.weight_decay) : 1.0f;
  const float lrf = static_cast<float>(lr);
  const int W = warmup_;
  const bool code = warmup_code_;
  const float* inv_bc1 = inv_bc1_.data();
  const float* sqrt_bc2 = sqrt_bc2_.data();
  float *w = p.value.data(), *m = m_[i].data(), *v = v_[i].data();
  const float* g = p.grad.data();
  const std::int64_t n = static_cast<std::int64_t>(idx.size()), T = t_;
  const bool local = per_entry_steps_;
#pragma omp parallel for schedule(static) num_threads(threads()) if (n >= (1 << 18))
  for (std::int64_t k = 0; k < n; ++k) {
    const std::int64_t at = local ? std::min<std::int64_t>(++tl[k], T) : T;
    const std::size_t j = std::size_t(idx[k]);
    const float gj = g[k];
    float mj = b1 * m[k] + c1 * gj;
    const float vj = b2 * v[k] + c2 * gj * gj;
    float f = 1.0f;  // the momentum warm-up factor min(t / W, 1)
    if (W > 1 && at < W) f = static_cast<float>(double(at) / double(W));
    if (code) {
      mj *= f;
      f = 1.0f;
    }
    m[k] = mj;
    v[k] = vj;
    w[j] = w[j] * keep - (lrf * inv_bc1[at]) * f * mj / (std::sqrt(vj) / sqrt_bc2[at] + eps);
  }
}

void AdamW::set_active(int param, const std::vector<std::int32_t>& active, std::int32_t new_step) {
  const std::size_t i = std::size_t(param);
  if (param < 0 || i >= names_.size()) throw UsageError(fmt::format("sparse state: no tensor {}", param));
  for (std::size_t k = 0; k < active.size(); ++k)
    if (active[k] < 0 || (k > 0 && active[k] <= active[k - 1]))
      throw UsageError(fmt::format("sparse state of {}: active indices must be increasing and >= 0", names_[i]));
  if (!active.empty() && std::size_t(active.back()) >= dense_size_[i])
    throw UsageError(fmt::format("sparse state of {}: index {} outside its {} entries", names_[i], active.back(), dense_size_[i]));
  std::vector<float> m(active.size(), 0.0f), v(active.size(), 0.0f);
  std::vector<std::int32_t> t(per_entry_steps_ ? active.size() : 0, new_step);
  if (sparse_[i]) {  // keep the state of entries active before (both lists sorted)
    const auto& old = idx_[i];
    for (std::size_t a = 0, b = 0; a < active.size(); ++a) {
      while (b < old.size() && old[b] < active[a]) ++b;
      if (b < old.size() && old[b] == active[a]) {
        m[a] = m_[i][b];
        v[a] = v_[i][b];
        if (!t.empty()) t[a] = tloc_[i][b];
      }
    }
  } else {
    for (std::size_t a = 0; a < active.size(); ++a) {  // a dense tensor's entries carry the global count
      m[a] = m_[i][active[a]];
      v[a] = v_[i][active[a]];
      if (!t.empty()) t[a] = static_cast<std::int32_t>(t_);
    }
  }
  m_[i] = std::move(m);
  v_[i] = std::move(v);
  tloc_[i] = std::move(t);
  idx_[i] = active;
  sparse_[i] = 1;
}

void AdamW::set_dense(int param) {
  const std::size_t i = std::size_t(param);
  if (!sparse_[i]) return;
  std::vector<float> m(dense_size_[i], 0.0f), v(dense_size_[i], 0.0f);
  for (std::size_t k = 0; k < idx_[i].size(); ++k) {
    m[idx_[i][k]] = m_[i][k];
    v[idx_[i][k]] = v_[i][k];
  }
  m_[i] = std::move(m);
  v_[i] = std::move(v);
  idx_[i].clear();
  tloc_[i].clear();
  sparse_[i] = 0;
}

void AdamW::reset_entries(int param, const std::vector<std::int32_t>& entries, std::int32_t step) {
  const std::size_t i = std::size_t(param);
  if (i >= names_.size() || !sparse_[i]) throw UsageError("reset_entries needs a tensor with sparse state (set_active)");
  const auto& idx = idx_[i];
  for (std::int32_t e : entries) {
    const auto it = std::lower_bound(idx.begin(), idx.end(), e);
    if (it == idx.end() || *it != e) throw UsageError(fmt::format("sparse state of {}: entry {} is not active", names_[i], e));
    const std::size_t k = std::size_t(it - idx.begin());
    m_[i][k] = v_[i][k] = 0.0f;
    if (per_entry_steps_) tloc_[i][k] = step;
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

std::vector<StateBuffer> AdamW::state() {
  std::vector<StateBuffer> s = moment_buffers(names_, m_, v_);
  for (std::size_t i = 0; i < names_.size(); ++i)
    if (sparse_[i]) {
      s.push_back({"idx/" + names_[i], nullptr, &idx_[i]});
      if (per_entry_steps_) s.push_back({"t/" + names_[i], nullptr, &tloc_[i]});
    }
  return s;
}

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
