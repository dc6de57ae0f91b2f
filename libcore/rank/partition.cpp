#include "rank/partition.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <bit>
#include <functional>
#include <limits>
#include <numeric>

#include <omp.h>

#include <atomic>
#include <mutex>

#include "rank/exact.hpp"
#include "rank/pseudo.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

namespace icmlkit::rank {

namespace {

constexpr double neg_inf = -std::numeric_limits<double>::infinity();

double log_add(double a, double b) {
  if (a == neg_inf) return b;
  if (b == neg_inf) return a;
  const double m = std::max(a, b);
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

// Footrule: sum_i |sigma(i) - i| = 2 sum_c k_c, k_c = the number of positions <= c holding a
// value > c (= values <= c placed after c).  Adding position/value i to a state with k open
// pairs: both open -> k+1 (1 way); one of them closes an earlier open one -> k (2k ways) or
// i -> i (1 way); both close earlier ones -> k-1 (k^2 ways).  Each cut then costs 2k'.
double log_z_footrule(int n, double alpha) {
  std::vector<double> z(static_cast<std::size_t>(n) + 2, 0.0), nz(z.size());
  z[0] = 1.0;
  double log_scale = 0;
  const double a = alpha / n;
  for (int step = 0; step < n; ++step) {
    std::fill(nz.begin(), nz.end(), 0.0);
    for (int k = 0; k <= step; ++k) {
      const double v = z[static_cast<std::size_t>(k)];
      if (v == 0) continue;
      nz[static_cast<std::size_t>(k) + 1] += v;
      nz[static_cast<std::size_t>(k)] += (2.0 * k + 1) * v;
      if (k > 0) nz[static_cast<std::size_t>(k) - 1] += static_cast<double>(k) * k * v;
    }
    double mx = 0;
    for (int k = 0; k <= step + 1; ++k) {
      nz[static_cast<std::size_t>(k)] *= std::exp(-a * 2.0 * k);
      mx = std::max(mx, nz[static_cast<std::size_t>(k)]);
    }
    for (auto& v : nz) v /= mx;
    log_scale += std::log(mx);
    std::swap(z, nz);
  }
  return std::log(z[0]) + log_scale;
}

double log_z_kendall(int n, double alpha) {
  if (alpha == 0) return std::lgamma(n + 1.0);
  const double a = alpha / n;
  double s = 0;
  for (int i = 1; i <= n; ++i) s += std::log(-std::expm1(-i * a)) - std::log(-std::expm1(-a));
  return s;
}

double log_z_cayley(int n, double alpha) {
  double s = 0;
  for (int i = 1; i < n; ++i) s += std::log1p(i * std::exp(-alpha / n));
  return s;
}

double log_z_hamming(int n, double alpha) {
  // Z = sum_i n! e^-alpha (e^(alpha/n) - 1)^i / i!
  if (alpha == 0) return std::lgamma(n + 1.0);
  const double lq = std::log(std::expm1(alpha / n));
  double s = neg_inf;
  for (int i = 0; i <= n; ++i) s = log_add(s, std::lgamma(n + 1.0) - alpha + i * lq - std::lgamma(i + 1.0));
  return s;
}

double log_z_spearman_dp(int n, double alpha) {
  Eigen::MatrixXd lw(n, n);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r) lw(i, r) = -(alpha / n) * static_cast<double>((i - r) * (i - r));
  return SubsetPosterior(lw).log_normaliser();
}

double log_z_from_log_counts(const std::vector<double>& lc, double alpha, int n) {
  double s = neg_inf;
  for (std::size_t d = 0; d < lc.size(); ++d)
    if (lc[d] != neg_inf) s = log_add(s, lc[d] - alpha / n * static_cast<double>(d));
  return s;
}

}  // namespace

bool log_z_exact(int n, Metric m) {
  switch (m) {
    case Metric::spearman: return n <= subset_dp_max_n;
    case Metric::ulam: return n <= ulam_exact_max_n;
    default: return true;
  }
}

double log_z(int n, double alpha, Metric m) {
  if (n < 1) throw InputError("log Z needs n >= 1");
  if (!(alpha >= 0)) throw InputError(fmt::format("alpha must be >= 0 (alpha = {})", alpha));
  switch (m) {
    case Metric::footrule: return log_z_footrule(n, alpha);
    case Metric::kendall: return log_z_kendall(n, alpha);
    case Metric::cayley: return log_z_cayley(n, alpha);
    case Metric::hamming: return log_z_hamming(n, alpha);
    case Metric::spearman:
      if (n > subset_dp_max_n) throw InputError(fmt::format("no exact Spearman log Z beyond n = {}", subset_dp_max_n));
      return log_z_spearman_dp(n, alpha);
    case Metric::ulam: return log_z_from_log_counts(ulam_log_counts(n), alpha, n);
  }
  return 0;
}

void check_importance_reach(int n, int samples) {
  if (n > importance_max_n)
    throw UsageError(fmt::format("log Z by importance sampling needs n <= {} (its n x n proposal tables; n = {}); "
                                 "no exact method covers this metric at this n", importance_max_n, n));
  const double work = static_cast<double>(samples) * n * n;
  if (work > importance_max_work)
    throw UsageError(fmt::format("log Z by importance sampling at n = {} with {} samples is out of reach here "
                                 "(~{:.1e} steps, limit {:.0e}); lower --is-samples to at most {}",
                                 n, samples, work, importance_max_work, static_cast<long long>(importance_max_work / (static_cast<double>(n) * n))));
}

LogZEstimate log_z_importance(int n, double alpha, Metric m, int samples, Rng& rng, int threads) {
  if (n < 1) throw InputError("log Z needs n >= 1");
  if (samples < 1) throw UsageError("importance sampling needs at least one sample");
  check_importance_reach(n, samples);
  const double a = alpha / n;
  const Metric pm = is_itemwise(m) ? m : Metric::footrule;
  // The proposal: Pseudo-Mallows around the identity with its factor weights precomputed once.
  Eigen::MatrixXd lw(n, n);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r) lw(i, r) = -a * item_distance(r, i, pm);
  Perm id(static_cast<std::size_t>(n));
  std::iota(id.begin(), id.end(), 0);
  const PseudoMallows prop(std::move(lw), id);
  const std::uint64_t seed = rng.bits();
  constexpr int block = 64;
  const int blocks = (samples + block - 1) / block;
  std::vector<double> logw(static_cast<std::size_t>(samples));
  const int nt = std::max(1, std::min(threads > 0 ? threads : icmlkit::threads(), blocks));
  std::atomic<int> done{0};
  Stopwatch sw;
  double next_report = progress_after_seconds;
#pragma omp parallel num_threads(nt)
  {
    std::vector<int> order(static_cast<std::size_t>(n)), r(static_cast<std::size_t>(n)), fr(static_cast<std::size_t>(n));
    std::vector<double> p(PseudoMallows::work_size(n));
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < blocks; ++b) {
      Rng br(derive_seed(seed, static_cast<std::uint64_t>(b)));
      const int hi = std::min(samples, (b + 1) * block);
      for (int s = b * block; s < hi; ++s) {
        std::iota(order.begin(), order.end(), 0);
        for (int k = n - 1; k > 0; --k) std::swap(order[static_cast<std::size_t>(k)], order[br.below(static_cast<std::uint64_t>(k) + 1)]);
        const double logq = prop.sample_into(br, order.data(), r.data(), fr.data(), p.data());
        logw[static_cast<std::size_t>(s)] = -a * distance(r.data(), id.data(), n, m) - logq;
      }
      const int d = done.fetch_add(hi - b * block) + (hi - b * block);
      if (omp_get_thread_num() == 0 && sw.seconds() > next_report) {
        log::info("log Z_{}({:.4g}) by importance sampling: {}/{} samples, {:.0f} s", n, alpha, d, samples, sw.seconds());
        next_report = sw.seconds() + progress_every_seconds;
      }
    }
  }
  const double mx = *std::max_element(logw.begin(), logw.end());
  double s1 = 0, s2 = 0;
  for (double v : logw) {
    const double w = std::exp(v - mx);
    s1 += w;
    s2 += w * w;
  }
  const double mean = s1 / samples;
  const double var = std::max(0.0, s2 / samples - mean * mean);
  return {mx + std::log(mean), std::sqrt(var / samples) / mean, s1 * s1 / s2};
}

std::vector<unsigned __int128> footrule_counts(int n) {
  if (n < 1 || n > 34) throw InputError(fmt::format("exact footrule counts need 1 <= n <= 34 (n = {})", n));
  using U = unsigned __int128;
  const int dmax = n * n / 4;  // largest half-distance
  // c[k][h]: partial structures with k open pairs and half-distance h so far.
  std::vector<std::vector<U>> c(static_cast<std::size_t>(n) + 2, std::vector<U>(static_cast<std::size_t>(dmax) + 1, 0));
  auto nc = c;
  c[0][0] = 1;
  for (int step = 0; step < n; ++step) {
    for (auto& row : nc) std::fill(row.begin(), row.end(), U{0});
    for (int k = 0; k <= step; ++k)
      for (int h = 0; h <= dmax; ++h) {
        const U v = c[static_cast<std::size_t>(k)][static_cast<std::size_t>(h)];
        if (!v) continue;
        auto add = [&](int k2, U mult) {
          const int h2 = h + k2;
          if (k2 <= n && h2 <= dmax) nc[static_cast<std::size_t>(k2)][static_cast<std::size_t>(h2)] += mult * v;
        };
        add(k + 1, 1);
        add(k, static_cast<U>(2 * k + 1));
        if (k > 0) add(k - 1, static_cast<U>(k) * static_cast<U>(k));
      }
    std::swap(c, nc);
  }
  return c[0];
}

std::vector<std::uint64_t> spearman_counts(int n) {
  if (n < 1 || n > 12) throw InputError(fmt::format("exact Spearman counts need 1 <= n <= 12 (n = {})", n));
  const int hmax = (n * n * n - n) / 6;
  const std::size_t full = std::size_t{1} << n, width = static_cast<std::size_t>(hmax) + 1;
  // Sum (v - pos)^2 need not be even per step, so track the full distance and halve at the end.
  const int dmax = 2 * hmax;
  const std::size_t w2 = static_cast<std::size_t>(dmax) + 1;
  std::vector<std::uint64_t> u(full * w2, 0);
  u[0] = 1;
  for (std::size_t s = 1; s < full; ++s) {
    const int pos = std::popcount(s) - 1;
    std::uint64_t* dst = &u[s * w2];
    for (std::size_t rest = s; rest; rest &= rest - 1) {
      const int v = std::countr_zero(rest);
      const int dd = (v - pos) * (v - pos);
      const std::uint64_t* src = &u[(s ^ (std::size_t{1} << v)) * w2];
      for (int d = 0; d + dd <= dmax; ++d) dst[d + dd] += src[d];
    }
  }
  std::vector<std::uint64_t> out(width, 0);
  for (int d = 0; d <= dmax; ++d) {
    const std::uint64_t v = u[(full - 1) * w2 + static_cast<std::size_t>(d)];
    if (v && d % 2) throw RuntimeError("odd Spearman distance (internal error)");
    if (d % 2 == 0) out[static_cast<std::size_t>(d / 2)] = v;
  }
  return out;
}

std::vector<double> ulam_log_counts(int n) {
  if (n < 1 || n > ulam_exact_max_n) throw InputError(fmt::format("exact Ulam counts need 1 <= n <= {} (n = {})", ulam_exact_max_n, n));
  std::vector<double> out(static_cast<std::size_t>(n), neg_inf);
  std::vector<int> parts;
  const double lfact = std::lgamma(n + 1.0);
  // Enumerate partitions in non-increasing parts; f^lambda = n! / prod of hook lengths.
  std::function<void(int, int)> rec = [&](int left, int maxpart) {
    if (left == 0) {
      double lh = 0;
      const int rows = static_cast<int>(parts.size());
      for (int i = 0; i < rows; ++i)
        for (int j = 0; j < parts[static_cast<std::size_t>(i)]; ++j) {
          int below = 0;  // cells under (i, j): rows k > i with parts[k] > j
          for (int k = i + 1; k < rows && parts[static_cast<std::size_t>(k)] > j; ++k) ++below;
          lh += std::log(static_cast<double>(parts[static_cast<std::size_t>(i)] - j - 1 + below + 1));
        }
      const double lf = lfact - lh;
      const int d = n - parts[0];
      out[static_cast<std::size_t>(d)] = log_add(out[static_cast<std::size_t>(d)], 2 * lf);
      return;
    }
    for (int p = std::min(left, maxpart); p >= 1; --p) {
      parts.push_back(p);
      rec(left - p, p);
      parts.pop_back();
    }
  };
  rec(n, n);
  return out;
}

PartitionFunction::PartitionFunction(int n, Metric m, int is_samples, std::uint64_t seed)
    : n_(n), m_(m), is_samples_(is_samples), seed_(seed), mutex_(std::make_unique<std::mutex>()) {
  if (!log_z_exact(n, m)) check_importance_reach(n, is_samples);
  grid_ = !log_z_exact(n, m) || (m == Metric::spearman && n > 12);
  if (m == Metric::ulam && log_z_exact(n, m)) ulam_ = ulam_log_counts(n);
}

std::string PartitionFunction::method() const {
  if (!log_z_exact(n_, m_)) return "importance sampling";
  switch (m_) {
    case Metric::footrule: return "counting recursion";
    case Metric::spearman: return "subset DP";
    case Metric::ulam: return "partition sum";
    default: return "closed form";
  }
}

double PartitionFunction::node(int k) {
  std::lock_guard<std::mutex> lock(*mutex_);
  auto it = cache_.find(k);
  if (it != cache_.end()) return it->second;
  Stopwatch sw;
  const double alpha = std::exp(k / 200.0);
  double v;
  if (log_z_exact(n_, m_)) {
    v = log_z(n_, alpha, m_);
  } else {
    Rng rng(derive_seed(seed_, static_cast<std::uint64_t>(k + (1 << 20))));
    v = log_z_importance(n_, alpha, m_, is_samples_, rng).value;
  }
  cache_.emplace(k, v);
  node_seconds_ += sw.seconds();
  if (node_seconds_ > next_report_) {
    log::info("log Z_{} ({}, {}) on the alpha grid: {} nodes, {:.0f} s so far, last alpha {:.3g}", n_, metric_name(m_), method(),
              cache_.size(), node_seconds_, alpha);
    next_report_ = node_seconds_ + progress_every_seconds;
  }
  return v;
}

double PartitionFunction::operator()(double alpha) {
  if (!grid_) {
    if (m_ == Metric::ulam) return log_z_from_log_counts(ulam_, alpha, n_);
    return log_z(n_, alpha, m_);
  }
  const double x = 200.0 * std::log(alpha);
  const int k = static_cast<int>(std::floor(x));
  const double t = x - k;
  return (1 - t) * node(k) + t * node(k + 1);
}

}  // namespace icmlkit::rank
