// Training forward and backward of the decoder (model contract v2: the block list is walked,
// each block by its type; today the llama block) on packed sequences, over a parameter store.
//
// The float forward performs exactly lm::forward's arithmetic for a causal batch (every row of
// a sequence attends its earlier rows), so its logits are bitwise equal to the inference
// engine's (test_nn.cpp proves it for both RoPE styles, tied and untied heads).  The double
// instantiation is the reference for finite-difference gradient checks.
#pragma once

#include <array>
#include <utility>
#include <functional>
#include <string>
#include <tuple>
#include <cstdint>
#include <vector>

#include "lm/model.hpp"
#include "nn/exit_loss.hpp"
#include "nn/lora.hpp"
#include "nn/params.hpp"
#include "nn/poet.hpp"

namespace icmlkit::nn {

/// The parameters of one model as a store, in checkpoint order: token_embd, then per block its
/// tensors in lm::tensor_slots order (llama: attn_norm, attn_q, attn_k, attn_v, attn_output,
/// ffn_norm, ffn_gate, ffn_up, ffn_down; a moe block the same attention and norms, then its routed
/// FFN's tensors), then output_norm and (untied) output.  Norm weights have decay = false; a
/// sigmoid router's selection bias is frozen (it is not trained by gradient).
template <class T>
struct LlamaParams {
  lm::ModelConfig config;
  ParamStore<T> store;

  /// Allocates every tensor (zeros) for `config`; with `frozen` every tensor is frozen from the
  /// start (no gradient buffers: a LoRA base).
  explicit LlamaParams(const lm::ModelConfig& config, bool frozen = false);
  /// A block's tensors (those of its type exist; the others are absent).
  enum LayerTensor {
    attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down,  // llama (attention and norms: every block)
    router, router_bias, gate_exps, up_exps, down_exps, gate_shexp, up_shexp, down_shexp, latent_down, latent_up,  // moe
    mlstm_fq, mlstm_fk, mlstm_iw, mlstm_ib, mlstm_fw, mlstm_fb, mlstm_ow, mlstm_ob,  // mlstm-hybrid (after llama's)
    post_attn_norm, post_ffn_norm, q_bias, k_bias,  // recdepth-* sandwich blocks (after llama's)
    kLayerTensors
  };
  /// Per block and LayerTensor: the store index, or -1 where the block has no such tensor.
  std::vector<std::array<int, kLayerTensors>> slots;
  Param<T>& embd() { return store.params[0]; }
  /// Store index of layer l's tensor t (which must exist).
  std::size_t index(int l, LayerTensor t) const noexcept { return std::size_t(slots[std::size_t(l)][t]); }
  /// Whether layer l has tensor t.
  bool has(int l, LayerTensor t) const noexcept { return slots[std::size_t(l)][t] >= 0; }
  Param<T>& layer(int l, LayerTensor t) { return store.params[index(l, t)]; }
  Param<T>& out_norm() { return store.params[std::size_t(out_norm_index)]; }
  /// The LM head [vocab, d] (token_embd when tied).
  Param<T>& head() { return config.tied ? embd() : store.params[std::size_t(out_norm_index) + 1]; }
  int out_norm_index = 0;  ///< store index of output_norm
  int adapter_index = -1;  ///< store index of a recurrent-depth model's recdepth_adapter (-1: none)
  /// The recurrent-depth adapter [d, 2d] (the model must be recurrent-depth).
  Param<T>& adapter() { return store.params[std::size_t(adapter_index)]; }

  /// moe blocks' load-balancing loss coefficient alpha (Switch / Mixtral: alpha E sum_e f_e P_e per
  /// block, f_e the fraction of routed entries sent to expert e, P_e the mean normalised router
  /// score of e; 0 = off).  A training setting, not part of the model.
  double moe_aux = 0;
  /// Per block: routed entries per expert, summed over the forward calls since the caller last
  /// cleared it (the router statistics; sized on the first moe forward) [n_layers][E].
  std::vector<std::vector<double>> moe_load;
  /// moe blocks' capacity factor c (GShard / Switch token dropping; 0 = no limit, the default):
  /// in one forward call of N rows each expert takes at most ceil(c N K / E) of its routed
  /// entries, the first in row order; a dropped entry contributes nothing (its expert output is
  /// 0, so neither it nor its gate weight gets a gradient) while the row's other entries keep
  /// their normalised weights.  A training setting (the engine never drops: batch invariance).
  double moe_capacity = 0;
  /// Per block: routed entries dropped by the capacity limit, summed like moe_load [n_layers].
  std::vector<double> moe_dropped;

  /// POET-X matrices (empty unless enable_poet() ran): the forward and backward run them
  /// input-centric, and params_to_model() writes their effective weights.
  std::vector<PoetLinear<T>> poet;
  std::vector<int> poet_of;  ///< per store tensor: its index in `poet`, or -1
  /// The POET-X matrix of layer l's tensor t, or null.
  /// Sparse training (issue 30; empty unless the trainer made matrices sparse): per store tensor
  /// its active flat entries (increasing; empty = dense).  A sparse tensor's gradient holds these
  /// entries only (grad[k] is the gradient of entry sparse[i][k]): the backward computes the
  /// matrix's dense gradient into a transient buffer and gathers them.
  std::vector<std::vector<std::int32_t>> sparse;
  /// When non-empty: per store tensor, a dense [numel] buffer the backward also adds a sparse
  /// tensor's full gradient to (RigL's regrowth score at topology updates; empty entries skipped).
  std::vector<std::vector<T>> dense_grad;
  /// LoRA (issue 33; null = none): the adapters of the next llama_loss call and the rows each
  /// owns.  Every base tensor should then be frozen (LoRA training): frozen tensors get no gradient
  /// (their products are skipped), and the loss gradient reaches the adapters only.
  LoraPack<T>* lora = nullptr;
  PoetLinear<T>* poet_matrix(int l, LayerTensor t) {
    const std::size_t i = index(l, t);
    return i < poet_of.size() && poet_of[i] >= 0 ? &poet[poet_of[i]] : nullptr;
  }
};

/// Turns every attention and MLP matrix of `params` into a POET-X matrix (POET-X's
/// replace_linear_with_poet: every linear layer but the LM head): the current values become W0
/// (rows normalised to unit L2 norm when opt.normalize), frozen; a zero Q tensor
/// "<matrix>.poet_q" [out_blocks + in_blocks, b(b-1)/2] is appended to the store (no decay); the
/// permutations are drawn from poet_permutation_seed(seed, 0, matrix).  The model's function
/// changes only by the normalisation (Q = 0 gives R = I).  Throws UsageError, naming the matrix
/// and the block sizes that would work, when b does not divide a matrix's dimensions
/// (block-stochastic) or exceeds one (fully stochastic), and for b < 2 or k < 1.
template <class T>
void enable_poet(LlamaParams<T>& params, const PoetOptions& opt, std::uint64_t seed);

/// POET-X's merge-then-reinitialise (poet_linear.py merge_then_reinitialize): each matrix's
/// effective weight becomes its new W0, under new permutations from poet_permutation_seed(seed,
/// merges, matrix), with Q = 0; the model's function is unchanged (up to rounding).
template <class T>
void poet_merge(LlamaParams<T>& params, std::uint64_t seed, std::int64_t merges);

/// The store indices of every attention and llama MLP matrix (wq wk wv wo, and w_gate w_up w_down
/// of llama blocks), layer by layer: POET-X's and sparse training's matrices.
std::vector<int> attention_mlp_matrices(const lm::ModelConfig& config);

/// One block's tensors for `config` as (LayerTensor, name, shape), in store order.
std::vector<std::tuple<int, std::string, std::vector<int>>> layer_param_shapes(const lm::ModelConfig& config, int l);

/// The store's tensors for `config` as (name, shape), in LlamaParams order.
std::vector<std::pair<std::string, std::vector<int>>> llama_param_shapes(const lm::ModelConfig& config);

/// Checks that POET-X with `opt` fits the matrices of `config` (enable_poet's checks, without
/// allocating anything).  Throws UsageError as enable_poet does.
void check_poet_shapes(const lm::ModelConfig& config, const PoetOptions& opt);

/// Copies a model's weights into a store (float or double).
/// With `frozen`, every tensor frozen (no gradient buffers).
template <class T>
LlamaParams<T> params_from_model(const lm::Model& model, bool frozen = false);

/// Writes a store's values back into `model` (shapes must match; config taken from params).
template <class T>
void params_to_model(LlamaParams<T>& params, lm::Model& model);

/// Activations kept between the forward and the backward of one batch, and the backward's
/// work buffers (all reused across calls: a step allocates nothing once shapes repeat).
template <class T>
struct TrainCache {
  /// One block step's activations (a block type that needs others adds its fields here).
  struct LayerActs {
    std::vector<T> x_in, xn1, rstd1, q, k, v, att, amx, ainv, x_mid, xn2, rstd2, gate, up, h;
    /// moe / latent-moe blocks: router logits and scores [N, E], the selected experts and weights
    /// [N, K], each row's selected-score sum [N], the latent input [N, l], the routed entries
    /// (i = row K + k) bucketed by expert (rows, offset [E + 1]) with each entry's expert input,
    /// pre-activations and hidden state in bucket order, the expert outputs [N K, w], the weighted
    /// sum [N, w] and the shared expert's pre-activations and hidden state.
    std::vector<T> m_logits, m_scores, m_weight, m_selsum, m_z, m_in, m_gate, m_up, m_h, m_y, m_acc, s_gate, s_up, s_h;
    std::vector<double> m_frac;  ///< f_e: the fraction of this step's routed entries sent to each expert [E]
    std::vector<int> m_expert, m_rows, m_offset;
    /// mlstm-hybrid blocks: q, k before RoPE [N, dq], [N, dkv], their Hedgehog features, the gates
    /// (i~, f~, o) [N, 3 n_heads], the output gate's input [q; k; v] [N, dq + 2 dkv], and the
    /// mLSTM and windowed-attention branches [N, dq] (att holds their mix).
    std::vector<T> h_q0, h_k0, h_fq, h_fk, h_gates, h_cat, h_m, h_sa;
    /// recdepth-* sandwich blocks: the post-norms' inputs (x + attention, x_mid + MLP) and rstd.
    std::vector<T> sw_y1, sw_r1, sw_y2, sw_r2;
    /// POET-X: per layer tensor, the product before the output rotation (PoetLinear::forward's y0).
    std::array<std::vector<T>, LlamaParams<T>::kLayerTensors> poet_y0;
    /// LoRA: per adapted projection, every job's u = xd A^T and (with dropout) dropped input xd.
    std::array<std::vector<T>, kLoraSlots> lora_u, lora_xd;
  };
  std::vector<LayerActs> layers;  ///< per block step (n_layers, or the schedule's length)
  std::vector<T> x_out, xnf, rstdf, logits, cs, sn;
  /// The last call's load-balancing term of the objective: sum over moe block steps of
  /// moe_aux x rows x L_aux (so that grad_scale = 1 / targets makes it alpha x the mean L_aux per
  /// block step, summed), and the plain sum of L_aux over the moe block steps (1 = balanced).
  double aux_objective = 0, aux_loss = 0;
  double aux_grad = 0;  ///< grad_scale x moe_aux during the backward
  std::vector<std::vector<T>> dexit;  ///< per early exit: the loss gradient at its block's output [N, d]
  std::vector<T> x, tmp, dlogits, dx, dxn, dh, dg, du, datt, dqv, dk, dv;  // work buffers
  std::vector<int> tokens, pos;
  /// Recurrent-depth models (lm/recdepth.hpp): the next call's iterations without gradient
  /// (run first) and with gradient (truncated backpropagation through the last ones), and the
  /// seed of the initial state (row n of the B·S rows drawn from (rd_seed, n): for B = 1, the
  /// engine's draw at position n).  rd_no_grad < 0 = the defaults: mean_recurrence − k̄ and k̄
  /// when training, mean_recurrence and 0 without gradient.
  int rd_no_grad = -1, rd_grad = -1;
  std::uint64_t rd_seed = 0;
  /// Recurrent-depth activations: the prelude's output e [N, d], the adapter's inputs [s; e] of
  /// the gradient iterations [k][N, 2d], the final state and its n_f rstd; the no-gradient
  /// iterations' scratch activations.
  std::vector<T> rd_e, rd_s, rd_rstd, rd_de;
  std::vector<std::vector<T>> rd_cat;
  std::vector<LayerActs> rd_scratch;
  PoetWork<T> poet;  ///< POET-X scratch
  std::vector<T> dw;  ///< a sparse matrix's dense gradient before the gather
  std::vector<T> lora_tmp;    ///< LoRA scratch
  std::vector<T> frozen_dw;   ///< where a frozen norm's (discarded) weight gradient goes
  /// Per-row gradient scales [B·S] (packed LoRA jobs: each job's rows 1 / its targets; empty = the
  /// call's grad_scale for every row) and, when set, the rows' cross-entropies after the call.
  std::vector<double> row_scale, row_loss;
  /// When non-empty [B·S, vocab]: the backward starts from this gradient at the logits instead of
  /// the cross-entropy's (which still gives the returned loss; grad_scale must be > 0 to run the
  /// backward, and does not scale it): J^T w products such as the Gauss-Newton product of issue 34.
  std::vector<T> dlogits_in;
  /// When set, called once the cross-entropy is taken, with the call's input tokens [B·S], the
  /// logits [B·S, vocab] and the gradient at the logits (null without a backward; else holding
  /// grad_scale · the cross-entropy's gradient), which it may rescale and add to (a distillation
  /// loss, issue 35).  It returns the summed extra objective it added, kept in hook_sum.
  std::function<double(const std::vector<int>& tokens, const T* logits, int N, int V, T* dlogits, double grad_scale)> logits_hook;
  double hook_sum = 0;  ///< the last call's logits_hook return (0 without a hook)
};

/// Huginn's per-step recurrence (raven_modeling_minimal.py randomized_iteration_sampler, the
/// "poisson-lognormal-filling" scheme): with t = max(r̄ − k̄, 0) and s = k̄, τ ~ LogNormal(log(t + s)
/// − σ²/2, σ = 0.5), p = Poisson(τ) + 1; returns (n, k) = (max(p − s, 0) iterations without
/// gradient, min(s, p) with), drawn from `seed` alone (portable: Knuth's Poisson on our Rng).
/// E[p] = r̄ + 1 − ... ≈ r̄ + 1; k >= 1.  mean >= 1, backprop >= 1 (a backprop of 0 is taken as 1).
std::pair<int, int> sample_recurrence(int mean, int backprop, std::uint64_t seed);

/// Model FLOP of one training token (forward + backward = 3 x forward) at sequence length S,
/// the count model-FLOP utilisation is quoted with (PaLM, Chowdhery et al. 2022, App. B):
/// 6 x the matrix weights (every projection and the LM head; the input embedding lookup and the
/// norm weights do not multiply) + 6 x n_layers x S x d_model for causal attention (QK^T and PV
/// over half the S x S square: 2 x 2 x S/2 x d per layer forward, x 3).  A recurrent-depth model:
/// the core blocks and the adapter forward r̄ times (2 FLOP per weight) and backward k̄ times (4).
double training_flop_per_token(const lm::ModelConfig& config, int S) noexcept;

/// Forward (and with `grad_scale` > 0, backward) of B sequences of S tokens: inputs
/// tokens [B·S], targets [B·S] (−1 = not counted).  Returns the summed cross-entropy over
/// counted targets; gradients of grad_scale · (summed loss) are ADDED to params.store grads
/// (so accumulation over micro-batches is plain summation; pass 1/total_targets for a mean).
/// With `logits_out`, the logits [B·S, vocab] are copied there.  With a `schedule`, the blocks
/// run in that order, one step each (repeats allowed: recurrent depth; omissions: layer
/// subsets), as lm::ForwardOptions::schedule; a repeated block's gradient sums every step's.
/// With `exits` (LayerSkip's early-exit loss, nn/exit_loss.hpp): the shared final norm and head
/// are also applied after each of its steps, the gradient is that of grad_scale · (Σ_i
/// weights[i] · loss_i + final_weight · loss_final) (summed losses), exits->losses[i] receives
/// loss_i, and the return value is still the final layer's summed loss.
/// Mixture-of-experts blocks add router statistics to params.moe_load and, with params.moe_aux
/// > 0, the load-balancing term cache.aux_objective to the objective whose gradient is taken (the
/// return value stays the summed cross-entropy; cache.aux_loss sums L_aux over the moe steps).
/// Throws InputError for tokens outside the vocabulary, S > n_ctx, a schedule entry outside
/// the model or an exit step outside [0, steps - 1); UsageError (lm/support.hpp) for a block
/// type the trainer does not run.
template <class T>
double llama_loss(LlamaParams<T>& params, const std::vector<int>& tokens, const std::vector<int>& targets,
                  int B, int S, double grad_scale, TrainCache<T>& cache, std::vector<T>* logits_out = nullptr,
                  const std::vector<int>& schedule = {}, ExitPlan* exits = nullptr);

/// The trainer's block interface (the counterpart of lm/block.hpp): one block's training
/// forward over the B·S packed rows, x [B·S, d_model] updated in place and the activations the
/// backward needs kept in `acts`, by the block's type (llama today).  cache.cs / cache.sn must
/// hold the rows' RoPE tables.
template <class T>
void block_train_forward(LlamaParams<T>& params, int block, int B, int S, TrainCache<T>& cache,
                         typename TrainCache<T>::LayerActs& acts, T* x);
/// Its backward: dx [B·S, d_model], the loss gradient at the block's output, becomes the
/// gradient at its input, and the block's parameter gradients are accumulated (+=).
template <class T>
void block_train_backward(LlamaParams<T>& params, int block, int B, int S, TrainCache<T>& cache,
                          typename TrainCache<T>::LayerActs& acts, T* dx);

}  // namespace icmlkit::nn
