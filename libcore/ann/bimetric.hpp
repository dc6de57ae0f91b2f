// The bi-metric search harness (Xu, Silwal & Indyk, "A Bi-metric Framework for Fast
// Similarity Search"): an index built with the proxy d only, queries answered under the
// expensive D within a budget of Q D-calls, and the baselines, sharing one code path.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ann/cover_tree.hpp"
#include "ann/vamana.hpp"

namespace icmlkit::ann {

/// Search modes (`bimetric-search --mode`).
enum class Mode {
  bimetric,  ///< proxy stage with d, then the quota-bounded search under D (the paper's "bi(ours)")
  rerank,    ///< proxy stage with d, rerank its top Q by D (the paper's "bi(baseline)")
  proxy,     ///< proxy stage only: the index's top k under d, no D-calls
  exact_d,   ///< brute force under d
  exact_D,   ///< brute force under D (the ground truth; n D-calls)
};

/// Parses "bimetric", "rerank", "proxy", "exact-d", "exact-D"; throws UsageError naming `flag`.
Mode parse_mode(const std::string& s, const std::string& flag);
/// The mode's command-line name.
std::string mode_name(Mode m);

/// An index over the items, built with d: a Vamana graph or a cover tree.
struct Index {
  std::optional<VamanaGraph> graph;  ///< set for --index-type vamana
  std::optional<CoverTree> tree;     ///< set for --index-type cover-tree
  VamanaParams params;               ///< Vamana build parameters (when graph)
  std::string type() const { return graph ? "vamana" : "cover-tree"; }
};

/// Per-query search settings.
struct SearchSettings {
  Mode mode = Mode::bimetric;
  int k = 10;                 ///< neighbours returned
  std::uint64_t quota = 100;  ///< Q: D-calls allowed (bimetric, rerank)
  int search_L = 5000;        ///< proxy-stage beam width on the graph (raised to max(k, Q) for rerank)
  int seeds = -1;             ///< bimetric seeds; -1 = the paper's min(max(100, Q/2), list size), then <= Q
  double c = 1.0;             ///< cover-tree bimetric radius scale (bound on D/d between items)
};

/// One query's answer.
struct QueryResult {
  std::vector<std::uint32_t> ids;  ///< distinct item ids, best first
  std::vector<double> dist;        ///< reported distances (under D, or under d for proxy/exact-d)
  std::uint64_t d_calls = 0, D_calls = 0;
};

/// Brute force: the k best items by raw distance (ties broken by id, as every search here).
std::vector<Neighbor> brute_force(QueryDistance& q, int k);

/// Answers one query.  `qd`/`qD`: the query prepared for d and D.  The index must match the
/// items of `d`.  D-calls never exceed `quota` in bimetric and rerank modes.
QueryResult search_one(const Index& index, const Space& d, const Space& D, const float* qd, const float* qD,
                       const SearchSettings& s, SearchScratch& scratch);

/// recall@k in ann-benchmarks' sense: the share of the k true neighbours' distance
/// threshold met, |{j in found : D(q, j) <= D(q, k-th true)}| / k (robust to ties).
/// `found_D`: raw D distances of the returned items; `kth_true`: raw D of the k-th true one.
double recall_at_k(const std::vector<float>& found_D, float kth_true, int k);

/// Quantiles of the distortion D/d (reported distances) over sampled pairs.
struct Distortion {
  std::size_t pairs = 0;           ///< pairs with d > 0 used
  std::vector<double> probs;       ///< quantile levels
  std::vector<double> quantiles;   ///< D/d at those levels
  double max_item_ratio = 0;       ///< max D/d (metric forms) over sampled item-item pairs (cover-tree c)
  double min_item_ratio = 0;       ///< min of the same (C = max/min is the paper's distortion)
};

/// Measures D/d on `query_pairs` random (query, item) pairs and `item_pairs` random item
/// pairs (seeded).  Ratios with d = 0 are skipped.  Quantiles are empty for the ip metric
/// (negative "distances" have no ratio).
Distortion measure_distortion(const Space& d, const Space& D, const std::vector<std::vector<float>>& qd,
                              const std::vector<std::vector<float>>& qD, std::size_t query_pairs, std::size_t item_pairs,
                              std::uint64_t seed);

/// Saves an index (structure + parameters + `meta` attributes) to HDF5 at `path`, atomically.
void save_index(const std::string& path, const Index& index, const io::Provenance& prov, const std::string& extra_json);
/// Loads an index saved by save_index for `n` items.  Throws InputError naming the file
/// when it is missing, not HDF5, truncated or inconsistent.  `extra_json` receives the
/// saved build description.
Index load_index(const std::string& path, std::size_t n, std::string* extra_json);

}  // namespace icmlkit::ann
