#include "lm/blocks.hpp"

#include <fmt/format.h>

#include "util/error.hpp"

namespace icmlkit::lm {

const char* block_type_name(BlockType t) noexcept {
  switch (t) {
    case BlockType::llama: return "llama";
    case BlockType::moe: return "moe";
    case BlockType::latent_moe: return "latent-moe";
    case BlockType::mlstm_hybrid: return "mlstm-hybrid";
    case BlockType::recdepth_prelude: return "recdepth-prelude";
    case BlockType::recdepth_core: return "recdepth-core";
    case BlockType::recdepth_coda: return "recdepth-coda";
  }
  return "?";
}

BlockType parse_block_type(const std::string& name, int block, const std::string& where) {
  if (name == "llama") return BlockType::llama;
  if (name == "moe") return BlockType::moe;
  if (name == "latent-moe") return BlockType::latent_moe;
  if (name == "mlstm-hybrid") return BlockType::mlstm_hybrid;
  if (name == "recdepth-prelude") return BlockType::recdepth_prelude;
  if (name == "recdepth-core") return BlockType::recdepth_core;
  if (name == "recdepth-coda") return BlockType::recdepth_coda;
  throw InputError(fmt::format("block {}: unknown block type '{}' (this build reads: llama, moe, latent-moe, mlstm-hybrid, recdepth-prelude, recdepth-core, recdepth-coda)", block, name), where);
}

const std::vector<std::string>& llama_tensor_names() {
  static const std::vector<std::string> llama{"attn_norm.weight", "attn_q.weight", "attn_k.weight",
                                              "attn_v.weight",    "attn_output.weight", "ffn_norm.weight",
                                              "ffn_gate.weight",  "ffn_up.weight", "ffn_down.weight"};
  return llama;
}

std::string join_block_types(const std::vector<BlockType>& types) {
  std::string s;
  for (std::size_t i = 0; i < types.size(); ++i) {
    if (i) s += ',';
    s += block_type_name(types[i]);
  }
  return s;
}

std::vector<BlockType> split_block_types(const std::string& stored, int n_layers, const std::string& where) {
  std::vector<std::string> names;
  std::size_t at = 0;
  while (true) {
    const std::size_t comma = stored.find(',', at);
    names.push_back(stored.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  if (static_cast<int>(names.size()) != n_layers)
    throw InputError(fmt::format("block_types lists {} blocks but n_layers is {}", names.size(), n_layers), where);
  std::vector<BlockType> types;
  for (int i = 0; i < n_layers; ++i) types.push_back(parse_block_type(names[i], i, where));
  return types;
}

}  // namespace icmlkit::lm
