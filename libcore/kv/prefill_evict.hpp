// Prefill-only KV eviction, the OBCache paper's evaluation protocol (issue 27): after the prompt's
// forward, each (layer, KV head) keeps `recent` newest slots plus the highest-scoring older ones
// up to the budget, and decoding never evicts.  The scores are accumulated attention (H2O,
// SnapKV, TOVA) or an OBCache score (kv/obc_score.hpp) over a window of the last prompt rows:
// the last `recent` rows for h2o and snapkv (the reference's ptb_window = num_recent), the last
// row for tova (whose recent budget moves to the heavy tokens); snapkv max-pools the scores
// (kernel 7).  streaming keeps 4 sink slots and the newest ones.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kv/obc_score.hpp"
#include "kv/policy.hpp"

namespace icmlkit::kv {

/// One prefill eviction method: a base policy and its score (apply_preset's names).
struct PrefillMethod {
  std::string name;        ///< "h2o", "snapkv+obcVK", ...
  PolicyConfig preset;     ///< policy, score and whether it is an OBCache score
};

/// Parses a preset name (apply_preset).  Throws UsageError naming `flag`.
PrefillMethod parse_prefill_method(const std::string& name, const std::string& flag = "--methods");

/// parse_prefill_method for each name; a name listed twice is a UsageError.
std::vector<PrefillMethod> parse_prefill_methods(const std::vector<std::string>& names, const std::string& flag = "--methods");

/// The prompt rows whose attention a method's scores read, for an n-row prompt: the last
/// `recent` rows (h2o, snapkv; at least 1), the last row (tova), none (streaming).
std::vector<int> score_rows(const PrefillMethod& m, int n, int recent);

/// The kept slots of one (layer, KV head) of an n-slot prompt at `budget` slots (1 <= budget):
/// all n when budget >= n; otherwise the `recent` newest (0 for tova; streaming: 4 sinks and
/// budget - 4 newest) plus the top budget - recent older slots by `scores` [n] (max-pooled over
/// `kernel` neighbours for snapkv; ties to the lower slot), sorted.  Throws UsageError when
/// budget <= recent for a method that keeps recent slots.
std::vector<std::int32_t> prefill_keep(const PrefillMethod& m, const std::vector<double>& scores, int n, int budget, int recent,
                                       int kernel = 7);

/// Budgets as slots of an n-token prompt: a fraction in (0, 1) of n (rounded down, at least 1)
/// or a whole number of slots >= 1.  Throws UsageError (naming --budget) for anything else, a
/// budget above n, or one that leaves no slot beside the `recent` newest for a method that keeps
/// them (h2o, snapkv), and for two budgets that give the same number of slots.
std::vector<int> budget_slots(const std::vector<double>& budgets, int n, const std::vector<PrefillMethod>& methods, int recent);

/// Every method's scores and keep sets for one prompt of n slots, prefilled into `cache` (all
/// rows committed to slots 0..n-1) by a forward whose `records` hold the attention of at least
/// the union of the methods' score_rows.
struct PromptKeeps {
  std::vector<std::vector<std::vector<double>>> scores;  ///< [method][layer * n_kv + head][slot]
  /// [method][budget][layer * n_kv + head] sorted kept slots
  std::vector<std::vector<std::vector<std::vector<std::int32_t>>>> keep;
  std::vector<double> score_seconds;  ///< [method] wall seconds of scoring (not of selecting)
};

/// Scores each method over its window and selects each budget's keep sets (prefill_keep).
/// `reference_value_norm` sets ObcScore::reference_value_norm for every OBCache score.
PromptKeeps prompt_keep_sets(const std::vector<PrefillMethod>& methods, const std::vector<int>& budget_slots, int recent,
                             int kernel, GqaReduce reduce, bool reference_value_norm, const lm::KvCache& cache, int n_heads,
                             const std::vector<lm::AttentionRecord>& records);

/// A copy of `full` holding only the kept slots of each (layer, KV head): the cache a model
/// decodes from after prefill-only eviction.  Throws InputError for keep sets that do not fit.
lm::KvCache evicted_copy(const lm::KvCache& full, const std::vector<std::vector<std::int32_t>>& keep);

/// Squared attention-output error and squared output norm of one query row, layer and head.
/// The relative error of a set of rows is sqrt(sum sq_error / sum sq_norm).
struct OutputError {
  double sq_error = 0;  ///< ||o' - o||^2
  double sq_norm = 0;   ///< ||o||^2
  /// sqrt(sq_error / sq_norm), 0 when sq_norm is 0.
  double relative() const { return sq_norm > 0 ? std::sqrt(sq_error / sq_norm) : 0.0; }
  OutputError& operator+=(const OutputError& o) {
    sq_error += o.sq_error;
    sq_norm += o.sq_norm;
    return *this;
  }
};

/// The attention-output error of eviction for one query row, layer and head, the quantity
/// OBCache minimises: from the row's full-cache attention `rec` (keys as slots, or batch rows
/// -(r + 1) that were committed to slot row_slot[r]), the output o' = sum_j softmax_S(z)_j v_j
/// over the kept keys S (those in `keep`, the sorted kept slots of the head's KV group, and every
/// slot >= keep_from: rows no eviction touches; o' = 0 when no key is kept), values from `cache`,
/// against o = rec.output, in double.  The same inputs reach the layer with and without
/// eviction, so this is the layer's own error, not the drift of earlier layers.  Throws
/// InputError for a key that maps to no slot of `cache`.
OutputError evicted_output_error(const lm::AttentionRecord& rec, const std::vector<int>& row_slot, const lm::KvCache& cache,
                                 int kv_head, const std::vector<std::int32_t>& keep, int keep_from);

}  // namespace icmlkit::kv
