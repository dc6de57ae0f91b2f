#include "rank/distance.hpp"

#include <algorithm>
#include <vector>

#include "util/error.hpp"

namespace icmlkit::rank {

Metric parse_metric(const std::string& s, const std::string& flag) {
  static const char* names[] = {"footrule", "spearman", "kendall", "cayley", "hamming", "ulam"};
  for (int i = 0; i < 6; ++i)
    if (s == names[i]) return static_cast<Metric>(i);
  throw UsageError("metric must be footrule, spearman, kendall, cayley, hamming or ulam", flag);
}

const char* metric_name(Metric m) {
  static const char* names[] = {"footrule", "spearman", "kendall", "cayley", "hamming", "ulam"};
  return names[static_cast<int>(m)];
}

bool is_itemwise(Metric m) { return m == Metric::footrule || m == Metric::spearman || m == Metric::hamming; }

double distance(const int* r1, const int* r2, int n, Metric m) {
  switch (m) {
    case Metric::footrule:
    case Metric::spearman:
    case Metric::hamming: {
      double s = 0;
      for (int i = 0; i < n; ++i) s += item_distance(r1[i], r2[i], m);
      return s;
    }
    case Metric::kendall: {
      int s = 0;
      for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j) s += ((r1[i] - r1[j]) ^ (r2[i] - r2[j])) < 0;
      return s;
    }
    case Metric::cayley: {
      // sigma = r1 o r2^-1 maps a rank in r2 to the rank of the same item in r1; the distance is
      // n minus its number of cycles.
      std::vector<int> inv2(static_cast<std::size_t>(n)), sigma(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) inv2[static_cast<std::size_t>(r2[i])] = i;
      for (int k = 0; k < n; ++k) sigma[static_cast<std::size_t>(k)] = r1[inv2[static_cast<std::size_t>(k)]];
      std::vector<char> seen(static_cast<std::size_t>(n), 0);
      int cycles = 0;
      for (int k = 0; k < n; ++k) {
        if (seen[static_cast<std::size_t>(k)]) continue;
        ++cycles;
        for (int c = k; !seen[static_cast<std::size_t>(c)]; c = sigma[static_cast<std::size_t>(c)]) seen[static_cast<std::size_t>(c)] = 1;
      }
      return n - cycles;
    }
    case Metric::ulam: {
      // Items in r2's order, read off their r1 ranks: the LIS of that sequence is the longest
      // common subsequence of the two orderings (patience sorting, O(n log n)).
      std::vector<int> inv2(static_cast<std::size_t>(n)), tails;
      for (int i = 0; i < n; ++i) inv2[static_cast<std::size_t>(r2[i])] = i;
      for (int k = 0; k < n; ++k) {
        const int v = r1[inv2[static_cast<std::size_t>(k)]];
        auto it = std::lower_bound(tails.begin(), tails.end(), v);
        if (it == tails.end()) tails.push_back(v);
        else *it = v;
      }
      return n - static_cast<int>(tails.size());
    }
  }
  return 0;
}

}  // namespace icmlkit::rank
