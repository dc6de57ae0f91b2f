// Cover tree (Beygelzimer, Kakade & Langford, ICML 2006) built with the proxy metric d, its
// exact k-NN query, and the bi-metric query of Xu, Silwal & Indyk under the expensive D.
//
// Levels i are integers; C_i = { p : level(p) >= i } is the cover set at level i.  The
// three invariants (checked by `check_invariants`):
//   nesting     C_i is a subset of C_{i-1}  (a node's parent sits at a strictly higher level)
//   covering    every p in C_{i-1} \ C_i has a parent q in C_i with m(p, q) <= 2^i
//   separation  distinct p, q in C_i have m(p, q) > 2^i
// where m is the metric form of the space's distance: Euclidean for l2, the chord
// sqrt(2 (1 - cos)) for cosine (1 - cos itself breaks the triangle inequality); inner
// product is not a metric and is refused.  Items at distance 0 from a node (duplicates)
// are kept in that node's duplicate list, outside the levels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ann/metric.hpp"
#include "ann/vamana.hpp"
#include "io/hdf5.hpp"

namespace icmlkit::ann {

/// Metric form of a raw distance (see above).  Throws nothing; ip returns the raw value.
double metric_distance(Metric m, float raw) noexcept;

/// A cover tree over the items of a Space.
class CoverTree {
 public:
  /// Inserts every item in id order with the paper's Insert (Algorithm 2): descend the cover
  /// sets Q_i = { q in children(Q_{i+1}) : m(p, q) <= 2^i } while they are non-empty, then
  /// attach p at level i-1 under a q in the lowest Q_i with m(p, Q_i) <= 2^i.  The root is
  /// item 0 at level ceil(log2(max_p m(0, p))).  Throws UsageError for the ip metric.
  static CoverTree build(const Space& d);

  /// Brute-force check of nesting, covering and separation over every level, and that every
  /// item is a node or a duplicate exactly once.  Returns the violations found (empty =
  /// valid), at most `max_report`.
  std::vector<std::string> check_invariants(const Space& d, std::size_t max_report = 10) const;

  /// Exact k nearest neighbours under the space the tree was built with: a best-first
  /// branch-and-bound over the tree (the cover-tree query of Beygelzimer et al. with the
  /// level-by-level sweep replaced by a priority order): pop the evaluated node q closest to
  /// the query; skip it if m(query, q) - 2^(level(q)+1) > m_k (every descendant of q lies
  /// within 2^(level(q)+1) of q, by covering); otherwise evaluate all its children.  m_k
  /// is the k-th best distance so far.  Returns raw distances, sorted (ties by id).
  /// Duplicates share their node's distance (not re-evaluated).
  std::vector<Neighbor> knn(QueryDistance& q, int k, SearchScratch& s) const;

  /// Bi-metric query under D on the tree built with d (our own statement of the paper's
  /// cover-tree procedure: its pseudo-code was not available to check against, and the
  /// reference code has no cover tree; man bimetric-search lists the possible departures:
  /// best-first rather than level-by-level order, no (1 + epsilon) early stop, c a sampled
  /// maximum of D/d): the same best-first search evaluated with D and the radius
  /// scaled by `c`, an upper bound on D/d between items (so q's descendants lie within
  /// c 2^(level(q)+1) of q under D): skip q when D(query, q) - c 2^(level(q)+1) > D_k.
  /// Duplicates under d are evaluated under D like nodes.  Stops when `quota` D-calls are
  /// spent (never exceeded) and returns the best k by D among all points evaluated.  Exact
  /// when c bounds D/d (the metric forms) and the quota is not reached.
  std::vector<Neighbor> bimetric_knn(QueryDistance& D, double c, std::uint64_t quota, int k, SearchScratch& s) const;

  /// Number of items (nodes + duplicates).
  std::size_t size() const noexcept { return level_.size(); }
  /// Root item.
  std::uint32_t root() const noexcept { return root_; }
  /// Top level of item i (duplicates: the level of their node).
  int level(std::size_t i) const noexcept { return level_[i]; }
  /// Parent of i (the root and duplicates: their node / itself).
  std::uint32_t parent(std::size_t i) const noexcept { return parent_[i]; }
  /// Whether item i is a duplicate stored in its parent's list.
  bool is_duplicate(std::size_t i) const noexcept { return dup_[i] != 0; }

  /// Saves parent, level and duplicate flags in group `group` of an open HDF5 file.
  void save(const io::h5::Handle& file, const std::string& group) const;
  /// Loads a saved tree; rebuilds children lists and checks n, ids, levels and acyclicity.
  /// Throws InputError naming `label`.
  static CoverTree load(const io::h5::Handle& file, const std::string& group, std::size_t n_expected, const std::string& label);

 private:
  void index_children();
  std::uint32_t root_ = 0;
  int min_level_ = 0;
  Metric metric_ = Metric::l2;
  std::vector<int> level_;
  std::vector<std::uint32_t> parent_;
  std::vector<std::uint8_t> dup_;
  // children[p]: (level, child) sorted by level descending; dups[p]: duplicate items.
  std::vector<std::vector<std::pair<int, std::uint32_t>>> children_;
  std::vector<std::vector<std::uint32_t>> dups_;
};

}  // namespace icmlkit::ann
