#include "nn/foam.hpp"

#include <fmt/format.h>

#include <cmath>

#include "util/error.hpp"
#include "util/threads.hpp"

namespace icmlkit::nn {

bool foam_folds(const std::string& name, const std::vector<int>& shape) {
  return shape.size() == 2 && name != "token_embd.weight" && name != "output.weight";
}

std::size_t foam_folded_cols(int cols, int level) {
  const std::size_t f = std::size_t(1) << level;
  return (std::size_t(cols) + f - 1) / f;
}

namespace {

/// The step coefficients shared by both updates, rounded to T once.
template <class T>
struct FoamStep {
  T b1, b2, eps, step_size, decay;
  FoamStep(std::int64_t t, double lr, const FoamOptions& o, bool decayed)
      : b1(static_cast<T>(o.beta1)), b2(static_cast<T>(o.beta2)), eps(static_cast<T>(o.eps)),
        step_size(static_cast<T>(lr * std::sqrt(1.0 - std::pow(o.beta2, double(t))) / (1.0 - std::pow(o.beta1, double(t))))),
        decay(decayed ? static_cast<T>(lr * o.weight_decay) : T(0)) {}
};

}  // namespace

template <class T>
void foam_update(T* w, const T* g, T* mf, T* vf, int rows, int cols, std::int64_t t, double lr, const FoamOptions& opt,
                 bool decay) {
  const FoamStep<T> k(t, lr, opt, decay);
  const int f = 1 << opt.level;
  const int fc = static_cast<int>(foam_folded_cols(cols, opt.level));
  const T inv_f = T(1) / static_cast<T>(f), s = static_cast<T>(opt.res_scale), s2 = s * s;
  const T scale = static_cast<T>(opt.scale);
#pragma omp parallel for schedule(static) num_threads(threads()) if (std::int64_t(rows) * cols >= (1 << 18))
  for (int r = 0; r < rows; ++r) {
    T* wr = w + std::size_t(r) * cols;
    const T* gr = g + std::size_t(r) * cols;
    for (int j = 0; j < fc; ++j) {
      const int lo = j * f, hi = std::min(cols, lo + f);
      T sum = 0, sumsq = 0;
      for (int c = lo; c < hi; ++c) {
        sum += gr[c];
        sumsq += gr[c] * gr[c];
      }
      const T mean = sum * inv_f;
      const T q = opt.paper_second_moment ? mean * mean : sumsq * inv_f;
      T& m = mf[std::size_t(r) * fc + j];
      T& v = vf[std::size_t(r) * fc + j];
      m = k.b1 * m + (T(1) - k.b1) * mean;
      v = k.b2 * v + (T(1) - k.b2) * q;
      for (int c = lo; c < hi; ++c) {
        const T res = gr[c] - mean;
        const T mh = m + s * res, vh = v + s2 * res * res;
        wr[c] -= k.step_size * (scale * mh / (std::sqrt(vh) + k.eps));
        wr[c] -= k.decay * wr[c];
      }
    }
  }
}

template <class T>
void foam_adam_update(T* w, const T* g, T* m, T* v, std::size_t n, std::int64_t t, double lr, const FoamOptions& opt,
                      bool decay) {
  const FoamStep<T> k(t, lr, opt, decay);
  const std::int64_t len = static_cast<std::int64_t>(n);
#pragma omp parallel for schedule(static) num_threads(threads()) if (len >= (1 << 18))
  for (std::int64_t j = 0; j < len; ++j) {
    m[j] = k.b1 * m[j] + (T(1) - k.b1) * g[j];
    v[j] = k.b2 * v[j] + (T(1) - k.b2) * (g[j] * g[j]);  // as the folded path at level 0: mean(g^2) = g^2
    w[j] -= k.step_size * (m[j] / (std::sqrt(v[j]) + k.eps));
    w[j] -= k.decay * w[j];
  }
}

#define ICMLKIT_NN_FOAM(T)                                                                                          \
  template void foam_update<T>(T*, const T*, T*, T*, int, int, std::int64_t, double, const FoamOptions&, bool); \
  template void foam_adam_update<T>(T*, const T*, T*, T*, std::size_t, std::int64_t, double, const FoamOptions&, bool);
ICMLKIT_NN_FOAM(float)
ICMLKIT_NN_FOAM(double)

void foam_check_level(int level, const std::string& name, const std::vector<int>& shape) {
  if (level < 0 || level > 16) throw UsageError(fmt::format("fold level {} outside [0, 16]", level), "--foam-level");
  if (foam_folds(name, shape) && (std::size_t(1) << level) > std::size_t(shape[1]))
    throw UsageError(fmt::format("fold level {} makes blocks of {} entries, wider than {} ({} columns)", level, 1 << level,
                                 name, shape[1]),
                     "--foam-level");
}

Foam::Foam(const ParamStore<float>& store, FoamOptions opt) : opt_(opt) {
  foam_check_level(opt.level, "", {});  // the level's range (each folded tensor is checked below)
  if (!(opt.scale >= 0)) throw UsageError("the update scale must be >= 0", "--foam-scale");
  if (!(opt.res_scale >= 0)) throw UsageError("the residual scale must be >= 0", "--foam-res-scale");
  if (!(opt.beta1 >= 0 && opt.beta1 < 1) || !(opt.beta2 >= 0 && opt.beta2 < 1)) throw UsageError("betas must be in [0, 1)");
  if (!(opt.eps >= 0)) throw UsageError("eps must be >= 0");
  for (const auto& p : store.params) {
    const bool fold = foam_folds(p.name, p.shape);
    foam_check_level(opt.level, p.name, p.shape);
    const std::size_t n = fold ? std::size_t(p.shape[0]) * foam_folded_cols(p.shape[1], opt.level) : p.numel();
    names_.push_back(p.name);
    folded_.push_back(fold);
    m_.emplace_back(n, 0.0f);
    v_.emplace_back(n, 0.0f);
  }
}

void Foam::step(ParamStore<float>& store, double lr) {
  ++t_;
  for (std::size_t i = 0; i < store.params.size(); ++i) {
    auto& p = store.params[i];
    if (folded_[i])
      foam_update(p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(), p.shape[0], p.shape[1], t_, lr, opt_, p.decay);
    else
      foam_adam_update(p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(), p.numel(), t_, lr, opt_, p.decay);
  }
}

std::vector<StateBuffer> Foam::state() { return moment_buffers(names_, m_, v_); }

}  // namespace icmlkit::nn
