#include "lm/gguf.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <fstream>
#include <limits>

#include "io/atomic_file.hpp"
#include "io/mapped_file.hpp"
#include "lm/tokenizer.hpp"
#include "num/half.hpp"
#include "util/error.hpp"

namespace icmlkit::lm::gguf {

namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
enum : std::uint32_t { t_u8 = 0, t_i8, t_u16, t_i16, t_u32, t_i32, t_f32, t_bool, t_string, t_array, t_u64, t_i64, t_f64 };

/// Bounds-checked little-endian cursor over the file bytes.
class Cursor {
 public:
  Cursor(const std::uint8_t* d, std::size_t n, const std::string& where) : d_(d), n_(n), where_(where) {}
  std::size_t pos() const noexcept { return p_; }
  std::size_t remaining() const noexcept { return n_ - p_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(what + fmt::format(" at byte {}", p_), where_);
  }
  template <class T>
  T get(const char* what) {
    if (remaining() < sizeof(T)) fail(std::string("truncated file while reading ") + what);
    T v;
    std::memcpy(&v, d_ + p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const auto len = get<std::uint64_t>(what);
    if (len > remaining()) fail(fmt::format("{} length {} exceeds the {} bytes left", what, len, remaining()));
    std::string s(reinterpret_cast<const char*>(d_ + p_), static_cast<std::size_t>(len));
    p_ += static_cast<std::size_t>(len);
    return s;
  }
  /// A key or tensor name: str(), refused when it holds a control byte (a damaged file; error
  /// messages quote names, so none may reach the terminal).
  std::string name(const char* what) {
    std::string s = str(what);
    for (const char ch : s)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) fail(fmt::format("{} holds a control byte (a damaged file?)", what));
    return s;
  }

 private:
  const std::uint8_t* d_;
  std::size_t n_, p_ = 0;
  const std::string& where_;
};

std::size_t scalar_size(std::uint32_t t) {
  switch (t) {
    case t_u8: case t_i8: case t_bool: return 1;
    case t_u16: case t_i16: return 2;
    case t_u32: case t_i32: case t_f32: return 4;
    case t_u64: case t_i64: case t_f64: return 8;
    case t_string: return 8;  // at least the length field
    default: return 0;
  }
}

template <class T>
std::int64_t get_int(Cursor& c, const char* what) { return static_cast<std::int64_t>(c.get<T>(what)); }

Value read_scalar(Cursor& c, std::uint32_t t, const std::string& key) {
  const char* w = "metadata value";
  switch (t) {
    case t_u8: return std::uint64_t(c.get<std::uint8_t>(w));
    case t_u16: return std::uint64_t(c.get<std::uint16_t>(w));
    case t_u32: return std::uint64_t(c.get<std::uint32_t>(w));
    case t_u64: return c.get<std::uint64_t>(w);
    case t_i8: return get_int<std::int8_t>(c, w);
    case t_i16: return get_int<std::int16_t>(c, w);
    case t_i32: return get_int<std::int32_t>(c, w);
    case t_i64: return c.get<std::int64_t>(w);
    case t_f32: return double(c.get<float>(w));
    case t_f64: return c.get<double>(w);
    case t_bool: {
      const auto b = c.get<std::uint8_t>(w);
      if (b > 1) c.fail(fmt::format("boolean '{}' has value {}", key, b));
      return b == 1;
    }
    case t_string: return c.str("metadata string");
    default: c.fail(fmt::format("unknown metadata type {} for key '{}'", t, key));
  }
}

Value read_value(Cursor& c, std::uint32_t t, const std::string& key) {
  if (t != t_array) return read_scalar(c, t, key);
  const auto et = c.get<std::uint32_t>("array type");
  const auto count = c.get<std::uint64_t>("array length");
  if (et == t_array) c.fail(fmt::format("nested arrays are not supported (key '{}')", key));
  const std::size_t es = scalar_size(et);
  if (es == 0) c.fail(fmt::format("unknown array element type {} for key '{}'", et, key));
  if (count > c.remaining() / es) c.fail(fmt::format("array '{}' of {} elements exceeds the file", key, count));
  const auto n = static_cast<std::size_t>(count);
  if (et == t_string) {
    std::vector<std::string> v(n);
    for (auto& s : v) s = c.str("array string");
    return v;
  }
  if (et == t_f32 || et == t_f64) {
    std::vector<double> v(n);
    for (auto& x : v) x = std::get<double>(read_scalar(c, et, key));
    return v;
  }
  std::vector<std::int64_t> v(n);
  for (auto& x : v) {
    const Value s = read_scalar(c, et, key);
    if (const auto* u = std::get_if<std::uint64_t>(&s)) {
      if (*u > std::uint64_t(std::numeric_limits<std::int64_t>::max())) c.fail(fmt::format("array '{}' value too large", key));
      x = static_cast<std::int64_t>(*u);
    } else if (const auto* i = std::get_if<std::int64_t>(&s)) {
      x = *i;
    } else {
      x = std::get<bool>(s) ? 1 : 0;
    }
  }
  return v;
}

std::uint64_t type_bytes(TensorType t, std::uint64_t n, std::uint64_t ne0, Cursor& c, const std::string& name) {
  switch (t) {
    case TensorType::f32: return n * 4;
    case TensorType::f16: case TensorType::bf16: return n * 2;
    case TensorType::q8_0:
    case TensorType::q4_0:
      if (ne0 % 32 != 0)
        c.fail(fmt::format("{} tensor '{}' has ne[0] = {} not divisible by 32", t == TensorType::q8_0 ? "Q8_0" : "Q4_0", name, ne0));
      return n / 32 * (t == TensorType::q8_0 ? 34 : 18);
  }
  return 0;
}

}  // namespace

const TensorInfo* File::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

File parse(const std::uint8_t* data, std::size_t size, const std::string& where) {
  Cursor c(data, size, where);
  File f;
  if (c.get<std::uint32_t>("magic") != kMagic) throw InputError("not a GGUF file (bad magic)", where);
  f.version = c.get<std::uint32_t>("version");
  if (f.version != 2 && f.version != 3) throw InputError(fmt::format("unsupported GGUF version {} (2 and 3 are read)", f.version), where);
  const auto n_tensors = c.get<std::uint64_t>("tensor count");
  const auto n_kv = c.get<std::uint64_t>("metadata count");
  if (n_kv > c.remaining() / 14) c.fail(fmt::format("metadata count {} exceeds the file", n_kv));
  if (n_tensors > c.remaining() / 33) c.fail(fmt::format("tensor count {} exceeds the file", n_tensors));
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.name("metadata key");
    if (key.empty()) c.fail("empty metadata key");
    const auto t = c.get<std::uint32_t>("metadata type");
    Value v = read_value(c, t, key);
    if (key == "general.alignment") {
      const auto* a = std::get_if<std::uint64_t>(&v);
      if (!a || *a == 0 || (*a & (*a - 1)) != 0 || *a > (1u << 20))
        c.fail("general.alignment must be a power of two in [1, 2^20]");
      f.alignment = *a;
    }
    if (!f.meta.emplace(std::move(key), std::move(v)).second) c.fail("duplicate metadata key");
  }
  f.tensors.reserve(static_cast<std::size_t>(n_tensors));
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.name("tensor name");
    if (t.name.empty()) c.fail("empty tensor name");
    const auto nd = c.get<std::uint32_t>("tensor dimension count");
    if (nd < 1 || nd > 4) c.fail(fmt::format("tensor '{}' has {} dimensions (1..4 allowed)", t.name, nd));
    std::uint64_t n = 1;
    for (std::uint32_t k = 0; k < nd; ++k) {
      const auto d = c.get<std::uint64_t>("tensor dimension");
      if (d == 0) c.fail(fmt::format("tensor '{}' has a zero dimension", t.name));
      if (d > (std::uint64_t(1) << 40) || n > (std::uint64_t(1) << 60) / d) c.fail(fmt::format("tensor '{}' is too large", t.name));
      n *= d;
      t.ne.push_back(d);
    }
    const auto ty = c.get<std::uint32_t>("tensor type");
    if (ty != 0 && ty != 1 && ty != 2 && ty != 8 && ty != 30)
      c.fail(fmt::format("tensor '{}' has unsupported type {} (F32, F16, BF16, Q8_0 and Q4_0 are read)", t.name, ty));
    t.type = static_cast<TensorType>(ty);
    t.nbytes = type_bytes(t.type, n, t.ne[0], c, t.name);
    t.offset = c.get<std::uint64_t>("tensor offset");
    if (t.offset % f.alignment != 0) c.fail(fmt::format("tensor '{}' offset {} is not aligned to {}", t.name, t.offset, f.alignment));
    for (const auto& o : f.tensors)
      if (o.name == t.name) c.fail(fmt::format("duplicate tensor name '{}'", t.name));
    f.tensors.push_back(std::move(t));
  }
  const std::uint64_t start = (c.pos() + f.alignment - 1) / f.alignment * f.alignment;
  if (start > size && !f.tensors.empty()) throw InputError("tensor data starts past the end of the file", where);
  for (auto& t : f.tensors) {
    if (t.offset > size || start + t.offset > size || t.nbytes > size - start - t.offset)
      throw InputError(fmt::format("tensor '{}' data [{}, +{}) runs past the end of the file ({} bytes)", t.name,
                                   start + std::min<std::uint64_t>(t.offset, size), t.nbytes, size), where);
    t.offset += start;
  }
  std::vector<const TensorInfo*> by_off;
  for (const auto& t : f.tensors) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_off.size(); ++i)
    if (by_off[i - 1]->offset + by_off[i - 1]->nbytes > by_off[i]->offset)
      throw InputError(fmt::format("tensors '{}' and '{}' overlap", by_off[i - 1]->name, by_off[i]->name), where);
  return f;
}

std::vector<float> dequantize(const std::uint8_t* data, const TensorInfo& t) {
  std::uint64_t n = 1;
  for (auto d : t.ne) n *= d;
  std::vector<float> out(static_cast<std::size_t>(n));
  const std::uint8_t* p = data + t.offset;
  switch (t.type) {
    case TensorType::f32: std::memcpy(out.data(), p, n * 4); break;
    case TensorType::f16:
      for (std::uint64_t i = 0; i < n; ++i) { std::uint16_t h; std::memcpy(&h, p + 2 * i, 2); out[i] = num::f16_to_f32(h); }
      break;
    case TensorType::bf16:
      for (std::uint64_t i = 0; i < n; ++i) { std::uint16_t h; std::memcpy(&h, p + 2 * i, 2); out[i] = num::bf16_to_f32(h); }
      break;
    case TensorType::q8_0:
    case TensorType::q4_0: {
      // Blocks of 32 (lm/matmul.hpp's WeightType): Q8_0 x = d q, Q4_0 x = d (q - 8).
      const WeightType wt = t.type == TensorType::q8_0 ? WeightType::q8_0 : WeightType::q4_0;
      const std::size_t bb = weight_row_bytes(wt, 32);
      for (std::uint64_t b = 0; b < n / 32; ++b) dequantize_row(wt, p + b * bb, 32, out.data() + b * 32);
      break;
    }
  }
  return out;
}

Matrix permute_rope_rows(const float* w, int rows, int cols, int n_head, bool inverse) {
  Matrix out(rows, cols);
  const int hd = rows / n_head, half = hd / 2;
  for (int h = 0; h < n_head; ++h)
    for (int i = 0; i < half; ++i)
      for (int j = 0; j < 2; ++j) {
        const int inter = h * hd + 2 * i + j, rot = h * hd + j * half + i;
        const int src = inverse ? inter : rot, dst = inverse ? rot : inter;
        std::copy_n(w + std::size_t(src) * cols, cols, out.row(dst));
      }
  return out;
}

namespace {

const Value* find_meta(const File& f, const std::string& key) {
  auto it = f.meta.find(key);
  return it == f.meta.end() ? nullptr : &it->second;
}

std::int64_t meta_int(const File& f, const std::string& key, const std::string& where, bool required, std::int64_t fallback) {
  const Value* v = find_meta(f, key);
  if (!v) {
    if (required) throw InputError("missing metadata key '" + key + "'", where);
    return fallback;
  }
  if (const auto* u = std::get_if<std::uint64_t>(v)) {
    if (*u > (1ull << 31)) throw InputError("metadata '" + key + "' out of range", where);
    return static_cast<std::int64_t>(*u);
  }
  if (const auto* i = std::get_if<std::int64_t>(v)) {
    if (*i < -1 || *i > (1ll << 31)) throw InputError("metadata '" + key + "' out of range", where);
    return *i;
  }
  throw InputError("metadata '" + key + "' is not an integer", where);
}

double meta_double(const File& f, const std::string& key, const std::string& where, double fallback) {
  const Value* v = find_meta(f, key);
  if (!v) return fallback;
  if (const auto* d = std::get_if<double>(v)) return *d;
  throw InputError("metadata '" + key + "' is not a float", where);
}

std::string meta_string(const File& f, const std::string& key, const std::string& where, bool required) {
  const Value* v = find_meta(f, key);
  if (!v) {
    if (required) throw InputError("missing metadata key '" + key + "'", where);
    return {};
  }
  if (const auto* s = std::get_if<std::string>(v)) return *s;
  throw InputError("metadata '" + key + "' is not a string", where);
}

bool meta_bool(const File& f, const std::string& key, const std::string& where, bool fallback) {
  const Value* v = find_meta(f, key);
  if (!v) return fallback;
  if (const auto* b = std::get_if<bool>(v)) return *b;
  throw InputError("metadata '" + key + "' is not a boolean", where);
}

// Loads tensor `name` of contract shape [rows, cols] (cols = 0: a vector; experts > 0: the
// stacked experts, ne [cols, rows / experts, experts]) into dst.
void load_tensor(const std::uint8_t* data, const File& f, const std::string& name, std::size_t rows,
                 std::size_t cols, int experts, float* dst, const std::string& where) {
  const TensorInfo* t = f.find(name);
  if (!t) throw InputError("missing tensor", where + ":" + name);
  std::vector<std::uint64_t> want;
  if (cols == 0) want = {rows};
  else if (experts > 0) want = {cols, rows / std::size_t(experts), std::size_t(experts)};
  else want = {cols, rows};
  if (t->ne != want) {
    std::string got, exp;
    for (auto d : t->ne) got += (got.empty() ? "" : ", ") + std::to_string(d);
    for (auto d : want) exp += (exp.empty() ? "" : ", ") + std::to_string(d);
    throw InputError(fmt::format("shape mismatch: expected ne [{}], got [{}]", exp, got), where + ":" + name);
  }
  const std::vector<float> v = dequantize(data, *t);
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) throw InputError(fmt::format("non-finite weight at flat index {}", i), where + ":" + name);
  std::copy(v.begin(), v.end(), dst);
}

// The routed FFN's settings: llama.cpp's expert keys (a Mixtral from llama.cpp has only the
// counts) and ours (block types, expert activation, latent width, unrounded scaling).
void read_moe_config(const File& f, const std::string& A, const std::string& path, ModelConfig& c) {
  const std::int64_t n_experts = meta_int(f, A + ".expert_count", path, false, 0);
  if (const Value* v = find_meta(f, "icmlkit.block_types")) {
    const auto* names = std::get_if<std::vector<std::string>>(v);
    if (!names) throw InputError("icmlkit.block_types is not a string array", path);
    if (names->size() != std::size_t(c.n_layers))
      throw InputError(fmt::format("icmlkit.block_types lists {} blocks but block_count is {}", names->size(), c.n_layers), path);
    for (std::size_t i = 0; i < names->size(); ++i) c.block_types.push_back(parse_block_type((*names)[i], int(i), path));
  } else if (n_experts > 0) {
    c.block_types.assign(std::size_t(c.n_layers), BlockType::moe);
  }
  if (!c.has_moe()) return;
  MoeConfig& e = c.moe;
  e.n_experts = static_cast<int>(n_experts);
  e.top_k = static_cast<int>(meta_int(f, A + ".expert_used_count", path, true, 0));
  e.d_expert = static_cast<int>(meta_int(f, A + ".expert_feed_forward_length", path, false, c.d_ff));
  e.d_shared = static_cast<int>(meta_int(f, A + ".expert_shared_feed_forward_length", path, false, 0));
  e.norm_topk = meta_bool(f, A + ".expert_weights_norm", path, true);
  e.routed_scaling = meta_double(f, "icmlkit.expert_weights_scale", path, meta_double(f, A + ".expert_weights_scale", path, 1.0));
  const std::int64_t gating = meta_int(f, A + ".expert_gating_func", path, false, 1);
  if (gating != 1 && gating != 2) throw InputError(fmt::format("expert_gating_func {} is not softmax (1) or sigmoid (2)", gating), path);
  e.router = gating == 1 ? RouterKind::softmax : RouterKind::sigmoid;
  const std::string act = meta_string(f, "icmlkit.expert_act", path, false);
  e.act = act.empty() ? ExpertAct::swiglu : parse_expert_act(act, path + ":icmlkit.expert_act");
  e.d_latent = static_cast<int>(meta_int(f, "icmlkit.latent_length", path, false, 0));
  c.d_ff = static_cast<int>(meta_int(f, "icmlkit.dense_feed_forward_length", path, false, c.d_ff));
}

}  // namespace

Model load_model(const std::string& path) {
  const io::MappedFile file(path);
  return load_model(file.data(), file.size(), path);
}

Model load_model(const std::uint8_t* bytes, std::size_t size, const std::string& path) {
  const File f = parse(bytes, size, path);
  const std::string arch = meta_string(f, "general.architecture", path, true);
  if (arch != "llama" && arch != kMoeArch)
    throw InputError("architecture '" + arch + "' is not supported (llama and " + kMoeArch + " are)", path);
  const std::string& A = arch;  // the metadata keys' prefix
  const std::string rs = meta_string(f, A + ".rope.scaling.type", path, false);
  if (!rs.empty() && rs != "none") throw InputError("RoPE scaling '" + rs + "' is not supported", path);
  const TensorInfo* embd = f.find("token_embd.weight");
  if (!embd) throw InputError("missing tensor", path + ":token_embd.weight");
  if (embd->ne.size() != 2) throw InputError("token_embd.weight is not 2-D", path);
  Model m;
  ModelConfig& c = m.config;
  c.vocab_size = static_cast<int>(std::min<std::uint64_t>(embd->ne[1], 1u << 30));
  c.d_model = static_cast<int>(meta_int(f, A + ".embedding_length", path, true, 0));
  c.n_layers = static_cast<int>(meta_int(f, A + ".block_count", path, true, 0));
  c.n_heads = static_cast<int>(meta_int(f, A + ".attention.head_count", path, true, 0));
  c.n_kv_heads = static_cast<int>(meta_int(f, A + ".attention.head_count_kv", path, false, c.n_heads));
  c.d_ff = static_cast<int>(meta_int(f, A + ".feed_forward_length", path, true, 0));
  c.n_ctx = static_cast<int>(meta_int(f, A + ".context_length", path, true, 0));
  c.rope_theta = meta_double(f, A + ".rope.freq_base", path, 10000.0);
  c.rms_eps = meta_double(f, A + ".attention.layer_norm_rms_epsilon", path, 1e-5);
  if (c.n_layers > 4096 || c.n_layers < 0) throw InputError("block_count out of range", path);
  read_moe_config(f, A, path, c);
  c.rope_style = RopeStyle::interleaved;
  c.tied = f.find("output.weight") == nullptr;
  c.bos_id = static_cast<int>(meta_int(f, "tokenizer.ggml.bos_token_id", path, false, -1));
  c.eos_id = static_cast<int>(meta_int(f, "tokenizer.ggml.eos_token_id", path, false, -1));
  c.add_bos = meta_bool(f, "tokenizer.ggml.add_bos_token", path, c.bos_id >= 0) && c.bos_id >= 0;
  c.validate(path);
  const std::int64_t rope_dims = meta_int(f, A + ".rope.dimension_count", path, false, c.head_dim());
  if (rope_dims != c.head_dim()) throw InputError("partial rotary embedding (rope.dimension_count != head_dim) is not supported", path);

  // Every weight takes at least 18/32 of a byte of the file (Q4_0, the smallest type read): a
  // config that implies more weights than that is refused before anything is allocated.
  if (c.n_params_approx() * 18.0 / 32.0 > double(size))
    throw InputError(fmt::format("the config implies {:.3g} weights but the file has {} bytes", c.n_params_approx(), size), path);
  m = allocate_model(c, path);
  // Matrices read from Q8_0 / Q4_0 also keep the file's blocks (lm::hold_quant holds them alone).
  std::map<const float*, Matrix*> by_data;
  for (Matrix* w : m.all_matrices()) by_data[w->data.data()] = w;
  for (auto& t : tensor_slots(m)) {
    load_tensor(bytes, f, t.gguf, t.rows, t.cols, t.experts, t.data, path);
    const TensorInfo* ti = f.find(t.gguf);
    const auto it = by_data.find(t.data);
    if ((ti->type == TensorType::q8_0 || ti->type == TensorType::q4_0) && t.is_matrix() && it != by_data.end()) {
      it->second->quant.assign(bytes + ti->offset, bytes + ti->offset + ti->nbytes);
      it->second->quant_type = ti->type == TensorType::q8_0 ? WeightType::q8_0 : WeightType::q4_0;
    }
  }
  const TensorType qt = f.find("blk.0.attn_q.weight")->type;
  m.stored = qt == TensorType::f16 ? io::h5::FloatStorage::f16 : qt == TensorType::bf16 ? io::h5::FloatStorage::bf16 : io::h5::FloatStorage::f32;

  // Tokenizer.
  if (const Value* raw = find_meta(f, "icmlkit.tokenizer.sentencepiece_model")) {
    const auto* bytes = std::get_if<std::vector<std::int64_t>>(raw);
    if (!bytes) throw InputError("icmlkit.tokenizer.sentencepiece_model is not a byte array", path);
    m.tokenizer_model.reserve(bytes->size());
    for (auto b : *bytes) {
      if (b < 0 || b > 255) throw InputError("icmlkit.tokenizer.sentencepiece_model is not a byte array", path);
      m.tokenizer_model.push_back(static_cast<char>(b));
    }
  } else if (find_meta(f, "tokenizer.ggml.model")) {
    const std::string type = meta_string(f, "tokenizer.ggml.model", path, true);
    if (type != "llama")
      throw InputError("tokenizer type '" + type + "' is not supported (only 'llama' SentencePiece vocabularies are)", path);
    const auto* toks = std::get_if<std::vector<std::string>>(find_meta(f, "tokenizer.ggml.tokens"));
    const Value* sv = find_meta(f, "tokenizer.ggml.scores");
    const Value* tv = find_meta(f, "tokenizer.ggml.token_type");
    if (!toks) throw InputError("tokenizer.ggml.tokens missing or not a string array", path);
    const auto* scores = sv ? std::get_if<std::vector<double>>(sv) : nullptr;
    const auto* types = tv ? std::get_if<std::vector<std::int64_t>>(tv) : nullptr;
    if ((sv && (!scores || scores->size() != toks->size())) || (tv && (!types || types->size() != toks->size())))
      throw InputError("tokenizer scores / token types do not match the token list", path);
    std::vector<Piece> pieces(toks->size());
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      pieces[i].text = (*toks)[i];
      pieces[i].score = scores ? static_cast<float>((*scores)[i]) : 0.0f;
      pieces[i].type = types ? static_cast<int>((*types)[i]) : Piece::normal;
    }
    const bool prefix = meta_bool(f, "tokenizer.ggml.add_space_prefix", path, true);
    m.tokenizer_model = build_spm_model(pieces, prefix, c.bos_id, c.eos_id, path + ":tokenizer.ggml");
  }
  if (!m.tokenizer_model.empty()) {
    const Tokenizer tok(m.tokenizer_model, path);
    if (tok.vocab_size() != c.vocab_size)
      throw InputError(fmt::format("tokenizer has {} pieces but vocab_size is {}", tok.vocab_size(), c.vocab_size), path);
  }
  return m;
}

// ---- writer ----------------------------------------------------------------------------------

namespace {

class Writer {
 public:
  std::string buf;
  template <class T>
  void put(T v) { char b[sizeof(T)]; std::memcpy(b, &v, sizeof(T)); buf.append(b, sizeof(T)); }
  void str(const std::string& s) { put<std::uint64_t>(s.size()); buf += s; }
  void kv_u32(const std::string& k, std::uint32_t v) { str(k); put<std::uint32_t>(t_u32); put(v); }
  void kv_f32(const std::string& k, float v) { str(k); put<std::uint32_t>(t_f32); put(v); }
  void kv_f64(const std::string& k, double v) { str(k); put<std::uint32_t>(t_f64); put(v); }
  void kv_bool(const std::string& k, bool v) { str(k); put<std::uint32_t>(t_bool); put<std::uint8_t>(v ? 1 : 0); }
  void kv_str(const std::string& k, const std::string& v) { str(k); put<std::uint32_t>(t_string); str(v); }
  template <class T>
  void kv_array(const std::string& k, std::uint32_t et, const std::vector<T>& v) {
    str(k); put<std::uint32_t>(t_array); put(et); put<std::uint64_t>(v.size());
    for (const auto& x : v) {
      if constexpr (std::is_same_v<T, std::string>) str(x);
      else put(x);
    }
  }
};

}  // namespace

void quantize_row(TensorType quant, const float* x, int K, std::uint8_t* out) {
  for (int b = 0; b < K / 32; ++b) {
    const float* v = x + 32 * b;
    if (quant == TensorType::q8_0) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      std::uint8_t* blk = out + std::size_t(b) * 34;
      const std::uint16_t h = num::f32_to_f16(d);
      std::memcpy(blk, &h, 2);
      for (int j = 0; j < 32; ++j) blk[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(std::lround(v[j] * id)));
    } else {
      float amax = 0, mx = 0;
      for (int j = 0; j < 32; ++j)
        if (std::fabs(v[j]) > amax) {
          amax = std::fabs(v[j]);
          mx = v[j];
        }
      const float d = mx / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      std::uint8_t* blk = out + std::size_t(b) * 18;
      const std::uint16_t h = num::f32_to_f16(d);
      std::memcpy(blk, &h, 2);
      for (int j = 0; j < 16; ++j) {
        const int q0 = std::min(15, static_cast<int>(v[j] * id + 8.5f));
        const int q1 = std::min(15, static_cast<int>(v[j + 16] * id + 8.5f));
        blk[2 + j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
      }
    }
  }
}

void save_model(const std::string& path, const Model& m, io::h5::FloatStorage storage, const io::Provenance& prov) {
  save_model_quantised(path, m, storage, TensorType::f32, prov);
}

void save_model_quantised(const std::string& path, const Model& m, io::h5::FloatStorage storage, TensorType quant,
                          const io::Provenance& prov) {
  if (quant != TensorType::f32 && quant != TensorType::q8_0 && quant != TensorType::q4_0)
    throw UsageError("GGUF matrices are quantised to q8_0 or q4_0 only", "--dtype");
  const ModelConfig& c = m.config;
  c.validate("model config");
  check_narrowing(m, storage);
  struct Out { std::string name; const float* data; std::vector<std::uint64_t> ne; TensorType type; };
  std::vector<Out> outs;
  std::vector<Matrix> permuted;  // q/k in the interleaved layout for rope_style = half
  permuted.reserve(2 * c.n_layers);
  const bool half_mat = storage != io::h5::FloatStorage::f32;  // F16 or BF16 matrices
  const bool bf16 = storage == io::h5::FloatStorage::bf16;
  const TensorType mat_type = !half_mat ? TensorType::f32 : bf16 ? TensorType::bf16 : TensorType::f16;
  for (const auto& t : tensor_slots(m)) {
    if (!t.is_matrix()) {
      outs.push_back({t.gguf, t.data, {std::uint64_t(t.rows)}, TensorType::f32});
      continue;
    }
    const TensorType ty = quant != TensorType::f32 && t.cols % 32 == 0 ? quant : mat_type;
    const float* src = t.data;
    if (t.rope_heads > 0 && c.rope_style == RopeStyle::half) {
      permuted.push_back(permute_rope_rows(t.data, t.rows, t.cols, t.rope_heads, false));
      src = permuted.back().data.data();
    }
    if (t.experts > 0)  // the stacked experts: one 3-D tensor, ne [in, out, expert] (llama.cpp's *_exps)
      outs.push_back({t.gguf, src, {std::uint64_t(t.cols), std::uint64_t(t.rows / t.experts), std::uint64_t(t.experts)}, ty});
    else
      outs.push_back({t.gguf, src, {std::uint64_t(t.cols), std::uint64_t(t.rows)}, ty});
  }

  Writer w;
  std::unique_ptr<Tokenizer> tok;
  if (!m.tokenizer_model.empty()) tok = std::make_unique<Tokenizer>(m.tokenizer_model, "model tokenizer");
  const std::uint32_t alignment = 32;
  int n_kv = 0;
  Writer meta;
  auto count = [&] { ++n_kv; };
  // A Mixtral is llama.cpp's llama architecture with experts; any other moe model is written
  // under the architecture "icmlkit-moe" (same keys and tensor names, so that llama.cpp refuses
  // it instead of computing a different router).
  const std::string A = c.has_moe() && !c.is_mixtral() ? kMoeArch : "llama";
  meta.kv_str("general.architecture", A); count();
  meta.kv_str("general.name", "icmlkit"); count();
  meta.kv_u32("general.alignment", alignment); count();
  // llama_ftype: ALL_F32, MOSTLY_F16, MOSTLY_BF16, MOSTLY_Q8_0, MOSTLY_Q4_0
  meta.kv_u32("general.file_type", quant == TensorType::q8_0 ? 7 : quant == TensorType::q4_0 ? 2 : bf16 ? 32 : half_mat ? 1 : 0); count();
  meta.kv_str("icmlkit.provenance.command", prov.command); count();
  meta.kv_u32(A + ".context_length", c.n_ctx); count();
  meta.kv_u32(A + ".embedding_length", c.d_model); count();
  meta.kv_u32(A + ".block_count", c.n_layers); count();
  // llama.cpp sizes a llama model's experts by feed_forward_length
  meta.kv_u32(A + ".feed_forward_length", c.has_llama_mlp() ? c.d_ff : c.moe.d_expert); count();
  meta.kv_u32(A + ".attention.head_count", c.n_heads); count();
  meta.kv_u32(A + ".attention.head_count_kv", c.n_kv_heads); count();
  meta.kv_f32(A + ".rope.freq_base", static_cast<float>(c.rope_theta)); count();
  meta.kv_f32(A + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_eps)); count();
  meta.kv_u32(A + ".rope.dimension_count", c.head_dim()); count();
  meta.kv_u32(A + ".vocab_size", c.vocab_size); count();
  if (c.has_moe()) {  // llama.cpp's expert keys, then ours for what it has no key for
    const MoeConfig& e = c.moe;
    meta.kv_u32(A + ".expert_count", e.n_experts); count();
    meta.kv_u32(A + ".expert_used_count", e.top_k); count();
    meta.kv_u32(A + ".expert_feed_forward_length", e.d_expert); count();
    meta.kv_u32(A + ".expert_shared_feed_forward_length", e.d_shared); count();
    meta.kv_f32(A + ".expert_weights_scale", static_cast<float>(e.routed_scaling)); count();
    meta.kv_bool(A + ".expert_weights_norm", e.norm_topk); count();
    meta.kv_u32(A + ".expert_gating_func", e.router == RouterKind::softmax ? 1 : 2); count();  // llama.cpp: 1 softmax, 2 sigmoid
    meta.kv_str("icmlkit.expert_act", expert_act_name(e.act)); count();
    meta.kv_u32("icmlkit.latent_length", e.d_latent); count();
    meta.kv_u32("icmlkit.dense_feed_forward_length", c.d_ff); count();
    meta.kv_f64("icmlkit.expert_weights_scale", e.routed_scaling); count();  // unrounded (the f32 key rounds it)
    std::vector<std::string> types;
    for (BlockType t : c.all_block_types()) types.push_back(block_type_name(t));
    meta.kv_array("icmlkit.block_types", t_string, types); count();
  }
  if (tok) {
    const auto pieces = tok->pieces();
    std::vector<std::string> texts;
    std::vector<float> scores;
    std::vector<std::int32_t> types;
    for (const auto& p : pieces) { texts.push_back(p.text); scores.push_back(p.score); types.push_back(p.type); }
    meta.kv_str("tokenizer.ggml.model", "llama"); count();
    meta.kv_array("tokenizer.ggml.tokens", t_string, texts); count();
    meta.kv_array("tokenizer.ggml.scores", t_f32, scores); count();
    meta.kv_array("tokenizer.ggml.token_type", t_i32, types); count();
    if (tok->unk_id() >= 0) { meta.kv_u32("tokenizer.ggml.unknown_token_id", tok->unk_id()); count(); }
    if (c.bos_id >= 0) { meta.kv_u32("tokenizer.ggml.bos_token_id", c.bos_id); count(); }
    if (c.eos_id >= 0) { meta.kv_u32("tokenizer.ggml.eos_token_id", c.eos_id); count(); }
    meta.kv_bool("tokenizer.ggml.add_bos_token", c.add_bos); count();
    meta.kv_bool("tokenizer.ggml.add_eos_token", false); count();
    const std::vector<std::uint8_t> raw(m.tokenizer_model.begin(), m.tokenizer_model.end());
    meta.kv_array("icmlkit.tokenizer.sentencepiece_model", t_u8, raw); count();
  } else {
    if (c.bos_id >= 0) { meta.kv_u32("tokenizer.ggml.bos_token_id", c.bos_id); count(); }
    if (c.eos_id >= 0) { meta.kv_u32("tokenizer.ggml.eos_token_id", c.eos_id); count(); }
  }

  w.put<std::uint32_t>(kMagic);
  w.put<std::uint32_t>(3);
  w.put<std::uint64_t>(outs.size());
  w.put<std::uint64_t>(n_kv);
  w.buf += meta.buf;
  auto nbytes = [](const Out& o) {
    std::uint64_t n = 1;
    for (auto d : o.ne) n *= d;
    switch (o.type) {
      case TensorType::q8_0: return n / 32 * 34;
      case TensorType::q4_0: return n / 32 * 18;
      case TensorType::f16:
      case TensorType::bf16: return n * 2;
      default: return n * 4;
    }
  };
  std::uint64_t off = 0;
  for (const auto& o : outs) {
    w.str(o.name);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(o.ne.size()));
    for (auto d : o.ne) w.put<std::uint64_t>(d);
    w.put<std::uint32_t>(static_cast<std::uint32_t>(o.type));
    w.put<std::uint64_t>(off);
    off += (nbytes(o) + alignment - 1) / alignment * alignment;
  }
  io::AtomicFile af(path);
  {
    std::ofstream out(af.temp_path(), std::ios::binary);
    if (!out) throw RuntimeError("cannot write file", path);
    w.buf.resize((w.buf.size() + alignment - 1) / alignment * alignment, '\0');
    out.write(w.buf.data(), static_cast<std::streamsize>(w.buf.size()));
    std::vector<char> chunk;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      const auto& o = outs[i];
      std::uint64_t n = 1;
      for (auto d : o.ne) n *= d;
      chunk.assign((nbytes(o) + alignment - 1) / alignment * alignment, '\0');
      if (o.type == TensorType::f16 || o.type == TensorType::bf16) {
        for (std::uint64_t j = 0; j < n; ++j) {
          const std::uint16_t h = bf16 ? num::f32_to_bf16(o.data[j]) : num::f32_to_f16(o.data[j]);
          std::memcpy(chunk.data() + 2 * j, &h, 2);
        }
      } else if (o.type == TensorType::q8_0 || o.type == TensorType::q4_0) {
        const int K = static_cast<int>(o.ne[0]);
        const std::uint64_t rows = n / o.ne[0];
        const std::uint64_t rb = nbytes(Out{"", nullptr, {o.ne[0]}, o.type});
        for (std::uint64_t r = 0; r < rows; ++r)
          quantize_row(o.type, o.data + r * o.ne[0], K, reinterpret_cast<std::uint8_t*>(chunk.data()) + r * rb);
      } else {
        std::memcpy(chunk.data(), o.data, n * 4);
      }
      out.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    }
    out.close();
    if (!out) throw RuntimeError("cannot write file (disk full?)", path);
  }
  af.commit();
}

}  // namespace icmlkit::lm::gguf
