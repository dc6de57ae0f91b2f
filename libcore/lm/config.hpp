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
