// OBCache's output-aware saliency of cached tokens (Gu, Liang, Zhao & Diao, "OBCache: Optimal
// Brain KV Cache Pruning for Efficient Long-Context LLM Inference", 2025; issue 27).
//
// Eviction as layer-wise structured pruning: a cached token j is scored by the change its removal
// makes to the attention outputs o_i = sum_j A_ij v_j of a window of query rows i, with
// z_ij = q_i.k_j / sqrt(d) and A_ij = softmax_j(z_ij), per head:
//   value pruning (v_j = 0, exact):       S_V(j) = sum_i A_ij^p * sum_d |v_jd|^p          (p = 2)
//   key pruning (k_j = 0, first order):   S_K(j) = sum_i (A_ij z_ij)^2 ||v_j - o_i||^2
//   joint (both, first order):            S_KV(j) = S_V + S_K + sum_i 2 A_ij^2 z_ij (||v_j||^2 - v_j.o_i)
// (the squared norm of -A_ij v_j - z_ij A_ij (v_j - o_i); the last sum is its cross term).  With
// the value term only, p = 1 and no value norm the score is sum_i A_ij, the accumulated attention
// of H2O, TOVA and SnapKV, so those methods keep their windows and pooling and swap the score.
// Formulas as the reference code's OBCScoreTracker (DreamSoul-AI/OBCache cache_utils.py,
// v_update / k_update; read in its fork MalachiAjayi/kv-cache-pruner).
#pragma once

#include <string>
#include <vector>

#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"

namespace icmlkit::kv {

/// Which terms make the score, and their norms.
struct ObcScore {
  bool value = true;   ///< the value-pruning term S_V
  bool key = true;     ///< the key-pruning term S_K
  bool cross = true;   ///< the joint cross term (only with value and key both on)
  int p = 2;           ///< power of S_V's attention and value norm: 1 or 2
  bool vnorm = true;   ///< S_V multiplies the attention term by sum_d |v_jd|^p (off: attention only)
  /// The reference code's form of the key and cross terms when value and vnorm are on: it
  /// reuses S_V's value norm sum_d |v_jd|^p where ||v_j||^2 belongs, which differs at p = 1
  /// (sum |v| in ||v - o||^2).  Off (default): ||v_j||^2 always, the consistent form.
  bool reference_value_norm = false;

  /// The accumulated attention of H2O / TOVA / SnapKV (value term, p = 1, no value norm).
  static ObcScore attention() { return ObcScore{true, false, false, 1, false, false}; }
  /// OBCache's value ("obcV"), key ("obcK") and joint ("obcVK") scores, p = 2 with value norm.
  static ObcScore value_only() { return ObcScore{true, false, false, 2, true, false}; }
  static ObcScore key_only() { return ObcScore{false, true, false, 2, true, false}; }
  static ObcScore joint() { return ObcScore{true, true, true, 2, true, false}; }

  /// Throws UsageError for p outside {1, 2} or no term on.
  void validate() const;
};

/// Adds the scores of n cached tokens of one head to out[n], from W query rows: probabilities
/// A and logits z [W, n] (row-major, row stride ld >= n; logits of keys a row does not attend
/// may be anything where A is 0), values V [n, hd] (row stride hd) and the rows' outputs
/// O [W, hd].  Sums in double.  Adding over calls accumulates the key and cross terms and S_V's
/// attention term, as the reference does; S_V's value norm is per token and not summed.
void add_head_scores(const ObcScore& s, const float* A, const float* z, int W, int n, int ld, const float* V, const float* O,
                     int hd, double* out);

/// How the query heads of one KV group combine into the KV head's score (the cache keeps one
/// K/V per KV head): sum or max over the group.
enum class GqaReduce { sum, max };

/// Parses "sum" | "max"; throws UsageError naming `flag`.
GqaReduce parse_gqa_reduce(const std::string& name, const std::string& flag = "--gqa-reduce");

/// The scores of every committed slot per (layer, KV head) [n_layers * n_kv][cache.size()],
/// from lm::forward's attention records of the window's query rows (ForwardOptions::attn_rows:
/// each record's keys are cache slots, or batch rows -(r + 1) mapped through row_slot to the
/// slot they were committed to; keys that map to no committed slot are ignored).  Values come
/// from `cache` (after the commit), outputs from the records.  Query heads of a group combine
/// by `reduce`.  Throws InputError when a record names a layer or head outside the cache.
std::vector<std::vector<double>> slot_scores(const ObcScore& s, GqaReduce reduce, const lm::KvCache& cache, int n_heads,
                                             const std::vector<lm::AttentionRecord>& records, const std::vector<int>& row_slot);

}  // namespace icmlkit::kv
