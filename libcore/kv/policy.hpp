// Token-dropping KV-cache compressors as keep sets over one shared cache.
//
// FAFO's lookahead rows attend a compressed view of the past; the cache itself is never
// evicted, so verification and AR rows still see every slot.  A Compressor holds, per
// (layer, KV head), the sorted slot indices a token-dropping policy would have kept, and
// updates them as slots are committed, exactly as that policy evicts:
//   - streaming (StreamingLLM, Xiao et al. 2024): the first `sinks` slots plus the most recent
//     budget - sinks.  Keys keep their original RoPE positions (the one cache holds rotated keys).
//   - h2o (Zhang et al. 2023): accumulated attention; keep the `recent` newest slots plus the
//     heavy hitters, evicting the lowest accumulated score one slot at a time (once evicted, a
//     slot never returns).  Scores sum over the query heads of each KV group.
//   - tova (Oren et al. 2024): evict the slot with the lowest attention from the newest committed
//     query, averaged over all query heads of the layer; one keep set per layer.
//   - snapkv (Li et al. 2024): at prefill, the attention of the last `window` prompt queries,
//     summed over them and over the group's query heads, pooled along the slots (max or average,
//     odd kernel), keeps the top budget - window prompt slots plus the window; slots committed
//     after the prompt are all kept (SnapKV compresses the prompt only).
// Each of h2o, tova and snapkv also runs with OBCache's output-aware score in place of its
// accumulated attention (kv/obc_score.hpp; presets "<policy>+obcV", "+obcK", "+obcVK", with
// "_no_cross" and "_p1" suffixes), keeping the rest of the method (windows, pooling, recent
// slots, accumulation), as the OBCache paper does.
// Scores come from the full-cache attention of committed rows (prefill rows, and in decoding the
// input row and accepted verification rows), recorded by lm::forward (ForwardOptions::attn_rows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/obc_score.hpp"
#include "lm/config.hpp"
#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"

namespace icmlkit::kv {

/// A token-dropping policy.
enum class Policy { streaming, h2o, tova, snapkv };

/// Parses "streaming" | "h2o" | "tova" | "snapkv"; throws UsageError (naming `flag`) otherwise.
Policy parse_policy(const std::string& name, const std::string& flag = "--kv-policy");
/// The policy's name as parse_policy() reads it.
const char* policy_name(Policy p) noexcept;

/// The policy and score of a preset name: "streaming", "h2o", "tova", "snapkv", or one of the last
/// three with "+obcV", "+obcK" or "+obcVK" (OBCache's value, key or joint score, p = 2 with the
/// value norm) and optionally "_no_cross" (joint without the cross term) and "_p1" (p = 1), e.g.
/// "snapkv+obcVK".  Sets `config.policy`, `.score` and `.obc`; throws UsageError naming `flag`.
struct PolicyConfig;
void apply_preset(const std::string& name, PolicyConfig& config, const std::string& flag = "--kv-policy");
/// The names apply_preset reads (for help texts and errors).
std::vector<std::string> preset_names();

/// Compressor settings.
struct PolicyConfig {
  Policy policy = Policy::streaming;
  int budget = 256;       ///< slots kept per (layer, KV head), >= 1 (snapkv: prompt slots kept)
  int sinks = -1;         ///< streaming: leading slots always kept (< budget); -1 = min(4, budget - 1)
  int recent = -1;        ///< h2o: newest slots always kept; -1 = budget / 2
  int window = 32;        ///< snapkv: observation window (last prompt queries), kept as well
  int kernel = 7;         ///< snapkv: pooling kernel (odd, >= 1)
  bool max_pool = true;   ///< snapkv: max pooling (else average)
  /// The score that ranks slots: accumulated attention (the policies' own), or an OBCache
  /// score (`obc` true: needs the committed values, Compressor::commit's cache).
  ObcScore score = ObcScore::attention();
  bool obc = false;
  GqaReduce gqa_reduce = GqaReduce::sum;  ///< OBCache scores: query heads of a KV group combine so
  /// Throws UsageError for a budget < 1, sinks >= budget, recent >= budget, window >= budget
  /// or an even / non-positive kernel.
  void validate() const;
};

/// The keep sets of one sequence's cache under a policy.
class Compressor {
 public:
  /// Empty keep sets for a model of `config`.  Throws UsageError for an invalid `policy`.
  Compressor(const lm::ModelConfig& config, PolicyConfig policy);

  const PolicyConfig& config() const noexcept { return cfg_; }
  /// Whether the policy needs attention records of committed rows (h2o, tova, snapkv at prefill).
  bool needs_attention() const noexcept { return cfg_.policy != Policy::streaming; }
  /// Rows of an n-row prefill whose attention observe() needs (all for h2o, the last `window`
  /// for snapkv, the last one for tova, none for streaming).
  std::vector<int> prefill_rows(int n) const;

  /// Registers `row_slot.size()` committed rows: row_slot[r] is the cache slot batch row r was
  /// committed to, or -1 when it was not committed.  `records` are those rows' attention
  /// (lm::forward with attn_rows; records of uncommitted rows are ignored).  Slots must be
  /// committed in increasing order, continuing from the last call.  `prefill` marks the prompt
  /// (snapkv selects then).  Throws InputError when slots do not continue the cache.
  /// With an OBCache score, `cache` must be the cache the slots were committed to (its values
  /// enter the score; InputError when null).
  void commit(const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot,
              bool prefill, const lm::KvCache* cache = nullptr);

  /// The current keep sets as a per-head view (every list sorted, at most the budget except
  /// snapkv after the prompt).
  lm::View view() const;
  /// Slots kept for (layer * n_kv_heads + head).
  const std::vector<std::int32_t>& kept(int lh) const { return keep_[lh]; }
  /// Slots committed so far.
  int size() const noexcept { return n_; }

 private:
  void accumulate(const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot);
  void accumulate_obc(const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot, const lm::KvCache& cache);
  void evict();
  void snap_select();

  PolicyConfig cfg_;
  int n_layers_, n_heads_, n_kv_, group_;
  int n_ = 0;
  std::vector<std::vector<std::int32_t>> keep_;  // [layer * n_kv + head] sorted slots
  std::vector<std::vector<double>> score_;       // h2o: accumulated; snapkv: window sum; [lh][slot]
  std::vector<std::vector<double>> last_;        // tova: newest query's mean attention [layer][slot]
  int last_row_slot_ = -1;                       // tova: slot of the row `last_` came from
};

}  // namespace icmlkit::kv
