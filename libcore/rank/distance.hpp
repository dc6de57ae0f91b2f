// The six Mallows distances between rankings (BayesMallows src/distances.cpp definitions).
#pragma once

#include <string>

#include "rank/ranking.hpp"

namespace icmlkit::rank {

/// A right-invariant distance between rankings.
enum class Metric { footrule, spearman, kendall, cayley, hamming, ulam };

/// Parses "footrule" | "spearman" | "kendall" | "cayley" | "hamming" | "ulam"; throws
/// UsageError naming `flag`.
Metric parse_metric(const std::string& s, const std::string& flag);
/// The metric's name.
const char* metric_name(Metric m);

/// d(r1, r2) for two complete rankings of n items (pointers to n 0-based ranks):
/// footrule sum|r1-r2|, spearman sum (r1-r2)^2, kendall = discordant pairs,
/// cayley = n - cycles(r1 o r2^-1) (fewest transpositions), hamming = #{i: r1_i != r2_i},
/// ulam = n - LIS (longest common subsequence of the two orderings).  O(n^2) at most.
double distance(const int* r1, const int* r2, int n, Metric m);
/// The same on Perm.
inline double distance(const Perm& a, const Perm& b, Metric m) {
  return distance(a.data(), b.data(), static_cast<int>(a.size()), m);
}

/// Whether d(R, rho) = sum_i f(R_i, rho_i) splits over items (footrule, spearman, hamming), so
/// the sequential Pseudo-Mallows factors and the exact DP over item subsets apply.
bool is_itemwise(Metric m);
/// The per-item term f(a, b) of an item-wise metric: |a-b|, (a-b)^2 or [a != b].
inline double item_distance(int a, int b, Metric m) {
  const int d = a - b;
  switch (m) {
    case Metric::footrule: return d < 0 ? -d : d;
    case Metric::spearman: return static_cast<double>(d) * d;
    default: return d != 0;
  }
}

}  // namespace icmlkit::rank
