#include "lm/config.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "util/error.hpp"

namespace icmlkit::lm {

const char* rope_style_name(RopeStyle s) noexcept {
  return s == RopeStyle::half ? "half" : "interleaved";
}

const char* expert_act_name(ExpertAct a) noexcept { return a == ExpertAct::swiglu ? "swiglu" : "relu2"; }
const char* router_kind_name(RouterKind r) noexcept { return r == RouterKind::softmax ? "softmax" : "sigmoid"; }

ExpertAct parse_expert_act(const std::string& name, const std::string& where) {
  if (name == "swiglu") return ExpertAct::swiglu;
  if (name == "relu2") return ExpertAct::relu2;
  throw InputError("unknown expert activation '" + name + "' (swiglu or relu2)", where);
}

RouterKind parse_router_kind(const std::string& name, const std::string& where) {
  if (name == "softmax") return RouterKind::softmax;
  if (name == "sigmoid") return RouterKind::sigmoid;
  throw InputError("unknown router '" + name + "' (softmax or sigmoid)", where);
}

const char* mlstm_mixer_name(MlstmMixer m) noexcept {
  switch (m) {
    case MlstmMixer::hybrid: return "hybrid";
    case MlstmMixer::linear: return "linear";
    case MlstmMixer::swa: return "swa";
  }
  return "?";
}

MlstmMixer parse_mlstm_mixer(const std::string& name, const std::string& where) {
  if (name == "hybrid") return MlstmMixer::hybrid;
  if (name == "linear") return MlstmMixer::linear;
  if (name == "swa") return MlstmMixer::swa;
  throw InputError("unknown mLSTM mixer '" + name + "' (hybrid, linear or swa)", where);
}

bool ModelConfig::has_mlstm() const noexcept {
  for (BlockType t : block_types)
    if (t == BlockType::mlstm_hybrid) return true;
  return false;
}

bool ModelConfig::is_recdepth() const noexcept {
  for (BlockType t : block_types)
    if (is_recdepth_block(t)) return true;
  return false;
}

namespace {
int count_type(const std::vector<BlockType>& types, BlockType t) {
  return static_cast<int>(std::count(types.begin(), types.end(), t));
}
}  // namespace

int ModelConfig::recdepth_prelude() const noexcept { return count_type(block_types, BlockType::recdepth_prelude); }
int ModelConfig::recdepth_core() const noexcept { return count_type(block_types, BlockType::recdepth_core); }
int ModelConfig::recdepth_coda() const noexcept { return count_type(block_types, BlockType::recdepth_coda); }

bool ModelConfig::has_moe() const noexcept {
  for (BlockType t : block_types)
    if (is_moe_block(t)) return true;
  return false;
}

bool ModelConfig::has_llama_mlp() const noexcept {
  if (block_types.empty()) return true;
  for (BlockType t : block_types)
    if (t == BlockType::llama || t == BlockType::mlstm_hybrid || is_recdepth_block(t)) return true;
  return false;
}

bool ModelConfig::is_mixtral() const noexcept {
  if (block_types.empty()) return false;
  for (BlockType t : block_types)
    if (t != BlockType::moe) return false;
  return moe.router == RouterKind::softmax && moe.norm_topk && moe.routed_scaling == 1.0 && moe.d_shared == 0 &&
         moe.act == ExpertAct::swiglu;
}

namespace {
// Weights of block l: (total, active per token), in double (no overflow for absurd configs).
std::pair<double, double> block_weights(const ModelConfig& c, int l) {
  const double d = c.d_model, hd = c.n_heads > 0 ? double(c.d_model) / c.n_heads : 0.0;
  const double attn = d * c.n_heads * hd * 2 + d * c.n_kv_heads * hd * 2 + 2 * d;
  const BlockType t = c.block_type(l);
  if (t == BlockType::mlstm_hybrid) {  // + feature maps, input / forget gates on x, the output gate on [q, k, v]
    const double nh = c.n_heads, dq = nh * hd, dkv = c.n_kv_heads * hd;
    const double mix = (nh + c.n_kv_heads) * hd * hd + 2 * nh * (d + 1) + nh * (dq + 2 * dkv + 1);
    return {attn + 3 * d * c.d_ff + mix, attn + 3 * d * c.d_ff + mix};
  }
  if (is_recdepth_block(t)) {  // + the two post-norms and the q / k biases
    const double extra = 2 * d + (c.recdepth.qk_bias ? (c.n_heads + c.n_kv_heads) * hd : 0.0);
    return {attn + 3 * d * c.d_ff + extra, attn + 3 * d * c.d_ff + extra};
  }
  if (!is_moe_block(t)) return {attn + 3 * d * c.d_ff, attn + 3 * d * c.d_ff};
  const MoeConfig& m = c.moe;
  const double mats = m.act == ExpertAct::swiglu ? 3 : 2;
  const double w = t == BlockType::latent_moe ? m.d_latent : d;
  const double expert = mats * w * m.d_expert;
  const double always = attn + double(m.n_experts) * d + (m.router == RouterKind::sigmoid ? m.n_experts : 0) +
                        mats * d * m.d_shared + (t == BlockType::latent_moe ? 2 * d * m.d_latent : 0.0);
  return {always + m.n_experts * expert, always + m.top_k * expert};
}
}  // namespace

std::int64_t ModelConfig::block_params(int l) const noexcept { return static_cast<std::int64_t>(block_weights(*this, l).first); }
std::int64_t ModelConfig::block_active_params(int l) const noexcept {
  return static_cast<std::int64_t>(block_weights(*this, l).second);
}

std::int64_t ModelConfig::n_params() const noexcept {
  std::int64_t n = std::int64_t(vocab_size) * d_model * (tied ? 1 : 2) + d_model;
  if (is_recdepth()) n += std::int64_t(2) * d_model * d_model;  // the adapter
  for (int l = 0; l < n_layers; ++l) n += block_params(l);
  return n;
}

double ModelConfig::n_params_approx() const noexcept {
  double n = double(vocab_size) * d_model * (tied ? 1 : 2) + d_model;
  if (is_recdepth()) n += 2.0 * d_model * d_model;
  for (int l = 0; l < n_layers; ++l) n += block_weights(*this, l).first;
  return n;
}

std::vector<BlockType> ModelConfig::all_block_types() const {
  return block_types.empty() ? std::vector<BlockType>(static_cast<std::size_t>(std::max(n_layers, 0)), BlockType::llama)
                             : block_types;
}

int ModelConfig::block_state_floats(int l) const noexcept {
  switch (block_type(l)) {
    case BlockType::llama:
    case BlockType::moe:
    case BlockType::latent_moe:
    case BlockType::recdepth_prelude:
    case BlockType::recdepth_core:
    case BlockType::recdepth_coda: return 0;  // all its memory is the KV cache
    case BlockType::mlstm_hybrid:  // per query head: C [hd, hd], n [hd], m and the empty flag
      return mlstm.mixer == MlstmMixer::swa ? 0 : n_heads * (head_dim() * head_dim() + head_dim() + 2);
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
  need(d_ff > 0 || !has_llama_mlp(), "d_ff must be positive");
  need(n_ctx > 0, "n_ctx must be positive");
  need(std::isfinite(rope_theta) && rope_theta > 1.0, "rope_theta must be > 1");
  need(std::isfinite(rms_eps) && rms_eps > 0.0, "rms_eps must be positive");
  need(bos_id >= -1 && bos_id < vocab_size, "bos_id out of range");
  need(eos_id >= -1 && eos_id < vocab_size, "eos_id out of range");
  need(!add_bos || bos_id >= 0, "add_bos needs a bos_id");
  need(block_types.empty() || static_cast<int>(block_types.size()) == n_layers,
       "block_types lists " + std::to_string(block_types.size()) + " blocks but n_layers is " + std::to_string(n_layers));
  need(arith_version >= 1, "arith_version must be >= 1");
  if (has_mlstm()) {
    need(mlstm.window >= 1 || mlstm.mixer == MlstmMixer::linear, "mlstm: window must be >= 1");
    need(mlstm.sinks >= 0, "mlstm: sinks must be >= 0");
  }
  if (is_recdepth()) {  // prelude* core+ coda*, nothing else
    const int P = recdepth_prelude(), C = recdepth_core(), D = recdepth_coda();
    need(P + C + D == n_layers, "a recurrent-depth model's blocks must all be recdepth-prelude, recdepth-core or recdepth-coda");
    for (int l = 0; l < n_layers; ++l) {
      const BlockType want = l < P ? BlockType::recdepth_prelude : l < P + C ? BlockType::recdepth_core : BlockType::recdepth_coda;
      need(block_types[std::size_t(l)] == want, "recurrent-depth blocks must be ordered prelude, core, coda (block " +
                                                    std::to_string(l) + " is " + block_type_name(block_types[std::size_t(l)]) + ")");
    }
    need(C >= 1, "a recurrent-depth model needs at least one recdepth-core block");
    need(recdepth.mean_recurrence >= 1, "recdepth: mean_recurrence must be >= 1");
    need(recdepth.backprop_depth >= 0, "recdepth: backprop_depth must be >= 0");
    need(std::isfinite(recdepth.embed_scale) && recdepth.embed_scale > 0, "recdepth: embed_scale must be positive");
    need(std::isfinite(recdepth.state_std) && recdepth.state_std >= 0, "recdepth: state_std must be >= 0");
  }
  if (has_moe()) {
    const MoeConfig& m = moe;
    need(m.n_experts >= 1, "moe: n_experts must be >= 1");
    need(m.top_k >= 1 && m.top_k <= m.n_experts,
         "moe: top_k must lie in [1, n_experts = " + std::to_string(m.n_experts) + "] (got " + std::to_string(m.top_k) + ")");
    need(m.d_expert > 0, "moe: d_expert must be positive");
    need(m.d_shared >= 0, "moe: d_shared must be >= 0");
    need(std::isfinite(m.routed_scaling) && m.routed_scaling > 0, "moe: routed_scaling must be positive");
    // the stacked expert matrices have n_experts x d_expert (and n_experts x width) rows, an int
    need(std::int64_t(m.n_experts) * std::max(m.d_expert, d_model) <= std::numeric_limits<int>::max(),
         "moe: n_experts x max(d_expert, d_model) exceeds 2^31 - 1 rows");
    bool latent = false;
    for (BlockType t : block_types) latent = latent || t == BlockType::latent_moe;
    if (latent)
      need(m.d_latent > 0 && m.d_latent <= d_model,
           "latent-moe: d_latent must lie in [1, d_model = " + std::to_string(d_model) + "] (got " + std::to_string(m.d_latent) + ")");
  }
}

}  // namespace icmlkit::lm
