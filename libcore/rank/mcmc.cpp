#include "rank/mcmc.hpp"

#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <numeric>

#include "rank/partition.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

namespace icmlkit::rank {

namespace {

// Number of ranks a leap from rank r can reach (its own excluded).
inline int leap_support(int r, int n, int L) { return std::min(n - 1, r + L) - std::max(0, r - L); }

// Marsaglia-Tsang gamma(shape, 1) draw on our portable generator.
double gamma_draw(double shape, Rng& rng) {
  if (shape < 1) return gamma_draw(shape + 1, rng) * std::pow(rng.uniform(), 1.0 / shape);
  const double d = shape - 1.0 / 3, c = 1 / std::sqrt(9 * d);
  for (;;) {
    double x, v;
    do {
      x = rng.normal();
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = rng.uniform();
    if (u < 1 - 0.0331 * x * x * x * x || std::log(u) < 0.5 * x * x + d * (1 - v + std::log(v))) return d * v;
  }
}

// Per-item adjacency of one assessor's preferences: (other item, whether this item is on top).
using Adjacency = std::vector<std::vector<std::pair<int, bool>>>;

class Chain {
 public:
  Chain(const MallowsData& data, const McmcOptions& opt, std::uint64_t seed, PartitionFunction& logz, int index)
      : d_(data), o_(opt), n_(data.n_items), N_(data.assessors()), index_(index), rng_(seed), logz_(logz) {
    itemwise_ = is_itemwise(o_.metric);
    pairwise_ = !d_.prefs.empty();
    // Starting rho: a uniformly random ranking (dispersed starts for R-hat).
    rho_.resize(static_cast<std::size_t>(n_));
    std::iota(rho_.begin(), rho_.end(), 0);
    for (int k = n_ - 1; k > 0; --k) std::swap(rho_[static_cast<std::size_t>(k)], rho_[rng_.below(static_cast<std::uint64_t>(k) + 1)]);
    if (o_.rho_init_data) rho_ = data_consensus();
    order_ = inverse(rho_);
    prop_ = rho_;
    alpha_ = o_.alpha_init;
    if (pairwise_) init_pairwise();
    else init_ranks();
    // Item-by-rank cost C(i, r) = sum_j f(R_ji, r) for item-wise metrics.
    if (itemwise_) {
      cost_ = Eigen::MatrixXd::Zero(n_, n_);
      for (int j = 0; j < N_; ++j)
        for (int i = 0; i < n_; ++i) add_cost(i, R_(j, i), +1);
    }
    logz_cur_ = logz_(alpha_);
  }

  ChainDraws run() {
    ChainDraws out;
    long acc_rho = 0, acc_alpha = 0, n_alpha = 0, acc_aug = 0, n_aug = 0;
    Stopwatch sw;
    double next_report = progress_after_seconds;
    for (int t = 0; t < o_.iterations; ++t) {
      if (index_ == 0 && (t & 1023) == 0 && sw.seconds() > next_report) {
        log::info("chain 1: iteration {}/{} ({:.0f} s, alpha {:.3g})", t, o_.iterations, sw.seconds(), alpha_);
        next_report = sw.seconds() + progress_every_seconds;
      }
      acc_rho += update_rho();
      if (!o_.fix_alpha && t % o_.alpha_jump == 0) {
        acc_alpha += update_alpha();
        ++n_alpha;
      }
      for (int j = 0; j < N_; ++j) {
        if (!latent_[static_cast<std::size_t>(j)]) continue;
        for (int k = 0; k < o_.aug_moves; ++k) {
          acc_aug += pairwise_ ? augment_pairwise(j) : augment_partial(j);
          ++n_aug;
        }
      }
      if (o_.error_model == ErrorModel::bernoulli) update_theta();
      if (t >= o_.burnin && (t - o_.burnin) % o_.thin == 0) {
        out.rho.insert(out.rho.end(), rho_.begin(), rho_.end());
        out.alpha.push_back(alpha_);
        if (o_.error_model == ErrorModel::bernoulli) out.theta.push_back(theta_);
      }
    }
    out.rho_acceptance = static_cast<double>(acc_rho) / o_.iterations;
    out.alpha_acceptance = n_alpha ? static_cast<double>(acc_alpha) / static_cast<double>(n_alpha) : 0.0;
    out.aug_acceptance = n_aug ? static_cast<double>(acc_aug) / static_cast<double>(n_aug) : 0.0;
    return out;
  }

 private:
  // Items by mean observed rank, or by wins minus losses for pairwise data (ties by index).
  Perm data_consensus() const {
    std::vector<double> score(static_cast<std::size_t>(n_), 0.0);
    if (pairwise_) {
      for (const auto& pj : d_.prefs)
        for (const auto& p : pj) {
          score[static_cast<std::size_t>(p.top)] -= 1;
          score[static_cast<std::size_t>(p.bottom)] += 1;
        }
    } else {
      for (int i = 0; i < n_; ++i) {
        double s = 0;
        int c = 0;
        for (int j = 0; j < N_; ++j)
          if (d_.ranks(j, i) != missing_rank) {
            s += d_.ranks(j, i);
            ++c;
          }
        score[static_cast<std::size_t>(i)] = c ? s / c : n_;
      }
    }
    Perm o(static_cast<std::size_t>(n_));
    std::iota(o.begin(), o.end(), 0);
    std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return score[static_cast<std::size_t>(a)] < score[static_cast<std::size_t>(b)]; });
    return inverse(o);
  }

  void add_cost(int item, int rank, int sign) {
    for (int r = 0; r < n_; ++r) cost_(item, r) += sign * item_distance(rank, r, o_.metric);
  }

  void init_ranks() {
    R_ = fill_missing(d_.ranks);
    free_.resize(static_cast<std::size_t>(N_));
    latent_.assign(static_cast<std::size_t>(N_), 0);
    for (int j = 0; j < N_; ++j) {
      auto& f = free_[static_cast<std::size_t>(j)];
      for (int i = 0; i < n_; ++i)
        if (d_.ranks(j, i) == missing_rank) f.push_back(i);
      latent_[static_cast<std::size_t>(j)] = f.size() >= 2;
      // Random starting augmentation: shuffle the free ranks among the free items.
      for (std::size_t k = f.size(); k > 1; --k) {
        const std::size_t m = rng_.below(k);
        std::swap(R_(j, f[k - 1]), R_(j, f[m]));
      }
    }
  }

  void init_pairwise() {
    R_.resize(N_, n_);
    ord_.resize(N_, n_);
    adj_.assign(static_cast<std::size_t>(N_), Adjacency(static_cast<std::size_t>(n_)));
    latent_.assign(static_cast<std::size_t>(N_), 1);
    viol_.assign(static_cast<std::size_t>(N_), 0);
    for (int j = 0; j < N_; ++j) {
      const auto& pj = d_.prefs[static_cast<std::size_t>(j)];
      auto& a = adj_[static_cast<std::size_t>(j)];
      for (const auto& p : pj) {
        a[static_cast<std::size_t>(p.top)].push_back({p.bottom, true});
        a[static_cast<std::size_t>(p.bottom)].push_back({p.top, false});
      }
      m_total_ += static_cast<long>(pj.size());
      Perm r = consistent_ranking(n_, pj);
      if (r.empty()) {
        // Inconsistent preferences (the caller has checked the error model): start from the
        // order by wins minus losses.
        std::vector<int> score(static_cast<std::size_t>(n_), 0);
        for (const auto& p : pj) {
          ++score[static_cast<std::size_t>(p.top)];
          --score[static_cast<std::size_t>(p.bottom)];
        }
        Perm o(static_cast<std::size_t>(n_));
        std::iota(o.begin(), o.end(), 0);
        std::stable_sort(o.begin(), o.end(), [&](int x, int y) { return score[static_cast<std::size_t>(x)] > score[static_cast<std::size_t>(y)]; });
        r = inverse(o);
      }
      for (int i = 0; i < n_; ++i) {
        R_(j, i) = r[static_cast<std::size_t>(i)];
        ord_(j, r[static_cast<std::size_t>(i)]) = i;
      }
      for (const auto& p : pj) viol_[static_cast<std::size_t>(j)] += r[static_cast<std::size_t>(p.top)] > r[static_cast<std::size_t>(p.bottom)];
      g_total_ += viol_[static_cast<std::size_t>(j)];
    }
  }

  // Sum_j d(R_j, r) for a complete r.
  double total_distance(const Perm& r) const {
    if (itemwise_) {
      double s = 0;
      for (int i = 0; i < n_; ++i) s += cost_(i, r[static_cast<std::size_t>(i)]);
      return s;
    }
    double s = 0;
    for (int j = 0; j < N_; ++j) s += distance(&R_(j, 0), r.data(), n_, o_.metric);
    return s;
  }

  int update_rho() {
    const double lr = leap_and_shift(rho_, o_.leap_size, rng_, prop_);
    // The ranks that moved lie between the leaping item's old and new rank.
    int lo = n_, hi = -1;
    for (int k = 0; k < n_; ++k)
      if (prop_[static_cast<std::size_t>(k)] != rho_[static_cast<std::size_t>(k)]) {
        lo = std::min(lo, rho_[static_cast<std::size_t>(k)]);
        hi = std::max(hi, rho_[static_cast<std::size_t>(k)]);
      }
    if (hi < 0) return 0;
    double delta = 0;
    if (itemwise_) {
      for (int k = lo; k <= hi; ++k) {
        const int item = order_[static_cast<std::size_t>(k)];
        delta += cost_(item, prop_[static_cast<std::size_t>(item)]) - cost_(item, k);
      }
    } else {
      delta = total_distance(prop_) - total_distance(rho_);
    }
    const double logr = -(alpha_ / n_) * delta + lr;
    if (logr >= 0 || std::log(rng_.uniform()) < logr) {
      for (int k = lo; k <= hi; ++k) {
        const int item = order_[static_cast<std::size_t>(k)];
        rho_[static_cast<std::size_t>(item)] = prop_[static_cast<std::size_t>(item)];
      }
      for (int i = 0; i < n_; ++i)
        if (rho_[static_cast<std::size_t>(i)] >= lo && rho_[static_cast<std::size_t>(i)] <= hi) order_[static_cast<std::size_t>(rho_[static_cast<std::size_t>(i)])] = i;
      return 1;
    }
    prop_ = rho_;
    return 0;
  }

  int update_alpha() {
    const double a2 = alpha_ * std::exp(o_.alpha_prop_sd * rng_.normal());
    const double D = total_distance(rho_);
    const double lz2 = logz_(a2);
    const double logr = -(a2 - alpha_) / n_ * D - N_ * (lz2 - logz_cur_) - o_.lambda * (a2 - alpha_) + std::log(a2 / alpha_);
    if (logr >= 0 || std::log(rng_.uniform()) < logr) {
      alpha_ = a2;
      logz_cur_ = lz2;
      return 1;
    }
    return 0;
  }

  // Swap the ranks of two unobserved items of assessor j (a symmetric proposal).
  int augment_partial(int j) {
    const auto& f = free_[static_cast<std::size_t>(j)];
    const std::size_t a = rng_.below(f.size());
    std::size_t b = rng_.below(f.size() - 1);
    if (b >= a) ++b;
    return try_swap(j, f[a], f[b], 0);
  }

  // Swap two items of assessor j's latent ranking: adjacent ranks or a uniform pair.
  int augment_pairwise(int j) {
    int k1, k2;
    if (rng_.uniform() < 0.5) {
      k1 = static_cast<int>(rng_.below(static_cast<std::uint64_t>(n_ - 1)));
      k2 = k1 + 1;
    } else {
      k1 = static_cast<int>(rng_.below(static_cast<std::uint64_t>(n_)));
      k2 = static_cast<int>(rng_.below(static_cast<std::uint64_t>(n_ - 1)));
      if (k2 >= k1) ++k2;
    }
    const int x = ord_(j, k1), y = ord_(j, k2);
    // Preferences touched: those of x, and those of y not involving x.
    int before = 0, after = 0;
    auto count = [&](int item, int skip) {
      for (const auto& [other, top] : adj_[static_cast<std::size_t>(j)][static_cast<std::size_t>(item)]) {
        if (other == skip) continue;
        auto rank_now = [&](int it) { return R_(j, it); };
        auto rank_new = [&](int it) { return it == x ? k2 : it == y ? k1 : R_(j, it); };
        const int t = top ? item : other, b = top ? other : item;
        before += rank_now(t) > rank_now(b);
        after += rank_new(t) > rank_new(b);
      }
    };
    count(x, -1);
    count(y, x);
    if (o_.error_model == ErrorModel::none && after > 0) return 0;
    const double extra = o_.error_model == ErrorModel::bernoulli ? (after - before) * std::log(theta_ / (1 - theta_)) : 0.0;
    const int ok = try_swap(j, x, y, extra);
    if (ok) {
      ord_(j, k1) = y;
      ord_(j, k2) = x;
      viol_[static_cast<std::size_t>(j)] += after - before;
      g_total_ += after - before;
    }
    return ok;
  }

  // MH step swapping R_jx and R_jy with extra log-ratio `extra`; updates the cost matrix.
  int try_swap(int j, int x, int y, double extra) {
    const int rx = R_(j, x), ry = R_(j, y);
    double delta;
    if (itemwise_) {
      const Metric m = o_.metric;
      const int px = rho_[static_cast<std::size_t>(x)], py = rho_[static_cast<std::size_t>(y)];
      delta = item_distance(ry, px, m) + item_distance(rx, py, m) - item_distance(rx, px, m) - item_distance(ry, py, m);
    } else {
      const double d0 = distance(&R_(j, 0), rho_.data(), n_, o_.metric);
      std::swap(R_(j, x), R_(j, y));
      delta = distance(&R_(j, 0), rho_.data(), n_, o_.metric) - d0;
      std::swap(R_(j, x), R_(j, y));
    }
    const double logr = -(alpha_ / n_) * delta + extra;
    if (logr >= 0 || std::log(rng_.uniform()) < logr) {
      if (itemwise_) {
        add_cost(x, rx, -1);
        add_cost(y, ry, -1);
        add_cost(x, ry, +1);
        add_cost(y, rx, +1);
      }
      R_(j, x) = ry;
      R_(j, y) = rx;
      return 1;
    }
    return 0;
  }

  void update_theta() {
    const double a = o_.kappa1 + static_cast<double>(g_total_), b = o_.kappa2 + static_cast<double>(m_total_ - g_total_);
    for (int tries = 0; tries < 10000; ++tries) {
      const double x = gamma_draw(a, rng_), y = gamma_draw(b, rng_);
      const double t = x / (x + y);
      if (t < 0.5) {
        theta_ = t;
        return;
      }
    }
  }

  const MallowsData& d_;
  const McmcOptions& o_;
  int n_, N_, index_;
  Rng rng_;
  PartitionFunction& logz_;
  bool itemwise_ = true, pairwise_ = false;
  Perm rho_, order_, prop_;
  double alpha_ = 1, logz_cur_ = 0, theta_ = 0.1;
  RankMatrix R_, ord_;
  Eigen::MatrixXd cost_;
  std::vector<std::vector<int>> free_;
  std::vector<char> latent_;
  std::vector<Adjacency> adj_;
  std::vector<int> viol_;
  long g_total_ = 0, m_total_ = 0;
};

}  // namespace

double leap_and_shift(const Perm& rho, int leap_size, Rng& rng, Perm& out) {
  const int n = static_cast<int>(rho.size());
  out = rho;
  if (n < 2) return 0;
  const int u = static_cast<int>(rng.below(static_cast<std::uint64_t>(n)));
  const int ru = rho[static_cast<std::size_t>(u)];
  const int lo = std::max(0, ru - leap_size);
  const int s = leap_support(ru, n, leap_size);
  int r2 = lo + static_cast<int>(rng.below(static_cast<std::uint64_t>(s)));
  if (r2 >= ru) ++r2;
  for (int i = 0; i < n; ++i) {
    const int r = rho[static_cast<std::size_t>(i)];
    if (ru < r2 && r > ru && r <= r2) out[static_cast<std::size_t>(i)] = r - 1;
    if (r2 < ru && r >= r2 && r < ru) out[static_cast<std::size_t>(i)] = r + 1;
  }
  out[static_cast<std::size_t>(u)] = r2;
  // A move by one rank is a swap reachable from either item, symmetric in both directions;
  // a longer leap is reachable only by leaping u, forward 1/(n s(ru)), backward 1/(n s(r2)).
  if (std::abs(r2 - ru) == 1) return 0;
  return std::log(static_cast<double>(s)) - std::log(static_cast<double>(leap_support(r2, n, leap_size)));
}

double rhat(const std::vector<std::vector<double>>& chains) {
  const std::size_t m = chains.size();
  if (m < 2) return std::nan("");
  const std::size_t len = chains[0].size();
  if (len < 2) return std::nan("");
  std::vector<double> means(m);
  double W = 0;
  for (std::size_t c = 0; c < m; ++c) {
    const auto& x = chains[c];
    const double mu = std::accumulate(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(len), 0.0) / static_cast<double>(len);
    double v = 0;
    for (std::size_t t = 0; t < len; ++t) v += (x[t] - mu) * (x[t] - mu);
    W += v / static_cast<double>(len - 1);
    means[c] = mu;
  }
  W /= static_cast<double>(m);
  const double grand = std::accumulate(means.begin(), means.end(), 0.0) / static_cast<double>(m);
  double B = 0;
  for (double mu : means) B += (mu - grand) * (mu - grand);
  B *= static_cast<double>(len) / static_cast<double>(m - 1);
  if (W <= 0) return B <= 0 ? 1.0 : std::numeric_limits<double>::infinity();
  const double var_plus = (static_cast<double>(len) - 1) / static_cast<double>(len) * W + B / static_cast<double>(len);
  return std::sqrt(var_plus / W);
}

McmcResult run_mcmc(const MallowsData& data, const McmcOptions& opt) {
  const int n = data.n_items;
  if (n < 2) throw InputError("need at least 2 items");
  if (data.assessors() < 1) throw InputError("no assessors");
  if (opt.burnin >= opt.iterations) throw UsageError(fmt::format("burn-in ({}) must be below the iterations ({})", opt.burnin, opt.iterations), "--burnin");
  if (opt.leap_size < 1 || opt.thin < 1 || opt.chains < 1 || opt.alpha_jump < 1 || opt.aug_moves < 1)
    throw UsageError("leap size, thinning, chains, alpha jump and augmentation moves must be >= 1");
  if (!(opt.alpha_init > 0)) throw UsageError("the starting alpha must be > 0", "--alpha");
  if (!data.prefs.empty() && opt.error_model == ErrorModel::none) {
    for (std::size_t j = 0; j < data.prefs.size(); ++j)
      if (consistent_ranking(n, data.prefs[j]).empty())
        throw InputError("inconsistent pairwise preferences (a cycle); choose an error model with --error-model bernoulli",
                         fmt::format("{}{}", data.source.empty() ? "" : data.source + ", ",
                                     j < data.labels.size() ? "assessor " + data.labels[j] : fmt::format("assessor number {}", j + 1)));
  }
  McmcResult res;
  res.n_items = n;
  res.chains.resize(static_cast<std::size_t>(opt.chains));
  // One log Z for all chains: its grid nodes (importance sampling, subset DP) are computed once.
  PartitionFunction pf(n, opt.metric, opt.is_samples, opt.seed);
  res.log_z_method = pf.method();
  Stopwatch sw;
  const std::clock_t cpu0 = std::clock();
  const int threads = std::max(1, std::min(opt.threads > 0 ? opt.threads : icmlkit::threads(), opt.chains));
  std::vector<std::string> errors(static_cast<std::size_t>(opt.chains));
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int c = 0; c < opt.chains; ++c) {
    try {
      Chain ch(data, opt, derive_seed(opt.seed, static_cast<std::uint64_t>(c)), pf, c);
      res.chains[static_cast<std::size_t>(c)] = ch.run();
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(c)] = e.what();
    }
  }
  for (const auto& e : errors)
    if (!e.empty()) throw RuntimeError(e);
  res.seconds = sw.seconds();
  res.cpu_seconds = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  return res;
}

}  // namespace icmlkit::rank
