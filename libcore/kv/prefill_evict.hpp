// Prefill-only KV eviction, the OBCache paper's evaluation protocol (issue 27): after the prompt's
// forward, each (layer, KV head) keeps `recent` newest slots plus the highest-scoring older ones
// up to the budget, and decoding never evicts.  The scores are accumulated attention (H2O,
// SnapKV, TOVA) or an OBCache score (kv/obc_score.hpp) over a window of the last prompt rows:
// the last `recent` rows for h2o and snapkv (the reference's ptb_window = num_recent), the last
// row for tova (whose recent budget moves to the heavy tokens); snapkv max-pools the scores
// (kernel 7).  streaming keeps 4 sink slots and the newest ones.
#pragma once

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

}  // namespace icmlkit::kv
