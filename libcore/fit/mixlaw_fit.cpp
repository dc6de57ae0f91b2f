#include "fit/mixlaw_fit.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>

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

// The law's objective over the free parameters in transformed space, plus the ridge penalty
// l2 * sum p_k^2 over the `penalized` parameters.
class MixObjective final : public num::Objective {
 public:
  MixObjective(const MixLaw& law, const MixData& d, const BoxTransform& tr, Eigen::VectorXd full, std::vector<bool> free,
               std::vector<bool> penalized, double l2)
      : law_(law), d_(d), tr_(tr), full_(std::move(full)), free_(std::move(free)), pen_(std::move(penalized)), l2_(l2) {
    for (bool b : free_) n_ += b;
  }
  int dim() const override { return n_; }
  const MixData& data() const { return d_; }
  Eigen::VectorXd params(const double* z) const {
    Eigen::VectorXd p;
    full_params(z, p, nullptr);
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
    Eigen::VectorXd p, dp;
    full_params(z, p, &dp);
    Eigen::VectorXd g(p.size());
    if (!law_.objective(p.data(), d_, f, grad ? g.data() : nullptr)) return false;
    for (Eigen::Index i = 0; i < p.size(); ++i)
      if (l2_ > 0 && pen_[static_cast<std::size_t>(i)] && free_[static_cast<std::size_t>(i)]) {
        *f += l2_ * p[i] * p[i];
        if (grad) g[i] += 2 * l2_ * p[i];
      }
    if (grad) {
      int k = 0;
      for (std::size_t i = 0; i < free_.size(); ++i)
        if (free_[i]) grad[k++] = g[static_cast<Eigen::Index>(i)] * dp[static_cast<Eigen::Index>(i)];
    }
    return true;
  }
  /// The same objective on other rows (penalty and fixed values kept).
  MixObjective on(const MixData& d) const { return MixObjective(law_, d, tr_, full_, free_, pen_, l2_); }

 private:
  void full_params(const double* z, Eigen::VectorXd& p, Eigen::VectorXd* dp) const {
    Eigen::VectorXd zz = tr_.to_free(full_);
    int k = 0;
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (free_[i]) zz[static_cast<Eigen::Index>(i)] = z[k++];
    tr_.to_params(zz, p, dp);
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (!free_[i]) p[static_cast<Eigen::Index>(i)] = full_[static_cast<Eigen::Index>(i)];
  }

  const MixLaw& law_;
  const MixData& d_;
  const BoxTransform& tr_;
  Eigen::VectorXd full_;
  std::vector<bool> free_, pen_;
  double l2_;
  int n_ = 0;
};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The law's MSE (no penalty) at free point z on rows d; NaN outside the law's domain.
double mse_at(const MixLaw& law, const MixObjective& obj, const Eigen::VectorXd& z, const MixData& d) {
  const Eigen::VectorXd p = obj.params(z.data());
  double f = 0;
  return law.objective(p.data(), d, &f, nullptr) && std::isfinite(f) ? f : kNaN;
}

// MRE over d's masked entries at free point z; NaN outside the law's domain.
double mre_at(const MixLaw& law, const MixObjective& obj, const Eigen::VectorXd& z, const MixData& d) {
  Eigen::ArrayXXd pred;
  if (!law.predict(obj.params(z.data()).data(), d, pred)) return kNaN;
  double sum = 0;
  int n = 0;
  for (Eigen::Index r = 0; r < d.h.rows(); ++r)
    for (Eigen::Index i = 0; i < d.h.cols(); ++i)
      if (d.mask(r, i) > 0) {
        sum += std::abs(pred(r, i) - d.loss(r, i)) / d.loss(r, i);
        ++n;
      }
  return n ? sum / n : kNaN;
}

// What one start's path is asked to do.
struct PathSpec {
  int start = 0;
  int budget = 0;                    // stop after this many path iterations (0 = run it all)
  const MixData* held_in = nullptr;  // score every iterate on these rows, return the best
  const MixData* monitor = nullptr;  // record the MRE of these rows in the trace
  bool trace = false;
  bool held_in_phase = false;
};

struct PathOut {
  Eigen::VectorXd z;  // the point returned
  double f = kNaN;    // objective at z
  double score = kNaN;  // lowest objective, or lowest held-in MSE with held_in
  int best_step = 0;    // path iteration of the best held-in iterate
  int steps = 0;        // path iterations run (the last one's index)
  int solves = 0;
  std::vector<MixTracePoint> trace;
};

// One start's path: a seeded start point, its L-BFGS solve, then `hops` basin-hopping steps
// (perturb the current minimum, re-minimise, Metropolis accept).  A path iteration is an
// L-BFGS iteration; a hop's perturbed starting point is not one, the first solve's is (step 0).
// Returns the lowest local minimum; with held_in, the iterate with the lowest held-in MSE;
// with budget, the iterate at which the budget ran out (if the path gets that far).
PathOut run_path(const MixLaw& law, const MixObjective& obj, const Eigen::VectorXd& z0, const MixFitOptions& opt,
                 const PathSpec& ps) {
  Rng rng(derive_seed(opt.seed, static_cast<std::uint64_t>(ps.start)));
  Eigen::VectorXd z = z0;
  if (ps.start > 0)
    for (Eigen::Index i = 0; i < z.size(); ++i) z[i] += rng.uniform(-2.0, 2.0);
  PathOut out;
  int step = -1, solve = 0;
  bool budget_hit = false;
  double best_held = std::numeric_limits<double>::infinity();
  Eigen::VectorXd best_held_z, budget_z;
  num::LbfgsOptions lo = opt.lbfgs;
  lo.max_evaluations = opt.max_evals;
  if (ps.held_in || ps.trace || ps.budget > 0)
    lo.on_iteration = [&](const Eigen::VectorXd& x, int it, double f) {
      if (it == 0 && solve > 0) return true;  // a hop's random starting point
      ++step;
      const double held = ps.held_in ? mse_at(law, obj, x, *ps.held_in) : kNaN;
      if (ps.held_in && held < best_held) {
        best_held = held;
        best_held_z = x;
        out.best_step = step;
      }
      if (ps.trace)
        out.trace.push_back({ps.start, solve, it, step, ps.held_in_phase, f, held,
                             ps.monitor ? mre_at(law, obj, x, *ps.monitor) : kNaN});
      if (ps.budget > 0 && step >= ps.budget) {
        budget_hit = true;
        budget_z = x;
        return false;
      }
      return true;
    };
  num::LbfgsResult cur = num::minimize_lbfgs(obj, z, lo);
  out.solves = 1;
  num::LbfgsResult top = cur;
  for (int h = 0; h < opt.hops && !budget_hit; ++h) {
    if (!std::isfinite(cur.f)) break;
    Eigen::VectorXd trial = cur.x;
    for (Eigen::Index i = 0; i < trial.size(); ++i) trial[i] += rng.uniform(-opt.step, opt.step);
    solve = h + 1;
    num::LbfgsResult r = num::minimize_lbfgs(obj, trial, lo);
    ++out.solves;
    if (!std::isfinite(r.f)) continue;
    const bool accept = r.f < cur.f || rng.uniform() < std::exp(-(r.f - cur.f) / opt.temperature);
    if (r.f < top.f) top = r;
    if (accept) cur = r;
  }
  if (ps.held_in && best_held_z.size()) {
    out.z = best_held_z;
    out.score = best_held;
  } else if (budget_hit) {
    out.z = budget_z;
  } else {
    out.z = top.x;
  }
  out.steps = std::max(step, 0);
  double f = kNaN;
  out.f = obj.evaluate(out.z.data(), &f, nullptr) && std::isfinite(f) ? f : kNaN;
  if (!ps.held_in) out.score = out.f;
  return out;
}

// A seeded permutation of 0..n-1.
std::vector<Eigen::Index> shuffled(Eigen::Index n, std::uint64_t seed) {
  std::vector<Eigen::Index> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), Eigen::Index{0});
  Rng rng(seed);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  return perm;
}

// Seed streams of the row splits (apart from the starts' streams 0, 1, ...).
constexpr std::uint64_t kHeldInStream = 0x4e1d1full;
constexpr std::uint64_t kFoldStream = 0xf01d5ull;
constexpr std::uint64_t kL2FoldStream = 0x12f01d5ull;

// Fits one start on obj's rows: the plain path, or with early stopping its two phases.
PathOut fit_start(const MixLaw& law, const MixObjective& obj, const Eigen::VectorXd& z0, const MixFitOptions& opt,
                  int start, bool trace, const MixData* monitor) {
  const MixData& d = obj.data();
  if (!(opt.early_stop > 0)) {
    PathSpec ps;
    ps.start = start;
    ps.trace = trace;
    ps.monitor = monitor;
    return run_path(law, obj, z0, opt, ps);
  }
  const Eigen::Index n = d.h.rows();
  const auto n_held = static_cast<Eigen::Index>(std::max<long>(1, std::lround(opt.early_stop * static_cast<double>(n))));
  const auto perm = shuffled(n, derive_seed(opt.seed, kHeldInStream));
  std::vector<Eigen::Index> held(perm.end() - n_held, perm.end()), rest(perm.begin(), perm.end() - n_held);
  std::sort(held.begin(), held.end());
  std::sort(rest.begin(), rest.end());
  const MixData held_rows = d.rows(held), rest_rows = d.rows(rest);
  const MixObjective rest_obj = obj.on(rest_rows);
  PathSpec p1;
  p1.start = start;
  p1.held_in = &held_rows;
  p1.trace = trace;
  p1.monitor = monitor;
  p1.held_in_phase = true;
  PathOut first = run_path(law, rest_obj, z0, opt, p1);
  PathSpec p2;
  p2.start = start;
  p2.budget = std::max(1, first.best_step);
  p2.trace = trace;
  p2.monitor = monitor;
  PathOut second = run_path(law, obj, z0, opt, p2);
  second.score = first.score;  // the start is judged by its held-in MSE
  second.best_step = std::min(p2.budget, second.steps);  // the path may end sooner on all rows
  second.solves += first.solves;
  first.trace.insert(first.trace.end(), second.trace.begin(), second.trace.end());
  second.trace = std::move(first.trace);
  return second;
}

// K seeded folds of n rows (by position): the rows fitted and the rows held out of each.
void make_folds(Eigen::Index n, int K, std::uint64_t seed, std::vector<std::vector<Eigen::Index>>& fit,
                std::vector<std::vector<Eigen::Index>>& out) {
  const auto perm = shuffled(n, seed);
  for (int f = 0; f < K; ++f) {
    std::vector<Eigen::Index> in, held;
    for (Eigen::Index i = 0; i < n; ++i) (i % K == f ? held : in).push_back(perm[static_cast<std::size_t>(i)]);
    std::sort(in.begin(), in.end());
    std::sort(held.begin(), held.end());
    fit.push_back(std::move(in));
    out.push_back(std::move(held));
  }
}

MixFitResult fit_fixed_l2(const MixLaw& law, const MixData& train, const MixFitOptions& opt, Progress* progress);

// Checks the options that split the n training rows before any fit runs: the folds of the
// cross-validations fit on n - ceil(n / K) rows, and early stopping must leave a row on each
// side of every fit it runs in (the smallest being a fold's).  Throws UsageError.
void check_row_options(const MixFitOptions& opt, Eigen::Index n, bool cv_l2) {
  auto folds_ok = [&](int K) { return K >= 2 && K <= n; };
  if (cv_l2 && !folds_ok(opt.l2_folds))
    throw UsageError(fmt::format("the noise penalty's cross-validation needs 2 to {} folds (the training rows), not {}: "
                                 "give --l2-folds or a fixed --l2", n, opt.l2_folds), "--l2-folds");
  if (opt.cv_folds != 0 && !folds_ok(opt.cv_folds))
    throw UsageError(fmt::format("the start selection's cross-validation needs 2 to {} folds (the training rows), not {}",
                                 n, opt.cv_folds), "--cv-folds");
  if (opt.early_stop == 0) return;
  Eigen::Index smallest = n;
  for (int K : {cv_l2 ? opt.l2_folds : 0, opt.cv_folds})
    if (K > 0) smallest = std::min<Eigen::Index>(smallest, n - (n + K - 1) / K);
  for (Eigen::Index m : {n, smallest}) {
    const long held = std::lround(opt.early_stop * static_cast<double>(m));
    if (!(opt.early_stop > 0 && opt.early_stop < 1 && held >= 1 && held < m))
      throw UsageError(fmt::format("an early-stopping fraction of {} leaves no row on one side of {} {} rows", opt.early_stop,
                                   m, m == n ? "training" : "cross-validation fold"), "--early-stop");
  }
}

// Runs body(t) for t in [0, tasks) on OpenMP threads; an exception is kept (the lowest task's)
// and rethrown once the loop is done, since none may leave a parallel region.
template <class Body>
void parallel_tasks(int tasks, const Body& body) {
  std::vector<std::exception_ptr> err(static_cast<std::size_t>(tasks));
#pragma omp parallel for schedule(dynamic)
  for (int t = 0; t < tasks; ++t) {
    try {
      body(t);
    } catch (...) {
      err[static_cast<std::size_t>(t)] = std::current_exception();
    }
  }
  for (auto& e : err)
    if (e) std::rethrow_exception(e);
}

}  // namespace

MixFitResult fit_mixlaw(const MixLaw& law, const MixData& train, const MixFitOptions& opt, Progress* progress) {
  const auto names = law.param_names(train.domains);
  const bool has_noise = std::any_of(names.begin(), names.end(), [](const std::string& x) { return x.rfind("A[", 0) == 0; });
  check_row_options(opt, train.h.rows(), has_noise && opt.l2 < 0);
  if (!(opt.l2 < 0) || !has_noise) {
    MixFitOptions o = opt;
    o.l2 = std::max(0.0, opt.l2);
    return fit_fixed_l2(law, train, o, progress);
  }
  const Eigen::Index n = train.h.rows();
  if (opt.l2_grid.empty()) throw UsageError("the l2 grid is empty", "--l2-grid");
  for (double v : opt.l2_grid)
    if (!(v >= 0) || !std::isfinite(v)) throw UsageError(fmt::format("l2 candidate {} is not a finite number >= 0", v), "--l2-grid");
  std::vector<std::vector<Eigen::Index>> fold_fit, fold_out;
  make_folds(n, opt.l2_folds, derive_seed(opt.seed, kL2FoldStream), fold_fit, fold_out);
  const int G = static_cast<int>(opt.l2_grid.size()), K = opt.l2_folds;
  std::vector<double> sse(static_cast<std::size_t>(G * K), kNaN);
  std::vector<int> solves(sse.size(), 0);
  parallel_tasks(G * K, [&](int t) {
    MixFitOptions o = opt;
    o.l2 = opt.l2_grid[static_cast<std::size_t>(t / K)];
    o.starts = 1;
    o.hops = 0;
    o.cv_folds = 0;
    o.trace = false;
    o.monitor = nullptr;
    const MixData fit_rows = train.rows(fold_fit[static_cast<std::size_t>(t % K)]);
    const MixData out_rows = train.rows(fold_out[static_cast<std::size_t>(t % K)]);
    try {
      const MixFitResult r = fit_fixed_l2(law, fit_rows, o, nullptr);
      double f = kNaN;
      if (law.objective(r.params.data(), out_rows, &f, nullptr) && std::isfinite(f))
        sse[static_cast<std::size_t>(t)] = f * static_cast<double>(out_rows.h.rows());
      solves[static_cast<std::size_t>(t)] = r.local_solves;
    } catch (const RuntimeError&) {
      // no finite fit on this fold: the candidate scores NaN and is not chosen
    }
  });
  // CV error per row of each candidate and its standard error over folds (the sd of the
  // folds' per-row errors / sqrt(K)); then the one-standard-error rule (Hastie, Tibshirani &
  // Friedman, ESL 7.10): the largest l2 whose error is within one SE of the lowest.
  std::vector<double> score(static_cast<std::size_t>(G), 0.0), se(static_cast<std::size_t>(G), 0.0);
  int best = -1;
  for (int g = 0; g < G; ++g) {
    double mean_e = 0, sq = 0;
    for (int k = 0; k < K; ++k) {
      score[static_cast<std::size_t>(g)] += sse[static_cast<std::size_t>(g * K + k)];
      const double e = sse[static_cast<std::size_t>(g * K + k)] / static_cast<double>(fold_out[static_cast<std::size_t>(k)].size());
      mean_e += e / K;
      sq += e * e;
    }
    score[static_cast<std::size_t>(g)] /= static_cast<double>(n);
    se[static_cast<std::size_t>(g)] = std::sqrt(std::max(0.0, (sq - K * mean_e * mean_e) / (K - 1)) / K);
    const double sc = score[static_cast<std::size_t>(g)];
    if (std::isfinite(sc) && (best < 0 || sc < score[static_cast<std::size_t>(best)])) best = g;
  }
  int pick = -1;
  if (best >= 0) {
    const double cut = score[static_cast<std::size_t>(best)] + se[static_cast<std::size_t>(best)];
    for (int g = 0; g < G; ++g) {
      const double sc = score[static_cast<std::size_t>(g)];
      const auto& grid = opt.l2_grid;
      if (std::isfinite(sc) && sc <= cut &&
          (pick < 0 || grid[static_cast<std::size_t>(g)] > grid[static_cast<std::size_t>(pick)]))
        pick = g;
    }
  }
  if (pick < 0) throw RuntimeError(fmt::format("no l2 candidate of the {} law fitted every fold", law.name()));
  MixFitOptions o = opt;
  o.l2 = opt.l2_grid[static_cast<std::size_t>(pick)];
  MixFitResult res = fit_fixed_l2(law, train, o, progress);
  res.l2_scores = score;
  res.l2_score_se = se;
  for (int c : solves) res.local_solves += c;
  return res;
}

namespace {

MixFitResult fit_fixed_l2(const MixLaw& law, const MixData& train, const MixFitOptions& opt, Progress* progress) {
  const int K = static_cast<int>(train.h.cols());
  const auto names = law.param_names(train.domains);
  BoxTransform tr;
  law.bounds(K, tr.lo, tr.hi);
  Eigen::VectorXd p0 = law.initial(train);
  std::vector<bool> free(names.size(), true), penalized(names.size(), false);
  for (std::size_t i = 0; i < names.size(); ++i) penalized[i] = names[i].rfind("A[", 0) == 0;
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
  const Eigen::Index n = train.h.rows();
  const MixObjective obj(law, train, tr, p0, free, penalized, opt.l2);
  const Eigen::VectorXd z0 = obj.free_point(p0);
  double f0;
  if (!obj.evaluate(z0.data(), &f0, nullptr))
    throw RuntimeError(fmt::format("the {} law cannot be evaluated at its starting point (check N > H, weights)", law.name()));

  const int starts = std::max(1, opt.starts);
  // Folds of the inner cross-validation (by position), fixed for every start.
  std::vector<std::vector<Eigen::Index>> fold_fit, fold_out;
  if (opt.cv_folds > 0) make_folds(n, opt.cv_folds, derive_seed(opt.seed, kFoldStream), fold_fit, fold_out);
  // Task t < starts: start t on every training row; the rest: (start, fold) pairs.
  const int folds = static_cast<int>(fold_fit.size());
  const int tasks = starts * (1 + folds);
  std::vector<PathOut> full(static_cast<std::size_t>(starts));
  std::vector<double> cv_sse(static_cast<std::size_t>(starts * std::max(1, folds)), kNaN);
  std::vector<int> cv_solves(cv_sse.size(), 0);
  parallel_tasks(tasks, [&](int t) {
    if (t < starts) {
      full[static_cast<std::size_t>(t)] = fit_start(law, obj, z0, opt, t, opt.trace, opt.monitor);
      if (progress) progress->tick();
      return;
    }
    const int s = (t - starts) / folds, f = (t - starts) % folds;
    const MixData fit_rows = train.rows(fold_fit[static_cast<std::size_t>(f)]);
    const MixData out_rows = train.rows(fold_out[static_cast<std::size_t>(f)]);
    const MixObjective fold_obj = obj.on(fit_rows);
    const PathOut r = fit_start(law, fold_obj, z0, opt, s, false, nullptr);
    cv_sse[static_cast<std::size_t>(s * folds + f)] =
        mse_at(law, fold_obj, r.z, out_rows) * static_cast<double>(out_rows.h.rows());
    cv_solves[static_cast<std::size_t>(s * folds + f)] = r.solves;
  });
  MixFitResult res;
  res.l2 = opt.l2;
  res.selection = folds > 0 ? "cv" : opt.early_stop > 0 ? "held-in" : "objective";
  res.start_scores.assign(static_cast<std::size_t>(starts), kNaN);
  for (int s = 0; s < starts; ++s) {
    auto& score = res.start_scores[static_cast<std::size_t>(s)];
    if (!std::isfinite(full[static_cast<std::size_t>(s)].f)) continue;
    if (folds > 0) {
      score = 0;
      for (int f = 0; f < folds; ++f) score += cv_sse[static_cast<std::size_t>(s * folds + f)];
      score /= static_cast<double>(n);
    } else {
      score = full[static_cast<std::size_t>(s)].score;
    }
  }
  int win = -1;
  for (int s = 0; s < starts; ++s) {
    const double sc = res.start_scores[static_cast<std::size_t>(s)];
    if (std::isfinite(sc) && (win < 0 || sc < res.start_scores[static_cast<std::size_t>(win)])) win = s;
  }
  if (win < 0) throw RuntimeError(fmt::format("no start of the {} law reached a finite objective", law.name()));
  const PathOut& w = full[static_cast<std::size_t>(win)];
  res.params = obj.params(w.z.data());
  res.objective = w.f;
  res.mse = mse_at(law, obj, w.z, train);
  res.best_start = win;
  res.early_stop_step = opt.early_stop > 0 ? w.best_step : 0;
  for (const auto& p : full) res.local_solves += p.solves;
  for (int c : cv_solves) res.local_solves += c;
  if (opt.trace)
    for (auto& p : full) res.trace.insert(res.trace.end(), p.trace.begin(), p.trace.end());
  return res;
}

}  // namespace

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
