// Exact inference for item-wise Mallows posteriors by a dynamic programme over item subsets.
//
// With complete data, a fixed alpha, a uniform prior on rho and an item-wise distance
// (footrule, Spearman, Hamming) the posterior is p(rho | R) ∝ prod_i exp(L(i, rho_i)) with
// L(i, r) = -(alpha/n) sum_j f(R_ji, r): a permanent.  Assigning ranks 0, 1, ... in turn to
// subsets S of items gives forward sums f(S) = sum_{i in S} f(S \ i) w(i, |S|-1) and backward
// sums b(S), hence log Z, the exact item-by-rank marginals and exact draws, in O(2^n n) time
// and 2^(n+1) doubles of memory; the sums are kept as logarithms (log-sum-exp), so any range
// of log weights works (sushi: 5,000 assessors, log weights spanning thousands of nats).
#pragma once

#include <Eigen/Core>

#include "rank/distance.hpp"
#include "rank/ranking.hpp"
#include "util/rng.hpp"

namespace icmlkit::rank {

/// Largest n the subset DP accepts (2^n doubles per table).
inline constexpr int subset_dp_max_n = 24;

/// The exact distribution p(r) ∝ exp(sum_i L(i, r_i)) over rankings r of n items.
class SubsetPosterior {
 public:
  /// `logw`: [n items, n ranks] log weights L(i, r).  Throws InputError when n < 1 or
  /// n > subset_dp_max_n.  Runs the forward pass.
  explicit SubsetPosterior(const Eigen::MatrixXd& logw);
  /// log sum_r exp(sum_i L(i, r_i)) (the log permanent of exp(L)).
  double log_normaliser() const { return log_norm_; }
  /// Exact marginals P(rho_i = r), [n items, n ranks]; rows and columns sum to 1.
  /// Runs the backward pass on first use.
  Eigen::MatrixXd marginals() const;
  /// One exact draw (backward sampling through the forward sums).
  Perm sample(Rng& rng) const;
  /// log p(r) for a complete ranking r.
  double log_prob(const Perm& r) const;

 private:
  int n_;
  Eigen::MatrixXd logw_;
  std::vector<double> fwd_;   // log f(S), indexed by item mask
  double log_norm_ = 0;
};

/// Log weights L(i, r) = -(alpha/n) sum_j f(R_ji, r) of an item-wise metric, [n, n].
/// `ranks` must be complete.  Throws InputError for a metric that is not item-wise.
Eigen::MatrixXd itemwise_log_weights(const RankMatrix& ranks, double alpha, Metric m);

/// `count` complete rankings drawn exactly from the Mallows model
/// p(R) ∝ exp(-(alpha/n) d(R, rho0)) of an item-wise metric (footrule, Spearman, Hamming), by the
/// subset DP with L(i, r) = -(alpha/n) f(r, rho0_i) (BayesMallows' sample_mallows draws the same
/// distribution by MCMC).  `rho0`: 0-based consensus ranking of n <= subset_dp_max_n items,
/// alpha >= 0.  Returns [count, n] 0-based ranks.  Throws InputError for a non-item-wise metric,
/// rho0 not a permutation or n out of range.
RankMatrix simulate_mallows(const Perm& rho0, double alpha, int count, Metric m, Rng& rng);

}  // namespace icmlkit::rank
