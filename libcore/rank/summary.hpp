// Posterior summaries of rank draws and their output files (shared by mallows-mcmc and
// pseudomallows-fit): item-by-rank marginals, CP and MAP consensus, alpha summary, HDF5 draws,
// marginals as CSV/HDF5 and a gnuplot heat map.
#pragma once

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "io/provenance.hpp"
#include "rank/ranking.hpp"

namespace icmlkit::rank {

/// Item-by-rank marginals P(rho_i = r) from draws ([draws, n] row-major 0-based ranks), [n, n].
Eigen::MatrixXd marginals_from_draws(const std::vector<int>& draws, int n);

/// Cumulative-probability (CP) consensus (Vitelli et al. 2018, sec. 5): for ranks 0, 1, ... in
/// turn, the free item with the largest P(rho_i <= r).  Returns the ordering (rank -> item) and
/// the cumulative probability of each pick.
Perm cp_consensus(const Eigen::MatrixXd& marginals, std::vector<double>* cumprob = nullptr);

/// Maximum a posteriori consensus estimated by the most frequent draw; `freq` receives its share.
Perm map_consensus(const std::vector<int>& draws, int n, double* freq = nullptr);
/// Number of distinct rankings among the draws (flat, n values each).
std::size_t distinct_draws(const std::vector<int>& draws, int n);

/// mean, sd, 2.5/50/97.5% quantiles of scalar draws as JSON.
nlohmann::json scalar_summary(const std::vector<double>& x);

/// Total variation max_i (1/2) sum_r |P(i, r) - Q(i, r)| between two marginal matrices (the
/// "marginal accuracy" the benchmarks and tests use).
double max_marginal_tv(const Eigen::MatrixXd& p, const Eigen::MatrixXd& q);
/// The mean over items of the same per-item total-variation distances (the whole table's
/// accuracy rather than its worst item).
double mean_marginal_tv(const Eigen::MatrixXd& p, const Eigen::MatrixXd& q);

/// Writes marginals as CSV (item, rank, probability; 1-based; with a .meta.json sidecar) or HDF5
/// (dataset /marginals [items, ranks]), by extension.  Throws UsageError for another extension.
void write_marginals(const std::string& path, const Eigen::MatrixXd& marginals, const io::Provenance& prov);

/// Writes draws to HDF5: /rho [draws, items] int32 1-based ranks, /alpha [draws], /chain [draws]
/// (and /theta when given), /marginals [items, ranks], provenance as root attributes.
void write_draws_h5(const std::string& path, const std::vector<int>& rho, int n, const std::vector<double>& alpha,
                    const std::vector<int>& chain, const std::vector<double>& theta, const Eigen::MatrixXd& marginals,
                    const io::Provenance& prov);

/// Renders the marginals as a PNG heat map with gnuplot (items in CP-consensus order on the y
/// axis, ranks on x).  Throws RuntimeError when gnuplot is absent or fails.
void write_heatmap(const std::string& png, const Eigen::MatrixXd& marginals, const Perm& consensus_order,
                   const std::string& title);

/// Orderings as 1-based item lists for JSON.
std::vector<int> one_based(const Perm& p);

}  // namespace icmlkit::rank

namespace icmlkit::rank {

/// Where a tool writes its rank draws (empty paths are skipped).
struct DrawOutputs {
  std::string samples;    ///< --samples: HDF5 draws
  std::string marginals;  ///< --marginals: CSV or HDF5
  std::string heatmap;    ///< --heatmap: PNG
};

/// Checks the output paths' extensions before any work (UsageError naming the flag) and, for a
/// heat map, that gnuplot is installed (RuntimeError).
void check_draw_outputs(const DrawOutputs& out);

/// The consensus part of a result: "cp_consensus" (rank, item, cumulative probability),
/// "map_consensus" (ordering, frequency) from draws and their marginals.
nlohmann::json consensus_json(const Eigen::MatrixXd& marginals, const std::vector<int>& draws, int n);

/// Writes the requested files for draws ([draws, n]), alpha/chain/theta per draw.
void write_draw_outputs(const DrawOutputs& out, const std::vector<int>& draws, int n, const std::vector<double>& alpha,
                        const std::vector<int>& chain, const std::vector<double>& theta, const Eigen::MatrixXd& marginals,
                        const io::Provenance& prov, const std::string& title);

}  // namespace icmlkit::rank
