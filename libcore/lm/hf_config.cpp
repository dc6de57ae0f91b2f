#include "lm/hf_config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "util/error.hpp"

namespace icmlkit::lm {

using nlohmann::json;

namespace {

int cfg_int(const json& c, const char* key, const std::string& where, bool required, int fallback) {
  if (!c.contains(key) || c[key].is_null()) {
    if (required) throw InputError(std::string("config.json lacks '") + key + "'", where);
    return fallback;
  }
  const json* v = &c[key];
  if (v->is_array() && !v->empty()) v = &(*v)[0];  // eos_token_id may be a list
  if (!v->is_number_integer() || v->get<std::int64_t>() < -1 || v->get<std::int64_t>() > (1ll << 30))
    throw InputError(std::string("config.json '") + key + "' is not a valid integer", where);
  return v->get<int>();
}

double cfg_double(const json& c, const char* key, const std::string& where, double fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_number()) throw InputError(std::string("config.json '") + key + "' is not a number", where);
  return c[key].get<double>();
}

bool cfg_bool(const json& c, const char* key, const std::string& where, bool fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_boolean()) throw InputError(std::string("config.json '") + key + "' is not a boolean", where);
  return c[key].get<bool>();
}

std::string cfg_str(const json& c, const char* key, const std::string& where, const char* fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  if (!c[key].is_string()) throw InputError(std::string("config.json '") + key + "' is not a string", where);
  return c[key].get<std::string>();
}

}  // namespace

ModelConfig config_from_hf_json(const json& cfg, const std::string& where) {
  if (!cfg.is_object()) throw InputError("config.json is not an object", where);
  const std::string mt = cfg_str(cfg, "model_type", where, "");
  if (mt != "llama" && mt != "mixtral" && mt != kHfMoeModelType)
    throw InputError("model_type '" + mt + "' is not supported (llama, mixtral and " + kHfMoeModelType + " are)", where);
  if (mt == "mixtral" && cfg.contains("sliding_window") && !cfg["sliding_window"].is_null())
    throw InputError("sliding_window attention is not supported (set it to null)", where);
  if (cfg.contains("rope_scaling") && !cfg["rope_scaling"].is_null()) throw InputError("rope_scaling is not supported", where);
  if (cfg_bool(cfg, "attention_bias", where, false) || cfg_bool(cfg, "mlp_bias", where, false))
    throw InputError("attention/MLP biases are not supported", where);
  if (cfg_str(cfg, "hidden_act", where, "silu") != "silu") throw InputError("hidden_act must be silu", where);
  ModelConfig c;
  c.vocab_size = cfg_int(cfg, "vocab_size", where, true, 0);
  c.d_model = cfg_int(cfg, "hidden_size", where, true, 0);
  c.n_layers = cfg_int(cfg, "num_hidden_layers", where, true, 0);
  c.n_heads = cfg_int(cfg, "num_attention_heads", where, true, 0);
  c.n_kv_heads = cfg_int(cfg, "num_key_value_heads", where, false, c.n_heads);
  c.d_ff = cfg_int(cfg, "intermediate_size", where, true, 0);
  c.n_ctx = cfg_int(cfg, "max_position_embeddings", where, true, 0);
  c.rope_theta = cfg_double(cfg, "rope_theta", where, 10000.0);
  c.rms_eps = cfg_double(cfg, "rms_norm_eps", where, 1e-6);
  c.tied = cfg_bool(cfg, "tie_word_embeddings", where, false);
  c.bos_id = cfg_int(cfg, "bos_token_id", where, false, -1);
  c.eos_id = cfg_int(cfg, "eos_token_id", where, false, -1);
  c.add_bos = c.bos_id >= 0;
  c.rope_style = RopeStyle::half;
  if (c.n_layers < 0 || c.n_layers > 4096)  // before anything is sized by it (as the GGUF reader)
    throw InputError(fmt::format("num_hidden_layers {} is outside [0, 4096]", c.n_layers), where);
  if (mt == "mixtral") {
    c.block_types.assign(std::size_t(std::max(0, c.n_layers)), BlockType::moe);
    c.moe.n_experts = cfg_int(cfg, "num_local_experts", where, true, 0);
    c.moe.top_k = cfg_int(cfg, "num_experts_per_tok", where, true, 0);
    c.moe.d_expert = c.d_ff;
  } else if (mt == kHfMoeModelType) {
    if (!cfg.contains("block_types") || !cfg["block_types"].is_array() || cfg["block_types"].size() != std::size_t(std::max(0, c.n_layers)))
      throw InputError("config.json 'block_types' must list num_hidden_layers block types", where);
    for (std::size_t i = 0; i < cfg["block_types"].size(); ++i) {
      const json& b = cfg["block_types"][i];
      if (!b.is_string()) throw InputError("config.json 'block_types' holds a non-string", where);
      c.block_types.push_back(parse_block_type(b.get<std::string>(), int(i), where));
    }
    MoeConfig& e = c.moe;
    e.n_experts = cfg_int(cfg, "n_routed_experts", where, true, 0);
    e.top_k = cfg_int(cfg, "num_experts_per_tok", where, true, 0);
    e.d_expert = cfg_int(cfg, "moe_intermediate_size", where, true, 0);
    e.d_shared = cfg_int(cfg, "shared_expert_intermediate_size", where, false, 0);
    e.d_latent = cfg_int(cfg, "latent_size", where, false, 0);
    e.routed_scaling = cfg_double(cfg, "routed_scaling_factor", where, 1.0);
    e.norm_topk = cfg_bool(cfg, "norm_topk_prob", where, true);
    e.router = parse_router_kind(cfg_str(cfg, "scoring_func", where, "softmax"), where + ":scoring_func");
    e.act = parse_expert_act(cfg_str(cfg, "expert_act", where, "swiglu"), where + ":expert_act");
  }
  if (c.n_heads > 0 && cfg.contains("head_dim") && !cfg["head_dim"].is_null() &&
      cfg_int(cfg, "head_dim", where, false, 0) * c.n_heads != c.d_model)
    throw InputError("head_dim * num_attention_heads != hidden_size is not supported", where);
  return c;
}

}  // namespace icmlkit::lm
