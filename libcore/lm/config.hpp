// Model contract v2: the configuration of a decoder made of typed blocks (see lm/README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lm/blocks.hpp"

namespace icmlkit::lm {

/// How rotary position embedding pairs the dimensions of a head.
enum class RopeStyle {
  half,         ///< rotate-half (Hugging Face / GPT-NeoX): pairs (i, i + head_dim/2)
  interleaved,  ///< GGUF / original Llama: pairs (2i, 2i + 1)
};

/// "half" | "interleaved".
const char* rope_style_name(RopeStyle s) noexcept;

/// The MLP of a routed (or shared) expert.
enum class ExpertAct {
  swiglu,  ///< down(silu(gate x) ⊙ up x): gate, up and down matrices (Mixtral, Qwen-MoE, DeepSeek)
  relu2,   ///< down(relu(up x)^2): up and down only (Nemotron-H, the LatentMoE paper's 95B model)
};
/// How router logits become expert scores.
enum class RouterKind {
  softmax,  ///< p = softmax(W_r x) over all experts; top-K by p (Mixtral, Qwen-MoE)
  /// s = sigmoid(W_r x); top-K by s + b with b a selection-only bias (DeepSeek-V3's
  /// e_score_correction_bias, the auxiliary-loss-free balancing); the weights are the s selected
  sigmoid,
};
const char* expert_act_name(ExpertAct a) noexcept;
const char* router_kind_name(RouterKind r) noexcept;
/// Parse "swiglu" / "relu2" and "softmax" / "sigmoid"; throw InputError naming `where`.
ExpertAct parse_expert_act(const std::string& name, const std::string& where);
RouterKind parse_router_kind(const std::string& name, const std::string& where);

/// The routed FFN of every moe / latent-moe block of a model (issue 31).  With K selected experts
/// of scores s_i the gate weights are g_i = s_i (norm_topk: s_i / Σ_selected s_j), times
/// routed_scaling; the block adds Σ g_i E_i plus the shared expert's output.
struct MoeConfig {
  int n_experts = 0;        ///< N routed experts per block
  int top_k = 0;            ///< K experts per token
  int d_expert = 0;         ///< m, a routed expert's hidden width
  int d_shared = 0;         ///< the shared expert's hidden width (S shared experts merged: S x m_s); 0 = none
  int d_latent = 0;         ///< l, latent-moe blocks' latent width (W_down [l, d], experts l -> m -> l)
  ExpertAct act = ExpertAct::swiglu;
  RouterKind router = RouterKind::softmax;
  bool norm_topk = true;    ///< renormalise the selected scores to sum 1
  double routed_scaling = 1.0;  ///< multiplies the routed experts' sum (DeepSeek's routed_scaling_factor)
};

/// The token mixer of every mlstm-hybrid block of a model (issue 35; arXiv 2603.15590 eq. 11 and
/// the baselines of its ablations).
enum class MlstmMixer {
  hybrid,  ///< o·mLSTM + (1 - o)·windowed attention, o a per-head sigmoid gate (the paper's student)
  linear,  ///< linear attention: the mLSTM with i = f = 1 and o = 1 (Hedgehog / LoLCATs without sliding window)
  swa,     ///< sliding-window attention with sinks only (o = 0, no recurrent state)
};
const char* mlstm_mixer_name(MlstmMixer m) noexcept;
/// Parses "hybrid" / "linear" / "swa"; throws InputError naming `where`.
MlstmMixer parse_mlstm_mixer(const std::string& name, const std::string& where);

/// The settings shared by every mlstm-hybrid block of a model (root attributes mlstm_window,
/// mlstm_sinks, mlstm_mixer).
struct MlstmConfig {
  int window = 64;  ///< W: a query attends the keys at distance < W (itself included)
  int sinks = 4;    ///< S: ... and the first S positions of the sequence (StreamingLLM's sinks)
  MlstmMixer mixer = MlstmMixer::hybrid;
};

/// The recurrent-depth settings of a model whose blocks are recdepth-prelude / core / coda (issue
/// 36; Huginn, arXiv 2502.05171, and seal-rg/recurrent-pretraining raven_modeling_minimal.py).
/// Root attributes recdepth_mean_recurrence, recdepth_backprop_depth, recdepth_qk_bias,
/// recdepth_embed_scale and recdepth_state_std.
struct RecdepthConfig {
  int mean_recurrence = 0;  ///< r̄: core iterations at inference by default; the training distribution's mean
  int backprop_depth = 0;   ///< k̄: the last iterations trained with gradient (truncated backprop)
  bool qk_bias = false;     ///< blocks add q / k biases before RoPE (attn_q.bias, attn_k.bias)
  double embed_scale = 1.0; ///< token embeddings are multiplied by it (Huginn: sqrt(d_model))
  /// The initial latent state is N(0, state_std^2) truncated to ±3 state_std (Huginn's "like-init":
  /// sqrt(2 / (5 d)) · sqrt(d) = sqrt(2/5)); 0 = a zero state.
  double state_std = 0.0;
};

/// Hyperparameters of one model; stored as root attributes of the native checkpoint.
struct ModelConfig {
  int vocab_size = 0;      ///< rows of token_embd / output
  int d_model = 0;         ///< residual width
  int n_layers = 0;        ///< decoder blocks
  int n_heads = 0;         ///< query heads; head_dim = d_model / n_heads
  int n_kv_heads = 0;      ///< key/value heads (grouped-query attention); divides n_heads
  int d_ff = 0;            ///< SwiGLU hidden width
  int n_ctx = 0;           ///< maximum positions (prompt + generated)
  double rope_theta = 10000.0;   ///< RoPE base
  RopeStyle rope_style = RopeStyle::half;
  double rms_eps = 1e-5;   ///< RMSNorm epsilon
  bool tied = false;       ///< LM head shares token_embd.weight
  int bos_id = 1;          ///< beginning-of-sequence token (-1: none)
  int eos_id = 2;          ///< end-of-sequence token (-1: none)
  bool add_bos = true;     ///< prepend bos_id to text prompts
  /// The type of each block [n_layers]; empty means every block is `llama` (contract v1).
  std::vector<BlockType> block_types;
  /// The arithmetic version the model's reference logits were checked with (blocks.hpp).
  int arith_version = kArithVersion;
  /// The routed FFN of the moe / latent-moe blocks (unused when there are none).
  MoeConfig moe;
  /// The mixer of the mlstm-hybrid blocks (unused when there are none).
  MlstmConfig mlstm;
  /// The recurrent-depth settings (unused unless the blocks are recdepth-*).
  RecdepthConfig recdepth;
  /// Whether the blocks are recdepth-prelude* recdepth-core+ recdepth-coda* (a recurrent-depth model).
  bool is_recdepth() const noexcept;
  /// Blocks of each recurrent-depth role: prelude P, core C, coda D (0, 0, 0 for other models).
  int recdepth_prelude() const noexcept;
  int recdepth_core() const noexcept;
  int recdepth_coda() const noexcept;
  /// Whether any block is moe or latent-moe.
  bool has_moe() const noexcept;
  /// Whether any block is mlstm-hybrid.
  bool has_mlstm() const noexcept;
  /// Whether any block is llama (and so uses d_ff).
  bool has_llama_mlp() const noexcept;
  /// Whether the model is a Mixtral: every block `moe` with a softmax router, normalised top-K,
  /// routed_scaling 1, no shared expert and SwiGLU experts -- what llama.cpp's llama
  /// architecture and transformers' MixtralForCausalLM compute, so GGUF and safetensors output
  /// use their names and keys.
  bool is_mixtral() const noexcept;
  /// Weights of block l (attention, norms and its FFN).
  std::int64_t block_params(int l) const noexcept;
  /// Weights block l multiplies per token (a moe block: top_k of its experts, the router, the
  /// shared expert and the latent projections; llama: block_params).
  std::int64_t block_active_params(int l) const noexcept;

  /// Type of block l (llama when block_types is empty).
  BlockType block_type(int l) const noexcept {
    return block_types.empty() ? BlockType::llama : block_types[static_cast<std::size_t>(l)];
  }
  /// Every block's type [n_layers] (block_types, or all llama).
  std::vector<BlockType> all_block_types() const;
  /// Floats of recurrent state a sequence keeps for block l besides its KV cache (0 for llama;
  /// mLSTM-style blocks set it).  KvCache(config) sizes each layer's state with it.
  int block_state_floats(int l) const noexcept;

  /// d_model / n_heads.
  int head_dim() const noexcept { return n_heads > 0 ? d_model / n_heads : 0; }
  /// Query heads per KV head.
  int group() const noexcept { return n_kv_heads > 0 ? n_heads / n_kv_heads : 0; }
  /// Number of weights (tied head counted once).
  std::int64_t n_params() const noexcept;
  /// n_params() in double precision (no overflow for absurd configs read from files).
  double n_params_approx() const noexcept;
  /// Checks every invariant of the contract; throws InputError naming `where` and the field.
  void validate(const std::string& where) const;
};

}  // namespace icmlkit::lm
