#include "lm/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/mapped_file.hpp"
#include "io/table.hpp"
#include "lm/gguf.hpp"
#include "lm/hf_config.hpp"
#include "lm/tokenizer.hpp"
#include "num/half.hpp"
#include "util/error.hpp"

namespace icmlkit::lm::safetensors {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::uint64_t dtype_size(const std::string& d) {
  if (d == "F32") return 4;
  if (d == "F16" || d == "BF16") return 2;
  return 0;
}

struct DuplicateKey {
  std::string key;
};

}  // namespace

Header parse(const std::uint8_t* data, std::size_t size, const std::string& where) {
  if (size < 8) throw InputError("not a safetensors file (shorter than 8 bytes)", where);
  std::uint64_t n;
  std::memcpy(&n, data, 8);
  if (n > size - 8) throw InputError(fmt::format("header length {} exceeds the file ({} bytes)", n, size), where);
  if (n > (100u << 20)) throw InputError(fmt::format("header length {} exceeds 100 MB", n), where);
  const std::uint64_t data_start = 8 + n, data_size = size - data_start;
  json h;
  std::set<std::string> top_keys;
  try {
    // Reject duplicate top-level names (a plain parse would silently keep the last one).
    json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
      if (ev == json::parse_event_t::key && depth == 1 && !top_keys.insert(parsed.get<std::string>()).second)
        throw DuplicateKey{parsed.get<std::string>()};
      return true;
    };
    h = json::parse(reinterpret_cast<const char*>(data + 8), reinterpret_cast<const char*>(data + 8 + n), cb);
  } catch (const DuplicateKey& d) {
    throw InputError("duplicate tensor name '" + d.key + "' in the header", where);
  } catch (const json::exception& e) {
    throw InputError(std::string("header is not valid JSON: ") + e.what(), where);
  }
  if (!h.is_object()) throw InputError("header is not a JSON object", where);
  Header out;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const std::string loc = where + ":" + name;
    if (name == "__metadata__") {
      if (!it->is_object()) throw InputError("__metadata__ is not an object", where);
      for (auto m = it->begin(); m != it->end(); ++m)
        if (m->is_string()) out.metadata[m.key()] = m->get<std::string>();
      continue;
    }
    if (name.empty()) throw InputError("empty tensor name", where);
    const json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      throw InputError("tensor entry needs dtype, shape and data_offsets", loc);
    if (!e["dtype"].is_string()) throw InputError("dtype is not a string", loc);
    Entry en;
    en.dtype = e["dtype"].get<std::string>();
    const std::uint64_t es = dtype_size(en.dtype);
    if (es == 0) throw InputError("unsupported dtype '" + en.dtype + "' (F32, F16 and BF16 are read)", loc);
    if (!e["shape"].is_array() || e["shape"].size() > 8) throw InputError("shape is not an array of at most 8 dimensions", loc);
    std::uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) throw InputError("shape holds a non-integer or negative dimension", loc);
      const auto v = d.get<std::uint64_t>();
      if (v == 0) throw InputError("zero dimension", loc);
      if (v > (std::uint64_t(1) << 40) || numel > (std::uint64_t(1) << 60) / v) throw InputError("tensor is too large", loc);
      numel *= v;
      en.shape.push_back(v);
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw InputError("data_offsets is not [begin, end]", loc);
    const auto b = off[0].get<std::uint64_t>(), en_ = off[1].get<std::uint64_t>();
    if (b > en_ || en_ > data_size)
      throw InputError(fmt::format("data_offsets [{}, {}] outside the {} data bytes", b, en_, data_size), loc);
    if (en_ - b != numel * es)
      throw InputError(fmt::format("data_offsets span {} bytes but shape x dtype needs {}", en_ - b, numel * es), loc);
    en.begin = data_start + b;
    en.end = data_start + en_;
    out.tensors.emplace(name, std::move(en));
  }
  std::vector<std::pair<std::uint64_t, const std::string*>> order;
  for (const auto& [name, e] : out.tensors) order.push_back({e.begin, &name});
  std::sort(order.begin(), order.end());
  for (std::size_t i = 1; i < order.size(); ++i)
    if (out.tensors.at(*order[i - 1].second).end > order[i].first)
      throw InputError("tensors '" + *order[i - 1].second + "' and '" + *order[i].second + "' overlap", where);
  return out;
}

std::vector<float> to_floats(const std::uint8_t* data, const Entry& e) {
  const std::uint64_t es = dtype_size(e.dtype), n = (e.end - e.begin) / es;
  std::vector<float> out(static_cast<std::size_t>(n));
  const std::uint8_t* p = data + e.begin;
  if (e.dtype == "F32") {
    std::memcpy(out.data(), p, n * 4);
  } else {
    const bool f16 = e.dtype == "F16";
    for (std::uint64_t i = 0; i < n; ++i) {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = f16 ? num::f16_to_f32(h) : num::bf16_to_f32(h);
    }
  }
  return out;
}

namespace {

/// A moe slot's Hugging Face name in a Mixtral checkpoint (block_sparse_moe.gate, experts.{}.w1 =
/// gate, w2 = down, w3 = up); other names unchanged.
std::string mixtral_name(std::string hf) {
  static const std::pair<const char*, const char*> kMap[] = {
      {".mlp.gate.weight", ".block_sparse_moe.gate.weight"},
      {".mlp.experts.{}.gate_proj.", ".block_sparse_moe.experts.{}.w1."},
      {".mlp.experts.{}.down_proj.", ".block_sparse_moe.experts.{}.w2."},
      {".mlp.experts.{}.up_proj.", ".block_sparse_moe.experts.{}.w3."}};
  for (const auto& [from, to] : kMap) {
    const auto at = hf.find(from);
    if (at != std::string::npos) return hf.replace(at, std::strlen(from), to);
  }
  return hf;
}

const char* const kMoeType = kHfMoeModelType;

/// The shards of a checkpoint, mapped once, and where each tensor lives.
class Shards {
 public:
  Shards(const fs::path& dir, const fs::path& single) {
    if (!single.empty()) { add(single); return; }
    const fs::path index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
      const json j = io::read_json(index.string());
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        throw InputError("index has no weight_map object", index.string());
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it->is_string()) throw InputError("weight_map value is not a file name", index.string());
        const std::string file = it->get<std::string>();
        if (file.find('/') != std::string::npos || file == ".." || file.empty())
          throw InputError("weight_map names a file outside the directory: '" + file + "'", index.string());
        where_[it.key()] = file;
      }
      std::set<std::string> files;
      for (const auto& [k, f] : where_) files.insert(f);
      for (const auto& f : files) add(dir / f);
      for (const auto& [k, f] : where_)
        if (!shards_.at(f).header.tensors.count(k))
          throw InputError("index places '" + k + "' in " + f + " but the shard lacks it", index.string());
      return;
    }
    if (fs::exists(dir / "model.safetensors")) { add(dir / "model.safetensors"); return; }
    throw InputError("no model.safetensors or model.safetensors.index.json", dir.string());
  }

  /// The tensor `name` as float32 with its shape; throws when absent.
  bool has(const std::string& name) const { return locate(name) != nullptr; }
  std::vector<float> get(const std::string& name, const std::vector<std::uint64_t>& shape, std::string& label) const {
    const auto* s = locate(name);
    if (!s) throw InputError("missing tensor", label_of(name));
    label = s->file->path() + ":" + name;
    const Entry& e = s->header.tensors.at(name);
    if (e.shape != shape) {
      std::string got, want;
      for (auto d : e.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      for (auto d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      throw InputError("shape mismatch: expected [" + want + "], got [" + got + "]", label);
    }
    return to_floats(s->file->data(), e);
  }
  std::uint64_t total_bytes() const {
    std::uint64_t n = 0;
    for (const auto& [k, s] : shards_) n += s.file->size();
    return n;
  }
  std::string first_dtype(const std::string& name) const {
    const auto* s = locate(name);
    return s ? s->header.tensors.at(name).dtype : "F32";
  }

 private:
  struct Shard {
    std::unique_ptr<io::MappedFile> file;
    Header header;
  };
  void add(const fs::path& p) {
    Shard s;
    s.file = std::make_unique<io::MappedFile>(p.string());
    s.header = parse(s.file->data(), s.file->size(), p.string());
    const std::string key = p.filename().string();
    if (where_.empty() || single_) {
      single_ = true;
      for (const auto& [k, e] : s.header.tensors) where_[k] = key;
    }
    shards_.emplace(key, std::move(s));
  }
  const Shard* locate(const std::string& name) const {
    auto it = where_.find(name);
    return it == where_.end() ? nullptr : &shards_.at(it->second);
  }
  std::string label_of(const std::string& name) const { return (shards_.empty() ? std::string() : shards_.begin()->second.file->path()) + ":" + name; }
  std::map<std::string, Shard> shards_;
  std::map<std::string, std::string> where_;
  bool single_ = false;
};

}  // namespace

Model load_model(const std::string& path) {
  fs::path dir = path, single;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    single = path;
    dir = fs::path(path).parent_path();
    if (dir.empty()) dir = ".";
  } else if (!fs::is_directory(path, ec)) {
    throw unreadable_file(path);
  }
  const fs::path cfg_path = dir / "config.json";
  const std::string cw = cfg_path.string();
  const json cfg = io::read_json(cfg_path.string());
  const ModelConfig c = config_from_hf_json(cfg, cw);
  const std::string mt = cfg.value("model_type", std::string());  // a string: checked above
  const Shards shards(dir, single);
  // F16/BF16 take two bytes per weight: a config implying more weights than the shards hold
  // is refused before anything is allocated.
  if (c.n_params_approx() * 2 > double(shards.total_bytes()))
    throw InputError(fmt::format("config.json implies {:.3g} weights but the safetensors files hold {} bytes",
                                 c.n_params_approx(), shards.total_bytes()), cw);
  Model m = allocate_model(c, cw);
  std::string label;
  auto load = [&](const std::string& name, std::vector<std::uint64_t> shape, float* dst) {
    const std::vector<float> v = shards.get(name, shape, label);
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) throw InputError(fmt::format("non-finite weight at flat index {}", i), label);
    std::copy(v.begin(), v.end(), dst);
  };
  if (!c.tied && !shards.has("lm_head.weight"))
    throw InputError("missing tensor lm_head.weight (and tie_word_embeddings is false)", cw);
  for (auto& t : tensor_slots(m)) {
    const std::string hf = mt == "mixtral" ? mixtral_name(t.hf) : t.hf;
    if (t.experts > 0) {  // one tensor per expert, stacked
      const std::uint64_t rows = std::uint64_t(t.rows / t.experts);
      for (int e = 0; e < t.experts; ++e) {
        TensorSlot one = t;
        one.hf = hf;
        load(one.hf_expert(e), {rows, std::uint64_t(t.cols)}, t.data + std::size_t(e) * rows * std::size_t(t.cols));
      }
    } else if (t.is_matrix()) {
      load(hf, {std::uint64_t(t.rows), std::uint64_t(t.cols)}, t.data);
    } else {
      load(hf, {std::uint64_t(t.rows)}, t.data);
    }
  }
  const std::string dt = shards.first_dtype("model.layers.0.self_attn.q_proj.weight");
  m.stored = dt == "F16" ? io::h5::FloatStorage::f16 : dt == "BF16" ? io::h5::FloatStorage::bf16 : io::h5::FloatStorage::f32;
  const fs::path tk = dir / "tokenizer.model";
  if (fs::exists(tk)) {
    m.tokenizer_model = io::read_file(tk.string());
    const Tokenizer tok(m.tokenizer_model, tk.string());
    if (tok.vocab_size() != c.vocab_size)
      throw InputError(fmt::format("tokenizer has {} pieces but vocab_size is {}", tok.vocab_size(), c.vocab_size), tk.string());
  }
  return m;
}

void save_model(const std::string& dir, const Model& m, io::h5::FloatStorage storage, const io::Provenance& prov) {
  const ModelConfig& c = m.config;
  c.validate("model config");
  check_narrowing(m, storage);
  const bool mixtral = c.is_mixtral();
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "model.safetensors.index.json"))
    throw RuntimeError("the output directory holds a sharded model (model.safetensors.index.json): choose an empty directory", dir);
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeError("cannot create directory", dir);
  struct T { std::string name; const float* data; std::vector<std::uint64_t> shape; bool narrow; };
  std::vector<T> ts;
  std::vector<Matrix> keep;  // q/k back in the rotate-half layout for rope_style = interleaved
  keep.reserve(2 * c.n_layers);
  for (auto t : tensor_slots(m)) {
    if (mixtral) t.hf = mixtral_name(t.hf);
    if (!t.is_matrix()) {
      ts.push_back({t.hf, t.data, {std::uint64_t(t.rows)}, false});
      continue;
    }
    if (t.experts > 0) {  // one tensor per expert, as Hugging Face checkpoints store them
      const std::uint64_t rows = std::uint64_t(t.rows / t.experts);
      for (int e = 0; e < t.experts; ++e)
        ts.push_back({t.hf_expert(e), t.data + std::size_t(e) * rows * std::size_t(t.cols), {rows, std::uint64_t(t.cols)}, true});
      continue;
    }
    const float* src = t.data;
    if (t.rope_heads > 0 && c.rope_style == RopeStyle::interleaved) {
      keep.push_back(gguf::permute_rope_rows(t.data, t.rows, t.cols, t.rope_heads, true));
      src = keep.back().data.data();
    }
    ts.push_back({t.hf, src, {std::uint64_t(t.rows), std::uint64_t(t.cols)}, true});
  }
  const char* narrow_name = storage == io::h5::FloatStorage::f16 ? "F16" : storage == io::h5::FloatStorage::bf16 ? "BF16" : "F32";
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}, {"icmlkit_command", prov.command}};
  std::uint64_t off = 0;
  for (const auto& t : ts) {
    std::uint64_t n = 1;
    for (auto s : t.shape) n *= s;
    const bool half = t.narrow && storage != io::h5::FloatStorage::f32;
    const std::uint64_t bytes = n * (half ? 2 : 4);
    header[t.name] = {{"dtype", half ? narrow_name : "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string hs = header.dump();
  hs.resize((hs.size() + 7) / 8 * 8, ' ');  // pad to 8 bytes, as the reference writer does
  const fs::path st_path = fs::path(dir) / "model.safetensors";
  io::AtomicFile af(st_path);
  {
    std::ofstream out(af.temp_path(), std::ios::binary);
    const std::uint64_t n = hs.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out.write(hs.data(), static_cast<std::streamsize>(hs.size()));
    std::vector<char> buf;
    for (const auto& t : ts) {
      std::uint64_t cnt = 1;
      for (auto s : t.shape) cnt *= s;
      const bool half = t.narrow && storage != io::h5::FloatStorage::f32;
      buf.resize(cnt * (half ? 2 : 4));
      if (!half) std::memcpy(buf.data(), t.data, cnt * 4);
      else
        for (std::uint64_t i = 0; i < cnt; ++i) {
          const std::uint16_t h = storage == io::h5::FloatStorage::f16 ? num::f32_to_f16(t.data[i]) : num::f32_to_bf16(t.data[i]);
          std::memcpy(buf.data() + 2 * i, &h, 2);
        }
      out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    }
    out.close();
    if (!out) throw RuntimeError("cannot write file (disk full?)", st_path.string());
  }
  af.commit();
  json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"vocab_size", c.vocab_size},
              {"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
              {"num_key_value_heads", c.n_kv_heads}, {"intermediate_size", c.d_ff},
              {"max_position_embeddings", c.n_ctx}, {"rope_theta", c.rope_theta}, {"rms_norm_eps", c.rms_eps},
              {"tie_word_embeddings", c.tied}, {"hidden_act", "silu"}, {"attention_bias", false},
              {"mlp_bias", false}, {"rope_scaling", nullptr}, {"head_dim", c.head_dim()},
              {"torch_dtype", storage == io::h5::FloatStorage::f16 ? "float16" : storage == io::h5::FloatStorage::bf16 ? "bfloat16" : "float32"}};
  if (c.bos_id >= 0) cfg["bos_token_id"] = c.bos_id;
  if (c.eos_id >= 0) cfg["eos_token_id"] = c.eos_id;
  if (mixtral) {  // transformers' MixtralForCausalLM (softmax top-K, renormalised)
    cfg["architectures"] = {"MixtralForCausalLM"};
    cfg["model_type"] = "mixtral";
    cfg["intermediate_size"] = c.moe.d_expert;
    cfg.update({{"num_local_experts", c.moe.n_experts}, {"num_experts_per_tok", c.moe.top_k}, {"sliding_window", nullptr},
                {"router_aux_loss_coef", 0.0}, {"output_router_logits", false}, {"attention_dropout", 0.0}});
    cfg.erase("mlp_bias");
  } else if (c.has_moe()) {  // icmlkit's own: DeepSeek-V3 / Qwen-MoE keys, plus the block list and latent width
    const MoeConfig& e = c.moe;
    cfg["architectures"] = {"IcmlkitMoeForCausalLM"};
    cfg["model_type"] = kMoeType;
    json types = json::array();
    for (BlockType t : c.all_block_types()) types.push_back(block_type_name(t));
    cfg.update({{"block_types", types}, {"n_routed_experts", e.n_experts}, {"num_experts_per_tok", e.top_k},
                {"moe_intermediate_size", e.d_expert}, {"shared_expert_intermediate_size", e.d_shared},
                {"latent_size", e.d_latent}, {"scoring_func", router_kind_name(e.router)}, {"norm_topk_prob", e.norm_topk},
                {"routed_scaling_factor", e.routed_scaling}, {"expert_act", expert_act_name(e.act)}});
  }
  io::write_text((fs::path(dir) / "config.json").string(), cfg.dump(2) + "\n");
  // generation_config.json and tokenizer_config.json: transformers loads the folder without
  // falling back to defaults (and warning) for the special tokens and the BOS rule.
  json gen = {{"_from_model_config", true}, {"do_sample", false}};
  if (c.bos_id >= 0) gen["bos_token_id"] = c.bos_id;
  if (c.eos_id >= 0) gen["eos_token_id"] = c.eos_id;
  io::write_text((fs::path(dir) / "generation_config.json").string(), gen.dump(2) + "\n");
  if (!m.tokenizer_model.empty()) {
    io::write_text((fs::path(dir) / "tokenizer.model").string(), m.tokenizer_model);
    const Tokenizer tok(m.tokenizer_model, "model tokenizer");
    auto piece = [&](int id) { return id >= 0 && id < tok.vocab_size() ? json(tok.piece(id)) : json(nullptr); };
    json tc = {{"tokenizer_class", "LlamaTokenizer"},
               {"add_bos_token", c.add_bos},
               {"add_eos_token", false},
               {"bos_token", piece(c.bos_id)},
               {"eos_token", piece(c.eos_id)},
               {"unk_token", piece(tok.unk_id())},
               {"pad_token", nullptr},
               {"model_max_length", c.n_ctx},
               {"legacy", false},
               {"clean_up_tokenization_spaces", false}};
    io::write_text((fs::path(dir) / "tokenizer_config.json").string(), tc.dump(2) + "\n");
  }
}

}  // namespace icmlkit::lm::safetensors
