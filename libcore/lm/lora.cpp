#include "lm/lora.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/mapped_file.hpp"
#include "io/sha256.hpp"
#include "lm/gguf.hpp"
#include "lm/safetensors.hpp"
#include "util/error.hpp"

namespace icmlkit::lm {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kConfigFile = "adapter_config.json";
const char* const kWeightsFile = "adapter_model.safetensors";
const char* const kKeyPrefix = "base_model.model.model.layers.";

bool is_attention(const std::string& target) { return target == "q" || target == "k" || target == "v" || target == "o"; }

bool known_target(const std::string& target) {
  const auto& n = lora_target_names();
  return std::find(n.begin(), n.end(), target) != n.end();
}

/// The base matrix `target` of layer `l`.
Matrix& target_matrix(Layer& l, const std::string& target) {
  if (target == "q") return l.wq;
  if (target == "k") return l.wk;
  if (target == "v") return l.wv;
  if (target == "o") return l.wo;
  if (target == "gate") return l.w_gate;
  if (target == "up") return l.w_up;
  return l.w_down;
}

/// Heads whose rows of a q/k matrix follow the RoPE layout (0 for other targets).
int rope_heads(const ModelConfig& c, const std::string& target) {
  return target == "q" ? c.n_heads : target == "k" ? c.n_kv_heads : 0;
}

/// B's rows between our order and the file's (Hugging Face rotate-half): only q/k of an
/// interleaved model move; `to_file` = our order -> the file's.
std::vector<float> file_order_b(const ModelConfig& c, const LoraTensor& t, int rank, bool to_file) {
  const int heads = rope_heads(c, t.target);
  if (heads == 0 || c.rope_style != RopeStyle::interleaved) return t.b;
  return gguf::permute_rope_rows(t.b.data(), t.out, rank, heads, to_file).data;
}

std::string key_of(int layer, const std::string& target, char ab) {
  return fmt::format("{}{}.{}.{}_proj.lora_{}.weight", kKeyPrefix, layer, is_attention(target) ? "self_attn" : "mlp", target, ab);
}

/// Parses "base_model.model.model.layers.{L}.{self_attn|mlp}.{T}_proj.lora_{A|B}.weight".
bool parse_key(const std::string& key, int& layer, std::string& target, char& ab) {
  if (key.rfind(kKeyPrefix, 0) != 0) return false;
  std::vector<std::string> parts;
  std::size_t at = std::strlen(kKeyPrefix);
  while (true) {
    const std::size_t dot = key.find('.', at);
    parts.push_back(key.substr(at, dot == std::string::npos ? std::string::npos : dot - at));
    if (dot == std::string::npos) break;
    at = dot + 1;
  }
  if (parts.size() != 5 || parts[4] != "weight") return false;
  const std::string& num = parts[0];
  if (num.empty() || num.size() > 6 || !std::all_of(num.begin(), num.end(), [](char ch) { return ch >= '0' && ch <= '9'; }) ||
      (num.size() > 1 && num[0] == '0'))
    return false;
  layer = std::stoi(num);
  const std::string& proj = parts[2];
  if (proj.size() < 6 || proj.compare(proj.size() - 5, 5, "_proj") != 0) return false;
  target = proj.substr(0, proj.size() - 5);
  if (!known_target(target) || parts[1] != (is_attention(target) ? "self_attn" : "mlp")) return false;
  if (parts[3] != "lora_A" && parts[3] != "lora_B") return false;
  ab = parts[3].back();
  return true;
}

std::string shape_text(const std::vector<std::uint64_t>& s) {
  std::string out;
  for (auto d : s) out += (out.empty() ? "" : ", ") + std::to_string(d);
  return "[" + out + "]";
}

/// adapter_config.json's target_modules (a list, or one plain module name) as our target names
/// in lora_target_names() order.
std::vector<std::string> parse_targets(const json& tm, const std::string& where) {
  std::vector<std::string> names;
  if (tm.is_null()) {
    names = {"q_proj", "v_proj"};  // PEFT's default for llama models
  } else if (tm.is_string()) {
    const std::string s = tm.get<std::string>();
    if (s == "all-linear") {  // PEFT's shorthand: every linear layer but the output head
      for (const auto& t : lora_target_names()) names.push_back(t + "_proj");
    } else if (s.empty() || !std::all_of(s.begin(), s.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; })) {
      throw InputError("target_modules '" + s + "' is a regular expression, which is not supported: list the modules (e.g. [\"q_proj\", \"v_proj\"])", where);
    } else {
      names = {s};
    }
  } else if (tm.is_array()) {
    for (const json& v : tm) {
      if (!v.is_string()) throw InputError("target_modules holds a non-string", where);
      names.push_back(v.get<std::string>());
    }
  } else {
    throw InputError("target_modules is neither a list nor a string", where);
  }
  std::set<std::string> chosen;
  for (const std::string& n : names) {
    const std::string t = n.size() > 5 && n.compare(n.size() - 5, 5, "_proj") == 0 ? n.substr(0, n.size() - 5) : "";
    if (!known_target(t))
      throw InputError("target module '" + n + "' is not supported (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj are)", where);
    chosen.insert(t);
  }
  std::vector<std::string> out;
  for (const auto& t : lora_target_names())
    if (chosen.count(t)) out.push_back(t);
  return out;
}

LoraConfig parse_config(const json& j, const std::string& where, std::string& base_model, std::string& base_sha) {
  if (!j.is_object()) throw InputError("adapter_config.json is not a JSON object", where);
  const auto str_of = [&](const char* key, const char* fallback) {
    if (!j.contains(key) || j[key].is_null()) return std::string(fallback);
    if (!j[key].is_string()) throw InputError(std::string("'") + key + "' is not a string", where);
    return j[key].get<std::string>();
  };
  const auto flag = [&](const char* key) {
    if (!j.contains(key) || j[key].is_null()) return false;
    if (!j[key].is_boolean()) throw InputError(std::string("'") + key + "' is not true or false", where);
    return j[key].get<bool>();
  };
  const auto empty_or_null = [&](const char* key) {
    return !j.contains(key) || j[key].is_null() || ((j[key].is_object() || j[key].is_array()) && j[key].empty());
  };
  // what decides the arithmetic must be stated (save_pretrained always writes these four): a missing
  // or misspelled one would silently fall back to a default and change the adapter's scaling
  for (const char* key : {"peft_type", "r", "lora_alpha", "target_modules"})
    if (!j.contains(key) || j[key].is_null())
      throw InputError(std::string("'") + key + "' is missing (PEFT writes it; a LoRA adapter's config needs it)", where);
  const std::string type = str_of("peft_type", "LORA");
  if (type != "LORA") throw InputError("peft_type '" + type + "' is not LORA", where);
  if (flag("use_dora")) throw InputError("DoRA adapters (use_dora true) are not supported", where);
  if (flag("fan_in_fan_out")) throw InputError("fan_in_fan_out true (Conv1D weights) is not supported", where);
  if (flag("lora_bias")) throw InputError("lora_bias true (a bias on lora_B) is not supported", where);
  const std::string bias = str_of("bias", "none");
  if (bias != "none") throw InputError("bias '" + bias + "' is not supported (only \"none\")", where);
  if (!empty_or_null("rank_pattern")) throw InputError("rank_pattern (per-module ranks) is not supported", where);
  if (!empty_or_null("alpha_pattern")) throw InputError("alpha_pattern (per-module alphas) is not supported", where);
  if (!empty_or_null("modules_to_save")) throw InputError("modules_to_save (fully trained modules) is not supported", where);
  LoraConfig c;
  c.rank = 8;  // PEFT's defaults for r and lora_alpha
  c.alpha = 8;
  if (j.contains("r")) {
    if (!j["r"].is_number_integer() || j["r"].get<std::int64_t>() < 1 || j["r"].get<std::int64_t>() > (1 << 20))
      throw InputError("'r' is not an integer in 1..1048576", where);
    c.rank = j["r"].get<int>();
  }
  if (j.contains("lora_alpha")) {
    if (!j["lora_alpha"].is_number() || !std::isfinite(j["lora_alpha"].get<double>()) || j["lora_alpha"].get<double>() <= 0)
      throw InputError("'lora_alpha' is not a positive number", where);
    c.alpha = j["lora_alpha"].get<double>();
  }
  if (j.contains("lora_dropout") && !j["lora_dropout"].is_null()) {
    if (!j["lora_dropout"].is_number() || !(j["lora_dropout"].get<double>() >= 0 && j["lora_dropout"].get<double>() < 1))
      throw InputError("'lora_dropout' is not a number in [0, 1)", where);
    c.dropout = j["lora_dropout"].get<double>();
  }
  c.rslora = flag("use_rslora");
  c.targets = parse_targets(j.contains("target_modules") ? j["target_modules"] : json(), where);
  base_model = str_of("base_model_name_or_path", "");
  base_sha.clear();
  if (j.contains("icmlkit") && j["icmlkit"].is_object() && j["icmlkit"].contains("base_sha256")) {
    const json& h = j["icmlkit"]["base_sha256"];
    if (!h.is_string() && !h.is_null()) throw InputError("icmlkit.base_sha256 is not a string", where);
    if (h.is_string()) base_sha = h.get<std::string>();
  }
  return c;
}

/// The safetensors bytes of `tensors` (F32, in order; __metadata__ {"format": "pt"}).
std::string encode_safetensors(const std::vector<std::pair<std::string, std::vector<std::uint64_t>>>& shapes,
                               const std::vector<const std::vector<float>*>& data) {
  json header = json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const std::uint64_t bytes = data[i]->size() * 4;
    header[shapes[i].first] = {{"dtype", "F32"}, {"shape", shapes[i].second}, {"data_offsets", {off, off + bytes}}};
    off += bytes;
  }
  std::string hs = header.dump();
  hs.resize((hs.size() + 7) / 8 * 8, ' ');  // 8-byte aligned data, as the reference writer pads
  std::string out(8, '\0');
  const std::uint64_t n = hs.size();
  std::memcpy(out.data(), &n, 8);
  out += hs;
  out.reserve(out.size() + off);
  for (const auto* d : data) out.append(reinterpret_cast<const char*>(d->data()), d->size() * 4);
  return out;
}

/// Checks one in-memory tensor against `c` (layer, target, block type, A/B sizes).  Throws
/// InputError naming `where`.
void check_tensor(const ModelConfig& c, const LoraTensor& t, int rank, const std::string& where) {
  const std::string what = fmt::format("layer {} {}_proj", t.layer, t.target);
  if (t.layer < 0 || t.layer >= c.n_layers)
    throw InputError(fmt::format("{}: the model has {} layers", what, c.n_layers), where);
  if (!known_target(t.target)) throw InputError("unknown LoRA target '" + t.target + "'", where);
  if (!is_attention(t.target) && is_moe_block(c.block_type(t.layer)))
    throw InputError(fmt::format("{}: block {} is {} (no llama MLP)", what, t.layer, block_type_name(c.block_type(t.layer))), where);
  const auto [out, in] = lora_target_shape(c, t.layer, t.target);
  if (t.in != in || t.out != out || t.a.size() != std::size_t(rank) * std::size_t(in) || t.b.size() != std::size_t(out) * std::size_t(rank))
    throw InputError(fmt::format("{}: A [{}, {}] and B [{}, {}] expected for the base's [{}, {}] matrix at rank {}", what, rank, in,
                                 out, rank, out, in, rank), where);
}

}  // namespace

double LoraConfig::scaling() const noexcept { return rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank); }

std::pair<int, int> lora_target_shape(const ModelConfig& c, int layer, const std::string& target) {
  const int hd = c.head_dim();
  if (target == "q") return {c.n_heads * hd, c.d_model};
  if (target == "k" || target == "v") return {c.n_kv_heads * hd, c.d_model};
  if (target == "o") return {c.d_model, c.n_heads * hd};
  if (!known_target(target))
    throw UsageError("unknown LoRA target '" + target + "' (q, k, v, o, gate, up, down)", "--lora-targets");
  if (layer >= 0 && layer < c.n_layers && is_moe_block(c.block_type(layer)))
    throw UsageError(fmt::format("LoRA target {}: block {} is {} and has no llama MLP", target, layer, block_type_name(c.block_type(layer))),
                     "--lora-targets");
  if (target == "down") return {c.d_model, c.d_ff};
  return {c.d_ff, c.d_model};
}

std::int64_t lora_param_count(const ModelConfig& c, int rank, const std::vector<std::string>& targets) {
  std::int64_t n = 0;
  for (int l = 0; l < c.n_layers; ++l)
    for (const std::string& t : targets) {
      const auto [out, in] = lora_target_shape(c, l, t);
      n += std::int64_t(rank) * (in + out);
    }
  return n;
}

void check_lora_config(const LoraConfig& lc, const ModelConfig& c) {
  if (lc.rank < 1) throw UsageError(fmt::format("LoRA rank {} must be at least 1", lc.rank), "--lora-rank");
  if (!std::isfinite(lc.alpha) || lc.alpha <= 0) throw UsageError(fmt::format("LoRA alpha {} must be a positive number", lc.alpha), "--lora-alpha");
  if (!(lc.dropout >= 0 && lc.dropout < 1)) throw UsageError(fmt::format("LoRA dropout {} must be in [0, 1)", lc.dropout), "--lora-dropout");
  if (lc.targets.empty()) throw UsageError("no LoRA targets", "--lora-targets");
  std::set<std::string> seen;
  for (const std::string& t : lc.targets) {
    if (!seen.insert(t).second) throw UsageError("LoRA target '" + t + "' is given twice", "--lora-targets");
    for (int l = 0; l < std::max(1, c.n_layers); ++l) {
      const auto [out, in] = lora_target_shape(c, l, t);
      if (lc.rank > std::min(out, in))
        throw UsageError(fmt::format("LoRA rank {} exceeds min(out, in) = {} of the {} matrix [{}, {}]", lc.rank, std::min(out, in), t, out, in),
                         "--lora-rank");
    }
  }
}

std::string weights_sha256(const Model& model) {
  const ModelConfig& c = model.config;
  io::Sha256 h;
  for (const auto& t : tensor_slots(model)) {
    const std::uint64_t dims[2] = {std::uint64_t(t.rows), std::uint64_t(t.cols)};
    h.update(t.gguf.data(), t.gguf.size() + 1);  // the name and its terminating NUL
    h.update(dims, sizeof dims);
    const std::size_t n = std::size_t(t.rows) * std::size_t(std::max(1, t.cols));
    if (t.rope_heads > 0 && c.rope_style == RopeStyle::interleaved) {  // q/k in the rotate-half order, whatever the file
      const Matrix m = gguf::permute_rope_rows(t.data, t.rows, t.cols, t.rope_heads, true);
      h.update(m.data.data(), n * 4);
    } else {
      h.update(t.data, n * 4);
    }
  }
  return h.hex();
}

std::pair<std::string, std::string> peft_adapter_files(const std::string& path) {
  std::error_code ec;
  fs::path dir = path;
  if (fs::is_regular_file(path, ec)) {
    const std::string name = fs::path(path).filename().string();
    if (name != kConfigFile && name != kWeightsFile)
      throw InputError(fmt::format("a LoRA adapter is a PEFT directory ({} + {}), not this file", kConfigFile, kWeightsFile), path);
    dir = fs::path(path).parent_path();
    if (dir.empty()) dir = ".";
  } else if (!fs::is_directory(path, ec)) {
    throw unreadable_file(path);
  }
  return {(dir / kConfigFile).string(), (dir / kWeightsFile).string()};
}

void write_peft_adapter(const std::string& dir, const LoraAdapter& adapter, const ModelConfig& base, const io::Provenance& prov) {
  const LoraConfig& lc = adapter.config;
  const int r = lc.rank;
  if (r < 1) throw InputError(fmt::format("LoRA rank {} must be at least 1", r), dir);
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> shapes;
  std::vector<std::vector<float>> bs;  // B in the file's row order
  bs.reserve(adapter.tensors.size());
  std::vector<const std::vector<float>*> data;
  for (const LoraTensor& t : adapter.tensors) {
    check_tensor(base, t, r, dir);
    bs.push_back(file_order_b(base, t, r, true));
    shapes.push_back({key_of(t.layer, t.target, 'A'), {std::uint64_t(r), std::uint64_t(t.in)}});
    data.push_back(&t.a);
    shapes.push_back({key_of(t.layer, t.target, 'B'), {std::uint64_t(t.out), std::uint64_t(r)}});
    data.push_back(&bs.back());
  }
  json targets = json::array();
  for (const auto& t : lora_target_names())
    if (std::find(lc.targets.begin(), lc.targets.end(), t) != lc.targets.end()) targets.push_back(t + "_proj");
  json cfg = {{"peft_type", "LORA"},
              {"task_type", "CAUSAL_LM"},
              {"base_model_name_or_path", adapter.base_model.empty() ? json() : json(adapter.base_model)},
              {"r", r},
              {"lora_alpha", lc.alpha == std::floor(lc.alpha) && std::fabs(lc.alpha) < 1e9 ? json(std::int64_t(lc.alpha)) : json(lc.alpha)},
              {"lora_dropout", lc.dropout},
              {"target_modules", targets},
              {"bias", "none"},
              {"fan_in_fan_out", false},
              {"use_rslora", lc.rslora},
              {"use_dora", false},
              {"rank_pattern", json::object()},
              {"alpha_pattern", json::object()},
              {"modules_to_save", nullptr},
              {"init_lora_weights", true},
              {"inference_mode", true},
              {"icmlkit", {{"meta", prov.to_json()}, {"base_sha256", adapter.base_sha256}}}};
  const std::string st = encode_safetensors(shapes, data), js = cfg.dump(2) + "\n";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) throw RuntimeError("cannot create directory", dir);
  // Both files are complete in their temporaries before either replaces an older adapter's.
  io::AtomicFile weights(fs::path(dir) / kWeightsFile), config(fs::path(dir) / kConfigFile);
  for (const auto& [file, bytes] : {std::pair<const io::AtomicFile*, const std::string*>{&weights, &st}, {&config, &js}}) {
    std::ofstream out(file->temp_path(), std::ios::binary);
    out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    out.close();
    if (!out) throw RuntimeError("cannot write file (disk full?)", file->target().string());
  }
  weights.commit();
  config.commit();
}

LoraAdapter read_peft_adapter(const std::string& path, const Model& model) {
  const ModelConfig& c = model.config;
  const auto [cfg_path, st_path] = peft_adapter_files(path);
  std::error_code ec;
  if (!fs::exists(cfg_path, ec)) throw InputError(std::string("no ") + kConfigFile + " (not a PEFT adapter directory)", cfg_path);
  LoraAdapter a;
  a.config = parse_config(io::read_json(cfg_path), cfg_path, a.base_model, a.base_sha256);
  const int r = a.config.rank;
  if (!fs::exists(st_path, ec)) {
    const fs::path bin = fs::path(st_path).parent_path() / "adapter_model.bin";
    if (fs::exists(bin, ec))
      throw InputError("adapter_model.bin (a PyTorch pickle) is not read: save the adapter with safe_serialization=True", bin.string());
    throw unreadable_file(st_path);
  }
  const io::MappedFile file(st_path);
  const safetensors::Header header = safetensors::parse(file.data(), file.size(), st_path);
  if (header.tensors.empty()) throw InputError("the adapter holds no tensors", st_path);
  std::map<std::pair<int, int>, LoraTensor> found;  // (layer, target index) -> tensor
  std::map<std::pair<int, int>, int> halves;         // bit 1: A seen, bit 2: B seen
  const auto& names = lora_target_names();
  for (const auto& [key, e] : header.tensors) {
    const std::string where = st_path + ":" + key;
    int layer = 0;
    std::string target;
    char ab = 0;
    if (!parse_key(key, layer, target, ab))
      throw InputError("not a LoRA tensor of a llama model (base_model.model.model.layers.{L}.{self_attn|mlp}."
                       "{q|k|v|o|gate|up|down}_proj.lora_{A|B}.weight)", where);
    if (layer >= c.n_layers) throw InputError(fmt::format("layer {} is beyond the model's {} layers", layer, c.n_layers), where);
    if (std::find(a.config.targets.begin(), a.config.targets.end(), target) == a.config.targets.end())
      throw InputError(fmt::format("{}_proj is not among adapter_config.json's target_modules", target), where);
    if (!is_attention(target) && is_moe_block(c.block_type(layer)))
      throw InputError(fmt::format("block {} is {} and has no llama MLP to adapt", layer, block_type_name(c.block_type(layer))), where);
    const auto [out, in] = lora_target_shape(c, layer, target);
    const std::vector<std::uint64_t> want = ab == 'A' ? std::vector<std::uint64_t>{std::uint64_t(r), std::uint64_t(in)}
                                                      : std::vector<std::uint64_t>{std::uint64_t(out), std::uint64_t(r)};
    if (e.shape != want)
      throw InputError(fmt::format("shape {} does not fit the base model: expected {} (r = {}, base matrix [{}, {}])", shape_text(e.shape),
                                   shape_text(want), r, out, in), where);
    std::vector<float> v = safetensors::to_floats(file.data(), e);
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) throw InputError(fmt::format("non-finite value at flat index {}", i), where);
    const int ti = int(std::find(names.begin(), names.end(), target) - names.begin());
    LoraTensor& t = found[{layer, ti}];
    t.layer = layer;
    t.target = target;
    t.in = in;
    t.out = out;
    (ab == 'A' ? t.a : t.b) = std::move(v);
    halves[{layer, ti}] |= ab == 'A' ? 1 : 2;
  }
  for (auto& [lt, t] : found) {
    if (halves[lt] != 3)
      throw InputError(fmt::format("layer {} {}_proj has lora_{} but not lora_{}", t.layer, t.target, halves[lt] == 1 ? 'A' : 'B',
                                   halves[lt] == 1 ? 'B' : 'A'), st_path);
    t.b = file_order_b(c, t, r, false);
    a.tensors.push_back(std::move(t));
  }
  if (!a.base_sha256.empty()) {
    const std::string mine = weights_sha256(model);
    if (mine != a.base_sha256)
      throw InputError(fmt::format("the adapter was made for another base model (base_sha256 {}..., this model's weights {}...)",
                                   a.base_sha256.substr(0, 12), mine.substr(0, 12)), cfg_path);
  }
  return a;
}

void merge_lora(Model& model, const LoraAdapter& adapter) {
  const int r = adapter.config.rank;
  const float s = static_cast<float>(adapter.config.scaling());
  for (const LoraTensor& t : adapter.tensors) check_tensor(model.config, t, r, "LoRA adapter");
  for (const LoraTensor& t : adapter.tensors) {
    Matrix& w = target_matrix(model.layers[std::size_t(t.layer)], t.target);
    if (w.weight_type() != WeightType::f32 || w.rows != t.out || w.cols != t.in)
      throw InputError(fmt::format("layer {} {}_proj: the model's matrix is not [{}, {}] float32", t.layer, t.target, t.out, t.in), "LoRA adapter");
    const int in = t.in;
    const float* A = t.a.data();
    const float* B = t.b.data();
#pragma omp parallel
    {
      std::vector<float> d(static_cast<std::size_t>(in));  // row o of B A, accumulated in float (one buffer per thread)
#pragma omp for schedule(static)
      for (int o = 0; o < t.out; ++o) {
        std::fill(d.begin(), d.end(), 0.0f);
        for (int k = 0; k < r; ++k) {
          const float bk = B[std::size_t(o) * r + k];
          const float* ak = A + std::size_t(k) * in;
          for (int j = 0; j < in; ++j) d[std::size_t(j)] += bk * ak[j];
        }
        float* row = w.row(o);
        for (int j = 0; j < in; ++j) row[j] += s * d[std::size_t(j)];
      }
    }
  }
}

void add_lora_flag(CLI::App& app, std::string& dir) {
  app.add_option("--lora", dir,
                 "LoRA adapter to merge into the model before running: a PEFT directory (adapter_config.json + "
                 "adapter_model.safetensors)");
}

LoraAdapter apply_lora(Model& model, const std::string& dir, io::Provenance& prov) {
  LoraAdapter a = read_peft_adapter(dir, model);
  merge_lora(model, a);
  const auto [cfg_path, st_path] = peft_adapter_files(dir);
  prov.add_input(cfg_path, io::sha256_file(cfg_path));
  prov.add_input(st_path, io::sha256_file(st_path));
  prov.extra["lora"] = {{"dir", dir},
                        {"rank", a.config.rank},
                        {"alpha", a.config.alpha},
                        {"rslora", a.config.rslora},
                        {"scaling", a.config.scaling()},
                        {"targets", a.config.targets},
                        {"tensors", a.tensors.size()},
                        {"base_sha256", a.base_sha256.empty() ? json() : json(a.base_sha256)}};
  return a;
}

}  // namespace icmlkit::lm
