#include "kv/policy.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "util/error.hpp"

namespace icmlkit::kv {

Policy parse_policy(const std::string& name, const std::string& flag) {
  if (name == "streaming") return Policy::streaming;
  if (name == "h2o") return Policy::h2o;
  if (name == "tova") return Policy::tova;
  if (name == "snapkv") return Policy::snapkv;
  throw UsageError("unknown KV policy '" + name + "' (streaming, h2o, tova, snapkv)", flag);
}

void apply_preset(const std::string& name, PolicyConfig& cfg, const std::string& flag) {
  const auto plus = name.find('+');
  cfg.policy = parse_policy(name.substr(0, plus), flag);
  cfg.obc = false;
  cfg.score = ObcScore::attention();
  if (plus == std::string::npos) return;
  std::string rest = name.substr(plus + 1);
  auto strip = [&rest](const std::string& suffix) {
    if (rest.size() > suffix.size() && rest.compare(rest.size() - suffix.size(), suffix.size(), suffix) == 0) {
      rest.resize(rest.size() - suffix.size());
      return true;
    }
    return false;
  };
  const bool p1 = strip("_p1");
  const bool no_cross = strip("_no_cross");
  if (cfg.policy == Policy::streaming || (rest != "obcV" && rest != "obcK" && rest != "obcVK") || (no_cross && rest != "obcVK"))
    throw UsageError("unknown KV policy '" + name + "' (streaming, or h2o, tova, snapkv with +obcV, +obcK, +obcVK[_no_cross][_p1])", flag);
  cfg.score = rest == "obcV" ? ObcScore::value_only() : rest == "obcK" ? ObcScore::key_only() : ObcScore::joint();
  if (no_cross) cfg.score.cross = false;
  if (p1 && rest == "obcK")
    throw UsageError("'" + name + "': p is the power of the value term, which +obcK has not (use " + name.substr(0, name.size() - 3) + ")", flag);
  if (p1) cfg.score.p = 1;
  cfg.obc = true;
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names{"streaming"};
  for (const char* base : {"h2o", "tova", "snapkv"}) {
    names.emplace_back(base);
    for (const char* s : {"+obcV", "+obcK", "+obcVK", "+obcVK_no_cross", "+obcV_p1", "+obcVK_p1"})
      names.push_back(std::string(base) + s);
  }
  return names;
}

const char* policy_name(Policy p) noexcept {
  switch (p) {
    case Policy::streaming: return "streaming";
    case Policy::h2o: return "h2o";
    case Policy::tova: return "tova";
    case Policy::snapkv: return "snapkv";
  }
  return "?";
}

void PolicyConfig::validate() const {
  if (budget < 1) throw UsageError("KV budget must be >= 1", "--kv-budget");
  if (policy == Policy::streaming && (sinks < 0 || sinks >= budget))
    throw UsageError("sink count must be in [0, budget)", "--kv-sinks");
  if (policy == Policy::h2o && recent >= budget) throw UsageError("recent window must be < budget", "--kv-recent");
  if (policy == Policy::snapkv && (window < 1 || window >= budget))
    throw UsageError("SnapKV window must be in [1, budget)", "--kv-window");
  if (policy == Policy::snapkv && (kernel < 1 || kernel % 2 == 0))
    throw UsageError("SnapKV pooling kernel must be odd and >= 1", "--kv-kernel");
}

Compressor::Compressor(const lm::ModelConfig& c, PolicyConfig policy)
    : cfg_(policy), n_layers_(c.n_layers), n_heads_(c.n_heads), n_kv_(c.n_kv_heads), group_(c.group()) {
  if (cfg_.sinks < -1) throw UsageError("sink count must be >= 0 (or -1 = auto)", "--kv-sinks");
  if (cfg_.recent < -1) throw UsageError("recent window must be >= 0 (or -1 = budget/2)", "--kv-recent");
  if (cfg_.recent < 0) cfg_.recent = cfg_.budget / 2;
  if (cfg_.sinks < 0) cfg_.sinks = std::min(4, cfg_.budget - 1);
  cfg_.validate();
  keep_.assign(std::size_t(n_layers_) * n_kv_, {});
  if (cfg_.policy == Policy::h2o || cfg_.policy == Policy::snapkv) score_.assign(keep_.size(), {});
  if (cfg_.policy == Policy::tova) last_.assign(n_layers_, {});
}

std::vector<int> Compressor::prefill_rows(int n) const {
  int first = n;
  switch (cfg_.policy) {
    case Policy::streaming: first = n; break;
    case Policy::h2o: first = 0; break;
    case Policy::tova: first = n - 1; break;
    case Policy::snapkv: first = std::max(0, n - cfg_.window); break;
  }
  std::vector<int> rows(std::size_t(n - first));
  std::iota(rows.begin(), rows.end(), first);
  return rows;
}

namespace {
/// The batch row of the records committed to the highest slot, and that slot ({-1, -1}: none).
std::pair<int, int> newest_committed(const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot) {
  int newest = -1, newest_row = -1;
  for (const auto& rec : records)
    if (rec.row < static_cast<int>(row_slot.size()) && row_slot[rec.row] > newest) {
      newest = row_slot[rec.row];
      newest_row = rec.row;
    }
  return {newest_row, newest};
}
}  // namespace

void Compressor::commit(const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot,
                        bool prefill, const lm::KvCache* cache) {
  if (cfg_.obc && !cache) throw InputError("an OBCache score needs the committed values (the cache)");
  int next = n_;
  std::vector<int> slots;
  for (int s : row_slot)
    if (s >= 0) slots.push_back(s);
  std::sort(slots.begin(), slots.end());
  for (int s : slots) {
    if (s != next) throw InputError("committed slots must continue the cache (expected slot " + std::to_string(next) + ")");
    ++next;
  }
  const int old_n = n_;
  n_ = next;
  for (auto& sc : score_) sc.resize(n_, 0.0);
  const bool snap_prompt = cfg_.policy == Policy::snapkv && prefill;
  for (auto& k : keep_)
    for (int s = old_n; s < n_; ++s) k.push_back(s);
  if (cfg_.policy == Policy::streaming) {
    evict();
    return;
  }
  if (cfg_.policy == Policy::snapkv && !prefill) return;  // decode slots are all kept
  if (cfg_.obc) accumulate_obc(records, row_slot, *cache);
  else accumulate(records, row_slot);
  if (snap_prompt) snap_select();
  else evict();
}

void Compressor::accumulate(const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot) {
  auto slot_of = [&](std::int32_t key) -> int {
    if (key >= 0) return key;
    const int r = -(key + 1);
    return r < static_cast<int>(row_slot.size()) ? row_slot[r] : -1;
  };
  if (cfg_.policy == Policy::tova) {
    const auto [newest_row, newest] = newest_committed(records, row_slot);
    if (newest_row < 0) return;
    for (auto& v : last_) v.assign(n_, 0.0);
    const double inv = 1.0 / n_heads_;
    for (const auto& rec : records) {
      if (rec.row != newest_row) continue;
      auto& v = last_[rec.layer];
      for (std::size_t j = 0; j < rec.keys.size(); ++j) {
        const int s = slot_of(rec.keys[j]);
        if (s >= 0 && s < n_) v[s] += rec.probs[j] * inv;
      }
    }
    last_row_slot_ = newest;
    return;
  }
  for (const auto& rec : records) {
    if (rec.row >= static_cast<int>(row_slot.size()) || row_slot[rec.row] < 0) continue;
    auto& sc = score_[std::size_t(rec.layer) * n_kv_ + rec.head / group_];
    for (std::size_t j = 0; j < rec.keys.size(); ++j) {
      const int s = slot_of(rec.keys[j]);
      if (s >= 0 && s < n_) sc[s] += rec.probs[j];
    }
  }
}

void Compressor::accumulate_obc(const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot,
                                const lm::KvCache& cache) {
  if (cache.n_layers() != n_layers_ || cache.n_kv_heads() != n_kv_) throw InputError("the cache does not match the compressor's model");
  if (cfg_.policy == Policy::tova) {
    // TOVA: the newest committed row's scores only, averaged over the layer's KV heads.
    const auto [newest_row, newest] = newest_committed(records, row_slot);
    if (newest_row < 0) return;
    std::vector<lm::AttentionRecord> mine;
    for (const auto& rec : records)
      if (rec.row == newest_row) mine.push_back(rec);
    const auto sc = slot_scores(cfg_.score, cfg_.gqa_reduce, cache, n_heads_, mine, row_slot);
    for (int l = 0; l < n_layers_; ++l) {
      auto& v = last_[l];
      v.assign(n_, 0.0);
      for (int h = 0; h < n_kv_; ++h) {
        const auto& s = sc[std::size_t(l) * n_kv_ + h];
        for (int j = 0; j < n_ && j < static_cast<int>(s.size()); ++j) v[j] += s[j] / n_kv_;
      }
    }
    last_row_slot_ = newest;
    return;
  }
  const auto sc = slot_scores(cfg_.score, cfg_.gqa_reduce, cache, n_heads_, records, row_slot);
  for (std::size_t lh = 0; lh < score_.size(); ++lh)
    for (int j = 0; j < n_ && j < static_cast<int>(sc[lh].size()); ++j) score_[lh][j] += sc[lh][j];
}

void Compressor::evict() {
  const int budget = cfg_.budget;
  if (cfg_.policy == Policy::streaming) {
    if (n_ <= budget) return;
    std::vector<std::int32_t> k;
    k.reserve(budget);
    for (int s = 0; s < cfg_.sinks; ++s) k.push_back(s);
    for (int s = n_ - (budget - cfg_.sinks); s < n_; ++s) k.push_back(s);
    for (auto& kk : keep_) kk = k;
    return;
  }
  for (std::size_t lh = 0; lh < keep_.size(); ++lh) {
    auto& k = keep_[lh];
    while (static_cast<int>(k.size()) > budget) {
      // The evictable slots: h2o protects the `recent` newest slots; tova protects none.
      const int limit = cfg_.policy == Policy::h2o ? n_ - cfg_.recent : n_;
      const auto& sc = cfg_.policy == Policy::h2o ? score_[lh] : last_[lh / n_kv_];
      std::size_t worst = k.size();
      for (std::size_t i = 0; i < k.size() && k[i] < limit; ++i)
        if (worst == k.size() || sc[k[i]] < sc[k[worst]]) worst = i;
      if (worst == k.size()) break;  // unreachable while recent < budget
      k.erase(k.begin() + static_cast<std::ptrdiff_t>(worst));
    }
  }
}

void Compressor::snap_select() {
  const int budget = cfg_.budget, w = cfg_.window, n = n_;
  if (n <= budget) return;
  const int m = n - w;  // candidate (pre-window) slots
  const int half = cfg_.kernel / 2;
  std::vector<double> pooled(m);
  std::vector<int> order(m);
  for (std::size_t lh = 0; lh < keep_.size(); ++lh) {
    const auto& sc = score_[lh];
    for (int i = 0; i < m; ++i) {
      const int lo = std::max(0, i - half), hi = std::min(m - 1, i + half);
      double acc = cfg_.max_pool ? sc[lo] : 0.0;
      for (int j = lo; j <= hi; ++j) acc = cfg_.max_pool ? std::max(acc, sc[j]) : acc + sc[j];
      pooled[i] = cfg_.max_pool ? acc : acc / (hi - lo + 1);
    }
    std::iota(order.begin(), order.end(), 0);
    const int top = budget - w;
    std::partial_sort(order.begin(), order.begin() + top, order.end(),
                      [&](int a, int b) { return pooled[a] != pooled[b] ? pooled[a] > pooled[b] : a < b; });
    auto& k = keep_[lh];
    k.assign(order.begin(), order.begin() + top);
    std::sort(k.begin(), k.end());
    for (int s = m; s < n; ++s) k.push_back(s);
  }
}

lm::View Compressor::view() const { return lm::View::per_head(keep_); }

}  // namespace icmlkit::kv
