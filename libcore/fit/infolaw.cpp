#include "fit/infolaw.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "num/optimize.hpp"
#include "num/stats.hpp"
#include "util/error.hpp"
#include "util/progress.hpp"
#include "util/rng.hpp"

namespace icmlkit::fit {

Eigen::ArrayXd infolaw_default_shares() {
  Eigen::ArrayXd s(6);
  s << 0.05, 0.15, 0.20, 0.20, 0.20, 0.20;
  return s;
}

double infolaw_information(const InfoLawData& d, Eigen::Index i, double theta, double lambda, double* d_theta,
                           double* d_lambda) {
  const double K = d.tokens[i], S = d.source[i];
  const double lk = std::log(K);
  double info = 0, dth = 0, dla = 0;
  for (Eigen::Index b = 0; b < d.shares.size(); ++b) {
    const double kd = d.weights(i, b) * K;
    if (!(kd > 0)) continue;
    const double md = std::min(kd, d.shares[b] * S);
    const double rd = kd / md;
    const double f = std::exp(-theta * static_cast<double>(b));
    const double x = lambda * rd / lk;
    const double e = std::exp(-x);
    const double term = f * md * lk * -std::expm1(-x);  // 1 - e^-x without cancellation at small x
    info += term;
    dth += -static_cast<double>(b) * term;
    dla += f * md * rd * e;
  }
  if (d_theta) *d_theta = dth;
  if (d_lambda) *d_lambda = dla;
  return info;
}

Eigen::ArrayXd infolaw_predict(const InfoLawParams& p, const InfoLawData& d) {
  Eigen::ArrayXd out(d.params.size());
  for (Eigen::Index i = 0; i < d.params.size(); ++i) {
    const double lambda = p.a * std::log(d.params[i]) + p.b;
    const double info = infolaw_information(d, i, p.theta, lambda);
    out[i] = info > 0 ? p.alpha * std::pow(info, -p.beta) : std::numeric_limits<double>::quiet_NaN();
  }
  return out;
}

namespace {

// Squared log residuals over (theta, a, b, ln alpha, beta).
class InfoLawObjective final : public num::Objective {
 public:
  explicit InfoLawObjective(const InfoLawData& d) : d_(d), log_loss_(d.loss.log()), log_n_(d.params.log()) {}
  int dim() const override { return 5; }
  bool evaluate(const double* x, double* f, double* grad) const override {
    const double theta = x[0], a = x[1], b = x[2], ln_alpha = x[3], beta = x[4];
    double total = 0, g[5] = {0, 0, 0, 0, 0};
    for (Eigen::Index i = 0; i < log_loss_.size(); ++i) {
      const double lambda = a * log_n_[i] + b;
      if (!(lambda > 0)) return false;
      double dth, dla;
      const double info = infolaw_information(d_, i, theta, lambda, &dth, &dla);
      if (!(info > 0)) return false;
      const double li = std::log(info);
      const double r = ln_alpha - beta * li - log_loss_[i];
      total += r * r;
      const double dr_dinfo = -beta / info;
      g[0] += 2 * r * dr_dinfo * dth;
      g[1] += 2 * r * dr_dinfo * dla * log_n_[i];
      g[2] += 2 * r * dr_dinfo * dla;
      g[3] += 2 * r;
      g[4] += 2 * r * (-li);
    }
    *f = total;
    if (grad) std::copy(g, g + 5, grad);
    return std::isfinite(total);
  }

 private:
  const InfoLawData& d_;
  Eigen::ArrayXd log_loss_, log_n_;
};

double sse_log(const InfoLawParams& p, const InfoLawData& d) {
  const Eigen::ArrayXd pred = infolaw_predict(p, d);
  if (!pred.isFinite().all()) return std::numeric_limits<double>::infinity();
  return (pred.log() - d.loss.log()).square().sum();
}

// Ordinary least squares y = c0 + c1 x; returns {c0, c1}.
std::pair<double, double> ols(const Eigen::ArrayXd& x, const Eigen::ArrayXd& y) {
  const double mx = x.mean(), my = y.mean();
  const double sxx = (x - mx).square().sum();
  if (sxx == 0) return {my, 0.0};
  const double c1 = ((x - mx) * (y - my)).sum() / sxx;
  return {my - c1 * mx, c1};
}

}  // namespace

InfoLawFitResult fit_infolaw(const InfoLawData& d, const InfoLawFitOptions& opt, Progress* progress) {
  const Eigen::Index n = d.params.size();
  if (n < 3) throw InputError("InfoLaw needs at least 3 runs to fit");
  if (opt.samples < 1) throw UsageError("need at least one sample", "--samples");
  InfoLawFitResult res;
  // Distinct model sizes and each run's size index.
  std::vector<double> sizes(d.params.data(), d.params.data() + n);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::vector<int> size_of(static_cast<std::size_t>(n));
  for (Eigen::Index i = 0; i < n; ++i)
    size_of[static_cast<std::size_t>(i)] =
        static_cast<int>(std::lower_bound(sizes.begin(), sizes.end(), d.params[i]) - sizes.begin());
  const int n_sizes = static_cast<int>(sizes.size());
  const Eigen::ArrayXd neg_loss = -d.loss;
  const Eigen::ArrayXd neg_loss_ranks = num::average_ranks(neg_loss);

  // Stage 1: random search, in fixed blocks with derived seeds (thread-count independent).
  constexpr int block = 1024;
  const int n_blocks = (opt.samples + block - 1) / block;
  std::vector<double> block_best(static_cast<std::size_t>(n_blocks), -2.0);
  std::vector<std::vector<double>> block_arg(static_cast<std::size_t>(n_blocks));
  const double llo = std::log(opt.lambda_lo), lhi = std::log(opt.lambda_hi);
#pragma omp parallel for schedule(dynamic)
  for (int blk = 0; blk < n_blocks; ++blk) {
    Rng rng(derive_seed(opt.seed, static_cast<std::uint64_t>(blk)));
    std::vector<double> cand(static_cast<std::size_t>(n_sizes + 1));
    Eigen::ArrayXd info(n);
    double best = -2.0;
    std::vector<double> arg;
    const int end = std::min(opt.samples, (blk + 1) * block);
    for (int s = blk * block; s < end; ++s) {
      cand[0] = rng.uniform(opt.theta_lo, opt.theta_hi);
      for (int k = 0; k < n_sizes; ++k) cand[static_cast<std::size_t>(k + 1)] = std::exp(rng.uniform(llo, lhi));
      for (Eigen::Index i = 0; i < n; ++i)
        info[i] = infolaw_information(d, i, cand[0], cand[static_cast<std::size_t>(size_of[static_cast<std::size_t>(i)] + 1)]);
      const double rho = num::pearson(num::average_ranks(info), neg_loss_ranks);
      if (std::isfinite(rho) && rho > best) {
        best = rho;
        arg = cand;
      }
    }
    block_best[static_cast<std::size_t>(blk)] = best;
    block_arg[static_cast<std::size_t>(blk)] = arg;
    if (progress) progress->tick(static_cast<std::size_t>(end - blk * block));
  }
  int win = -1;
  for (int blk = 0; blk < n_blocks; ++blk)
    if (!block_arg[static_cast<std::size_t>(blk)].empty() &&
        (win < 0 || block_best[static_cast<std::size_t>(blk)] > block_best[static_cast<std::size_t>(win)]))
      win = blk;
  if (win < 0) throw RuntimeError("stage 1 found no sample with a defined rank correlation (constant losses?)");
  const auto& arg = block_arg[static_cast<std::size_t>(win)];
  res.spearman = block_best[static_cast<std::size_t>(win)];
  res.sizes = sizes;
  res.lambda_per_size.assign(arg.begin() + 1, arg.end());

  // Stage 2: lambda(N) = a ln N + b through the per-size optima.
  Eigen::ArrayXd ln_sizes(n_sizes), lam(n_sizes);
  for (int k = 0; k < n_sizes; ++k) {
    ln_sizes[k] = std::log(sizes[static_cast<std::size_t>(k)]);
    lam[k] = res.lambda_per_size[static_cast<std::size_t>(k)];
  }
  const auto [b0, a1] = ols(ln_sizes, lam);
  InfoLawParams p{arg[0], a1, b0, 1.0, 0.0};
  // Stage 3: ln L = ln alpha - beta ln info (info from the fitted lambda(N); a run whose
  // lambda(N) is not positive falls back to its per-size lambda).
  Eigen::ArrayXd ln_info(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    double lambda = p.a * std::log(d.params[i]) + p.b;
    if (!(lambda > 0)) lambda = res.lambda_per_size[static_cast<std::size_t>(size_of[static_cast<std::size_t>(i)])];
    ln_info[i] = std::log(infolaw_information(d, i, p.theta, lambda));
  }
  const auto [c0, c1] = ols(ln_info, d.loss.log());
  p.alpha = std::exp(c0);
  p.beta = -c1;
  res.staged = p;
  res.sse_log_staged = sse_log(p, d);
  res.params = p;
  res.sse_log = res.sse_log_staged;

  if (opt.refine) {
    InfoLawObjective obj(d);
    Eigen::VectorXd x0(5);
    x0 << p.theta, p.a, p.b, std::log(p.alpha), p.beta;
    double f0;
    if (!obj.evaluate(x0.data(), &f0, nullptr)) {
      // lambda(N) <= 0 somewhere: restart from a constant lambda at the per-size median.
      std::vector<double> l = res.lambda_per_size;
      std::nth_element(l.begin(), l.begin() + static_cast<long>(l.size() / 2), l.end());
      x0[1] = 0;
      x0[2] = l[l.size() / 2];
    }
    const auto r = num::minimize_lbfgs(obj, x0);
    res.refine_converged = r.converged;
    InfoLawParams q{r.x[0], r.x[1], r.x[2], std::exp(r.x[3]), r.x[4]};
    const double s = sse_log(q, d);
    if (std::isfinite(s) && s < res.sse_log) {
      res.params = q;
      res.sse_log = s;
      res.refined = true;
    }
  }
  return res;
}

}  // namespace icmlkit::fit
