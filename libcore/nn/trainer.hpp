// One training run of the Llama-style decoder: micro-batches of packed windows in a seeded
// order, gradient accumulation, global-norm clipping, AdamW on a warmup-cosine schedule,
// evaluation, and resumable checkpoints (model + optimizer + data position).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/comm.hpp"
#include "io/provenance.hpp"
#include "lm/model.hpp"
#include "nn/adamw.hpp"
#include "nn/corpus.hpp"
#include "nn/foam.hpp"
#include "nn/galore.hpp"
#include "nn/llama_train.hpp"
#include "nn/schedule.hpp"
#include "nn/sparse.hpp"

namespace icmlkit::nn {

/// Settings that determine a run's trajectory (all stored in the checkpoint and checked on resume).
struct TrainOptions {
  int seq_len = 256;            ///< tokens per window (<= n_ctx)
  int batch = 8;                ///< windows per micro-batch
  int accum = 1;                ///< micro-batches per optimizer step (gradient accumulation)
  std::int64_t steps = 1000;    ///< optimizer steps in total (schedule length)
  double lr = 1e-3, min_lr = 1e-4;
  std::int64_t warmup = 100;    ///< warmup steps
  double clip = 1.0;            ///< global gradient-norm limit (0 = off)
  AdamWOptions adam;
  std::uint64_t seed = 0;       ///< data order seed
  ExitLossOptions exit;         ///< LayerSkip's early-exit loss (off by default)
  std::string optimizer = "adamw";  ///< "adamw", "adam-mini", "galore", "foam" or "poet-x" (issue 29)
  /// FOAM's own settings (level, scale, res_scale, second moment); its betas, eps and weight
  /// decay are `adam`'s.
  FoamOptions foam;
  GaloreOptions galore;  ///< GaLore's rank, update gap and scale (its Adam's settings are `adam`'s)
  /// POET-X's block size, merge interval, Cayley polynomial, Q learning rate and scale; its Adam's
  /// betas, eps and weight decay are `adam`'s, its permutations are drawn from `seed`.
  PoetOptions poet;
  /// Sparse training of the attention and MLP matrices (SMET and its baselines, issue 30; AdamW
  /// only).  Resolve --sparse smet's implications (resolve_sparse_options) before use.
  SparseOptions sparse;
  /// Mixture-of-experts models (issue 31): the load-balancing loss coefficient alpha
  /// (LlamaParams::moe_aux) and the auxiliary-loss-free bias update gamma of a sigmoid router
  /// (DeepSeek-V3: after each step b_e += gamma sign(mean load - load_e); 0 = off).  Recorded in
  /// the options only for a model with moe blocks (`moe_model`, set by the Trainer).
  double moe_aux = 0.01;
  double router_bias_update = 0;
  /// The capacity factor of token dropping in training steps (LlamaParams::moe_capacity; 0 = no
  /// limit).  Held-out evaluation never drops.
  double moe_capacity = 0;
  bool moe_model = false;
  /// As JSON (the checkpoint's /train attribute `options`).
  nlohmann::json to_json() const;
};

/// Refuses, before any work, what a run with `opt` cannot do on a model of `config`: an unknown
/// optimizer, sparse training with another optimizer than AdamW or with bad sparse settings
/// (check_sparse_options), a FOAM fold wider than a folded matrix, POET-X blocks that do not fit its matrices
/// (naming the matrix and the sizes that would), a POET-X learning rate <= 0.  Throws UsageError
/// (the flag named) with the reason.  The Trainer constructor runs it first.
void check_train_options(const TrainOptions& opt, const lm::ModelConfig& config);

/// One sparse matrix's part of a topology update.
struct LayerTopology {
  std::string name;          ///< the tensor, e.g. "blk.0.attn_q.weight"
  std::size_t pruned = 0;    ///< blocks pruned (= regrown: the density stays exact)
  std::size_t regrown = 0;
  double density = 0;        ///< active entries / entries after the update
};

/// A topology update (after the optimizer step of a multiple of update_every): the prune fraction
/// used and the probe batch's loss right before and right after prune + regrow (the pruning jump).
struct TopologyEvent {
  double prune_fraction = 0;
  double probe_before = 0, probe_after = 0;  ///< mean cross-entropy (nats) of the fixed probe batch
  /// With SparseOptions::probe_control: the probe loss after each of the control branch's steps
  /// u + 1 .. u + probe_steps (the same batches, no update); paired with the run's own probes at
  /// u + k, L(u + k) - control[k - 1] is the update's excess loss with the training noise cancelled.
  std::vector<double> control_probe;
  std::vector<LayerTopology> layers;
};

/// Refuses sparse settings that the matrices of `config` cannot hold exactly: a block size that
/// does not divide some attention/MLP matrix (listing the sizes that divide all), or a density
/// below 1 that leaves a matrix with every block active.  Throws UsageError (--sparse-block or
/// --density); check_train_options runs it for sparse runs.
void check_sparse_shapes(const SparseOptions& opt, const lm::ModelConfig& config);

/// The /train "options" of a training checkpoint (JSON), or null when `path` holds none; never throws.
nlohmann::json checkpoint_train_options(const std::string& path) noexcept;

/// What one optimizer step did.
struct StepStats {
  std::int64_t step = 0;       ///< steps done after this one
  std::int64_t tokens = 0;     ///< training tokens seen after this one
  double loss = 0;             ///< mean cross-entropy over the step's targets (nats)
  double grad_norm = 0;        ///< global gradient norm before clipping
  double lr = 0;               ///< learning rate used
  /// With the early-exit loss: the objective minimised (the weighted mean over the exits and the
  /// final layer, nats) and each exit's mean loss as (layer = blocks run, loss); otherwise
  /// objective == loss and no exits.
  double objective = 0;
  std::vector<std::pair<int, double>> exit_losses;
  /// Sparse training: the probe batch's loss after this step when the step lies in a probe window
  /// (NaN otherwise), and where: since_update = -1 for the step before a topology update, k in
  /// 1 .. probe_steps for the k-th step after one, 0 at the update step of a static mask (the
  /// same probes without an update: the control of the optimizer spike; 0 also outside the windows).
  double probe_loss = std::numeric_limits<double>::quiet_NaN();
  int since_update = 0;
  std::optional<TopologyEvent> topology;  ///< the topology update at the end of this step, if any
  /// The training windows of this step's batch, micro-batch by micro-batch (batch x accum ids
  /// into the training stream's windows: what a trajectory store records, issue 34).
  std::vector<std::int64_t> windows;
  /// Mixture-of-experts models: this step's routed entries per expert of each block [n_layers][E]
  /// (empty rows for llama blocks) and the mean load-balancing loss L_aux over its moe block
  /// steps and micro-batches (1 = balanced; NaN without moe blocks).
  std::vector<std::vector<double>> expert_load;
  /// Routed entries the capacity factor dropped in this step, per block [n_layers] (zeros without one).
  std::vector<double> expert_dropped;
  double aux_loss = std::numeric_limits<double>::quiet_NaN();
  /// With a logits hook (Trainer::set_logits_hook): the mean per target of the objective it added
  /// (a distillation KL); NaN without one.
  double hook_loss = std::numeric_limits<double>::quiet_NaN();
  /// Recurrent-depth models: the step's core iterations (n + k, mean over micro-batches); NaN otherwise.
  double recurrence = std::numeric_limits<double>::quiet_NaN();
};

/// Mean loss of a token stream.
struct EvalResult {
  double loss = 0;            ///< mean cross-entropy (nats per token)
  std::int64_t tokens = 0;    ///< predicted tokens counted
  std::int64_t correct = 0;   ///< targets that are their position's arg-max logit (the lower id on ties)
  double perplexity() const;  ///< exp(loss)
  /// Top-1 (next-token) accuracy correct / tokens (0 without tokens).
  double top1() const { return tokens > 0 ? double(correct) / double(tokens) : 0.0; }
};

/// Loss of `params` on every non-overlapping window of `stream` (the last, shorter window
/// included), `batch` windows per forward.  max_tokens > 0 scores only the first max_tokens
/// targets (the same as evaluating stream[0, max_tokens]), so `tokens` is at most max_tokens.
/// `on_progress(done, total)` (optional) is called after each forward with the targets scored
/// so far and the total to score.  `cache` (optional) is the activation store to use (a trainer's
/// own, so that evaluation allocates nothing beyond it); a fresh one when null.
EvalResult evaluate(LlamaParams<float>& params, const std::vector<int>& stream, int seq_len, int batch,
                    std::int64_t max_tokens = 0,
                    const std::function<void(std::int64_t, std::int64_t)>& on_progress = {},
                    TrainCache<float>* cache = nullptr);

/// Whether `path` is one of our checkpoints holding a training run's state (/train), which
/// Trainer::load can resume.  False for a missing file or any other file; never throws.
bool holds_training_state(const std::string& path) noexcept;

/// A training run.  Deterministic: the same options, data and seed give bitwise the same
/// weights whatever the thread count and rank count (set_comm), and a run resumed from a
/// checkpoint continues bit-identically.  With gradient accumulation the step's gradient is
/// (((g_0 + g_1) + g_2) + ...), each micro-batch's g_a computed from zero (since issue 41; before,
/// the micro-batches were accumulated into one buffer inside the products, which no rank split
/// could reproduce).
class Trainer {
 public:
  /// Takes the initial weights (config, tokenizer) and the training token stream.  Throws
  /// InputError when seq_len > n_ctx or the stream holds no full window.
  Trainer(const lm::Model& init, std::vector<int> train_stream, TrainOptions opt);

  /// One optimizer step (accum micro-batches).  Throws RuntimeError, leaving the weights
  /// untouched, when the loss or the gradient norm is not finite.  With POET-X the clip limit
  /// ramps after each merge (PoetOptions::clip_ramp_until) and every merge_every-th step ends
  /// with merge-then-reinitialise (poet_merge, the Q moments zeroed).
  StepStats step();
  /// One optimizer step on the given windows (batch x accum ids of the training stream's
  /// windows, micro-batch by micro-batch) instead of the data order's next ones, whose position
  /// is left as it is: a trajectory's replay and a re-queued batch.  Throws InputError for a
  /// wrong count or an id outside the stream, RuntimeError as step().
  StepStats step(const std::vector<std::int64_t>& windows);
  /// The next batch x accum windows of the seeded data order (advancing it): what step() trains on.
  std::vector<std::int64_t> next_windows();
  /// A no-op step: the step count (and with it the schedule's position and Adam's bias
  /// correction) advances, the weights, optimizer moments and data order stay (the
  /// counterfactual of a deleted batch, issue 34).
  void skip_step();
  /// Installs a hook on the training steps' logits (TrainCache::logits_hook: a distillation loss
  /// added to the cross-entropy's gradient; StepStats::hook_loss reports its mean).  Evaluation
  /// and probes do not call it.
  void set_logits_hook(decltype(TrainCache<float>::logits_hook) hook) { cache_.logits_hook = std::move(hook); }
  /// Trains as one rank of a data-parallel group (issue 41): each step's micro-batches are shared
  /// out over the ranks of `comm` (micro-batch a on rank a mod N) and their gradients summed in
  /// micro-batch order (dist::ChainReducer), so every rank ends each step with the same weights,
  /// bitwise those of one process (null: this process alone, the default).  Every rank must make the
  /// same calls with the same options and data; `comm` must outlive the trainer.
  void set_comm(dist::Comm* comm) {
    comm_ = comm && comm->size() > 1 ? comm : nullptr;
    reducer_.reset();
  }
  /// SHA-256 (hex) of the run's whole state: weights, optimizer state, sparse masks, POET-X's W0
  /// and Q, step, tokens and data position (what a data-parallel job compares across its ranks at
  /// start).
  std::string state_sha256();
  /// Ranks the steps are shared over (1 alone).
  int ranks() const noexcept { return comm_ ? comm_->size() : 1; }
  /// Seconds the steps spent in the gradient reduction (waiting for, moving and adding the other
  /// ranks' sums, and the broadcast), and the bytes this rank sent along the chain; 0 alone.
  double reduce_seconds() const noexcept { return reducer_ && comm_ ? reducer_->seconds() : 0.0; }
  std::int64_t reduce_bytes_sent() const noexcept { return reducer_ ? reducer_->bytes_sent() : 0; }
  /// The optimizer (its state buffers, e.g. AdamW's second moments).
  Optimizer& optimizer() noexcept { return *optimizer_; }
  /// The learning rate of step index s (0-based: the step taken when s steps are done).
  double lr_at(std::int64_t s) const noexcept { return schedule_(s); }
  /// The training stream's windows.
  const Windows& window_source() const noexcept { return windows_; }

  std::int64_t steps_done() const noexcept { return optimizer_->steps(); }
  /// The gradient-norm limit the next step clips to: TrainOptions::clip, or with POET-X during
  /// the 10 steps after a merge (while the steps done are in [T, clip_ramp_until]) the reference's
  /// ramp (0.1 + 0.9 (s mod T) / 10) clip, s the steps done.
  double clip_limit() const noexcept;
  /// Bytes of the optimizer's state buffers (what a checkpoint stores under /train/optim).
  std::int64_t optimizer_state_bytes();
  /// Bytes of the trainable parameters (float32 values; their gradients take as much again).
  std::int64_t trainable_bytes() const noexcept { return params_.store.trainable_numel() * std::int64_t(sizeof(float)); }
  /// Bytes of the frozen tensors (POET-X's base weights W0; 0 for the other optimizers).
  std::int64_t frozen_bytes() const noexcept {
    return (params_.store.numel() - params_.store.trainable_numel()) * std::int64_t(sizeof(float));
  }
  std::int64_t tokens_seen() const noexcept { return tokens_; }
  /// Sparse training: the masks of the sparse matrices (store index, mask), in store order (empty
  /// when dense or at density 1, where every matrix stays dense).
  const std::vector<std::pair<int, SparseMask>>& sparse_masks() const noexcept { return masks_; }
  /// Bytes of the gradient buffers (a sparse matrix's: its active entries only).
  std::int64_t grad_bytes() const noexcept;
  /// The fixed probe batch's mean loss now (the first min(batch, 8) windows of the training stream).
  double probe_loss();
  LlamaParams<float>& params() noexcept { return params_; }
  const TrainOptions& options() const noexcept { return opt_; }
  /// Full windows in the training stream.
  std::int64_t windows() const noexcept { return windows_.count(); }
  /// The current weights as a model (config and tokenizer of the initial one).
  lm::Model model();

  /// Records the SHA-256 (hex) of the training corpus; save() writes it as the /train attribute
  /// `corpus_sha256` so that a resume can check it trains on the same data.
  void set_corpus_sha256(std::string hex) { corpus_sha256_ = std::move(hex); }
  /// The corpus SHA-256 stored in the checkpoint that load() read ("" when the checkpoint
  /// predates the attribute or nothing was loaded).
  const std::string& checkpoint_corpus_sha256() const noexcept { return checkpoint_corpus_sha256_; }

  /// Writes an f32 model checkpoint (readable by every lm tool) with the training state under
  /// /train: options, step, tokens, data position, optimizer buffers, corpus SHA-256 (when
  /// set), `extra` (JSON).  Atomic.
  void save(const std::string& path, const io::Provenance& prov, const nlohmann::json& extra = {});
  /// Restores weights and state from a checkpoint written by save().  Throws InputError when the
  /// file has no training state, when its options or model shape differ from this run's
  /// (naming the optimizer first, else the first differing option), or when the weights and state
  /// read do not match the checksum save() recorded (a corrupted file).  Returns the saved `extra`.
  nlohmann::json load(const std::string& path);

 private:
  /// SHA-256 over the weights as the checkpoint holds them (`written`), the optimizer's state and
  /// POET-X's W0 and Q: the /train attribute state_sha256 that load() checks.
  std::string state_digest(LlamaParams<float>& written);
  /// Sparse training: draws the initial masks and zeroes the inactive weights (constructor).
  void init_sparse();
  /// Installs matrix `k`'s mask: the gradient sized to its active entries, the optimizer's sparse
  /// state (new entries at step `new_step`).
  void install_mask(std::size_t k, std::int32_t new_step);
  /// Prune + regrow every sparse matrix (after the optimizer step of `step`).
  TopologyEvent update_topology(std::int64_t step);
  /// The paired spike control: trains probe_steps steps from the current state without a topology
  /// update, returns the probe loss after each, and restores weights, optimizer state, step and
  /// token counts and the data position (RigL's scoring gradient kept), also when a step throws.
  std::vector<double> control_branch();
  bool in_control_ = false;  // inside control_branch: no probes, no topology updates
  std::vector<std::pair<int, SparseMask>> masks_;
  std::vector<int> probe_in_, probe_tg_;
  int probe_batch_ = 0;
  TrainCache<float> probe_cache_;
  lm::Model base_;  // config, norms and tokenizer of the initial model; its matrices are in params_
  LlamaParams<float> params_;
  std::vector<int> stream_;
  Windows windows_;
  TrainOptions opt_;
  WarmupCosine schedule_;
  std::unique_ptr<Optimizer> optimizer_;
  DataOrder order_;
  std::int64_t tokens_ = 0;
  TrainCache<float> cache_;
  std::string corpus_sha256_, checkpoint_corpus_sha256_;
  dist::Comm* comm_ = nullptr;  // data parallelism's group (null: alone)
  dist::SelfComm self_comm_;
  std::unique_ptr<dist::ChainReducer> reducer_;
  int reducer_accum_ = 0;
  std::vector<float> reduce_floats_;   // a micro-batch's gradients, flat (then the step's total)
  std::vector<double> reduce_doubles_;  // its statistics
};

}  // namespace icmlkit::nn
