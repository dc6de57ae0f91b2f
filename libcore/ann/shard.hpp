// Sharded Vamana builds, DiskANN's recipe for indexes too large to build at once (Subramanya et
// al., NeurIPS 2019, sec. 4.3): the items are split by k-means into S clusters, each item joining
// its 2 nearest centres; a Vamana graph is built on each shard alone (in one process, or one array
// task per shard), and the graphs are merged into one: an item's out-list is the union of its lists
// in the shards that hold it, cut to R where longer.  DiskANN's merge_shards cuts by keeping R at
// random; here the default cut is RobustPrune with the build's alpha (the rule every list of a
// single build obeys), and `truncate` keeps the R nearest (the cheap cut, for comparison).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ann/vamana.hpp"
#include "io/provenance.hpp"

namespace icmlkit::ann {

/// How the items are split: the k-means centres and each shard's members.
struct ShardPlan {
  std::size_t dim = 0;
  int overlap = 2;                                  ///< centres each item joins
  std::vector<float> centres;                       ///< [shards, dim], under squared L2 on d's vectors
  std::vector<std::vector<std::uint32_t>> members;  ///< per shard: item ids, increasing
  int shards() const noexcept { return static_cast<int>(members.size()); }
  /// SHA-256 of the members (and dim, overlap, shard count): the parts of one plan carry it, and a
  /// merge refuses parts whose plans differ.  The centres are left out: their last bits depend on
  /// the CPU's vector kernels, the members only where an item lies on a boundary.
  std::string sha256() const;
};

/// Splits d's n items into `shards` clusters: k-means (k-means++ seeding, `iterations` Lloyd
/// rounds on squared L2 of d's vectors, on a seeded sample of at most `sample` items, sums in item
/// order so the plan depends on the seed only), then every item joins its min(overlap, shards)
/// nearest centres (DiskANN: 2).  Throws UsageError for shards < 1 or > n, or overlap < 1.
ShardPlan plan_shards(const Space& d, int shards, int overlap, std::uint64_t seed, int iterations = 12,
                      std::size_t sample = 50000);

/// One shard's graph, in the ids of all items.
struct ShardGraph {
  int shard = 0;
  std::vector<std::uint32_t> members;             ///< the shard's items (increasing)
  std::vector<std::vector<std::uint32_t>> lists;  ///< members[i]'s out-neighbours (item ids, <= R)
  double seconds = 0;                             ///< build wall time
  std::int64_t working_bytes = 0;                 ///< the shard's vectors and graph slots during its build
  std::string plan_sha256;                        ///< the plan it belongs to (set by load_shard)
};

/// Builds shard s of `plan` alone: a Vamana graph (VamanaGraph::build, p, seed derived from
/// p.seed and s) on a copy of its members' vectors.  Throws UsageError for s outside the plan.
ShardGraph build_shard(const Space& d, const ShardPlan& plan, int s, const VamanaParams& p);

/// How a merged list longer than R is cut.
enum class MergeCut { prune, truncate };
/// Parses "prune" or "truncate"; throws UsageError naming `flag`.
MergeCut parse_merge_cut(const std::string& s, const std::string& flag);

/// Merges the shards' graphs over all n items of d (see the file comment): each item's list is the
/// union of its lists, sorted by d and deduplicated, then cut to p.R by RobustPrune(p.alpha) or by
/// keeping the p.R nearest; the entry point is VamanaGraph::medoid_of(d), as a single build's.
/// (Under ip each shard was built with its own largest norm in the MIPS-to-L2 augmentation, the cut
/// uses the global one.)
/// The result does not depend on the parts' order.  Throws InputError when an item is in no part
/// or a part names an item outside d.
VamanaGraph merge_shards(const Space& d, const std::vector<ShardGraph>& parts, const VamanaParams& p, MergeCut cut);

/// Writes shard graph `g` of a plan to `path` (HDF5, atomically): its members and lists, with the
/// plan's hash and `build_sha256` (the build description's) so that a merge can check it.
void save_shard(const std::string& path, const ShardGraph& g, const ShardPlan& plan, const std::string& build_sha256,
                int R, const io::Provenance& prov);
/// Reads a part written by save_shard and checks that it is shard i < `shards` of a build with
/// `build_sha256` (the plan's hash goes to plan_sha256: the merge compares the parts').  Throws
/// InputError naming the file when it is missing, not a part, of another build, or inconsistent.
ShardGraph load_shard(const std::string& path, int shards, const std::string& build_sha256);

}  // namespace icmlkit::ann
