#include "kv/prefill_evict.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "util/error.hpp"

namespace icmlkit::kv {

PrefillMethod parse_prefill_method(const std::string& name, const std::string& flag) {
  PrefillMethod m;
  m.name = name;
  apply_preset(name, m.preset, flag);
  return m;
}

std::vector<PrefillMethod> parse_prefill_methods(const std::vector<std::string>& names, const std::string& flag) {
  std::vector<PrefillMethod> ms;
  for (const auto& name : names) {
    for (const auto& m : ms)
      if (m.name == name) throw UsageError("'" + name + "' is listed twice", flag);
    ms.push_back(parse_prefill_method(name, flag));
  }
  return ms;
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
    throw UsageError(fmt::format("a budget of {} slot{} leaves none beside the {} recent ones", budget, budget == 1 ? "" : "s", r), "--budget");
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

std::vector<int> budget_slots(const std::vector<double>& budgets, int n, const std::vector<PrefillMethod>& methods, int recent) {
  std::vector<int> out;
  for (const double b : budgets) {
    int slots = 0;
    if (b > 0 && b < 1) slots = std::max(1, static_cast<int>(b * n));
    else if (b >= 1 && b == std::floor(b) && b <= 1e9) slots = static_cast<int>(b);
    else throw UsageError(fmt::format("budget {} is neither a fraction in (0, 1) nor a whole number of slots", b), "--budget");
    if (slots > n) throw UsageError(fmt::format("budget {} ({} slots) is above the prompt's {} tokens", b, slots, n), "--budget");
    for (const auto& m : methods)
      if ((m.preset.policy == Policy::h2o || m.preset.policy == Policy::snapkv) && slots <= recent && slots < n)
        throw UsageError(fmt::format("{}: a budget of {} slot{} leaves none beside the --num-recent {} newest", m.name, slots, slots == 1 ? "" : "s", recent),
                         "--budget");
    for (std::size_t i = 0; i < out.size(); ++i)
      if (out[i] == slots)
        throw UsageError(fmt::format("budgets {} and {} both give {} slots", budgets[i], b, slots), "--budget");
    out.push_back(slots);
  }
  return out;
}

PromptKeeps prompt_keep_sets(const std::vector<PrefillMethod>& methods, const std::vector<int>& budget_slots, int recent,
                             int kernel, GqaReduce reduce, bool reference_value_norm, const lm::KvCache& cache, int n_heads,
                             const std::vector<lm::AttentionRecord>& records) {
  const int n = cache.size(), lh_count = cache.n_layers() * cache.n_kv_heads();
  std::vector<int> row_slot(n);
  std::iota(row_slot.begin(), row_slot.end(), 0);
  PromptKeeps out;
  for (const auto& m : methods) {
    std::vector<std::vector<double>> sc(std::size_t(lh_count), std::vector<double>(n, 0.0));
    const auto t0 = std::chrono::steady_clock::now();
    if (m.preset.policy != Policy::streaming) {
      const std::vector<int> win = score_rows(m, n, recent);
      std::vector<lm::AttentionRecord> recs;
      for (const auto& rec : records)
        if (std::binary_search(win.begin(), win.end(), rec.row)) recs.push_back(rec);
      ObcScore s = m.preset.score;
      s.reference_value_norm = reference_value_norm;
      sc = slot_scores(s, reduce, cache, n_heads, recs, row_slot);
    }
    out.score_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::vector<std::vector<std::vector<std::int32_t>>> per_budget(budget_slots.size());
    for (std::size_t bi = 0; bi < budget_slots.size(); ++bi)
      for (const auto& s : sc) per_budget[bi].push_back(prefill_keep(m, s, n, budget_slots[bi], recent, kernel));
    out.scores.push_back(std::move(sc));
    out.keep.push_back(std::move(per_budget));
  }
  return out;
}

lm::KvCache evicted_copy(const lm::KvCache& full, const std::vector<std::vector<std::int32_t>>& keep) {
  lm::KvCache c = full;
  c.retain(keep);
  return c;
}

OutputError evicted_output_error(const lm::AttentionRecord& rec, const std::vector<int>& row_slot, const lm::KvCache& cache,
                                 int kv_head, const std::vector<std::int32_t>& keep, int keep_from) {
  const int hd = cache.head_dim(), n = cache.size(rec.layer, kv_head);
  std::vector<double> o(hd, 0.0);
  double zmax = -std::numeric_limits<double>::infinity(), denom = 0;
  std::vector<std::pair<int, double>> kept;  // slot, logit
  for (std::size_t t = 0; t < rec.keys.size(); ++t) {
    const std::int32_t key = rec.keys[t];
    const int r = -(key + 1);
    const int slot = key >= 0 ? key : (r < static_cast<int>(row_slot.size()) ? row_slot[r] : -1);
    if (slot < 0 || slot >= n)
      throw InputError(fmt::format("attention key {} of row {} maps to no cache slot (layer {}, {} slots)", key, rec.row, rec.layer, n));
    if (slot < keep_from && !std::binary_search(keep.begin(), keep.end(), slot)) continue;
    kept.emplace_back(slot, rec.scores[t]);
    zmax = std::max(zmax, static_cast<double>(rec.scores[t]));
  }
  for (const auto& [slot, z] : kept) {
    const double w = std::exp(z - zmax);
    denom += w;
    const float* v = cache.value(rec.layer, kv_head, slot);
    for (int d = 0; d < hd; ++d) o[d] += w * v[d];
  }
  OutputError e;
  for (int d = 0; d < hd; ++d) {
    const double full = rec.output[d], evicted = denom > 0 ? o[d] / denom : 0.0;  // no key kept: o' = 0
    e.sq_error += (evicted - full) * (evicted - full);
    e.sq_norm += full * full;
  }
  return e;
}

}  // namespace icmlkit::kv
