#include "fit/law_fit.hpp"

#include <fmt/core.h>

#include <cmath>
#include <limits>

#include "io/table.hpp"
#include "num/huber.hpp"
#include "util/error.hpp"
#include "util/progress.hpp"
#include "util/rng.hpp"

namespace icmlkit::fit {

HuberLogObjective::HuberLogObjective(const Law& law, const LawData& data, double delta, Eigen::VectorXd full,
                                     std::vector<bool> free_mask, Eigen::ArrayXd weights)
    : law_(law), data_(data), delta_(delta), full_(std::move(full)), free_(std::move(free_mask)),
      log_loss_(data.loss.log()), weights_(std::move(weights)) {
  data_.prepare();
  for (bool b : free_) n_free_ += b ? 1 : 0;
  if (weights_.size() == 0) weights_ = Eigen::ArrayXd::Ones(data.loss.size());
}

Eigen::VectorXd HuberLogObjective::expand(const double* x) const {
  Eigen::VectorXd p = full_;
  int k = 0;
  for (std::size_t i = 0; i < free_.size(); ++i)
    if (free_[i]) p[static_cast<Eigen::Index>(i)] = x[k++];
  return p;
}

Eigen::VectorXd HuberLogObjective::restrict(const Eigen::VectorXd& full) const {
  Eigen::VectorXd x(n_free_);
  int k = 0;
  for (std::size_t i = 0; i < free_.size(); ++i)
    if (free_[i]) x[k++] = full[static_cast<Eigen::Index>(i)];
  return x;
}

bool HuberLogObjective::evaluate(const double* x, double* f, double* grad) const {
  // Per-thread scratch: no allocation once the sizes are known.
  thread_local Eigen::ArrayXd pred;
  thread_local Eigen::ArrayXXd jac;
  const Eigen::VectorXd p = expand(x);
  if (!law_.log_predict(p.data(), data_, pred, grad ? &jac : nullptr)) return false;
  double total = 0;
  const Eigen::Index n = pred.size();
  thread_local Eigen::ArrayXd dr;
  dr.resize(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const double r = pred[i] - log_loss_[i];
    total += weights_[i] * num::huber(r, delta_);
    dr[i] = weights_[i] * num::huber_grad(r, delta_);
  }
  *f = total;
  if (grad) {
    int k = 0;
    for (std::size_t j = 0; j < free_.size(); ++j)
      if (free_[j]) grad[k++] = (jac.col(static_cast<Eigen::Index>(j)) * dr).sum();
  }
  return std::isfinite(total);
}

double huber_objective(const Law& law, const LawData& data, const Eigen::VectorXd& params, double delta) {
  std::vector<bool> none(static_cast<std::size_t>(params.size()), false);
  HuberLogObjective obj(law, data, delta, params, none);
  double f = std::numeric_limits<double>::quiet_NaN();
  if (!obj.evaluate(nullptr, &f, nullptr)) return std::numeric_limits<double>::quiet_NaN();
  return f;
}

GridAxis parse_grid_axis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) throw UsageError(fmt::format("expected NAME=LO:HI:STEP or NAME=V1|V2, got '{}'", text), "--grid");
  GridAxis ax;
  ax.name = text.substr(0, eq);
  const std::string spec = text.substr(eq + 1);
  auto num = [&](const std::string& s) {
    const auto v = io::parse_double(s);
    if (!v || !std::isfinite(*v)) throw UsageError(fmt::format("not a number: '{}'", s), "--grid " + text);
    return *v;
  };
  if (spec.find(':') != std::string::npos) {
    const auto c1 = spec.find(':'), c2 = spec.find(':', c1 + 1);
    if (c2 == std::string::npos) throw UsageError("expected LO:HI:STEP", "--grid " + text);
    const double lo = num(spec.substr(0, c1)), hi = num(spec.substr(c1 + 1, c2 - c1 - 1)), step = num(spec.substr(c2 + 1));
    if (!(step > 0) || hi < lo) throw UsageError("need LO <= HI and STEP > 0", "--grid " + text);
    if ((hi - lo) / step > 1e6) throw UsageError("too many grid values", "--grid " + text);
    for (int i = 0;; ++i) {
      const double x = lo + step * i;
      if (x > hi + 1e-9 * step) break;
      ax.values.push_back(x);
    }
  } else {
    std::size_t pos = 0;
    while (pos <= spec.size()) {
      const std::size_t end = std::min(spec.find('|', pos), spec.size());
      ax.values.push_back(num(spec.substr(pos, end - pos)));
      pos = end + 1;
    }
  }
  return ax;
}

std::vector<Eigen::VectorXd> make_start_grid(const Law& law, const FitOptions& opt) {
  const auto names = law.param_names();
  std::vector<GridAxis> axes = law.default_grid();
  for (const auto& o : opt.grid) {
    bool found = false;
    for (auto& ax : axes)
      if (ax.name == o.name) { ax.values = o.values; found = true; }
    if (!found) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UsageError(fmt::format("unknown parameter '{}' for law {} (parameters: {})", o.name, law.name(), known), "--grid");
    }
  }
  for (const auto& [k, v] : opt.fixed) {
    bool found = false;
    for (auto& ax : axes)
      if (ax.name == k) { ax.values = {v}; found = true; }
    if (!found) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      throw UsageError(fmt::format("unknown parameter '{}' for law {} (parameters: {})", k, law.name(), known), "--fix");
    }
  }
  std::size_t total = 1;
  for (const auto& ax : axes) {
    if (ax.values.empty()) throw UsageError(fmt::format("grid axis '{}' is empty", ax.name), "--grid");
    total *= ax.values.size();
    if (total > 10'000'000) throw UsageError("start grid has more than 10 million points", "--grid");
  }
  std::vector<Eigen::VectorXd> starts;
  starts.reserve(total);
  std::vector<std::size_t> idx(axes.size(), 0);
  for (std::size_t s = 0; s < total; ++s) {
    Eigen::VectorXd p(static_cast<Eigen::Index>(names.size()));
    for (std::size_t i = 0; i < names.size(); ++i) {
      for (std::size_t a = 0; a < axes.size(); ++a)
        if (axes[a].name == names[i]) p[static_cast<Eigen::Index>(i)] = axes[a].values[idx[a]];
    }
    starts.push_back(std::move(p));
    // Odometer increment, last axis fastest.
    for (std::size_t a = axes.size(); a-- > 0;) {
      if (++idx[a] < axes[a].values.size()) break;
      idx[a] = 0;
    }
  }
  return starts;
}

FitResult fit_law(const Law& law, const LawData& data, const FitOptions& opt, Progress* progress) {
  const auto names = law.param_names();
  std::vector<bool> free_mask(names.size(), true);
  for (std::size_t i = 0; i < names.size(); ++i) free_mask[i] = opt.fixed.count(names[i]) == 0;
  const auto starts_full = make_start_grid(law, opt);
  HuberLogObjective obj(law, data, opt.huber_delta, starts_full.front(), free_mask);
  FitResult res;
  res.n_starts = static_cast<int>(starts_full.size());
  if (obj.dim() == 0) {
    // Nothing to fit: evaluate the fixed parameters.
    res.params = starts_full.front();
    res.objective = huber_objective(law, data, res.params, opt.huber_delta);
    if (!std::isfinite(res.objective)) throw RuntimeError("the fixed parameters give a non-finite objective");
    res.best_start = 0;
    res.best_start_point = res.params;
    res.converged = true;
    return res;
  }
  std::vector<Eigen::VectorXd> starts;
  starts.reserve(starts_full.size());
  for (const auto& s : starts_full) starts.push_back(obj.restrict(s));
  const auto results = num::minimize_multistart(obj, starts, opt.lbfgs, progress);
  for (const auto& r : results) {
    res.n_converged += r.converged && std::isfinite(r.f) ? 1 : 0;
    res.n_failed += std::isfinite(r.f) ? 0 : 1;
  }
  const int best = num::best_result(results);
  if (best < 0) throw RuntimeError(fmt::format("no start of {} gave a finite objective", starts.size()));
  const auto& b = results[static_cast<std::size_t>(best)];
  res.params = obj.expand(b.x.data());
  res.objective = b.f;
  res.best_start = best;
  res.best_start_point = starts_full[static_cast<std::size_t>(best)];
  res.converged = b.converged;
  res.iterations = b.iterations;

  const int k_begin = std::max(0, opt.bootstrap_begin), k_end = opt.bootstrap_end < 0 ? opt.bootstrap : std::min(opt.bootstrap, opt.bootstrap_end);
  if (opt.bootstrap > 0 && k_begin < k_end) {
    // Each resample draws n rows with replacement (as row counts) from its own derived
    // seed, and refits warm-started from the optimum: results do not depend on --threads.
    const Eigen::Index n = data.loss.size();
    std::vector<Eigen::VectorXd> fits(static_cast<std::size_t>(opt.bootstrap));
    std::vector<char> ok(static_cast<std::size_t>(opt.bootstrap), 0);
    const Eigen::VectorXd x0 = obj.restrict(res.params);
#pragma omp parallel for schedule(dynamic)
    for (int k = k_begin; k < k_end; ++k) {
      Rng rng(derive_seed(opt.seed, static_cast<std::uint64_t>(k)));
      Eigen::ArrayXd w = Eigen::ArrayXd::Zero(n);
      for (Eigen::Index i = 0; i < n; ++i) w[static_cast<Eigen::Index>(rng.below(static_cast<std::uint64_t>(n)))] += 1;
      HuberLogObjective ok_obj(law, data, opt.huber_delta, res.params, free_mask, w);
      const auto r = num::minimize_lbfgs(ok_obj, x0, opt.lbfgs);
      if (std::isfinite(r.f)) {
        fits[static_cast<std::size_t>(k)] = ok_obj.expand(r.x.data());
        ok[static_cast<std::size_t>(k)] = 1;
      }
    }
    int n_ok = 0;
    for (char c : ok) n_ok += c;
    res.bootstrap.resize(n_ok, static_cast<Eigen::Index>(names.size()));
    int row = 0;
    for (int k = k_begin; k < k_end; ++k) {
      if (!ok[static_cast<std::size_t>(k)]) {
        res.bootstrap_failed.push_back(k);
        continue;
      }
      res.bootstrap.row(row++) = fits[static_cast<std::size_t>(k)].transpose();
      res.bootstrap_k.push_back(k);
    }
  }
  return res;
}

}  // namespace icmlkit::fit
