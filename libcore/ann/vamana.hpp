// Vamana / DiskANN in-memory graph (Subramanya et al., NeurIPS 2019): RobustPrune with
// alpha, max out-degree R, build list L, two passes (alpha = 1, then alpha), medoid entry,
// greedy beam search; and the bi-metric quota search of Xu, Silwal & Indyk (their
// `greedy_search_quota`): a best-first search under the expensive D on the graph built with d.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ann/metric.hpp"
#include "io/hdf5.hpp"

namespace icmlkit::ann {

/// A candidate: item id and raw distance to the query (metric.hpp).
struct Neighbor {
  std::uint32_t id = 0;
  float dist = 0.0f;
  bool operator<(const Neighbor& o) const noexcept { return dist < o.dist || (dist == o.dist && id < o.id); }
};

/// Build parameters, named as DiskANN's flags.
struct VamanaParams {
  int R = 64;           ///< -R: maximum out-degree
  int L = 100;          ///< -L: build search list size (>= R recommended)
  float alpha = 1.2f;   ///< --alpha: pruning slack of the second pass (>= 1)
  int passes = 2;       ///< --passes: 2 = the paper (alpha = 1, then alpha); 1 = one pass at alpha (DiskANN's library)
  std::uint64_t seed = 0;  ///< insertion order of each pass
};

/// A greedy-search list entry: a candidate, its raw distance, and whether it was expanded
/// (one 12-byte record, so an insertion into the sorted list is one memmove).
struct BeamEntry {
  std::uint32_t id = 0;
  float dist = 0.0f;
  std::uint32_t expanded = 0;
};

/// Per-thread scratch for searches over n items (visited set, candidate list); reused so
/// the hot loop does not allocate.
struct SearchScratch {
  std::vector<std::uint64_t> seen;     ///< visited set: one bit per item (n / 8 bytes, cache resident)
  std::vector<std::uint32_t> touched;  ///< the items marked since reset, to clear their bits
  std::vector<BeamEntry> beam;      ///< greedy search: sorted candidate list (capacity L)
  std::vector<Neighbor> pool;       ///< beam search result; quota search frontier heap
  std::vector<Neighbor> visited;    ///< expanded nodes (build: the prune candidates)
  std::vector<double> dcache;       ///< cover tree: distance per evaluated item
  std::vector<std::uint32_t> ids;   ///< a node's unvisited neighbours, evaluated as one batch
  std::vector<float> dists;         ///< their distances
  /// Starts a new search over `n` items (clears the visited set).
  void reset(std::size_t n);
  /// Whether item u is marked visited.
  bool visited_item(std::uint32_t u) const { return (seen[u >> 6] >> (u & 63)) & 1u; }
  /// Marks item u visited; returns false when it already was.
  bool visit(std::uint32_t u) {
    std::uint64_t& w = seen[u >> 6];
    const std::uint64_t bit = std::uint64_t{1} << (u & 63);
    if (w & bit) return false;
    w |= bit;
    touched.push_back(u);
    return true;
  }
};

/// A directed graph with out-degree <= R, stored flat: neighbours of i are
/// nbrs[i*R .. i*R + degree[i]).
class VamanaGraph {
 public:
  /// Builds the graph on `d` (the only metric it ever sees): two passes over a seeded random
  /// order (alpha = 1, then alpha, as the paper; one pass at alpha when p.passes = 1, as
  /// DiskANN's library), each one OpenMP loop inserting points in parallel as DiskANN does:
  /// search the live graph, RobustPrune, set the list, add back edges under per-node
  /// (striped) locks.  Back edges may fill a list up to 1.3 R before it is pruned, and every
  /// list longer than R is pruned to R at the end of each pass, so the result has degree <= R.
  /// With one thread the graph depends on the seed only; with more, also on the thread
  /// schedule (as DiskANN's).  Under ip the graph is built with the l2 rules on the
  /// augmented vectors (see robust_prune) and searched with ip unchanged.  Throws UsageError for R < 1, L < 1, alpha < 1 or passes not
  /// 1 or 2.
  static VamanaGraph build(const Space& d, const VamanaParams& p);

  /// Greedy beam search (DiskANN GreedySearch) from the medoid, list size L: repeatedly
  /// expands the closest unexpanded candidate and keeps the best L seen.  Returns the list
  /// (sorted, at most L).  Every distance goes through `q` (counted).
  std::vector<Neighbor> beam_search(QueryDistance& q, int L, SearchScratch& s) const;

  /// Bi-metric search under the expensive D (Xu et al., `greedy_search_quota`): evaluates
  /// `seeds` (truncated to `quota`) under D, then repeatedly expands the best unexpanded
  /// evaluated node, evaluating its not-yet-evaluated out-neighbours until `quota` D-calls
  /// are spent (seeds count) or nothing is left.  Returns the best `k` by D among all points
  /// evaluated.  D-calls never exceed `quota`.
  std::vector<Neighbor> quota_search(QueryDistance& D, const std::vector<std::uint32_t>& seeds, std::uint64_t quota, int k,
                                     SearchScratch& s) const;

  /// RobustPrune(p, V, alpha, R) on item distances of `d`: repeatedly keeps the closest
  /// remaining candidate p* and drops every p' it occludes: alpha * d(p*, p') < d(p, p')
  /// (DiskANN's occlusion factor d(p, p') / d(p*, p') > alpha, on raw distances: squared L2
  /// as in DiskANN, 1 - cos under cosine), and a candidate at raw distance <= 0 from a kept
  /// one (a duplicate) is always dropped, so duplicates never fill a list.  ip is not a
  /// metric (-<x, y> is negative, and an item is not its own nearest neighbour), so under
  /// ip the rule runs in the MIPS-to-L2 augmented space x' = (x, sqrt(M^2 - |x|^2)), M the
  /// largest norm (Bachrach et al. 2014; DiskANN's inner-product preprocessing), where the
  /// order by distance to a query (q, 0) is the order by -<x, q>; the candidates' distances
  /// are recomputed there.  `cand` (sorted or not, may contain p) is consumed.
  static std::vector<std::uint32_t> robust_prune(const Space& d, std::uint32_t p, std::vector<Neighbor>& cand, float alpha, int R);

  /// The space RobustPrune works in for `d`: under ip the MIPS-to-L2 augmented vectors (see
  /// robust_prune; build it once and prune many lists in it), else an empty Space (prune in d).
  static Space prune_space(const Space& d);
  /// The entry point build() uses: the item closest (L2) to the centroid of d's vectors (of the
  /// MIPS-to-L2 augmented vectors under ip, as build() works there).
  static std::uint32_t medoid_of(const Space& d);
  /// A graph from out-lists (lists[i]: item i's neighbours, each < lists.size(), at most R) and
  /// an entry point: how a merged sharded build is assembled.  Throws InputError for a list
  /// longer than R, an id out of range or a medoid outside the items; UsageError for R < 1.
  static VamanaGraph from_lists(int R, std::uint32_t medoid, const std::vector<std::vector<std::uint32_t>>& lists);

  /// Number of items.
  std::size_t size() const noexcept { return degree_.size(); }
  /// Maximum out-degree R.
  int max_degree() const noexcept { return R_; }
  /// Entry point (the medoid: the item closest to the centroid under d).
  std::uint32_t medoid() const noexcept { return medoid_; }
  /// Out-degree of item i.
  std::uint32_t degree(std::size_t i) const noexcept { return degree_[i]; }
  /// Out-neighbours of item i.
  const std::uint32_t* neighbors(std::size_t i) const noexcept { return nbrs_.data() + i * stride_; }
  /// Wall seconds of each build pass (empty for a loaded graph; not saved).
  const std::vector<double>& pass_seconds() const noexcept { return pass_seconds_; }

  /// Saves structure and parameters in group `group` of an open HDF5 file.
  void save(const io::h5::Handle& file, const std::string& group, const VamanaParams& p) const;
  /// Loads a saved graph; checks ids < n, degree <= R, that n equals `n_expected`, and that the
  /// entry point has out-neighbours when n > 1.
  /// Throws InputError naming `label` on any inconsistency.
  static VamanaGraph load(const io::h5::Handle& file, const std::string& group, std::size_t n_expected, const std::string& label);

 private:
  int R_ = 0;
  std::size_t stride_ = 0;  // slots per node: ceil(1.3 R) during the build (DiskANN's slack), R after
  std::uint32_t medoid_ = 0;
  std::vector<std::uint32_t> degree_;
  std::vector<std::uint32_t, CacheLineAllocator<std::uint32_t>> nbrs_;  // cache-line aligned, huge pages when large
  std::vector<double> pass_seconds_;
};

}  // namespace icmlkit::ann
