// Model contract v2: a model is a list of typed blocks (lm/README.md, "Block types").
//
// Each decoder block of a model has a type; the type fixes the block's tensors (names after
// "blk.N.", shapes from the config) and the forward and backward that run it.  Today one type
// exists, `llama` (the v1 block: attention with RoPE and GQA, then a SwiGLU MLP, both
// pre-normed); the issues that add MoE, LatentMoE, mLSTM-hybrid and recurrent-depth models add
// their types here, each with its tensor names and config attributes stated in lm/README.md.
#pragma once

#include <string>
#include <vector>

namespace icmlkit::lm {

/// The native checkpoint formats: v1 (no block list; every block llama) is read, v2 written.
inline constexpr const char* kFormatV1 = "icmlkit-lm-v1";
inline constexpr const char* kFormatV2 = "icmlkit-lm-v2";

/// Version of the engine arithmetic a file's reference logits were checked with, kept apart
/// from the format version: 1 = the batch-invariant 8-lane CPU arithmetic (lm/matmul.hpp).
inline constexpr int kArithVersion = 1;

/// The block types of the contract.
enum class BlockType {
  llama,  ///< x += Wo·Attn(RoPE(Wq·n1(x)), RoPE(Wk·n1(x)), Wv·n1(x)); x += Wdown·(silu(Wgate·n2(x)) ⊙ Wup·n2(x))
  /// llama's attention, then a routed FFN: x += Σ_{i ∈ top-K} g_i E_i(n2(x)) + E_shared(n2(x))
  /// (ModelConfig::moe: N experts, router, shared expert; Mixtral / Qwen-MoE / DeepSeek style).
  moe,
  /// llama's attention, then LatentMoE's FFN (Elango et al. 2026, arXiv 2601.18089):
  /// x += W_up Σ_{i ∈ top-K} g_i E_i(W_down n2(x)) + E_shared(n2(x)), experts at the latent width l.
  latent_moe,
  /// The hybrid xLSTM student block of "Effective Distillation to Hybrid xLSTM Architectures"
  /// (arXiv 2603.15590, eq. 11): llama's projections feed a per-head gated mix of an mLSTM
  /// (Hedgehog feature maps, exponential input and sigmoid forget gates) and softmax attention
  /// over a sliding window plus sink tokens, then llama's SwiGLU MLP (ModelConfig::mlstm).
  mlstm_hybrid,
  /// The blocks of a recurrent-depth ("looped") decoder (Huginn: Geiping et al. 2025, arXiv
  /// 2502.05171; seal-rg/recurrent-pretraining SandwichBlock), all "sandwich" blocks:
  /// x = n2(x + Wo·Attn(n1 x)); x = n4(x + Wdown·(silu(Wgate n3 x) ⊙ Wup n3 x)), with optional
  /// q/k biases before RoPE (ModelConfig::recdepth).  The model is prelude blocks, then core
  /// blocks applied r times to s = core(A [s; e]) (e: the prelude's output, A the adapter), then
  /// coda blocks on n_f(s); lm/recdepth.hpp runs it.
  recdepth_prelude,
  recdepth_core,   ///< see recdepth_prelude
  recdepth_coda,   ///< see recdepth_prelude
};

/// Whether blocks of type t are recurrent-depth sandwich blocks.
inline bool is_recdepth_block(BlockType t) noexcept {
  return t == BlockType::recdepth_prelude || t == BlockType::recdepth_core || t == BlockType::recdepth_coda;
}

/// Whether blocks of type t have a routed FFN (moe, latent_moe).
inline bool is_moe_block(BlockType t) noexcept { return t == BlockType::moe || t == BlockType::latent_moe; }

/// The type's name as stored in the checkpoint's `block_types` attribute ("llama", "moe", "latent-moe",
/// "mlstm-hybrid", "recdepth-prelude", "recdepth-core", "recdepth-coda").
const char* block_type_name(BlockType t) noexcept;

/// Parses a stored name.  Throws InputError "block N: unknown block type 'x' (this build
/// reads: llama, moe, latent-moe, mlstm-hybrid,
/// recdepth-prelude, recdepth-core, recdepth-coda)" naming `where` (the file).
BlockType parse_block_type(const std::string& name, int block, const std::string& where);

/// The tensor names of one llama block, after the "blk.N." prefix, in checkpoint order (a moe
/// block's depend on its configuration: lm::tensor_slots lists them).
const std::vector<std::string>& llama_tensor_names();

/// The stored form of a block list: names joined by ',' ("llama,llama,...").
std::string join_block_types(const std::vector<BlockType>& types);

/// Parses the stored form into exactly n_layers types.  Throws InputError naming `where` when
/// the count differs from n_layers or a name is unknown (naming the block).
std::vector<BlockType> split_block_types(const std::string& stored, int n_layers, const std::string& where);

}  // namespace icmlkit::lm
