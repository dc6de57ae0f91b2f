// The Hugging Face config.json of a Llama, Mixtral or icmlkit-moe checkpoint, read into our
// ModelConfig: its own file so that the parser can be fuzzed without the whole library.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "lm/config.hpp"

namespace icmlkit::lm {

/// config.json's model_type for icmlkit's own moe checkpoints (any moe model that is not a Mixtral).
inline constexpr const char* kHfMoeModelType = "icmlkit_moe";

/// Reads a parsed config.json (model_type llama, mixtral or icmlkit_moe; SiLU, no biases, no
/// rope_scaling, no sliding window) into a ModelConfig: sizes, RoPE theta, RMSNorm epsilon,
/// tied embeddings, BOS/EOS ids, and for moe models the experts, router and block types.
/// Checks every value's type and range (integers in [-1, 2^30], layers in [0, 4096]); the
/// shapes against the tensors are checked by the caller.  Throws InputError naming `where`
/// and the key.
ModelConfig config_from_hf_json(const nlohmann::json& cfg, const std::string& where);

}  // namespace icmlkit::lm
