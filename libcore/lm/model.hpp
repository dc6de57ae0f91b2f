// Llama-style model weights and the native HDF5 checkpoint (model contract v2, lm/README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/h5array.hpp"
#include "io/provenance.hpp"
#include "lm/config.hpp"
#include "lm/matmul.hpp"

namespace icmlkit::lm {

/// A row-major matrix [rows, cols] (weights are [out, in], as in GGUF), float32 in `data`, or —
/// for inference weights after hold_half() — IEEE binary16 or bfloat16 bits in `half` (then
/// `data` is empty; `bf16` says which), or — after hold_quant() — the GGUF Q8_0 / Q4_0 blocks it
/// was read from in `quant` (a GGUF reader keeps them beside `data` until then).
struct Matrix {
  int rows = 0, cols = 0;
  std::vector<float> data;
  std::vector<std::uint16_t> half;
  bool bf16 = false;  ///< `half` holds bfloat16 bits (else IEEE binary16)
  bool bf16_dot = false;  ///< those bfloat16 bits are computed in bf16 arithmetic (hold_bf16_dot)
  std::vector<std::uint8_t> quant;  ///< the rows as GGUF blocks of quant_type (lm/matmul.hpp)
  WeightType quant_type = WeightType::f32;
  bool act_q8 = false;  ///< `quant` holds act-q8 groups (lm::pack_act_q8; hold_act_q8)
  Matrix() = default;
  Matrix(int r, int c) : rows(r), cols(c), data(std::size_t(r) * c, 0.0f) {}
  /// Whether the values are held as f16 bits.
  bool is_half() const noexcept { return !half.empty(); }
  /// Whether quantised blocks are held (beside `data` or alone).
  bool is_quant() const noexcept { return !quant.empty(); }
  /// How the values the kernel reads are held: `data` when present, else `half`, else `quant`.
  WeightType weight_type() const noexcept {
    if (!data.empty() || (half.empty() && quant.empty())) return WeightType::f32;
    if (!half.empty()) return bf16_dot ? WeightType::bf16_dot : bf16 ? WeightType::bf16 : WeightType::f16;
    return act_q8 ? (quant_type == WeightType::q8_0 ? WeightType::q8_0_aq : WeightType::q4_0_aq) : quant_type;
  }
  /// Those values from row r on (act_q8: r a multiple of 16, the start of its group).
  const void* values_from(int r) const noexcept {
    switch (weight_type()) {
      case WeightType::f32: return data.data() + std::size_t(r) * cols;
      case WeightType::f16:
      case WeightType::bf16:
      case WeightType::bf16_dot: return half.data() + std::size_t(r) * cols;
      default: return quant.data() + std::size_t(r) * weight_row_bytes(quant_type, cols);
    }
  }
  /// Row r as float32 (widened when held as 16-bit or quantised).
  void row_f32(int r, float* out) const noexcept;
  /// Pointer to row r.
  const float* row(int r) const noexcept { return data.data() + std::size_t(r) * cols; }
  float* row(int r) noexcept { return data.data() + std::size_t(r) * cols; }
};

/// One decoder block's weights (GGUF names in comments).  A llama block holds the attention,
/// norms and w_gate/w_up/w_down; a moe or latent-moe block the same attention and norms and,
/// instead of the MLP, the routed FFN below (ModelConfig::moe; w = d_model for moe, d_latent for
/// latent-moe; m = d_expert, ms = d_shared).  The N experts' matrices are stacked along the rows,
/// expert e's rows [e·m, (e+1)·m) (down: [e·w, (e+1)·w)), GGUF's 3-D layout [N, m, w] flattened.
struct Layer {
  std::vector<float> attn_norm;  ///< blk.N.attn_norm.weight [d_model]
  Matrix wq;                     ///< blk.N.attn_q.weight [n_heads*head_dim, d_model]
  Matrix wk;                     ///< blk.N.attn_k.weight [n_kv_heads*head_dim, d_model]
  Matrix wv;                     ///< blk.N.attn_v.weight [n_kv_heads*head_dim, d_model]
  Matrix wo;                     ///< blk.N.attn_output.weight [d_model, n_heads*head_dim]
  std::vector<float> ffn_norm;   ///< blk.N.ffn_norm.weight [d_model]
  Matrix w_gate;                 ///< blk.N.ffn_gate.weight [d_ff, d_model]
  Matrix w_up;                   ///< blk.N.ffn_up.weight [d_ff, d_model]
  Matrix w_down;                 ///< blk.N.ffn_down.weight [d_model, d_ff]
  // moe / latent-moe blocks
  Matrix router;                 ///< blk.N.ffn_gate_inp.weight [N, d_model]
  std::vector<float> router_bias;  ///< blk.N.exp_probs_b.bias [N] (sigmoid router: selection only)
  Matrix gate_exps;              ///< blk.N.ffn_gate_exps.weight [N·m, w] (swiglu experts)
  Matrix up_exps;                ///< blk.N.ffn_up_exps.weight [N·m, w]
  Matrix down_exps;              ///< blk.N.ffn_down_exps.weight [N·w, m]
  Matrix gate_shexp;             ///< blk.N.ffn_gate_shexp.weight [ms, d_model] (swiglu, d_shared > 0)
  Matrix up_shexp;               ///< blk.N.ffn_up_shexp.weight [ms, d_model]
  Matrix down_shexp;             ///< blk.N.ffn_down_shexp.weight [d_model, ms]
  Matrix latent_down;            ///< blk.N.ffn_latent_down.weight [l, d_model] (latent-moe: W_down)
  Matrix latent_up;              ///< blk.N.ffn_latent_up.weight [d_model, l] (latent-moe: W_up)
  // mlstm-hybrid blocks (llama's tensors plus these; hd = head_dim, dq = n_heads hd, dkv = n_kv hd)
  Matrix mlstm_fq;               ///< blk.N.mlstm_fq.weight [n_heads·hd, hd]: head h's Hedgehog map of q, rows [h hd, (h+1) hd)
  Matrix mlstm_fk;               ///< blk.N.mlstm_fk.weight [n_kv·hd, hd]: KV head g's map of k
  Matrix mlstm_igate;            ///< blk.N.mlstm_igate.weight [n_heads, d_model]: input gate i~ = W n1(x) + b
  std::vector<float> mlstm_igate_b;  ///< blk.N.mlstm_igate.bias [n_heads]
  Matrix mlstm_fgate;            ///< blk.N.mlstm_fgate.weight [n_heads, d_model]: forget gate f~ = W n1(x) + b
  std::vector<float> mlstm_fgate_b;  ///< blk.N.mlstm_fgate.bias [n_heads]
  Matrix mlstm_ogate;            ///< blk.N.mlstm_ogate.weight [n_heads, dq + 2 dkv]: output gate o = σ(W [q; k; v] + b), q, k before RoPE
  std::vector<float> mlstm_ogate_b;  ///< blk.N.mlstm_ogate.bias [n_heads]
  // recdepth-* (sandwich) blocks: llama's tensors (attn_norm = n1, ffn_norm = n3) plus these
  std::vector<float> post_attn_norm;  ///< blk.N.post_attn_norm.weight [d_model]: n2, on x + attention
  std::vector<float> post_ffn_norm;   ///< blk.N.post_ffn_norm.weight [d_model]: n4, on x + MLP
  std::vector<float> q_bias;     ///< blk.N.attn_q.bias [n_heads·hd], added before RoPE (RecdepthConfig::qk_bias)
  std::vector<float> k_bias;     ///< blk.N.attn_k.bias [n_kv·hd], added before RoPE
  /// Every matrix of the block that is allocated (llama's or the routed FFN's).
  std::vector<Matrix*> matrices();
  std::vector<const Matrix*> matrices() const;
  /// Every matrix field, allocated or not, in one fixed order (copying shapes between layers).
  std::vector<Matrix*> matrices_all();
  std::vector<const Matrix*> matrices_all() const;
};

/// A whole model: config, weights (float32 in memory) and the tokenizer bytes.
struct Model {
  ModelConfig config;
  Matrix token_embd;             ///< token_embd.weight [vocab, d_model]
  std::vector<Layer> layers;
  std::vector<float> output_norm;  ///< output_norm.weight [d_model]
  Matrix output;                 ///< output.weight [vocab, d_model]; empty when tied
  /// recdepth_adapter.weight [d_model, 2 d_model]: a recurrent-depth model's injection, the core's
  /// input A [s; e] (state first, then the prelude's output); empty for other models.
  Matrix adapter;
  std::string tokenizer_model;   ///< SentencePiece model proto bytes; may be empty
  io::h5::FloatStorage stored = io::h5::FloatStorage::f32;  ///< precision of matrices on disk

  /// Every matrix field of the model (embedding, head, adapter, each layer's matrices_all()),
  /// allocated or not.
  std::vector<Matrix*> all_matrices();
  /// The LM head matrix (token_embd when tied).
  const Matrix& head() const noexcept { return config.tied ? token_embd : output; }
  /// Bytes of all float32 weights in memory.
  std::int64_t weight_bytes() const noexcept;
};

/// One tensor of a model under its GGUF and Hugging Face names (F = float or const float).
template <class F>
struct BasicTensorSlot {
  std::string gguf;    ///< "blk.0.attn_q.weight"
  std::string hf;      ///< "model.layers.0.self_attn.q_proj.weight"
  F* data;             ///< row-major values
  int rows, cols;      ///< [out, in]; cols == 0 for a vector of `rows`
  int rope_heads;      ///< q/k matrices: heads whose rows follow the RoPE layout; else 0
  /// A moe block's stacked experts: `experts` matrices of rows / experts rows each, expert e's
  /// rows first e x rows / experts (GGUF: one 3-D tensor ne [cols, rows / experts, experts]; `hf`
  /// then holds "{}" where the expert's index goes, one tensor per expert); else 0.
  int experts = 0;
  bool is_matrix() const noexcept { return cols > 0; }
  /// The Hugging Face name of expert e of a stacked slot (hf with "{}" replaced by e).
  std::string hf_expert(int e) const {
    const auto at = hf.find("{}");
    return hf.substr(0, at) + std::to_string(e) + hf.substr(at + 2);
  }
};
using TensorSlot = BasicTensorSlot<float>;
using ConstTensorSlot = BasicTensorSlot<const float>;

/// Every tensor of `m` in checkpoint order: token_embd, per block (attn_norm, q, k, v, output,
/// ffn_norm, then llama's gate, up, down or a moe block's router, router bias (sigmoid), gate/up/
/// down experts, shared gate/up/down (d_shared > 0) and latent down/up (latent-moe); an
/// mlstm-hybrid block llama's, then mlstm_fq, mlstm_fk and the three gates' weight and bias; a
/// recdepth-* block llama's, then post_attn_norm, post_ffn_norm and (qk_bias) attn_q.bias,
/// attn_k.bias), recdepth_adapter (recurrent-depth models), output_norm,
/// output (when untied).  The single list every reader and writer (HDF5, GGUF, safetensors)
/// walks.  A moe block's Hugging Face names follow DeepSeek-V3 / Qwen-MoE (mlp.gate.weight,
/// mlp.gate.e_score_correction_bias, mlp.experts.{}.gate_proj/up_proj/down_proj.weight,
/// mlp.shared_experts.*) plus latent-moe's own mlp.latent_down_proj / latent_up_proj.weight;
/// the safetensors writer renames them for Mixtral where the model is one.
std::vector<TensorSlot> tensor_slots(Model& m);
std::vector<ConstTensorSlot> tensor_slots(const Model& m);

/// A model with every tensor allocated to its contract shape: matrices zero, norm weights 1.
/// Validates the config (InputError naming `where`).
Model allocate_model(const ModelConfig& config, const std::string& where = "model config");

/// A model with every tensor allocated to its contract shape and N(0, std^2) matrices
/// (norm weights 1), drawn from `seed` (one derived stream per tensor, so the result does not
/// depend on threads).  Validates the config (InputError).
Model random_model(const ModelConfig& config, std::uint64_t seed, double std = 0.02);

/// Holds every matrix as f16 bits, or bf16 bits with `bf16` (half the memory and bandwidth of
/// decoding).  Exact when the weights are representable (a model stored so): then logits are
/// bitwise those of the float32 model.  Such a model computes (forward, apply_head) but cannot be
/// saved or trained: tensor_slots() throws RuntimeError.  Returns false (and changes nothing)
/// when a weight is not exactly representable.
bool hold_half(Model& model, bool bf16 = false);

/// Holds every matrix as bf16-dot weights (`--weights bf16-dot`, issue 37): its values (widened
/// first when held 16-bit or quantised) rounded to bfloat16 (lm::bf16_dot_round), computed in
/// bfloat16 arithmetic by the kernel (WeightType::bf16_dot).  Lossy, never refused.
void hold_bf16_dot(Model& model);

/// Holds the matrices read from GGUF Q8_0 / Q4_0 as those blocks (about 1/3.8 and 1/7.1 of
/// float32's bytes), dropping their float32 copy — only where that copy is still exactly the
/// blocks' values (a matrix changed since, e.g. by a merged LoRA adapter, keeps float32 and
/// drops the blocks).  Logits are bitwise those of the float32 model.  Such a model computes but
/// cannot be saved or trained (tensor_slots() throws RuntimeError).  Returns the number of
/// matrices now held quantised.
int hold_quant(Model& model);

/// Drops every matrix's quantised blocks, keeping float32 (--weights f32).
void drop_quant(Model& model);

/// Has every matrix held as Q8_0 / Q4_0 blocks (hold_quant first) multiply activations
/// quantised to Q8_0 blocks with integer dot products (`--act-quant q8`, issue 37;
/// WeightType::q8_0_aq / q4_0_aq): llama.cpp's arithmetic for these files, lossy.  The blocks are
/// reordered in place into 16-row groups (lm::pack_act_q8, the same bytes), so a matrix takes part
/// only when its rows — and, stacked experts, each expert's rows — are a multiple of 16; the
/// others keep their exact products.  Returns the number of matrices converted (0: nothing changed).
int hold_act_q8(Model& model);

/// Rounds every matrix to `storage` precision and back, so in-memory weights equal what a
/// checkpoint saved at that precision loads as.
void round_weights(Model& model, io::h5::FloatStorage storage);

/// What narrowing a model's matrices to `storage` loses (lm-convert's check, issue 26).
struct NarrowingReport {
  std::string overflow_tensor;  ///< first tensor with a finite weight that becomes ±inf ("" = none)
  float overflow_value = 0;     ///< that weight
  std::string underflow_tensor; ///< first tensor with a non-zero weight that becomes 0 ("" = none)
  std::int64_t underflow_count = 0;  ///< non-zero weights that become 0, over all matrices
};

/// Scans every matrix for weights `storage` cannot hold: finite values that round to ±inf
/// (|x| >= 65520 in f16) and non-zero values that round to 0 (|x| <= 2^-25 in f16).  f32: none.
NarrowingReport narrowing_report(const Model& model, io::h5::FloatStorage storage);

/// Every writer's guard: throws UsageError naming the tensor, the weight and the remedy
/// ("--dtype bf16 or f32") when narrowing to `storage` would turn a finite weight into inf,
/// and warns on stderr (log::warn) with the count when non-zero weights would become 0.
void check_narrowing(const Model& model, io::h5::FloatStorage storage);

/// Loads a native checkpoint.  Throws InputError (exit 1) naming the file and tensor for: not
/// HDF5, missing attribute or tensor, shape mismatch, n_heads not divisible by n_kv_heads,
/// NaN/Inf weights, unknown dtype or rope_style, tokenizer vocabulary != vocab_size.
Model load_checkpoint(const std::string& path);

/// Writes a native checkpoint atomically: config attributes, tensors (matrices narrowed to
/// `storage`, norms f32), /tokenizer/model bytes and provenance.  Throws RuntimeError, and
/// UsageError from check_narrowing before anything is written.
void save_checkpoint(const std::string& path, const Model& model, io::h5::FloatStorage storage,
                     const io::Provenance& prov);

}  // namespace icmlkit::lm
