#include "lm/model.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fmt/format.h>

#include <cstdio>
#include <cstring>

#include "io/atomic_file.hpp"
#include "io/hdf5.hpp"
#include "lm/tokenizer.hpp"
#include "num/half.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

namespace icmlkit::lm {

namespace h5 = io::h5;

void Matrix::row_f32(int r, float* out) const noexcept {
  if (weight_type() == WeightType::f32) {
    std::copy_n(row(r), cols, out);
    return;
  }
  if (half.empty()) {
    const std::size_t rb = weight_row_bytes(quant_type, cols);
    if (act_q8) dequantize_act_q8_row(weight_type(), quant.data() + std::size_t(r / 16) * 16 * rb, r % 16, cols, out);
    else dequantize_row(quant_type, quant.data() + std::size_t(r) * rb, cols, out);
    return;
  }
  const std::uint16_t* h = half.data() + std::size_t(r) * cols;
  if (bf16)
    for (int i = 0; i < cols; ++i) out[i] = num::bf16_to_f32(h[i]);
  else
    for (int i = 0; i < cols; ++i) out[i] = num::f16_to_f32(h[i]);
}

std::vector<Matrix*> Layer::matrices_all() {
  return {&wq,        &wk,          &wv,         &wo,          &w_gate,     &w_up,        &w_down,
          &router,    &gate_exps,   &up_exps,    &down_exps,   &gate_shexp, &up_shexp,    &down_shexp,
          &latent_down, &latent_up, &mlstm_fq,   &mlstm_fk,    &mlstm_igate, &mlstm_fgate, &mlstm_ogate};
}

std::vector<const Matrix*> Layer::matrices_all() const {
  std::vector<const Matrix*> out;
  for (Matrix* w : const_cast<Layer*>(this)->matrices_all()) out.push_back(w);
  return out;
}

std::vector<Matrix*> Layer::matrices() {
  std::vector<Matrix*> out;
  for (Matrix* w : matrices_all())
    if (w->rows > 0) out.push_back(w);
  return out;
}

std::vector<const Matrix*> Layer::matrices() const {
  std::vector<const Matrix*> out;
  for (Matrix* w : const_cast<Layer*>(this)->matrices()) out.push_back(w);
  return out;
}

std::int64_t Model::weight_bytes() const noexcept {
  auto mb = [](const Matrix& m) {
    return std::int64_t(m.data.size()) * 4 + std::int64_t(m.half.size()) * 2 + std::int64_t(m.quant.size());
  };
  std::int64_t n = mb(token_embd) + mb(output) + mb(adapter) + std::int64_t(output_norm.size()) * 4;
  for (const auto& l : layers) {
    n += std::int64_t(l.attn_norm.size() + l.ffn_norm.size() + l.router_bias.size() + l.mlstm_igate_b.size() +
                      l.mlstm_fgate_b.size() + l.mlstm_ogate_b.size() + l.post_attn_norm.size() + l.post_ffn_norm.size() + l.q_bias.size() +
                      l.k_bias.size()) * 4;
    for (const Matrix* w : l.matrices()) n += mb(*w);
  }
  return n;
}

std::vector<Matrix*> Model::all_matrices() {
  std::vector<Matrix*> mats = {&token_embd, &output, &adapter};
  for (auto& l : layers)
    for (Matrix* w : l.matrices_all()) mats.push_back(w);
  return mats;
}

int hold_quant(Model& m) {
  int held = 0;
  std::vector<float> row;
  for (Matrix* w : m.all_matrices()) {
    if (!w->is_quant()) continue;
    if (w->data.empty()) {  // already held
      ++held;
      continue;
    }
    bool exact = w->data.size() == std::size_t(w->rows) * w->cols;
    row.resize(std::size_t(w->cols));
    for (int r = 0; exact && r < w->rows; ++r) {
      dequantize_row(w->quant_type, w->quant.data() + std::size_t(r) * weight_row_bytes(w->quant_type, w->cols), w->cols,
                     row.data());
      exact = std::memcmp(row.data(), w->row(r), sizeof(float) * std::size_t(w->cols)) == 0;
    }
    if (exact) {
      std::vector<float>().swap(w->data);
      ++held;
    } else {
      std::vector<std::uint8_t>().swap(w->quant);
      w->quant_type = WeightType::f32;
    }
  }
  return held;
}

void drop_quant(Model& m) {
  for (Matrix* w : m.all_matrices())
    if (w->is_quant() && !w->data.empty()) {
      std::vector<std::uint8_t>().swap(w->quant);
      w->quant_type = WeightType::f32;
    }
}

bool hold_half(Model& m, bool bf16) {
  const std::vector<Matrix*> mats = m.all_matrices();
  for (const Matrix* w : mats)
    for (float x : w->data)
      if ((bf16 ? num::bf16_to_f32(num::f32_to_bf16(x)) : num::f16_to_f32(num::f32_to_f16(x))) != x) return false;
  for (Matrix* w : mats) {
    if (w->data.empty()) continue;
    w->half.resize(w->data.size());
    for (std::size_t i = 0; i < w->data.size(); ++i) w->half[i] = bf16 ? num::f32_to_bf16(w->data[i]) : num::f32_to_f16(w->data[i]);
    w->bf16 = bf16;
    std::vector<float>().swap(w->data);
  }
  return true;
}

int hold_act_q8(Model& m) {
  // stacked experts are multiplied a row block (one expert) at a time
  std::vector<const Matrix*> stacked;
  for (Layer& l : m.layers) stacked.insert(stacked.end(), {&l.gate_exps, &l.up_exps, &l.down_exps});
  const int n_experts = std::max(1, m.config.moe.n_experts);
  int n = 0;
  std::vector<std::uint8_t> packed;
  for (Matrix* w : m.all_matrices()) {
    if (!w->data.empty() || !w->half.empty() || !w->is_quant() || w->act_q8) continue;
    const bool is_stacked = std::find(stacked.begin(), stacked.end(), w) != stacked.end();
    const int block_rows = is_stacked ? w->rows / n_experts : w->rows;
    if (w->rows % 16 != 0 || block_rows % 16 != 0) continue;
    packed.resize(w->quant.size());
    pack_act_q8(w->quant_type, w->quant.data(), w->rows, w->cols, packed.data());
    w->quant.swap(packed);
    w->act_q8 = true;
    ++n;
  }
  return n;
}

void hold_bf16_dot(Model& m) {
  std::vector<float> row;
  for (Matrix* w : m.all_matrices()) {
    if (w->rows == 0 || w->cols == 0 || w->bf16_dot) continue;
    if (w->weight_type() == WeightType::f32 && w->data.size() != std::size_t(w->rows) * w->cols) continue;
    std::vector<std::uint16_t> bits(std::size_t(w->rows) * w->cols);
    row.resize(std::size_t(w->cols));
    for (int r = 0; r < w->rows; ++r) {
      w->row_f32(r, row.data());
      for (int k = 0; k < w->cols; ++k) bits[std::size_t(r) * w->cols + k] = bf16_dot_round(row[std::size_t(k)]);
    }
    std::vector<float>().swap(w->data);
    std::vector<std::uint8_t>().swap(w->quant);
    w->quant_type = WeightType::f32;
    w->half = std::move(bits);
    w->bf16 = w->bf16_dot = true;
    w->act_q8 = false;
  }
}

namespace {

template <class S, class M>
std::vector<S> slots_of(M& m) {
  const auto& c = m.config;
  for (const Matrix* w : {&m.token_embd, &m.output})
    if (w->weight_type() != WeightType::f32)
      throw RuntimeError("the model holds 16-bit or quantised compute weights (hold_half, hold_quant); its tensors cannot be saved or trained");
  for (const auto& l : m.layers)
    for (const Matrix* w : l.matrices())
      if (w->weight_type() != WeightType::f32)
        throw RuntimeError("the model holds 16-bit or quantised compute weights (hold_half, hold_quant); its tensors cannot be saved or trained");
  std::vector<S> out;
  auto mat = [&](std::string g, std::string h, auto& w, int heads, int experts = 0) {
    out.push_back(S{std::move(g), std::move(h), w.data.data(), w.rows, w.cols, heads, experts});
  };
  auto vec = [&](std::string g, std::string h, auto& v) { out.push_back(S{std::move(g), std::move(h), v.data(), static_cast<int>(v.size()), 0, 0}); };
  mat("token_embd.weight", "model.embed_tokens.weight", m.token_embd, 0);
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    auto& l = m.layers[i];
    const std::string g = fmt::format("blk.{}.", i), h = fmt::format("model.layers.{}.", i);
    vec(g + "attn_norm.weight", h + "input_layernorm.weight", l.attn_norm);
    mat(g + "attn_q.weight", h + "self_attn.q_proj.weight", l.wq, c.n_heads);
    mat(g + "attn_k.weight", h + "self_attn.k_proj.weight", l.wk, c.n_kv_heads);
    mat(g + "attn_v.weight", h + "self_attn.v_proj.weight", l.wv, 0);
    mat(g + "attn_output.weight", h + "self_attn.o_proj.weight", l.wo, 0);
    vec(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", l.ffn_norm);
    const BlockType t = c.block_type(static_cast<int>(i));
    if (!is_moe_block(t)) {
      mat(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", l.w_gate, 0);
      mat(g + "ffn_up.weight", h + "mlp.up_proj.weight", l.w_up, 0);
      mat(g + "ffn_down.weight", h + "mlp.down_proj.weight", l.w_down, 0);
      if (t == BlockType::mlstm_hybrid) {  // ours: no other format has the block
        mat(g + "mlstm_fq.weight", h + "self_attn.mlstm_fq.weight", l.mlstm_fq, 0);
        mat(g + "mlstm_fk.weight", h + "self_attn.mlstm_fk.weight", l.mlstm_fk, 0);
        mat(g + "mlstm_igate.weight", h + "self_attn.mlstm_igate.weight", l.mlstm_igate, 0);
        vec(g + "mlstm_igate.bias", h + "self_attn.mlstm_igate.bias", l.mlstm_igate_b);
        mat(g + "mlstm_fgate.weight", h + "self_attn.mlstm_fgate.weight", l.mlstm_fgate, 0);
        vec(g + "mlstm_fgate.bias", h + "self_attn.mlstm_fgate.bias", l.mlstm_fgate_b);
        mat(g + "mlstm_ogate.weight", h + "self_attn.mlstm_ogate.weight", l.mlstm_ogate, 0);
        vec(g + "mlstm_ogate.bias", h + "self_attn.mlstm_ogate.bias", l.mlstm_ogate_b);
      }
      if (is_recdepth_block(t)) {  // ours (Huginn's SandwichBlock norm_2, norm_4, qk_bias)
        vec(g + "post_attn_norm.weight", h + "post_attention_norm.weight", l.post_attn_norm);
        vec(g + "post_ffn_norm.weight", h + "post_feedforward_norm.weight", l.post_ffn_norm);
        if (c.recdepth.qk_bias) {
          vec(g + "attn_q.bias", h + "self_attn.q_proj.bias", l.q_bias);
          vec(g + "attn_k.bias", h + "self_attn.k_proj.bias", l.k_bias);
        }
      }
      continue;
    }
    const bool swiglu = c.moe.act == ExpertAct::swiglu;
    const int E = c.moe.n_experts;
    mat(g + "ffn_gate_inp.weight", h + "mlp.gate.weight", l.router, 0);
    if (c.moe.router == RouterKind::sigmoid) vec(g + "exp_probs_b.bias", h + "mlp.gate.e_score_correction_bias", l.router_bias);
    if (swiglu) mat(g + "ffn_gate_exps.weight", h + "mlp.experts.{}.gate_proj.weight", l.gate_exps, 0, E);
    mat(g + "ffn_up_exps.weight", h + "mlp.experts.{}.up_proj.weight", l.up_exps, 0, E);
    mat(g + "ffn_down_exps.weight", h + "mlp.experts.{}.down_proj.weight", l.down_exps, 0, E);
    if (c.moe.d_shared > 0) {
      if (swiglu) mat(g + "ffn_gate_shexp.weight", h + "mlp.shared_experts.gate_proj.weight", l.gate_shexp, 0);
      mat(g + "ffn_up_shexp.weight", h + "mlp.shared_experts.up_proj.weight", l.up_shexp, 0);
      mat(g + "ffn_down_shexp.weight", h + "mlp.shared_experts.down_proj.weight", l.down_shexp, 0);
    }
    if (t == BlockType::latent_moe) {
      mat(g + "ffn_latent_down.weight", h + "mlp.latent_down_proj.weight", l.latent_down, 0);
      mat(g + "ffn_latent_up.weight", h + "mlp.latent_up_proj.weight", l.latent_up, 0);
    }
  }
  if (c.is_recdepth()) mat("recdepth_adapter.weight", "model.adapter.weight", m.adapter, 0);
  vec("output_norm.weight", "model.norm.weight", m.output_norm);
  if (!c.tied) mat("output.weight", "lm_head.weight", m.output, 0);
  return out;
}

void allocate(Model& m) {
  const auto& c = m.config;
  const int hd = c.head_dim();
  m.token_embd = Matrix(c.vocab_size, c.d_model);
  m.layers.assign(c.n_layers, Layer{});
  for (int i = 0; i < c.n_layers; ++i) {
    Layer& l = m.layers[std::size_t(i)];
    l.attn_norm.assign(c.d_model, 1.0f);
    l.ffn_norm.assign(c.d_model, 1.0f);
    l.wq = Matrix(c.n_heads * hd, c.d_model);
    l.wk = Matrix(c.n_kv_heads * hd, c.d_model);
    l.wv = Matrix(c.n_kv_heads * hd, c.d_model);
    l.wo = Matrix(c.d_model, c.n_heads * hd);
    const BlockType t = c.block_type(i);
    if (!is_moe_block(t)) {
      l.w_gate = Matrix(c.d_ff, c.d_model);
      l.w_up = Matrix(c.d_ff, c.d_model);
      l.w_down = Matrix(c.d_model, c.d_ff);
      if (t == BlockType::mlstm_hybrid) {
        l.mlstm_fq = Matrix(c.n_heads * hd, hd);
        l.mlstm_fk = Matrix(c.n_kv_heads * hd, hd);
        l.mlstm_igate = Matrix(c.n_heads, c.d_model);
        l.mlstm_fgate = Matrix(c.n_heads, c.d_model);
        l.mlstm_ogate = Matrix(c.n_heads, (c.n_heads + 2 * c.n_kv_heads) * hd);
        l.mlstm_igate_b.assign(std::size_t(c.n_heads), 0.0f);
        l.mlstm_fgate_b.assign(std::size_t(c.n_heads), 0.0f);
        l.mlstm_ogate_b.assign(std::size_t(c.n_heads), 0.0f);
      }
      if (is_recdepth_block(t)) {
        l.post_attn_norm.assign(c.d_model, 1.0f);
        l.post_ffn_norm.assign(c.d_model, 1.0f);
        if (c.recdepth.qk_bias) {
          l.q_bias.assign(std::size_t(c.n_heads) * hd, 0.0f);
          l.k_bias.assign(std::size_t(c.n_kv_heads) * hd, 0.0f);
        }
      }
      continue;
    }
    const MoeConfig& e = c.moe;
    const int w = t == BlockType::latent_moe ? e.d_latent : c.d_model;
    const bool swiglu = e.act == ExpertAct::swiglu;
    l.router = Matrix(e.n_experts, c.d_model);
    if (e.router == RouterKind::sigmoid) l.router_bias.assign(std::size_t(e.n_experts), 0.0f);
    if (swiglu) l.gate_exps = Matrix(e.n_experts * e.d_expert, w);
    l.up_exps = Matrix(e.n_experts * e.d_expert, w);
    l.down_exps = Matrix(e.n_experts * w, e.d_expert);
    if (e.d_shared > 0) {
      if (swiglu) l.gate_shexp = Matrix(e.d_shared, c.d_model);
      l.up_shexp = Matrix(e.d_shared, c.d_model);
      l.down_shexp = Matrix(c.d_model, e.d_shared);
    }
    if (t == BlockType::latent_moe) {
      l.latent_down = Matrix(e.d_latent, c.d_model);
      l.latent_up = Matrix(c.d_model, e.d_latent);
    }
  }
  m.output_norm.assign(c.d_model, 1.0f);
  m.adapter = c.is_recdepth() ? Matrix(c.d_model, 2 * c.d_model) : Matrix();
  m.output = c.tied ? Matrix() : Matrix(c.vocab_size, c.d_model);
}

}  // namespace

std::vector<TensorSlot> tensor_slots(Model& m) { return slots_of<TensorSlot>(m); }
std::vector<ConstTensorSlot> tensor_slots(const Model& m) { return slots_of<ConstTensorSlot>(m); }

Model allocate_model(const ModelConfig& config, const std::string& where) {
  config.validate(where);
  Model m;
  m.config = config;
  allocate(m);
  return m;
}

Model random_model(const ModelConfig& config, std::uint64_t seed, double std) {
  Model m = allocate_model(config);
  std::uint64_t stream = 0;
  for (auto& t : tensor_slots(m)) {
    if (!t.is_matrix()) continue;
    Rng rng(derive_seed(seed, ++stream));
    for (std::size_t i = 0; i < std::size_t(t.rows) * t.cols; ++i) t.data[i] = static_cast<float>(std * rng.normal());
  }
  return m;
}

NarrowingReport narrowing_report(const Model& model, h5::FloatStorage storage) {
  NarrowingReport rep;
  if (storage == h5::FloatStorage::f32) return rep;
  const bool f16 = storage == h5::FloatStorage::f16;
  for (const auto& t : tensor_slots(model)) {
    if (!t.is_matrix()) continue;
    std::int64_t zeros = 0;
    for (std::size_t i = 0; i < std::size_t(t.rows) * t.cols; ++i) {
      const float x = t.data[i];
      const float y = f16 ? num::f16_to_f32(num::f32_to_f16(x)) : num::bf16_to_f32(num::f32_to_bf16(x));
      if (std::isfinite(x) && !std::isfinite(y) && rep.overflow_tensor.empty()) {
        rep.overflow_tensor = t.gguf;
        rep.overflow_value = x;
      }
      if (x != 0.0f && y == 0.0f) ++zeros;
    }
    if (zeros > 0 && rep.underflow_tensor.empty()) rep.underflow_tensor = t.gguf;
    rep.underflow_count += zeros;
  }
  return rep;
}

void check_narrowing(const Model& model, h5::FloatStorage storage) {
  const NarrowingReport rep = narrowing_report(model, storage);
  const char* name = h5::storage_name(storage);
  if (!rep.overflow_tensor.empty())
    throw UsageError(fmt::format("weight {:g} in {} is beyond {}'s range ({}): use --dtype bf16 or f32", rep.overflow_value,
                                 rep.overflow_tensor, name, storage == h5::FloatStorage::f16 ? "65504" : "3.4e38"),
                     "--dtype");
  if (rep.underflow_count > 0)
    log::warn("{} non-zero weight(s) become 0 in {} (first in {}){}", rep.underflow_count, name, rep.underflow_tensor,
              storage == h5::FloatStorage::f16 ? "; --dtype bf16 keeps them" : "");
}

void round_weights(Model& model, h5::FloatStorage storage) {
  if (storage == h5::FloatStorage::f32) return;
  for (auto& t : tensor_slots(model)) {
    if (!t.is_matrix()) continue;
    for (std::size_t i = 0; i < std::size_t(t.rows) * t.cols; ++i) {
      float& x = t.data[i];
      x = storage == h5::FloatStorage::f16 ? num::f16_to_f32(num::f32_to_f16(x)) : num::bf16_to_f32(num::f32_to_bf16(x));
    }
  }
  model.stored = storage;
}

namespace {

int read_int_attr(const h5::Handle& root, const char* name, const std::string& label, bool required,
                  int fallback) {
  std::int64_t v = fallback;
  if (!h5::read_attr_int(root, name, v, label) && required)
    throw InputError(std::string("missing config attribute '") + name + "'", label);
  if (v < -1 || v > (std::int64_t(1) << 31) - 1)
    throw InputError(std::string("config attribute '") + name + "' out of range", label);
  return static_cast<int>(v);
}

ModelConfig read_config(const h5::Handle& root, const std::string& label) {
  std::string format;
  if (!h5::read_attr(root, "format", format) || (format != kFormatV1 && format != kFormatV2))
    throw InputError(fmt::format("not an icmlkit model checkpoint (root attribute format is neither {} nor {})",
                                 kFormatV1, kFormatV2), label);
  ModelConfig c;
  c.vocab_size = read_int_attr(root, "vocab_size", label, true, 0);
  c.d_model = read_int_attr(root, "d_model", label, true, 0);
  c.n_layers = read_int_attr(root, "n_layers", label, true, 0);
  c.n_heads = read_int_attr(root, "n_heads", label, true, 0);
  c.n_kv_heads = read_int_attr(root, "n_kv_heads", label, true, 0);
  c.d_ff = read_int_attr(root, "d_ff", label, true, 0);
  c.n_ctx = read_int_attr(root, "n_ctx", label, true, 0);
  c.tied = read_int_attr(root, "tied", label, true, 0) != 0;
  c.bos_id = read_int_attr(root, "bos_id", label, false, -1);
  c.eos_id = read_int_attr(root, "eos_id", label, false, -1);
  c.add_bos = read_int_attr(root, "add_bos", label, false, c.bos_id >= 0 ? 1 : 0) != 0;
  if (!h5::read_attr_double(root, "rope_theta", c.rope_theta, label))
    throw InputError("missing config attribute 'rope_theta'", label);
  if (!h5::read_attr_double(root, "rms_eps", c.rms_eps, label))
    throw InputError("missing config attribute 'rms_eps'", label);
  std::string rope;
  if (!h5::read_attr(root, "rope_style", rope)) throw InputError("missing config attribute 'rope_style'", label);
  if (rope == "half") c.rope_style = RopeStyle::half;
  else if (rope == "interleaved") c.rope_style = RopeStyle::interleaved;
  else throw InputError("unknown rope_style '" + rope + "' (expected half or interleaved)", label);
  if (format == kFormatV2) {  // v2: the block list and the arithmetic version
    std::string types;
    if (!h5::read_attr(root, "block_types", types)) throw InputError("missing config attribute 'block_types'", label);
    if (c.n_layers <= 0) throw InputError("invalid model config: n_layers must be positive", label);
    c.block_types = split_block_types(types, c.n_layers, label);
    c.arith_version = read_int_attr(root, "arith_version", label, true, kArithVersion);
  }
  if (c.has_moe()) {  // the routed FFN's settings (every one required)
    c.moe.n_experts = read_int_attr(root, "moe_n_experts", label, true, 0);
    c.moe.top_k = read_int_attr(root, "moe_top_k", label, true, 0);
    c.moe.d_expert = read_int_attr(root, "moe_d_expert", label, true, 0);
    c.moe.d_shared = read_int_attr(root, "moe_d_shared", label, true, 0);
    c.moe.d_latent = read_int_attr(root, "moe_d_latent", label, true, 0);
    std::string act, router;
    if (!h5::read_attr(root, "moe_act", act)) throw InputError("missing config attribute 'moe_act'", label);
    if (!h5::read_attr(root, "moe_router", router)) throw InputError("missing config attribute 'moe_router'", label);
    c.moe.act = parse_expert_act(act, label);
    c.moe.router = parse_router_kind(router, label);
    c.moe.norm_topk = read_int_attr(root, "moe_norm_topk", label, true, 1) != 0;
    if (!h5::read_attr_double(root, "moe_routed_scaling", c.moe.routed_scaling, label))
      throw InputError("missing config attribute 'moe_routed_scaling'", label);
  }
  if (c.has_mlstm()) {  // the mlstm-hybrid blocks' mixer (every one required)
    c.mlstm.window = read_int_attr(root, "mlstm_window", label, true, 0);
    c.mlstm.sinks = read_int_attr(root, "mlstm_sinks", label, true, 0);
    std::string mixer;
    if (!h5::read_attr(root, "mlstm_mixer", mixer)) throw InputError("missing config attribute 'mlstm_mixer'", label);
    c.mlstm.mixer = parse_mlstm_mixer(mixer, label);
  }
  if (c.is_recdepth()) {  // the recurrence's settings (every one required)
    c.recdepth.mean_recurrence = read_int_attr(root, "recdepth_mean_recurrence", label, true, 0);
    c.recdepth.backprop_depth = read_int_attr(root, "recdepth_backprop_depth", label, true, 0);
    c.recdepth.qk_bias = read_int_attr(root, "recdepth_qk_bias", label, true, 0) != 0;
    if (!h5::read_attr_double(root, "recdepth_embed_scale", c.recdepth.embed_scale, label))
      throw InputError("missing config attribute 'recdepth_embed_scale'", label);
    if (!h5::read_attr_double(root, "recdepth_state_std", c.recdepth.state_std, label))
      throw InputError("missing config attribute 'recdepth_state_std'", label);
  }
  c.validate(label);
  return c;
}

void read_tensor(const h5::Handle& root, const std::string& name, float* dst, std::size_t rows,
                 std::size_t cols, const std::string& path, h5::FloatStorage* stored, const ModelConfig& c) {
  const std::string label = path + ":/" + name;
  if (!h5::exists(root, name)) {  // name the block and its type: "block 3 (llama): missing tensor ..."
    int block = -1;
    if (std::sscanf(name.c_str(), "blk.%d.", &block) == 1 && block >= 0 && block < c.n_layers)
      throw InputError(fmt::format("block {} ({}): missing tensor {}", block, block_type_name(c.block_type(block)), name), path);
    throw InputError("missing tensor " + name, path);
  }
  h5::FloatArray a = h5::read_floats(root, name, label);
  const bool vec = cols == 0;
  const bool ok = vec ? (a.dims.size() == 1 && a.dims[0] == rows)
                      : (a.dims.size() == 2 && a.dims[0] == rows && a.dims[1] == cols);
  if (!ok) {
    std::string got;
    for (auto d : a.dims) got += (got.empty() ? "" : ", ") + std::to_string(d);
    throw InputError(vec ? fmt::format("shape mismatch: expected [{}], got [{}]", rows, got)
                         : fmt::format("shape mismatch: expected [{}, {}], got [{}]", rows, cols, got),
                     label);
  }
  for (std::size_t i = 0; i < a.data.size(); ++i)
    if (!std::isfinite(a.data[i]))
      throw InputError(fmt::format("non-finite weight at flat index {}", i), label);
  std::copy(a.data.begin(), a.data.end(), dst);
  if (stored) *stored = a.stored;
}

}  // namespace

Model load_checkpoint(const std::string& path) {
  h5::Handle file = h5::open_file(path);
  h5::Handle root = h5::open_group(file, "/", path);
  Model m;
  m.config = read_config(root, path);
  // Tensors are stored uncompressed with at least two bytes per weight: a config implying
  // more weights than the file can hold is refused before anything is allocated.
  std::error_code ec;
  const auto fsize = std::filesystem::file_size(path, ec);
  if (!ec && m.config.n_params_approx() * 2 > double(fsize))
    throw InputError(fmt::format("the config implies {:.3g} weights but the file has {} bytes", m.config.n_params_approx(), fsize), path);
  allocate(m);
  for (auto& t : tensor_slots(m))
    read_tensor(root, t.gguf, t.data, t.rows, t.cols, path, t.is_matrix() ? &m.stored : nullptr, m.config);
  if (h5::exists(root, "tokenizer/model")) {
    m.tokenizer_model = h5::read_bytes(root, "tokenizer/model", path + ":/tokenizer/model");
    Tokenizer tok(m.tokenizer_model, path + ":/tokenizer/model");
    if (tok.vocab_size() != m.config.vocab_size)
      throw InputError(fmt::format("tokenizer has {} pieces but vocab_size is {}", tok.vocab_size(),
                                   m.config.vocab_size), path + ":/tokenizer/model");
  }
  return m;
}

void save_checkpoint(const std::string& path, const Model& m, h5::FloatStorage storage,
                     const io::Provenance& prov) {
  const auto& c = m.config;
  c.validate("model config");
  check_narrowing(m, storage);
  io::AtomicFile out(path);
  {
    h5::Handle file = h5::create_file(out.temp_path().string());
    h5::write_provenance(file, prov);
    h5::write_attr(file, "format", kFormatV2);
    h5::write_attr(file, "architecture", "llama");
    h5::write_attr(file, "block_types", join_block_types(c.all_block_types()));
    h5::write_attr_int(file, "arith_version", c.arith_version);
    h5::write_attr_int(file, "vocab_size", c.vocab_size);
    h5::write_attr_int(file, "d_model", c.d_model);
    h5::write_attr_int(file, "n_layers", c.n_layers);
    h5::write_attr_int(file, "n_heads", c.n_heads);
    h5::write_attr_int(file, "n_kv_heads", c.n_kv_heads);
    h5::write_attr_int(file, "d_ff", c.d_ff);
    h5::write_attr_int(file, "n_ctx", c.n_ctx);
    h5::write_attr_double(file, "rope_theta", c.rope_theta);
    h5::write_attr(file, "rope_style", rope_style_name(c.rope_style));
    h5::write_attr_double(file, "rms_eps", c.rms_eps);
    h5::write_attr_int(file, "tied", c.tied ? 1 : 0);
    h5::write_attr_int(file, "bos_id", c.bos_id);
    h5::write_attr_int(file, "eos_id", c.eos_id);
    h5::write_attr_int(file, "add_bos", c.add_bos ? 1 : 0);
    h5::write_attr(file, "dtype", h5::storage_name(storage));
    if (c.has_moe()) {  // the routed FFN of the moe / latent-moe blocks
      h5::write_attr_int(file, "moe_n_experts", c.moe.n_experts);
      h5::write_attr_int(file, "moe_top_k", c.moe.top_k);
      h5::write_attr_int(file, "moe_d_expert", c.moe.d_expert);
      h5::write_attr_int(file, "moe_d_shared", c.moe.d_shared);
      h5::write_attr_int(file, "moe_d_latent", c.moe.d_latent);
      h5::write_attr(file, "moe_act", expert_act_name(c.moe.act));
      h5::write_attr(file, "moe_router", router_kind_name(c.moe.router));
      h5::write_attr_int(file, "moe_norm_topk", c.moe.norm_topk ? 1 : 0);
      h5::write_attr_double(file, "moe_routed_scaling", c.moe.routed_scaling);
    }
    if (c.has_mlstm()) {
      h5::write_attr_int(file, "mlstm_window", c.mlstm.window);
      h5::write_attr_int(file, "mlstm_sinks", c.mlstm.sinks);
      h5::write_attr(file, "mlstm_mixer", mlstm_mixer_name(c.mlstm.mixer));
    }
    if (c.is_recdepth()) {
      h5::write_attr_int(file, "recdepth_mean_recurrence", c.recdepth.mean_recurrence);
      h5::write_attr_int(file, "recdepth_backprop_depth", c.recdepth.backprop_depth);
      h5::write_attr_int(file, "recdepth_qk_bias", c.recdepth.qk_bias ? 1 : 0);
      h5::write_attr_double(file, "recdepth_embed_scale", c.recdepth.embed_scale);
      h5::write_attr_double(file, "recdepth_state_std", c.recdepth.state_std);
    }
    for (const auto& t : tensor_slots(m)) {
      if (t.is_matrix()) h5::write_floats(file, t.gguf, t.data, {std::uint64_t(t.rows), std::uint64_t(t.cols)}, storage);
      else h5::write_floats(file, t.gguf, t.data, {std::uint64_t(t.rows)}, h5::FloatStorage::f32);
    }
    if (!m.tokenizer_model.empty()) h5::write_bytes(file, "tokenizer/model", m.tokenizer_model);
    h5::close_file(file, path);
  }
  out.commit();
}

}  // namespace icmlkit::lm
