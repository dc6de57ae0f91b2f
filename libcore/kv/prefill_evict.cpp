#include "kv/prefill_evict.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "util/error.hpp"

namespace icmlkit::kv {

PrefillMethod parse_prefill_method(const std::string& name, const std::string& flag) {
  PrefillMethod m;
  m.name = name;
  apply_preset(name, m.preset, flag);
  return m;
}

std::vector<int> score_rows(const PrefillMethod& m, int n, int recent) {
  int first = n;
  switch (m.preset.policy) {
    case Policy::streaming: first = n; break;
    case Policy::tova: first = n - 1; break;
    case Policy::h2o:
    case Policy::snapkv: first = n - std::max(1, recent); break;
  }
  std::vector<int> rows;
  for (int r = std::max(0, first); r < n; ++r) rows.push_back(r);
  return rows;
}

std::vector<std::int32_t> prefill_keep(const PrefillMethod& m, const std::vector<double>& scores, int n, int budget, int recent,
                                       int kernel) {
  std::vector<std::int32_t> keep;
  if (budget >= n) {
    keep.resize(n);
    std::iota(keep.begin(), keep.end(), 0);
    return keep;
  }
  const Policy p = m.preset.policy;
  if (p == Policy::streaming) {
    const int sinks = std::min(4, budget - 1);
    for (int s = 0; s < sinks; ++s) keep.push_back(s);
    for (int s = n - (budget - sinks); s < n; ++s) keep.push_back(s);
    return keep;
  }
  const int r = p == Policy::tova ? 0 : recent;
  if (budget <= r)
    throw UsageError(fmt::format("a budget of {} slots leaves none beside the {} recent ones", budget, r), "--budget");
  const int m_old = n - r, top = budget - r;
  std::vector<double> sc(scores.begin(), scores.begin() + m_old);
  if (p == Policy::snapkv && kernel > 1) {
    const int half = kernel / 2;
    std::vector<double> pooled(m_old);
    for (int i = 0; i < m_old; ++i) {
      double best = sc[std::max(0, i - half)];
      for (int j = std::max(0, i - half); j <= std::min(m_old - 1, i + half); ++j) best = std::max(best, sc[j]);
      pooled[i] = best;
    }
    sc.swap(pooled);
  }
  std::vector<int> order(m_old);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](int a, int b) { return sc[a] != sc[b] ? sc[a] > sc[b] : a < b; });
  keep.assign(order.begin(), order.begin() + top);
  std::sort(keep.begin(), keep.end());
  for (int s = m_old; s < n; ++s) keep.push_back(s);
  return keep;
}

}  // namespace icmlkit::kv
