#include "rank/pseudo.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "util/error.hpp"

namespace icmlkit::rank {

PseudoMallows::PseudoMallows(Eigen::MatrixXd logw, Perm order) : logw_(std::move(logw)), order_(std::move(order)) {
  if (logw_.rows() != logw_.cols() || logw_.rows() != static_cast<Eigen::Index>(order_.size()))
    throw InputError("Pseudo-Mallows: the weight matrix must be [n, n] for an order of n items");
  if (!is_permutation(order_)) throw InputError("Pseudo-Mallows: the variational order is not a permutation of the items");
}

Perm PseudoMallows::sample(Rng& rng, double* logq) const {
  const int n = this->n();
  Perm r(static_cast<std::size_t>(n));
  // free ranks kept in a compact array; p holds the factor's unnormalised weights
  int free_ranks[256];
  std::vector<int> fr_big;
  int* fr = free_ranks;
  if (n > 256) {
    fr_big.resize(static_cast<std::size_t>(n));
    fr = fr_big.data();
  }
  std::iota(fr, fr + n, 0);
  double lq = 0;
  std::vector<double> p(static_cast<std::size_t>(n));
  int m = n;
  for (int k = 0; k < n; ++k) {
    const int item = order_[static_cast<std::size_t>(k)];
    double mx = -std::numeric_limits<double>::infinity();
    for (int t = 0; t < m; ++t) mx = std::max(mx, logw_(item, fr[t]));
    double tot = 0;
    for (int t = 0; t < m; ++t) tot += (p[static_cast<std::size_t>(t)] = std::exp(logw_(item, fr[t]) - mx));
    double u = rng.uniform() * tot;
    int pick = m - 1;
    for (int t = 0; t < m; ++t) {
      u -= p[static_cast<std::size_t>(t)];
      if (u < 0) {
        pick = t;
        break;
      }
    }
    lq += std::log(p[static_cast<std::size_t>(pick)] / tot);
    r[static_cast<std::size_t>(item)] = fr[pick];
    fr[pick] = fr[--m];
  }
  if (logq) *logq = lq;
  return r;
}

double PseudoMallows::log_q(const Perm& r) const {
  const int n = this->n();
  std::vector<char> used(static_cast<std::size_t>(n), 0);
  double lq = 0;
  for (int k = 0; k < n; ++k) {
    const int item = order_[static_cast<std::size_t>(k)];
    double mx = -std::numeric_limits<double>::infinity();
    for (int s = 0; s < n; ++s)
      if (!used[static_cast<std::size_t>(s)]) mx = std::max(mx, logw_(item, s));
    double tot = 0;
    for (int s = 0; s < n; ++s)
      if (!used[static_cast<std::size_t>(s)]) tot += std::exp(logw_(item, s) - mx);
    const int rr = r[static_cast<std::size_t>(item)];
    lq += logw_(item, rr) - mx - std::log(tot);
    used[static_cast<std::size_t>(rr)] = 1;
  }
  return lq;
}

double PseudoMallows::log_target(const Perm& r) const {
  double s = 0;
  for (int i = 0; i < n(); ++i) s += logw_(i, r[static_cast<std::size_t>(i)]);
  return s;
}

KlEstimate neg_elbo(const PseudoMallows& q, int samples, Rng& rng) {
  double s1 = 0, s2 = 0;
  for (int s = 0; s < samples; ++s) {
    double lq;
    const Perm r = q.sample(rng, &lq);
    const double v = lq - q.log_target(r);
    s1 += v;
    s2 += v * v;
  }
  const double mean = s1 / samples;
  const double var = std::max(0.0, s2 / samples - mean * mean);
  return {mean, std::sqrt(var / samples)};
}

namespace {
Perm order_by(const RankMatrix& ranks, bool variance) {
  const int n = static_cast<int>(ranks.cols());
  std::vector<double> key(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    double s = 0, s2 = 0;
    int c = 0;
    for (Eigen::Index j = 0; j < ranks.rows(); ++j)
      if (ranks(j, i) != missing_rank) {
        s += ranks(j, i);
        s2 += static_cast<double>(ranks(j, i)) * ranks(j, i);
        ++c;
      }
    const double mean = c ? s / c : (n - 1) / 2.0;
    key[static_cast<std::size_t>(i)] = variance ? (c ? s2 / c - mean * mean : 1e300) : mean;
  }
  Perm o(static_cast<std::size_t>(n));
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return key[static_cast<std::size_t>(a)] < key[static_cast<std::size_t>(b)]; });
  return o;
}
}  // namespace

Perm mean_rank_order(const RankMatrix& ranks) { return order_by(ranks, false); }

Perm ends_inward_order(const RankMatrix& ranks) {
  const Perm by_mean = order_by(ranks, false);
  Perm o;
  o.reserve(by_mean.size());
  for (std::size_t lo = 0, hi = by_mean.size(); lo < hi;) {
    o.push_back(by_mean[lo++]);
    if (lo < hi) o.push_back(by_mean[--hi]);
  }
  return o;
}
Perm middle_out_order(const RankMatrix& ranks) {
  Perm o = ends_inward_order(ranks);
  std::reverse(o.begin(), o.end());
  return o;
}

Perm variance_order(const RankMatrix& ranks) { return order_by(ranks, true); }

Perm search_order(const Eigen::MatrixXd& logw, Perm start, int iterations, int samples, std::uint64_t seed, double* best_value) {
  auto score = [&](const Perm& o) {
    Rng rng(derive_seed(seed, 77));  // common random numbers for every candidate
    return neg_elbo(PseudoMallows(logw, o), samples, rng).value;
  };
  Perm best = std::move(start);
  double bv = score(best);
  Rng prop(derive_seed(seed, 78));
  const auto n = static_cast<std::uint64_t>(best.size());
  for (int it = 0; it < iterations && n > 1; ++it) {
    Perm cand = best;
    const auto a = prop.below(n);
    auto b = prop.below(n - 1);
    if (b >= a) ++b;
    std::swap(cand[a], cand[b]);
    const double v = score(cand);
    if (v < bv) {
      bv = v;
      best = std::move(cand);
    }
  }
  if (best_value) *best_value = bv;
  return best;
}

}  // namespace icmlkit::rank
