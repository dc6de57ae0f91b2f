#include "rank/exact.hpp"

#include <fmt/core.h>

#include <bit>
#include <cmath>
#include <limits>

#include "util/error.hpp"

namespace icmlkit::rank {

namespace {
constexpr double neg_inf = -std::numeric_limits<double>::infinity();
}  // namespace

// Everything is kept in the log domain: with thousands of assessors (sushi) the log weights span
// thousands of nats and the dominant assignment may sit far from every column's maximum, so any
// fixed rescaling of exp(L) under- or overflows.  Each subset's sum is a log-sum-exp over its
// items (two passes: max, then sum), O(2^n n) exponentials.
SubsetPosterior::SubsetPosterior(const Eigen::MatrixXd& logw) : n_(static_cast<int>(logw.rows())), logw_(logw) {
  if (n_ < 1 || logw.cols() != n_) throw InputError("the subset DP needs a square [items, ranks] weight matrix");
  if (n_ > subset_dp_max_n)
    throw InputError(fmt::format("exact DP over item subsets is limited to n <= {} items (n = {})", subset_dp_max_n, n_));
  if (!logw.allFinite()) throw InputError("the subset DP needs finite log weights");
  const std::size_t full = std::size_t{1} << n_;
  fwd_.assign(full, neg_inf);
  fwd_[0] = 0.0;
  for (std::size_t s = 1; s < full; ++s) {
    const int r = std::popcount(s) - 1;
    double mx = neg_inf;
    for (std::size_t rest = s; rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      mx = std::max(mx, fwd_[s ^ (std::size_t{1} << i)] + logw_(i, r));
    }
    if (mx == neg_inf) continue;
    double acc = 0;
    for (std::size_t rest = s; rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      acc += std::exp(fwd_[s ^ (std::size_t{1} << i)] + logw_(i, r) - mx);
    }
    fwd_[s] = mx + std::log(acc);
  }
  log_norm_ = fwd_[full - 1];
}

Eigen::MatrixXd SubsetPosterior::marginals() const {
  const std::size_t full = std::size_t{1} << n_;
  std::vector<double> bwd(full, neg_inf);
  bwd[full - 1] = 0.0;
  for (std::size_t s = full - 1; s-- > 0;) {
    const int r = std::popcount(s);
    double mx = neg_inf;
    for (std::size_t rest = ~s & (full - 1); rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      mx = std::max(mx, logw_(i, r) + bwd[s | (std::size_t{1} << i)]);
    }
    if (mx == neg_inf) continue;
    double acc = 0;
    for (std::size_t rest = ~s & (full - 1); rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      acc += std::exp(logw_(i, r) + bwd[s | (std::size_t{1} << i)] - mx);
    }
    bwd[s] = mx + std::log(acc);
  }
  Eigen::MatrixXd p = Eigen::MatrixXd::Zero(n_, n_);
  for (std::size_t s = 0; s < full - 1; ++s) {
    const int r = std::popcount(s);
    if (fwd_[s] == neg_inf) continue;
    for (std::size_t rest = ~s & (full - 1); rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      p(i, r) += std::exp(fwd_[s] + logw_(i, r) + bwd[s | (std::size_t{1} << i)] - log_norm_);
    }
  }
  return p;
}

Perm SubsetPosterior::sample(Rng& rng) const {
  Perm r(static_cast<std::size_t>(n_));
  std::size_t s = (std::size_t{1} << n_) - 1;
  for (int k = n_ - 1; k >= 0; --k) {
    // P(item i takes rank k | items S hold ranks 0..k) = f(S \ i) w(i, k) / f(S).
    double u = rng.uniform();
    int pick = -1;
    for (std::size_t rest = s; rest; rest &= rest - 1) {
      const int i = std::countr_zero(rest);
      pick = i;
      u -= std::exp(fwd_[s ^ (std::size_t{1} << i)] + logw_(i, k) - fwd_[s]);
      if (u < 0) break;
    }
    r[static_cast<std::size_t>(pick)] = k;
    s ^= std::size_t{1} << pick;
  }
  return r;
}

double SubsetPosterior::log_prob(const Perm& r) const {
  double s = 0;
  for (int i = 0; i < n_; ++i) s += logw_(i, r[static_cast<std::size_t>(i)]);
  return s - log_norm_;
}

Eigen::MatrixXd itemwise_log_weights(const RankMatrix& ranks, double alpha, Metric m) {
  if (!is_itemwise(m)) throw InputError(fmt::format("the {} distance does not split over items", metric_name(m)));
  const int n = static_cast<int>(ranks.cols());
  const Eigen::Index N = ranks.rows();
  Eigen::MatrixXd c(n, n);
  const bool in_range = (ranks.array() >= 0).all() && (ranks.array() < n).all();
  if (in_range) {
    // From each item's rank counts h(k) = #{j : R_ji = k}, every c(i, r) = sum_k h(k) f(k, r) in
    // O(N n + n^2): footrule by the recurrence S(r + 1) = S(r) + #{k <= r} - #{k > r}, Spearman
    // from the first two moments, Hamming as N - h(r).  All terms are integers below 2^53, so the
    // sums are exact and equal the direct O(N n^2) sum.
    std::vector<double> h(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      std::fill(h.begin(), h.end(), 0.0);
      for (Eigen::Index j = 0; j < N; ++j) h[static_cast<std::size_t>(ranks(j, i))] += 1;
      double m1 = 0, m2 = 0;
      for (int k = 0; k < n; ++k) {
        m1 += h[static_cast<std::size_t>(k)] * k;
        m2 += h[static_cast<std::size_t>(k)] * k * k;
      }
      const double total = static_cast<double>(N);
      if (m == Metric::footrule) {
        double s = m1, below = 0;  // S(0) = sum_k h(k) k
        for (int r = 0; r < n; ++r) {
          c(i, r) = s;
          below += h[static_cast<std::size_t>(r)];
          s += below - (total - below);
        }
      } else if (m == Metric::spearman) {
        for (int r = 0; r < n; ++r) c(i, r) = m2 - 2.0 * r * m1 + static_cast<double>(r) * r * total;
      } else {
        for (int r = 0; r < n; ++r) c(i, r) = total - h[static_cast<std::size_t>(r)];
      }
    }
  } else {
    c.setZero();
    for (Eigen::Index j = 0; j < N; ++j)
      for (int i = 0; i < n; ++i)
        for (int r = 0; r < n; ++r) c(i, r) += item_distance(ranks(j, i), r, m);
  }
  return -(alpha / n) * c;
}

RankMatrix simulate_mallows(const Perm& rho0, double alpha, int count, Metric m, Rng& rng) {
  if (!is_itemwise(m)) throw InputError(fmt::format("exact Mallows sampling needs an item-wise distance, not {}", metric_name(m)));
  if (!is_permutation(rho0)) throw InputError("the Mallows consensus rho0 is not a permutation");
  if (!(alpha >= 0) || !std::isfinite(alpha)) throw InputError("the Mallows scale alpha must be finite and >= 0");
  const int n = static_cast<int>(rho0.size());
  Eigen::MatrixXd lw(n, n);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r) lw(i, r) = -(alpha / n) * item_distance(r, rho0[static_cast<std::size_t>(i)], m);
  const SubsetPosterior mallows(lw);
  RankMatrix R(count, n);
  for (int j = 0; j < count; ++j) {
    const Perm p = mallows.sample(rng);
    for (int i = 0; i < n; ++i) R(j, i) = p[static_cast<std::size_t>(i)];
  }
  return R;
}

}  // namespace icmlkit::rank
