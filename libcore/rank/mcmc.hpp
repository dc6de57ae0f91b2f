// Metropolis-Hastings for the Bayesian Mallows model (Vitelli, Sørensen, Crispino, Frigessi &
// Arjas 2018, JMLR; the sampler of the BayesMallows R package):
//   rho | alpha, R   leap-and-shift proposal (leap size L), uniform prior on rankings;
//   alpha | rho, R   log-normal random walk, exponential(lambda) prior;
//   R_j              augmentation of missing ranks (swap two unobserved items) and of pairwise
//                    data (swap two items, adjacent or uniform pair, keeping the assessor's
//                    preferences, or - with the Bernoulli error model of Crispino et al. 2019 -
//                    paying theta per violated preference);
//   theta            Gibbs draw from Beta(kappa1 + G, kappa2 + M - G) truncated to [0, 0.5].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rank/distance.hpp"
#include "rank/ranking.hpp"
#include "util/rng.hpp"

namespace icmlkit::rank {

/// Data for the sampler: either rankings (complete or with missing ranks) or pairwise preferences.
struct MallowsData {
  int n_items = 0;
  RankMatrix ranks;  ///< [assessors, items]; missing_rank marks latent ranks.  Empty for pairwise data.
  std::vector<std::vector<Preference>> prefs;  ///< per assessor; empty for rank data
  std::vector<std::string> labels;  ///< optional assessor names for error messages (file ids)
  std::string source;               ///< optional file the data came from, for error messages
  /// Number of assessors.
  int assessors() const { return prefs.empty() ? static_cast<int>(ranks.rows()) : static_cast<int>(prefs.size()); }
};

/// How inconsistent pairwise preferences are handled.
enum class ErrorModel {
  none,       ///< every assessor's preferences must be acyclic (exit 1 otherwise)
  bernoulli,  ///< each preference is flipped with probability theta (Crispino et al. 2019)
};

/// Sampler settings (defaults follow BayesMallows where it has one).
struct McmcOptions {
  Metric metric = Metric::footrule;
  int iterations = 2000;       ///< per chain, burn-in included (BayesMallows nmc = 2000)
  int burnin = 500;            ///< discarded iterations
  int thin = 1;                ///< keep every thin-th draw of rho and alpha after burn-in
  int chains = 1;              ///< independent chains (random starting rho), run in parallel
  int leap_size = 1;           ///< L of leap-and-shift
  bool rho_init_data = false;  ///< start rho at the data's mean-rank (or wins-minus-losses) order instead of a random ranking
  double alpha_init = 1.0;     ///< starting alpha
  double alpha_prop_sd = 0.1;  ///< sd of the log-normal random walk on alpha
  double lambda = 0.001;       ///< rate of the exponential prior on alpha
  int alpha_jump = 1;          ///< update alpha every alpha_jump iterations
  bool fix_alpha = false;      ///< keep alpha at alpha_init
  int aug_moves = 1;           ///< augmentation proposals per assessor per iteration
  ErrorModel error_model = ErrorModel::none;
  double kappa1 = 1.0, kappa2 = 1.0;  ///< truncated Beta prior of theta
  int is_samples = 10000;      ///< importance samples per log Z grid node (only without an exact method)
  std::uint64_t seed = 20260701;
  int threads = 0;             ///< 0 = all cores (chains run in parallel)
};

/// The kept draws of one chain.
struct ChainDraws {
  std::vector<int> rho;        ///< [draws, n] row-major 0-based ranks
  std::vector<double> alpha;   ///< [draws]
  std::vector<double> theta;   ///< [draws] (Bernoulli error model only)
  double rho_acceptance = 0, alpha_acceptance = 0, aug_acceptance = 0;  ///< rates over all iterations
};

/// All chains of one run.
struct McmcResult {
  int n_items = 0;
  std::vector<ChainDraws> chains;
  double seconds = 0;         ///< wall time of the sampling
  double cpu_seconds = 0;     ///< process CPU time of the sampling (all threads)
  std::string log_z_method;   ///< how log Z was evaluated
};

/// Runs `opt.chains` chains.  Throws InputError for pairwise data with a cycle when the error
/// model is none ("choose --error-model bernoulli"), UsageError for invalid options.
McmcResult run_mcmc(const MallowsData& data, const McmcOptions& opt);

/// The leap-and-shift proposal (Vitelli et al. 2018, sec. 2.3): leaps item u to a rank within
/// L of its own, shifts the items in between by one.  Writes the proposal into `out` and returns
/// log q(rho | out) - log q(out | rho) (the backward minus forward log probability).
double leap_and_shift(const Perm& rho, int leap_size, Rng& rng, Perm& out);

/// Gelman-Rubin potential scale reduction factor of one scalar over chains of equal length
/// ([chains][draws]); NaN with fewer than 2 chains or 2 draws.
double rhat(const std::vector<std::vector<double>>& chains);

}  // namespace icmlkit::rank
