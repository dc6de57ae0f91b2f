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
/// The factor weights exp(L(i, r) - max_r L(i, r)) are precomputed once (row per item), so a
/// draw costs O(n^2) additions over the free ranks, about one logarithm (log q accumulates the
/// factors' totals as a product), no exponentials and no allocation; a factor whose remaining
/// weights all underflow falls back to log-space arithmetic for that step.
class PseudoMallows {
 public:
  /// `logw`: [n, n] log weights; `order`: a permutation of the items (V).  Throws InputError when
  /// the shapes disagree or `order` is not a permutation.
  PseudoMallows(Eigen::MatrixXd logw, Perm order);
  /// One draw rho ~ q_V; `logq` (optional) receives log q_V(rho) exactly.
  Perm sample(Rng& rng, double* logq = nullptr) const;
  /// Size of the `weights` work space of sample_into for n items: 2n + (n + 3) / 4.
  static std::size_t work_size(int n) { return 2 * static_cast<std::size_t>(n) + static_cast<std::size_t>(n + 3) / 4; }
  /// Allocation-free draw: writes the 0-based ranks of items 0..n-1 to `out` [n], uses
  /// `free_ranks` [n] and `weights` [work_size(n)] as work space, and returns log q_V(out).
  /// Each factor is drawn by inverse CDF over the free ranks (in the work-space order of
  /// `free_ranks`, located in blocks of four by comparisons against running sums).  When `marg` is not null
  /// ([n items x n ranks], row-major) it adds the factor probabilities q(rho_v = r | earlier
  /// ranks) of every step: their expectation is the marginal q(rho_v = r), so their mean over
  /// draws is a Rao-Blackwellised (lower-variance) estimate of q's marginals.
  double sample_into(Rng& rng, int* out, int* free_ranks, double* weights, double* marg = nullptr) const;
  /// sample_into with another item order `order` [n] (a permutation, not checked) for this draw
  /// only: the sequential importance-sampling proposal of log Z draws a fresh order per sample.
  double sample_into(Rng& rng, const int* order, int* out, int* free_ranks, double* weights, double* marg = nullptr) const;
  /// L draws at once, in lockstep factor by factor (their independent steps overlap in the CPU):
  /// draw l uses order[l], writes out[l], with work space fr[l] [n] and work[l] [work_size(n)];
  /// log q of draw l goes to logq[l].  The uniforms are taken factor by factor, lane by lane.
  /// Marginals as sample_into.  Defined for L = 1 and 2.
  template <int L>
  void sample_lanes(Rng& rng, const int* const* order, int* const* out, int* const* fr, double* const* work, double* marg,
                    double* logq) const;
  /// Exact log q_V(r) of a complete ranking.
  double log_q(const Perm& r) const;
  /// L(i, r): the log weight of item i at 0-based rank r.
  double log_weight(int i, int r) const { return logw_(i, r); }
  /// log p~(r) = sum_i L(i, r_i) (the unnormalised target).
  double log_target(const Perm& r) const;
  /// The variational order V.
  const Perm& order() const { return order_; }
  /// Number of items.
  int n() const { return static_cast<int>(order_.size()); }

 private:
  Eigen::MatrixXd logw_;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> w_;  // exp(L - row max)
  std::vector<double> row_max_;                                               // max_r L(i, r)
  Perm order_;
  // One factor of a draw (see pseudo.cpp): returns the picked index into fr.
  int factor_step(int item, int m, const int* fr, double* p, double* bs, double* c, double u01, double& tot,
                  double& shift) const;
};

/// `count` draws from q_V, in parallel (OpenMP over blocks of 256 draws, block b seeded with
/// derive_seed(seed, b); one thread below 1e7 proposal steps), so the result does not depend on
/// the number of threads.
struct PseudoDraws {
  std::vector<int> rho;        ///< [count, n] row-major 0-based ranks
  std::vector<double> log_q;   ///< [count] exact log q_V of each draw
  Eigen::MatrixXd marginals;   ///< [n items, n ranks] Rao-Blackwellised estimate of q's marginals
};
/// Draws `count` >= 1 samples with `threads` threads (0 = all cores).
PseudoDraws draw_pseudo(const PseudoMallows& q, int count, std::uint64_t seed, int threads = 0);

/// The authors' sampler (sylvia-liu-qinghua/Pseudo-Mallows, RhoSamples -> SampleRho with sigma = 0
/// and GenerateVOrdering called per draw): every draw takes a fresh V order of `consensus` (the
/// items by mean rank, mean_rank_order) whose floor(n/2) pair orientations are fair coins from
/// the draw's random stream, so the draws come from the uniform mixture
/// q_mix = 2^-floor(n/2) sum_V q_V of the V-order factorisations of q's weights (q's own order is
/// not used).  `log_q` holds log q_V of the component that made each draw: its mean minus
/// log p~ estimates the components' mean KL (plus log Z_p), an upper bound on KL(q_mix || p) by
/// convexity.  The marginals are Rao-Blackwellised over the factors as in draw_pseudo, hence
/// unbiased for q_mix's marginals.  Blocks, seeds and threading as draw_pseudo.  Throws InputError
/// when `consensus` is not a permutation of q's n items, UsageError when count < 1.
PseudoDraws draw_pseudo_v_mixture(const PseudoMallows& q, const Perm& consensus, int count, std::uint64_t seed, int threads = 0);

/// Opt-in, NOT the paper's method: self-normalised importance reweighting of draws from q towards
/// the exact posterior p.  Draw s gets the weight w_s ∝ exp(log p~(rho_s) - log q(rho_s)) (log q
/// exact, from the draw), normalised to sum 1; the marginals are sum_s w_s 1[rho_s(i) = r], which
/// converge to p's (not q's) as the draws grow, at a rate set by the effective sample size.  For
/// V-mixture draws (draw_pseudo_v_mixture) log q is the drawing component's log q_V: importance
/// sampling on the joint space of (V, rho) with V uniform, still consistent for p.
struct ReweightedMarginals {
  Eigen::MatrixXd marginals;  ///< [n items, n ranks] weighted estimate of p's marginals
  double ess = 0;             ///< Kish effective sample size (sum w)^2 / sum w^2, in [1, draws]
  double max_weight = 0;      ///< largest normalised weight
};
/// Reweights the draws `d` of q (see above).  Throws UsageError when `d` holds no draws.
ReweightedMarginals reweight_draws(const PseudoMallows& q, const PseudoDraws& d);

/// Monte Carlo estimate of E_q[log q_V - log p~] (KL(q_V || p) - log Z_p) with its standard error.
struct KlEstimate {
  double value = 0;
  double se = 0;
};
/// The mean of log_q - log p~ over existing draws `d` (from draw_pseudo: E_q[log q - log p~];
/// from draw_pseudo_v_mixture: the upper bound described there).
KlEstimate neg_elbo(const PseudoMallows& q, const PseudoDraws& d);
/// Estimates E_q[log q - log p~] from `samples` draws.
KlEstimate neg_elbo(const PseudoMallows& q, int samples, Rng& rng);
/// The same from `samples` draws made in parallel by draw blocks seeded from `seed` (results do
/// not depend on the thread count; the same seed gives common random numbers across orders).
KlEstimate neg_elbo(const PseudoMallows& q, int samples, std::uint64_t seed, int threads = 0);

/// The paper's conjectured optimal variational order, the "V order" (read in the authors'
/// reference code, sylvia-liu-qinghua/Pseudo-Mallows: GenerateVOrdering / generateVOrderings,
/// the set tested by isV): with c the items' ranks by column sum of the data (ties: lower item
/// index first), items are factorised from the middle of c outwards: for odd n the middle item
/// first, then the two items at distance 1 from the middle, then distance 2, ..., and the
/// consensus top and bottom items last; the items of each pair come in either order.
/// `worse_first` picks that order per pair: pair k (k = 0 nearest the middle) puts the worse
/// (higher c) item first when worse_first[k] is nonzero (missing entries count as 0).  Missing
/// ranks are ignored in the column means.
Perm v_order(const RankMatrix& ranks, const std::vector<char>& worse_first = {});
/// The V order with every pair's order a fair coin from `rng`, as the reference code draws it.
Perm v_order(const RankMatrix& ranks, Rng& rng);
/// V-order refinement within the conjectured set: starting from `worse_first`, one pass over the
/// floor(n/2) pairs flipping each when that lowers the estimated E_q[log q - log p~] (`samples`
/// draws, common random numbers from `seed`).  Returns the best V order found; `best_value`
/// (optional) receives its estimate.
Perm v_order_search(const Eigen::MatrixXd& logw, const RankMatrix& ranks, std::vector<char> worse_first, int samples,
                    std::uint64_t seed, double* best_value = nullptr, int threads = 0);

/// Other data-dependent candidate orders, for comparison with the V order.
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
