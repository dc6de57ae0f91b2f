// The batched forward pass of the Llama-style decoder (model contract v2: the block list is walked, lm/README.md).
//
// One call takes new rows.  Each row has a token, a position id, a view (cache slots it may
// attend, see kv_cache.hpp) and the other new rows it may attend; it always attends itself.
// AR decoding is one row with View::full(); prefill is many rows with a causal mask;
// lookahead / FAFO batches mix views and tree masks.  Keys are attended in the order
// (view slots ascending, then new rows ascending), so a row decoded alone after its ancestors
// were committed sees the same keys in the same order and gets bit-identical logits.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "lm/kv_cache.hpp"
#include "lm/model.hpp"

namespace icmlkit::lm {

/// One new row of a forward batch.
struct BatchRow {
  int token = 0;            ///< token id in [0, vocab_size)
  int pos = 0;              ///< position id (RoPE), in [0, n_ctx)
  int view = 0;             ///< index into Batch::views
  std::vector<int> attend;  ///< other new rows (batch indices) this row may attend
  /// The sequence the row belongs to: index into the caches passed to forward() (0 with one
  /// cache).  A row attends only its own sequence's cache and new rows (contract v2: several
  /// independent sequences in one pass, each with its own positions, cache and mask).
  int seq = 0;
};

/// New rows plus the views they refer to.
struct Batch {
  std::vector<BatchRow> rows;
  std::vector<View> views{View::full()};  ///< views[0] is the full view

  /// Prefill: tokens at positions start.., full view, causal mask among them.
  static Batch causal(const std::vector<int>& tokens, int start_pos);
  /// Appends a row; returns its batch index.
  int add(int token, int pos, int view = 0, std::vector<int> attend = {}, int seq = 0);
  /// Appends `other`'s rows as sequence `seq` (their attend lists shifted to the new indices,
  /// their views appended after this batch's); returns the batch index of its first row.
  int append(const Batch& other, int seq);
  /// Appends a view; returns its index.
  int add_view(View v);
  int size() const noexcept { return static_cast<int>(rows.size()); }
};

/// The projections of a llama block an adapter may sit on (named as in GGUF).
enum class Projection { attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down };

/// "attn_q", ..., "ffn_down".
const char* projection_name(Projection p) noexcept;
/// Parses a projection name; throws InputError listing the names.
Projection parse_projection(const std::string& name);

/// A low-rank adapter applied unmerged to one projection of one block (LoRA, Hu et al. 2022,
/// eq. 3): y = W x + scale · B (A x), A [rank, in], B [out, rank] (float32).
struct Adapter {
  int block = 0;
  Projection proj = Projection::attn_q;
  Matrix A, B;
  float scale = 1.0f;
};

/// How a recurrent-depth model's core blocks keep K/V across iterations (lm/recdepth.hpp).
enum class CoreKv {
  /// One cache layer per core block, overwritten by every iteration: a position keeps only its
  /// latest iteration's K/V, and a later row at iteration i attends the earlier positions' latest
  /// entries (the reference's "latest-m4-compress-s4"; KV memory of a P + C + D layer model).
  latest,
  /// One cache layer per (iteration, core block): a row at iteration i attends the earlier
  /// positions' iteration-i entries (the reference's "full" lookup; recurrence x the memory).
  full,
};

/// What forward() computes besides the pending K/V.
struct ForwardOptions {
  /// Unmerged adapters (not owned; null = none).  Shapes are checked against the projection.
  /// CPU engine only.
  const std::vector<Adapter>* adapters = nullptr;
  /// Rows whose logits are computed; empty with all_logits = true means every row.
  std::vector<int> logits_rows;
  bool all_logits = true;
  /// Keep the residual stream after the embedding and after every layer ([n_layers+1][R, d]).
  bool hidden = false;
  /// Rows whose per-layer, per-head attention is recorded (scores, probabilities, output).
  std::vector<int> attn_rows;
  /// Per layer (size n_layers or empty): skip that block's attention / MLP sublayer for every
  /// row (the residual passes through; self-speculative drafting).  A skipped attention leaves
  /// the rows' pending K/V of that layer unspecified, so such rows must not be committed.
  std::vector<char> skip_attn, skip_mlp;
  /// The blocks to run, in order, one step each (empty = 0, 1, ..., n_layers − 1).  A block may
  /// repeat (recurrent depth: {0, 1, 1, 1, 2}) or be left out; step i uses the cache's layer i,
  /// so the cache must have schedule.size() layers (KvCache(config, layers)).  Not combined
  /// with skip lists or per-head views.  CPU engine only.
  std::vector<int> schedule;
  /// Stop after this many block steps (−1 = all): blocks stop_after.. are not run, hidden (when
  /// asked) has stop_after + 1 entries, and logits are the head applied to the residual after
  /// block stop_after − 1 (early exit, logit lens).  The rows' pending K/V of the blocks not run
  /// are unspecified, so such rows must not be committed.  CPU engine only.
  int stop_after = -1;
  /// Blocks with recurrent state (mlstm-hybrid): the rows a later commit may end at, whose state
  /// is kept in the pending area (empty = every row).  Naming only the last row of a causal
  /// prefill lets such blocks run their chunkwise form instead of one recurrent step per row;
  /// KvCache::commit then refuses to end at another row.
  std::vector<int> state_rows;
  /// Recurrent-depth models (lm/recdepth.hpp): core iterations r (0 = the model's
  /// mean_recurrence), the seed of the initial latent state (each row's state is drawn from
  /// (state_seed, its position), so a row's outputs do not depend on its batch), and the core's KV
  /// layout (the cache needs recdepth_cache_layers() layers).  CPU engine only.
  int recurrence = 0;
  std::uint64_t state_seed = 0;
  CoreKv core_kv = CoreKv::latest;
  /// Measure the CPU seconds spent in attention per view (ForwardResult::attn_cpu_s).
  bool time_attention = false;
  /// Only each logits row's greedy token is needed (greedy decoding, self-speculative drafts):
  /// ForwardResult::greedy holds it, and an engine may leave ForwardResult::logits empty (the
  /// CUDA engine then keeps the logits on the device and copies back one id and one probability
  /// per row instead of vocab_size floats).
  bool greedy_only = false;
  /// With greedy_only, also each greedy token's probability (ForwardResult::greedy_prob; a
  /// self-speculative draft's confidence).  The CPU engine computes it only when asked (a pass
  /// of exp over the vocabulary per row); the CUDA engine always returns it.
  bool greedy_prob = false;
};

/// Attention of one query row, one layer, one query head.
struct AttentionRecord {
  int row = 0, layer = 0, head = 0;
  /// Attended keys in order: cache slot s >= 0, or new row r encoded as -(r + 1).
  std::vector<std::int32_t> keys;
  std::vector<float> scores;  ///< pre-softmax q.k / sqrt(head_dim), one per key
  std::vector<float> probs;   ///< softmax of scores
  std::vector<float> output;  ///< sum_j probs_j v_j  [head_dim]
};

/// Results of one forward call.
struct ForwardResult {
  std::vector<int> logits_rows;     ///< batch rows of `logits`, in order
  Matrix logits;                    ///< [logits_rows.size(), vocab_size]
  std::vector<Matrix> hidden;       ///< [n_layers + 1] of [R, d_model] when requested
  std::vector<AttentionRecord> attention;  ///< for ForwardOptions::attn_rows
  /// With time_attention: CPU seconds of attention (scores, softmax, weighted sum) summed over
  /// threads and layers, per view index of the batch [views.size()].
  std::vector<double> attn_cpu_s;
  /// With ForwardOptions::greedy_only: each logits row's greedy token (argmax, lowest id on
  /// ties), [logits_rows.size()]; empty otherwise.
  std::vector<int> greedy;
  /// With ForwardOptions::greedy_only and greedy_prob: softmax probability of each greedy token,
  /// 1 / sum_i exp(l_i - l_max) (lm::greedy_probability; CUDA: accumulated in f32 on the device
  /// with an online max-and-sum reduction, returned with every greedy_only forward),
  /// [logits_rows.size()]; empty otherwise.
  std::vector<double> greedy_prob;
};

/// Runs the decoder on `batch`, attending `cache` through each row's view, and writes every
/// new row's K/V to the cache's pending area (commit with KvCache::commit).  A row's outputs
/// are bitwise independent of the other rows and of the thread count.
/// Throws InputError for tokens out of range, positions outside [0, n_ctx), bad view or
/// attend indices, or a per-head view that does not fit the cache.
ForwardResult forward(const Model& model, KvCache& cache, const Batch& batch,
                      const ForwardOptions& options = {});

/// The same for rows of several independent sequences in one pass: row r attends
/// caches[rows[r].seq] through its view and the new rows of its own sequence, and its K/V go to
/// that cache's pending area at the row's index among its sequence's rows (in batch order).
/// Every row's logits and K/V are bitwise what the same rows give alone with their own cache.
/// Caches that no row uses are left untouched.  Throws InputError as above, and for a seq
/// outside [0, caches.size()) or an attend index naming another sequence's row.
ForwardResult forward(const Model& model, const std::vector<KvCache*>& caches, const Batch& batch,
                      const ForwardOptions& options = {});

/// Final RMSNorm + LM head applied to hidden states [n, d_model] (e.g. an intermediate layer's
/// output for early exit).  With `vocab_ids` non-empty, only those rows of the head (proxy LM
/// head): logits [n, vocab_ids.size()], each entry bitwise equal to the full head's.
Matrix apply_head(const Model& model, const Matrix& hidden, const std::vector<int>& vocab_ids = {});

/// RMSNorm of each row of x [n, d] with weight w: y = w * x / sqrt(mean(x^2) + eps).
void rms_norm(const float* x, int n, int d, const float* w, double eps, float* y);

/// The checks forward() makes before computing, for any engine: token and position ranges,
/// view and attend indices, per-head views against the cache sizes `head_size(layer, kv_head)`,
/// logits / attention rows.  Throws InputError naming the batch row or view.
void check_batch(const ModelConfig& config, const std::function<int(int, int)>& head_size, const Batch& batch,
                 const ForwardOptions& options);
/// The same for a batch over `n_seqs` caches: head_size(seq, layer, kv_head); a per-head view is
/// checked against the cache of every sequence whose rows use it.
void check_batch(const ModelConfig& config, int n_seqs, const std::function<int(int, int, int)>& head_size,
                 const Batch& batch, const ForwardOptions& options);

/// The batch rows whose logits `options` asks for (every row with all_logits and no list).
std::vector<int> logits_rows_of(const ForwardOptions& options, int rows);

/// RoPE tables of the batch rows' positions: cs, sn [R, head_dim/2] with
/// angle(pos, i) = pos * rope_theta^(-2i/head_dim) computed in double, rounded to float.
void rope_tables(const ModelConfig& config, const Batch& batch, std::vector<float>& cs, std::vector<float>& sn);

/// rope_tables' values with each position's row computed once (pow, cos and sin per entry
/// cost more than a copy): an engine that builds tables every forward keeps one.  Filled
/// lazily in blocks of 256 positions, so a long context costs memory only where it is used.
class RopeCache {
 public:
  explicit RopeCache(const ModelConfig& config);
  /// Writes the rows' cos table to cs [R, head_dim/2] and sin table to sn [R, head_dim/2],
  /// bitwise rope_tables'.  Positions must lie in [0, n_ctx) (check_batch checks them).
  void tables(const Batch& batch, float* cs, float* sn);

 private:
  static constexpr int kBlock = 256;
  int half_ = 0, hd_ = 0;
  double theta_ = 0.0;
  std::vector<std::vector<float>> blocks_;  // per block: [kBlock, half] cos, then [kBlock, half] sin; empty until used
};

/// Rotates one head vector x [hd] in place with its position's tables (cs, sn [hd/2]), pairing
/// dimensions as `style` says (lm/README.md, RoPE pairing).
void apply_rope(float* x, int hd, RopeStyle style, const float* cs, const float* sn);

}  // namespace icmlkit::lm
