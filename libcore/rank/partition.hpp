// The Mallows partition function Z_n(alpha) = sum_sigma exp(-(alpha/n) d(sigma, id)) for the six
// distances (the likelihood exp(-(alpha/n) d(R, rho)) / Z_n(alpha) of BayesMallows).
//
// Exact methods, by metric:
//   kendall, cayley, hamming  closed forms (BayesMallows src/partition_functions.cpp), any n;
//   footrule                  a weighted counting recursion over "open" positions, O(n^2): exact
//                             up to floating-point rounding for every n;
//   spearman                  the permanent of exp(-(alpha/n)(i-r)^2) by the DP over item
//                             subsets, n <= subset_dp_max_n;
//   ulam                      sum over integer partitions lambda of n of (f^lambda)^2 (RSK:
//                             permutations with longest increasing subsequence lambda_1),
//                             n <= ulam_exact_max_n.
// Beyond: importance sampling with the sequential pseudo-likelihood proposal.
//
// Exactness of the counting recursions (integer cardinalities N_n(d), as BayesMallows tabulates
// them from OEIS): footrule counts are exact in unsigned 128-bit integers for n <= 34 (34! <
// 2^128); stored as double they stay exact while every count is below 2^53, i.e. n <= 18
// (18! < 2^53), and as 80-bit long double (64-bit mantissa) n <= 20.  Spearman counts here are
// exact (64-bit) for n <= 12, a memory limit of the value-subset DP.  log Z itself never needs
// the counts: the weighted recursions accumulate exp(-(alpha/n) d) directly, rescaled per step, so
// they have only floating-point rounding (relative ~1e-13 in the tests) at any n.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rank/distance.hpp"
#include "util/rng.hpp"

namespace icmlkit::rank {

/// Largest n for the exact Ulam sum over partitions.
inline constexpr int ulam_exact_max_n = 50;

/// Whether log Z_n(alpha) has an exact method for this metric and n.
bool log_z_exact(int n, Metric m);

/// Exact log Z_n(alpha), alpha >= 0.  Throws InputError when no exact method covers n.
double log_z(int n, double alpha, Metric m);

/// An importance-sampling estimate of log Z, its standard error (delta method) and the effective
/// sample size (sum w)^2 / sum w^2 (an ESS far below the sample count means the standard error
/// itself is unreliable).
struct LogZEstimate {
  double value = 0;
  double se = 0;
  double ess = 0;
};

/// Largest n for importance sampling (its two n x n double tables: 400 MB at this n).
inline constexpr int importance_max_n = 5000;
/// Largest samples * n^2 (proposal steps) one importance-sampling estimate may take (minutes).
inline constexpr double importance_max_work = 1e11;
/// Long computations (importance sampling, grids of log Z) print a progress line on stderr once
/// they have run this long, then every progress_every_seconds.
inline constexpr double progress_after_seconds = 3.0;
/// See progress_after_seconds.
inline constexpr double progress_every_seconds = 10.0;

/// Throws UsageError, saying how to get within reach, when importance sampling of log Z with
/// `samples` samples at this n exceeds importance_max_n or importance_max_work.
void check_importance_reach(int n, int samples);

/// log Z_n(alpha) by importance sampling (an estimate, as BayesMallows uses beyond its exact
/// tables): `samples` draws of the sequential proposal that puts items, in a random order, on
/// free ranks with probability ∝ exp(-(alpha/n) f(r, i)) (f the footrule term for non-item-wise
/// metrics), weighted by exp(-(alpha/n) d) / q.  O(n^2) per draw with precomputed weights; OpenMP
/// over blocks of draws seeded from one draw of `rng` (thread-count independent); a progress
/// line on stderr after progress_after_seconds.  Throws as check_importance_reach.
LogZEstimate log_z_importance(int n, double alpha, Metric m, int samples, Rng& rng, int threads = 0);

/// N_n(d): the number of permutations of n at footrule distance d from the identity, d = 0, 2,
/// ..., floor(n^2/2) (entry k is d = 2k).  Exact integers (unsigned 128-bit) for n <= 34;
/// OEIS A062869.  Throws InputError beyond.
std::vector<unsigned __int128> footrule_counts(int n);

/// N_n(d) for the Spearman distance, entry k is d = 2k, k <= (n^3 - n)/6.  Exact (64-bit) for
/// n <= 12 (subset DP over value sets tracking d: 2^n (n^3 - n)/3 words, 19 MB at n = 12);
/// OEIS A175929.  Throws InputError beyond (log Z itself stays exact to n = 24 by the DP).
std::vector<std::uint64_t> spearman_counts(int n);

/// log N_n(d) for the Ulam distance d = 0..n-1 (-inf where zero), n <= ulam_exact_max_n.
std::vector<double> ulam_log_counts(int n);

/// log Z_n(alpha) as a function of alpha for one (n, metric), fast enough for an MCMC step:
/// exact closed forms are evaluated directly; expensive exact methods (Spearman n > 12) and
/// importance sampling are evaluated on a grid in log alpha (step 1/200) on first need, cached,
/// and interpolated linearly.  Thread-safe (one instance is shared by parallel chains); prints a
/// progress line on stderr once grid nodes have taken progress_after_seconds.  The constructor
/// throws as check_importance_reach when importance sampling is needed and out of reach.
class PartitionFunction {
 public:
  /// `is_samples`: importance samples per grid node when no exact method exists.
  PartitionFunction(int n, Metric m, int is_samples = 10000, std::uint64_t seed = default_seed);
  /// log Z_n(alpha), alpha > 0.
  double operator()(double alpha);
  /// "closed form", "counting recursion", "subset DP", "partition sum", or "importance sampling".
  std::string method() const;

 private:
  double node(int k);
  int n_;
  Metric m_;
  int is_samples_;
  std::uint64_t seed_;
  bool grid_;
  std::vector<double> ulam_;
  std::map<int, double> cache_;
  std::unique_ptr<std::mutex> mutex_;
  double node_seconds_ = 0, next_report_ = progress_after_seconds;
};

}  // namespace icmlkit::rank
