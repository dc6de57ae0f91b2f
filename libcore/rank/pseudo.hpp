// Pseudo-Mallows (Liu, Vitelli, Mannino, Frigessi & Scheel, ICML 2026): the Bayesian Mallows
// posterior p(rho | R, alpha) ∝ exp(-(alpha/n) sum_j d(R_j, rho)) (uniform prior, item-wise
// distance: footrule or Spearman) approximated by a product of univariate discrete factors taken
// in a variational item order V = (v_1, ..., v_n):
//   q_V(rho) = prod_k q(rho_{v_k} | rho_{v_1..v_{k-1}}),
//   q(rho_{v_k} = r | ...) ∝ exp(-(alpha/n) sum_j f(R_{j v_k}, r)) over the ranks still free.
// The order is chosen to minimise KL(q_V || p) = E_q[log q_V - log p~] + log Z_p, whose
// order-dependent part E_q[log q_V - log p~] (a negative ELBO) is estimated by sampling from q.
#pragma once

#include <Eigen/Core>

#include <string>
#include <vector>

#include "rank/ranking.hpp"
#include "util/rng.hpp"

namespace icmlkit::rank {

/// q_V for fixed log weights L(i, r) = -(alpha/n) sum_j f(R_ji, r) ([n items, n ranks]).
class PseudoMallows {
 public:
  /// `logw`: [n, n] log weights; `order`: a permutation of the items (V).  Throws InputError when
  /// the shapes disagree or `order` is not a permutation.
  PseudoMallows(Eigen::MatrixXd logw, Perm order);
  /// One draw rho ~ q_V; `logq` (optional) receives log q_V(rho) exactly.
  Perm sample(Rng& rng, double* logq = nullptr) const;
  /// Exact log q_V(r) of a complete ranking.
  double log_q(const Perm& r) const;
  /// log p~(r) = sum_i L(i, r_i) (the unnormalised target).
  double log_target(const Perm& r) const;
  /// The variational order V.
  const Perm& order() const { return order_; }
  /// Number of items.
  int n() const { return static_cast<int>(order_.size()); }

 private:
  Eigen::MatrixXd logw_;
  Perm order_;
};

/// Monte Carlo estimate of E_q[log q_V - log p~] (KL(q_V || p) - log Z_p) with its standard error.
struct KlEstimate {
  double value = 0;
  double se = 0;
};
/// Estimates E_q[log q - log p~] from `samples` draws.
KlEstimate neg_elbo(const PseudoMallows& q, int samples, Rng& rng);

/// Data-dependent candidate orders (the paper conjectures a data-dependent optimum; its exact form
/// was not available to us, so these are candidates the search compares, not the paper's formula).
/// `ranks` may contain missing ranks (ignored).
/// Items sorted by mean observed rank, taken from both ends inwards (best, worst, second best, ...).
Perm ends_inward_order(const RankMatrix& ranks);
/// The reverse of ends_inward_order: middle items first, the extremes last.
Perm middle_out_order(const RankMatrix& ranks);
/// Items by increasing mean observed rank (top of the data consensus first).
Perm mean_rank_order(const RankMatrix& ranks);
/// Items by increasing variance of their observed ranks (most agreed-on first).
Perm variance_order(const RankMatrix& ranks);

/// Local search for the order: starting from `start`, `iterations` proposals each swapping two
/// positions of V, accepted when the estimated negative ELBO (common random numbers: the same
/// seed for every candidate, `samples` draws) decreases.  Returns the best order.
Perm search_order(const Eigen::MatrixXd& logw, Perm start, int iterations, int samples, std::uint64_t seed,
                  double* best_value = nullptr);

}  // namespace icmlkit::rank
