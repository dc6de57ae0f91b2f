// Rankings, orderings, partial rankings and pairwise preferences (Bayesian Mallows model,
// Vitelli et al. 2018; BayesMallows' data conventions).
//
// Conventions: items and ranks are 0-based in memory (item 0..n-1, rank 0 = best); files use
// 1-based ranks and items.  A ranking r maps item -> rank; an ordering o maps rank -> item
// (o = r^-1).  A missing rank is `missing_rank` (-1).
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <string>
#include <vector>

namespace icmlkit::rank {

/// A ranking or an ordering of n items: a permutation of 0..n-1 (or -1 for missing ranks).
using Perm = std::vector<int>;

/// Rank matrix [n_assessors, n_items], row-major; entry = 0-based rank or `missing_rank`.
using RankMatrix = Eigen::Matrix<int, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// The value of a missing rank.
inline constexpr int missing_rank = -1;

/// Whether `r` is a permutation of 0..r.size()-1.
bool is_permutation(const Perm& r);

/// The inverse permutation: ranking -> ordering, ordering -> ranking.  Requires a permutation.
Perm inverse(const Perm& p);

/// One pairwise preference of one assessor: `top` is preferred to `bottom` (rank(top) < rank(bottom)).
struct Preference {
  int top = 0;     ///< 0-based preferred item
  int bottom = 0;  ///< 0-based less preferred item
};

/// Pairwise preferences of every assessor, as read from BayesMallows' (assessor, bottom_item,
/// top_item) tables.  `by_assessor[j]` lists the comparisons of assessor j.
struct PairwiseData {
  int n_items = 0;
  std::vector<std::vector<Preference>> by_assessor;
  std::vector<std::string> assessor_labels;  ///< the assessor ids of the file, in order of first appearance
};

/// What to do with missing ranks in a rank table (--missing).
enum class MissingPolicy {
  augment,  ///< treat as latent and sample them (data augmentation, Vitelli et al. 2018 sec. 4)
  fail,     ///< a missing rank is an error naming the row
  omit,     ///< drop assessors with a missing rank
};

/// Parses "augment" | "fail" | "omit"; throws UsageError naming `flag`.
MissingPolicy parse_missing_policy(const std::string& s, const std::string& flag);

/// A rank table read from a file, with the file row of each kept assessor.
struct RankData {
  RankMatrix ranks;               ///< [assessors, items], 0-based ranks, missing_rank where absent
  std::vector<std::size_t> rows;  ///< 1-based file line of each kept row
  std::string sha256;             ///< of the bytes read
  int omitted = 0;                ///< rows dropped by MissingPolicy::omit
  /// Whether any rank is missing.
  bool has_missing() const;
};

/// Reads a CSV of ranks without a header (one assessor per line, one column per item, values
/// 1..n; empty, "NA" or "0" = missing), e.g. potato_visual.csv.  `header` skips a first line.
/// Throws InputError "(file, line L)" for an empty file, ragged lines, a non-integer cell, a rank
/// out of 1..n, a repeated rank (tie) or, with policy fail, a missing rank; rows that become
/// empty under omit are an error too.
RankData read_rank_csv(const std::string& path, MissingPolicy policy, bool header = false);

/// Checks row `r` of a rank matrix: observed ranks in range and distinct.  Throws InputError
/// with `where`.
void check_partial_ranking(const int* r, int n, const std::string& where);

/// Reads pairwise preferences from a CSV with header assessor,bottom_item,top_item (1-based
/// items; any column order).  `n_items` 0 = the largest item seen.  Throws InputError naming the
/// line for a missing column, a non-integer, an item < 1 or > n_items, or top == bottom.
PairwiseData read_pairwise_csv(const std::string& path, int n_items, std::string* sha256 = nullptr);

/// The pairwise preferences implied by a partial ranking: every pair of observed items, and an
/// unobserved item against an observed one when every unused rank lies on one side of the
/// observed rank.  (The disjunction "the missing items share the unused ranks" is not pairwise,
/// so the two fits agree closely but not exactly.)
PairwiseData implied_preferences(const RankMatrix& ranks);

/// A ranking of n items consistent with `prefs` (a topological order, ties broken by item
/// index), or an empty Perm when the preferences contain a cycle.
Perm consistent_ranking(int n, const std::vector<Preference>& prefs);

/// Fills the missing ranks of each row with the unused ranks in increasing item order (a valid
/// starting augmentation).  Rows must pass check_partial_ranking.
RankMatrix fill_missing(const RankMatrix& ranks);

}  // namespace icmlkit::rank
