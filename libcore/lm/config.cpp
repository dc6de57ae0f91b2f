#include "lm/config.hpp"

#include <algorithm>
#include <cmath>

#include "util/error.hpp"

namespace icmlkit::lm {

const char* rope_style_name(RopeStyle s) noexcept {
  return s == RopeStyle::half ? "half" : "interleaved";
}

std::int64_t ModelConfig::n_params() const noexcept {
  const std::int64_t d = d_model, hd = head_dim();
  const std::int64_t attn = d * (n_heads * hd) * 2 + d * (n_kv_heads * hd) * 2;
  const std::int64_t mlp = 3 * d * std::int64_t(d_ff);
  const std::int64_t per_layer = attn + mlp + 2 * d;
  return std::int64_t(vocab_size) * d * (tied ? 1 : 2) + n_layers * per_layer + d;
}

double ModelConfig::n_params_approx() const noexcept {
  const double d = d_model, hd = n_heads > 0 ? double(d_model) / n_heads : 0.0;
  const double per_layer = d * n_heads * hd * 2 + d * n_kv_heads * hd * 2 + 3 * d * d_ff + 2 * d;
  return double(vocab_size) * d * (tied ? 1 : 2) + double(n_layers) * per_layer + d;
}

std::vector<BlockType> ModelConfig::all_block_types() const {
  return block_types.empty() ? std::vector<BlockType>(static_cast<std::size_t>(std::max(n_layers, 0)), BlockType::llama)
                             : block_types;
}

int ModelConfig::block_state_floats(int l) const noexcept {
  switch (block_type(l)) {
    case BlockType::llama: return 0;  // all its memory is the KV cache
  }
  return 0;
}

void ModelConfig::validate(const std::string& where) const {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw InputError("invalid model config: " + what, where);
  };
  need(vocab_size > 0, "vocab_size must be positive");
  need(d_model > 0, "d_model must be positive");
  need(n_layers > 0, "n_layers must be positive");
  need(n_heads > 0, "n_heads must be positive");
  need(n_kv_heads > 0, "n_kv_heads must be positive");
  need(n_heads % n_kv_heads == 0, "n_heads (" + std::to_string(n_heads) +
                                      ") is not divisible by n_kv_heads (" + std::to_string(n_kv_heads) + ")");
  need(d_model % n_heads == 0, "d_model is not divisible by n_heads");
  need(head_dim() % 2 == 0, "head_dim must be even for rotary embedding");
  need(d_ff > 0, "d_ff must be positive");
  need(n_ctx > 0, "n_ctx must be positive");
  need(std::isfinite(rope_theta) && rope_theta > 1.0, "rope_theta must be > 1");
  need(std::isfinite(rms_eps) && rms_eps > 0.0, "rms_eps must be positive");
  need(bos_id >= -1 && bos_id < vocab_size, "bos_id out of range");
  need(eos_id >= -1 && eos_id < vocab_size, "eos_id out of range");
  need(!add_bos || bos_id >= 0, "add_bos needs a bos_id");
  need(block_types.empty() || static_cast<int>(block_types.size()) == n_layers,
       "block_types lists " + std::to_string(block_types.size()) + " blocks but n_layers is " + std::to_string(n_layers));
  need(arith_version >= 1, "arith_version must be >= 1");
}

}  // namespace icmlkit::lm
