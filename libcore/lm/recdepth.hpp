// Recurrent-depth ("looped") decoders on the CPU engine (issue 36): Huginn's architecture
// (Geiping et al. 2025, "Scaling up Test-Time Compute with Latent Reasoning", arXiv 2502.05171;
// seal-rg/recurrent-pretraining recpre/raven_modeling_minimal.py), model contract v2 block types
// recdepth-prelude / recdepth-core / recdepth-coda (lm/README.md).
//
//   e   = prelude(embed_scale · E[tokens])                       P sandwich blocks
//   s_0 ~ N(0, state_std^2) truncated to ±3 state_std            per (seed, position)
//   s_i = core(A [s_{i-1}; e]),  i = 1..r                        C sandwich blocks, adapter A [d, 2d]
//   y   = head(n_f(coda(n_f(s_r))))                              D sandwich blocks; n_f = output_norm, used twice
//
// lm::forward runs this for a recurrent-depth model (ForwardOptions::recurrence, state_seed,
// core_kv); RecurrentDepthForward exposes the steps to samplers that iterate, inspect and re-enter
// the recurrence (recdepth-sample: adaptive exits, the diffusion-forcing sampler).
#pragma once

#include <cstdint>
#include <vector>

#include "lm/forward.hpp"
#include "lm/layerwise.hpp"

namespace icmlkit::lm {

/// Cache layers a recurrent-depth forward of `recurrence` iterations uses: P + C + D with
/// CoreKv::latest, P + C·recurrence + D with CoreKv::full (0 for other models).
int recdepth_cache_layers(const ModelConfig& config, CoreKv kv, int recurrence);

/// The cache layer of core block j (0-based within the core) at iteration i (0-based):
/// P + j (latest), P + i C + j (full).
int recdepth_core_layer(const ModelConfig& config, CoreKv kv, int iteration, int j) noexcept;

/// Writes the initial latent state of a row at position `pos` to out [d]: d draws of N(0, std^2)
/// truncated to ±3 std (rejection), from a stream derived from (seed, pos) only; zeros when std
/// is 0 (Huginn's initialize_state with its "like-init" std).
void draw_state(std::uint64_t seed, int pos, int d, double std, float* out);

/// The sandwich block (recdepth-prelude / core / coda; Huginn's SandwichBlock):
/// x = n2(x + Wo·Attn(RoPE(Wq n1 x + b_q), RoPE(Wk n1 x + b_k), Wv n1 x)); x = n4(x + MLP(n3 x)),
/// n1..n4 = attn_norm, post_attn_norm, ffn_norm, post_ffn_norm.  K/V to the step's cache layer.
void sandwich_block_forward(const BlockStep& step, BlockWork& work, float* x, ForwardResult& result);

/// One recurrent-depth forward over a batch, step by step.  Borrowed: the model, cache and batch
/// must outlive it.  The cache must have recdepth_cache_layers(config, options.core_kv, n) layers
/// for the n iterations run (with CoreKv::latest: KvCache(config)).  A call sequence is
/// prelude(), init_state() (or state() filled), iterate(n) one or more times, coda() (again after
/// further iterations if wanted), then finish() or KvCache::commit of the rows to keep: the
/// pending K/V are those of the last coda() and of each core block's latest iteration.
class RecurrentDepthForward {
 public:
  /// Checks the batch (forward()'s checks; InputError) and that the model is recurrent-depth;
  /// UsageError for options a recurrent-depth forward does not take (a block schedule, skip
  /// lists, stop_after, hidden states, adapters, per-head views).
  RecurrentDepthForward(const Model& model, KvCache& cache, const Batch& batch, const ForwardOptions& options = {});

  /// Embeds the rows (times embed_scale) and runs the prelude: embeds() becomes e [R, d].
  void prelude();
  /// e [R, d] (row-major), which a sampler may change before iterating (the diffusion sampler's
  /// EMA of embeddings); valid after prelude().
  std::vector<float>& embeds() noexcept { return e_; }
  /// The latent state s [R, d], which a caller may set (warm starts, state noise).
  std::vector<float>& state() noexcept { return s_; }
  /// Draws every row's initial state from (seed, its position) (draw_state).
  void init_state(std::uint64_t seed);
  /// Runs n core iterations: s = core(A [s; e]) each.  Throws InputError when a CoreKv::full
  /// cache has no layers for the iterations.
  void iterate(int n);
  /// Core iterations run so far.
  int iterations() const noexcept { return iter_; }
  /// n_f, the coda and the head on the current state: the logits of the options' logits rows
  /// [rows, vocab] (the coda's K/V rewritten each call).
  Matrix coda();
  /// coda() without the head (forward() applies it in finish()).
  void run_coda();
  /// forward()'s result after the last coda() / run_coda() (logits, greedy tokens as the options ask).
  ForwardResult finish();

 private:
  const Model& model_;
  const Batch& batch_;
  ForwardOptions opt_;
  LayerwiseForward pass_;
  std::vector<float> e_, s_, cat_;
  int iter_ = 0;
  bool coda_done_ = false;
};

/// lm::forward for a recurrent-depth model: prelude, initial state from options.state_seed,
/// options.recurrence iterations (0 = mean_recurrence), coda, head.
ForwardResult recdepth_forward(const Model& model, KvCache& cache, const Batch& batch, const ForwardOptions& options);

}  // namespace icmlkit::lm
