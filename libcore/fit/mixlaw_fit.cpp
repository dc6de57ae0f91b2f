#include "fit/mixlaw_fit.hpp"

#include <fmt/core.h>

#include <cmath>
#include <limits>

#include "num/stats.hpp"
#include "util/error.hpp"
#include "util/progress.hpp"
#include "util/rng.hpp"

namespace icmlkit::fit {

void BoxTransform::to_params(const Eigen::VectorXd& z, Eigen::VectorXd& p, Eigen::VectorXd* dp_dz) const {
  p.resize(z.size());
  if (dp_dz) dp_dz->resize(z.size());
  for (Eigen::Index i = 0; i < z.size(); ++i) {
    if (std::isfinite(lo[i]) && std::isfinite(hi[i])) {
      const double s = 1 / (1 + std::exp(-z[i]));
      p[i] = lo[i] + (hi[i] - lo[i]) * s;
      if (dp_dz) (*dp_dz)[i] = (hi[i] - lo[i]) * s * (1 - s);
    } else if (std::isfinite(lo[i])) {
      const double e = std::exp(z[i]);
      p[i] = lo[i] + e;
      if (dp_dz) (*dp_dz)[i] = e;
    } else {
      p[i] = z[i];
      if (dp_dz) (*dp_dz)[i] = 1;
    }
  }
}

Eigen::VectorXd BoxTransform::to_free(const Eigen::VectorXd& p) const {
  Eigen::VectorXd z(p.size());
  for (Eigen::Index i = 0; i < p.size(); ++i) {
    if (std::isfinite(lo[i]) && std::isfinite(hi[i])) {
      const double w = hi[i] - lo[i];
      const double s = std::clamp((p[i] - lo[i]) / w, 1e-9, 1 - 1e-9);
      z[i] = std::log(s / (1 - s));
    } else if (std::isfinite(lo[i])) {
      z[i] = std::log(std::max(p[i] - lo[i], 1e-12));
    } else {
      z[i] = p[i];
    }
  }
  return z;
}

namespace {

// The law's objective over the free parameters in transformed space.
class MixObjective final : public num::Objective {
 public:
  MixObjective(const MixLaw& law, const MixData& d, BoxTransform tr, Eigen::VectorXd full, std::vector<bool> free)
      : law_(law), d_(d), tr_(std::move(tr)), full_(std::move(full)), free_(std::move(free)) {
    for (bool b : free_) n_ += b;
  }
  int dim() const override { return n_; }
  Eigen::VectorXd params(const double* z) const {
    Eigen::VectorXd zz = tr_.to_free(full_);
    int k = 0;
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i]) zz[static_cast<Eigen::Index>(i)] = z[k++];
    Eigen::VectorXd p;
    tr_.to_params(zz, p, nullptr);
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (!free_[i]) p[static_cast<Eigen::Index>(i)] = full_[static_cast<Eigen::Index>(i)];
    return p;
  }
  Eigen::VectorXd free_point(const Eigen::VectorXd& p) const {
    const Eigen::VectorXd z = tr_.to_free(p);
    Eigen::VectorXd out(n_);
    int k = 0;
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i]) out[k++] = z[static_cast<Eigen::Index>(i)];
    return out;
  }
  bool evaluate(const double* z, double* f, double* grad) const override {
    Eigen::VectorXd zz = tr_.to_free(full_);
    int k = 0;
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i]) zz[static_cast<Eigen::Index>(i)] = z[k++];
    Eigen::VectorXd p, dp;
    tr_.to_params(zz, p, &dp);
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (!free_[i]) p[static_cast<Eigen::Index>(i)] = full_[static_cast<Eigen::Index>(i)];
    Eigen::VectorXd g(p.size());
    if (!law_.objective(p.data(), d_, f, grad ? g.data() : nullptr)) return false;
    if (grad) {
      k = 0;
      for (std::size_t i = 0; i < free_.size(); ++i)
        if (free_[i]) {
          grad[k++] = g[static_cast<Eigen::Index>(i)] * dp[static_cast<Eigen::Index>(i)];
        }
    }
    return true;
  }

 private:
  const MixLaw& law_;
  const MixData& d_;
  BoxTransform tr_;
  Eigen::VectorXd full_;
  std::vector<bool> free_;
  int n_ = 0;
};

}  // namespace

MixFitResult fit_mixlaw(const MixLaw& law, const MixData& train, const MixFitOptions& opt, Progress* progress) {
  const int K = static_cast<int>(train.h.cols());
  const auto names = law.param_names(train.domains);
  BoxTransform tr;
  law.bounds(K, tr.lo, tr.hi);
  Eigen::VectorXd p0 = law.initial(train);
  std::vector<bool> free(names.size(), true);
  for (const auto& [k, v] : opt.fixed) {
    const auto it = std::find(names.begin(), names.end(), k);
    if (it == names.end()) throw UsageError(fmt::format("law {} has no parameter '{}'", law.name(), k), "--fix");
    const auto k2 = it - names.begin();
    if (v < tr.lo[k2] || v > tr.hi[k2])
      throw UsageError(fmt::format("{} = {} is outside its bounds [{}, {}]", k, v, tr.lo[k2], tr.hi[k2]), "--fix");
    if (k == "H" && !(v > 0 && v < train.params.minCoeff()))
      throw UsageError(fmt::format("H = {} must be in (0, N) with N = {}", v, train.params.minCoeff()), "--fix");
    p0[k2] = v;
    free[static_cast<std::size_t>(k2)] = false;
  }
  MixObjective obj(law, train, tr, p0, free);
  const Eigen::VectorXd z0 = obj.free_point(p0);
  double f0;
  if (!obj.evaluate(z0.data(), &f0, nullptr))
    throw RuntimeError(fmt::format("the {} law cannot be evaluated at its starting point (check N > H, weights)", law.name()));

  const int starts = std::max(1, opt.starts);
  std::vector<num::LbfgsResult> best(static_cast<std::size_t>(starts));
#pragma omp parallel for schedule(dynamic)
  for (int s = 0; s < starts; ++s) {
    Rng rng(derive_seed(opt.seed, static_cast<std::uint64_t>(s)));
    Eigen::VectorXd z = z0;
    if (s > 0)
      for (Eigen::Index i = 0; i < z.size(); ++i) z[i] += rng.uniform(-2.0, 2.0);
    num::LbfgsResult cur = num::minimize_lbfgs(obj, z, opt.lbfgs);
    num::LbfgsResult top = cur;
    for (int h = 0; h < opt.hops; ++h) {
      if (!std::isfinite(cur.f)) break;
      Eigen::VectorXd trial = cur.x;
      for (Eigen::Index i = 0; i < trial.size(); ++i) trial[i] += rng.uniform(-opt.step, opt.step);
      num::LbfgsResult r = num::minimize_lbfgs(obj, trial, opt.lbfgs);
      if (!std::isfinite(r.f)) continue;
      const bool accept = r.f < cur.f || rng.uniform() < std::exp(-(r.f - cur.f) / opt.temperature);
      if (r.f < top.f) top = r;
      if (accept) cur = r;
    }
    best[static_cast<std::size_t>(s)] = top;
    if (progress) progress->tick();
  }
  int win = -1;
  for (int s = 0; s < starts; ++s)
    if (std::isfinite(best[static_cast<std::size_t>(s)].f) &&
        (win < 0 || best[static_cast<std::size_t>(s)].f < best[static_cast<std::size_t>(win)].f))
      win = s;
  if (win < 0) throw RuntimeError(fmt::format("no start of the {} law reached a finite objective", law.name()));
  MixFitResult res;
  res.params = obj.params(best[static_cast<std::size_t>(win)].x.data());
  res.objective = best[static_cast<std::size_t>(win)].f;
  res.best_start = win;
  res.local_solves = starts * (1 + opt.hops);
  return res;
}

nlohmann::json mix_metrics(const Eigen::ArrayXXd& pred, const MixData& d) {
  std::vector<double> all_p, all_o;
  nlohmann::json per = nlohmann::json::object();
  for (Eigen::Index i = 0; i < d.h.cols(); ++i) {
    std::vector<double> p, o;
    for (Eigen::Index r = 0; r < d.h.rows(); ++r)
      if (d.mask(r, i) > 0) {
        p.push_back(pred(r, i));
        o.push_back(d.loss(r, i));
      }
    if (p.empty()) continue;
    const Eigen::Map<Eigen::ArrayXd> P(p.data(), static_cast<Eigen::Index>(p.size())), O(o.data(), static_cast<Eigen::Index>(o.size()));
    nlohmann::json m{{"mre", num::mre(O, P)}, {"mae", num::mae(O, P)}, {"max_ae", (P - O).abs().maxCoeff()},
                     {"max_re", ((P - O).abs() / O).maxCoeff()}, {"count", p.size()}};
    const double rho = p.size() > 2 ? num::spearman(O, P) : std::numeric_limits<double>::quiet_NaN();
    m["spearman"] = std::isfinite(rho) ? nlohmann::json(rho) : nlohmann::json(nullptr);
    per[d.domains[static_cast<std::size_t>(i)]] = m;
    all_p.insert(all_p.end(), p.begin(), p.end());
    all_o.insert(all_o.end(), o.begin(), o.end());
  }
  if (all_p.empty()) throw InputError("no (row, domain) entry passes the mask: nothing to evaluate");
  const Eigen::Map<Eigen::ArrayXd> P(all_p.data(), static_cast<Eigen::Index>(all_p.size())),
      O(all_o.data(), static_cast<Eigen::Index>(all_o.size()));
  const double rho = num::spearman(O, P);
  return {{"mre", num::mre(O, P)},
          {"mae", num::mae(O, P)},
          {"rmse", num::rmse(O, P)},
          {"max_ae", (P - O).abs().maxCoeff()},
          {"spearman", std::isfinite(rho) ? nlohmann::json(rho) : nlohmann::json(nullptr)},
          {"entries", all_p.size()},
          {"per_domain", per}};
}

}  // namespace icmlkit::fit
