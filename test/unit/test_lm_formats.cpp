// lm/: GGUF and safetensors readers/writers — round trips, Q8_0, the rebuilt SentencePiece
// vocabulary, and malformed files (each must be refused with InputError, never crash).
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>
#include <vector>

#include "lm/forward.hpp"
#include "lm/gguf.hpp"
#include "lm/hf_config.hpp"
#include "lm/model_io.hpp"
#include "lm/safetensors.hpp"
#include "lm/tokenizer.hpp"
#include "num/half.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("icmlkit_test_formats_" + name);
  fs::remove_all(p);
  return p;
}

std::string shared_tokenizer() {
  static const std::string bytes = [] {
    std::vector<std::string> text;
    for (int i = 0; i < 100; ++i)
      text.push_back("And God called the light Day, and the darkness he called Night " + std::to_string(i) + ".\n");
    TokenizerTrainOptions opt;
    opt.vocab_size = 320;
    return train_tokenizer(text, opt);
  }();
  return bytes;
}

Model test_model(RopeStyle style, bool tied, bool with_tokenizer = true) {
  ModelConfig c;
  c.vocab_size = 320;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 40;
  c.n_ctx = 32;
  c.rope_style = style;
  c.tied = tied;
  Model m = random_model(c, 5, 0.3);
  Rng rng(9);
  for (auto& l : m.layers)
    for (auto& w : l.attn_norm) w = static_cast<float>(0.5 + rng.uniform());
  if (with_tokenizer) m.tokenizer_model = shared_tokenizer();
  return m;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

Matrix logits_of(const Model& m) {
  KvCache cache(m.config);
  return forward(m, cache, Batch::causal({1, 7, 99, 250, 3, 42}, 0)).logits;
}

double max_abs_diff(const Matrix& a, const Matrix& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.data.size(); ++i) d = std::max(d, double(std::fabs(a.data[i] - b.data[i])));
  return d;
}

io::Provenance prov() {
  io::Provenance p;
  p.tool = "test";
  return p;
}

// ---- an independent little GGUF writer for hand-made (and broken) files ----------------------
struct G {
  std::string b;
  template <class T>
  G& put(T v) { char c[sizeof(T)]; std::memcpy(c, &v, sizeof(T)); b.append(c, sizeof(T)); return *this; }
  G& str(const std::string& s) { put<std::uint64_t>(s.size()); b += s; return *this; }
  G& header(std::uint64_t nt, std::uint64_t nkv, std::uint32_t version = 3) {
    b.clear();
    b += "GGUF";
    return put<std::uint32_t>(version).put<std::uint64_t>(nt).put<std::uint64_t>(nkv);
  }
  G& kv_str(const std::string& k, const std::string& v) { return str(k).put<std::uint32_t>(8).str(v); }
  G& kv_u32(const std::string& k, std::uint32_t v) { return str(k).put<std::uint32_t>(4).put(v); }
  G& tensor(const std::string& name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t off) {
    str(name).put<std::uint32_t>(static_cast<std::uint32_t>(ne.size()));
    for (auto d : ne) put(d);
    return put(type).put(off);
  }
  G& align(std::size_t a = 32) { b.resize((b.size() + a - 1) / a * a, '\0'); return *this; }
};

std::string parse_error(const std::string& bytes) {
  try {
    gguf::parse(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), "f.gguf");
  } catch (const InputError& e) {
    return e.message();
  }
  return "";
}

std::string st_error(const std::string& bytes) {
  try {
    safetensors::parse(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), "f.safetensors");
  } catch (const InputError& e) {
    return e.message();
  }
  return "";
}

std::string st_file(const std::string& header_json, std::size_t data_bytes) {
  std::string out(8, '\0');
  const std::uint64_t n = header_json.size();
  std::memcpy(out.data(), &n, 8);
  return out + header_json + std::string(data_bytes, '\0');
}

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("formats: HDF5 -> GGUF -> HDF5 keeps tensors bitwise and logits") {
  for (RopeStyle style : {RopeStyle::interleaved, RopeStyle::half}) {
    CAPTURE(rope_style_name(style));
    const Model m = test_model(style, false);
    const fs::path dir = scratch(std::string("gguf_rt_") + rope_style_name(style));
    fs::create_directories(dir);
    save_checkpoint((dir / "a.h5").string(), m, io::h5::FloatStorage::f32, prov());
    const Model a = load_any((dir / "a.h5").string());
    gguf::save_model((dir / "a.gguf").string(), a, io::h5::FloatStorage::f32, prov());
    CHECK(detect_format((dir / "a.gguf").string()) == ModelFormat::gguf);
    const Model g = load_any((dir / "a.gguf").string());
    save_checkpoint((dir / "b.h5").string(), g, io::h5::FloatStorage::f32, prov());
    const Model b = load_checkpoint((dir / "b.h5").string());
    CHECK(b.config.rope_style == RopeStyle::interleaved);  // GGUF's layout
    CHECK(b.tokenizer_model == m.tokenizer_model);
    CHECK(same(b.token_embd.data, m.token_embd.data));
    CHECK(same(b.output.data, m.output.data));
    CHECK(same(b.layers[1].w_down.data, m.layers[1].w_down.data));
    CHECK(same(b.layers[0].attn_norm, m.layers[0].attn_norm));
    if (style == RopeStyle::interleaved) {
      CHECK(same(b.layers[0].wq.data, m.layers[0].wq.data));
      CHECK(same(b.layers[1].wk.data, m.layers[1].wk.data));
      const Matrix lm = logits_of(m), lb = logits_of(b);
      CHECK(std::memcmp(lm.data.data(), lb.data.data(), lm.data.size() * 4) == 0);
    } else {
      // q/k rows permuted to interleaved: exactly the documented permutation, and the function
      // is unchanged up to float summation order (q.k sums the same products in another order).
      CHECK(same(b.layers[0].wq.data, gguf::permute_rope_rows(m.layers[0].wq, 4, false).data));
      CHECK(same(b.layers[1].wk.data, gguf::permute_rope_rows(m.layers[1].wk, 2, false).data));
      CHECK(same(gguf::permute_rope_rows(b.layers[1].wk, 2, true).data, m.layers[1].wk.data));
      CHECK(max_abs_diff(logits_of(m), logits_of(b)) < 1e-5);
    }
  }
}

TEST_CASE("formats: f16 GGUF and bf16/f16 safetensors load as the rounded weights") {
  const Model m = test_model(RopeStyle::interleaved, true);
  const fs::path dir = scratch("half");
  fs::create_directories(dir);
  gguf::save_model((dir / "h.gguf").string(), m, io::h5::FloatStorage::f16, prov());
  Model want = m;
  round_weights(want, io::h5::FloatStorage::f16);
  const Model g = gguf::load_model((dir / "h.gguf").string());
  CHECK(g.config.tied);
  CHECK(g.stored == io::h5::FloatStorage::f16);
  CHECK(same(g.layers[0].w_up.data, want.layers[0].w_up.data));
  CHECK(same(g.token_embd.data, want.token_embd.data));
  // BF16 GGUF (ggml type 30): loads as the bf16-rounded weights, and is stored as bf16.
  gguf::save_model((dir / "b.gguf").string(), m, io::h5::FloatStorage::bf16, prov());
  Model want_b = m;
  round_weights(want_b, io::h5::FloatStorage::bf16);
  const Model gb = gguf::load_model((dir / "b.gguf").string());
  CHECK(gb.stored == io::h5::FloatStorage::bf16);
  CHECK(same(gb.layers[1].w_down.data, want_b.layers[1].w_down.data));
  CHECK(same(gb.token_embd.data, want_b.token_embd.data));
  CHECK(fs::file_size(dir / "b.gguf") == fs::file_size(dir / "h.gguf"));
  safetensors::save_model((dir / "hf").string(), m, io::h5::FloatStorage::bf16, prov());
  Model wb = m;
  round_weights(wb, io::h5::FloatStorage::bf16);
  const Model s = safetensors::load_model((dir / "hf").string());
  CHECK(s.stored == io::h5::FloatStorage::bf16);
  CHECK(s.config.rope_style == RopeStyle::half);
  // interleaved -> HF permutes q back to rotate-half.
  CHECK(same(s.layers[0].wq.data, gguf::permute_rope_rows(wb.layers[0].wq, 4, true).data));
  CHECK(same(s.layers[1].w_gate.data, wb.layers[1].w_gate.data));
}

// Issue 26: narrowing to f16 turned weights beyond 65504 into inf and tiny ones into 0 without a
// word.  Every writer now refuses the overflow before writing (naming the tensor) and counts the
// underflow; bf16 holds both.
TEST_CASE("formats: narrowing refuses weights beyond the storage's range and counts those lost to 0") {
  Model m = test_model(RopeStyle::half, false);
  CHECK(narrowing_report(m, io::h5::FloatStorage::f16).overflow_tensor.empty());
  CHECK(narrowing_report(m, io::h5::FloatStorage::f16).underflow_count == 0);
  m.layers[1].w_up.data[3] = 1.0e6f;
  m.layers[0].wk.data[0] = 1.0e-9f;
  m.layers[0].wk.data[1] = -2.0e-8f;
  m.layers[0].wk.data[2] = 6.0e-8f;  // just above f16's smallest subnormal 2^-24: kept
  m.layers[0].wk.data[4] = 65519.0f;  // rounds to 65504: kept
  const NarrowingReport r = narrowing_report(m, io::h5::FloatStorage::f16);
  CHECK(r.overflow_tensor == "blk.1.ffn_up.weight");
  CHECK(r.overflow_value == 1.0e6f);
  CHECK(r.underflow_tensor == "blk.0.attn_k.weight");
  CHECK(r.underflow_count == 2);
  const NarrowingReport rb = narrowing_report(m, io::h5::FloatStorage::bf16);
  CHECK(rb.overflow_tensor.empty());
  CHECK(rb.underflow_count == 0);
  CHECK(narrowing_report(m, io::h5::FloatStorage::f32).underflow_count == 0);
  const fs::path dir = scratch("narrow");
  fs::create_directories(dir);
  CHECK_THROWS_WITH_AS(gguf::save_model((dir / "m.gguf").string(), m, io::h5::FloatStorage::f16, prov()),
                       doctest::Contains("weight 1e+06 in blk.1.ffn_up.weight is beyond f16's range"), UsageError);
  CHECK_THROWS_AS(save_checkpoint((dir / "m.h5").string(), m, io::h5::FloatStorage::f16, prov()), UsageError);
  CHECK_THROWS_AS(safetensors::save_model((dir / "hf").string(), m, io::h5::FloatStorage::f16, prov()), UsageError);
  CHECK_FALSE(fs::exists(dir / "m.gguf"));
  CHECK_FALSE(fs::exists(dir / "m.h5"));
  CHECK_FALSE(fs::exists(dir / "hf"));
  m.layers[1].w_up.data[3] = 1.0f;
  CHECK_NOTHROW(gguf::save_model((dir / "m.gguf").string(), m, io::h5::FloatStorage::f16, prov()));  // warns only
  CHECK(gguf::load_model((dir / "m.gguf").string()).layers[0].wk.data[0] == 0.0f);
}

// Output paths: extensions in any case; other model formats' file names are refused.
TEST_CASE("formats: output_format reads extensions in any case and refuses single-file HF names") {
  CHECK(output_format("a.H5") == ModelFormat::native_h5);
  CHECK(output_format("a.HDF5") == ModelFormat::native_h5);
  CHECK(output_format("x/OUT.GGUF") == ModelFormat::gguf);
  CHECK(output_format("hf_dir/") == ModelFormat::hf_safetensors);
  CHECK(output_format("hf.v2") == ModelFormat::hf_safetensors);
  CHECK_THROWS_WITH_AS(output_format("model.safetensors"), doctest::Contains("model/"), UsageError);
  CHECK_THROWS_AS(output_format("pytorch_model.BIN"), UsageError);
}

TEST_CASE("formats: safetensors -> HDF5 keeps tensors and logits bitwise, single and sharded") {
  const Model m = test_model(RopeStyle::half, false);
  const fs::path dir = scratch("hf_rt");
  safetensors::save_model(dir.string(), m, io::h5::FloatStorage::f32, prov());
  CHECK(detect_format(dir.string()) == ModelFormat::hf_safetensors);
  const Model s = load_any(dir.string());
  save_checkpoint((dir / "m.h5").string(), s, io::h5::FloatStorage::f32, prov());
  const Model b = load_checkpoint((dir / "m.h5").string());
  CHECK(same(b.layers[0].wq.data, m.layers[0].wq.data));
  CHECK(same(b.layers[1].wo.data, m.layers[1].wo.data));
  CHECK(same(b.output.data, m.output.data));
  CHECK(b.tokenizer_model == m.tokenizer_model);
  const Matrix lm = logits_of(m), lb = logits_of(b);
  CHECK(std::memcmp(lm.data.data(), lb.data.data(), lm.data.size() * 4) == 0);
  // The single file path also works (config.json beside it).
  CHECK(same(load_any((dir / "model.safetensors").string()).layers[1].w_up.data, m.layers[1].w_up.data));

  // Shard by hand: split the tensors of model.safetensors into two files plus an index.
  const std::string whole = [&] { std::ifstream in(dir / "model.safetensors", std::ios::binary); return std::string(std::istreambuf_iterator<char>(in), {}); }();
  const auto h = safetensors::parse(reinterpret_cast<const std::uint8_t*>(whole.data()), whole.size(), "whole");
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  nlohmann::json heads[2] = {nlohmann::json::object(), nlohmann::json::object()};
  std::string datas[2];
  int i = 0;
  for (const auto& [name, e] : h.tensors) {
    const int s2 = (i++) % 2;
    const std::uint64_t off = datas[s2].size();
    datas[s2] += whole.substr(e.begin, e.end - e.begin);
    heads[s2][name] = {{"dtype", e.dtype}, {"shape", e.shape}, {"data_offsets", {off, off + (e.end - e.begin)}}};
    index["weight_map"][name] = s2 == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  const fs::path sd = scratch("hf_sharded");
  fs::create_directories(sd);
  fs::copy_file(dir / "config.json", sd / "config.json");
  for (int s2 = 0; s2 < 2; ++s2) {
    const std::string hj = heads[s2].dump();
    std::string file(8, '\0');
    const std::uint64_t n = hj.size();
    std::memcpy(file.data(), &n, 8);
    write_file(sd / (s2 == 0 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors"), file + hj + datas[s2]);
  }
  write_file(sd / "model.safetensors.index.json", index.dump());
  const Model sh = load_any(sd.string());
  CHECK(same(sh.layers[1].w_down.data, m.layers[1].w_down.data));
  CHECK(same(sh.token_embd.data, m.token_embd.data));
  index["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  const bool norm_in_first = heads[0].contains("model.norm.weight");
  write_file(sd / "model.safetensors.index.json", index.dump());
  if (!norm_in_first) CHECK_THROWS_WITH_AS(load_any(sd.string()), doctest::Contains("the shard lacks it"), InputError);
  index["weight_map"]["model.norm.weight"] = "../evil.safetensors";
  write_file(sd / "model.safetensors.index.json", index.dump());
  CHECK_THROWS_WITH_AS(load_any(sd.string()), doctest::Contains("outside the directory"), InputError);
}

TEST_CASE("formats: the GGUF llama vocabulary rebuilds a tokenizer that encodes identically") {
  const Tokenizer orig(shared_tokenizer(), "orig");
  const auto pieces = orig.pieces();
  CHECK(pieces[0].type == Piece::unknown);
  CHECK(pieces[1].type == Piece::control);
  const Tokenizer rebuilt(build_spm_model(pieces, true, 1, 2, "test"), "rebuilt");
  for (const std::string s : {"And God called the light Day,\nand the darkness he called Night.", "  spaced\ttab ümlaut 42",
                              "unseen: \xe2\x82\xac\xf0\x9f\x98\x80"}) {
    CHECK(rebuilt.encode(s, "x") == orig.encode(s, "x"));
    CHECK(rebuilt.decode(rebuilt.encode(s, "x")) == s);
  }
  auto dup = pieces;
  dup[10].text = dup[11].text;
  CHECK_THROWS_WITH_AS(build_spm_model(dup, true, 1, 2, "t"), doctest::Contains("duplicate vocabulary piece"), InputError);
  auto nounk = pieces;
  nounk[0].type = Piece::normal;
  CHECK_THROWS_WITH_AS(build_spm_model(nounk, true, 1, 2, "t"), doctest::Contains("no unknown piece"), InputError);
}

TEST_CASE("formats: Q8_0 dequantisation against a reference, and a hand-made GGUF vocabulary") {
  // One Q8_0 tensor of 64 values (2 blocks) and one F16 tensor; reference x = d * q written here.
  G g;
  g.header(2, 1).kv_u32("general.alignment", 32);
  g.tensor("q", {64}, 8, 0).tensor("h", {3}, 1, 96).align();
  const std::size_t data_start = g.b.size();
  const float scales[2] = {0.5f, -0.03125f};
  std::vector<float> want;
  for (int b = 0; b < 2; ++b) {
    g.put<std::uint16_t>(num::f32_to_f16(scales[b]));
    for (int j = 0; j < 32; ++j) {
      const std::int8_t q = static_cast<std::int8_t>(j * 7 - 100 + b);
      g.put(q);
      want.push_back(scales[b] * q);
    }
  }
  g.b.resize(data_start + 96, '\0');
  for (float v : {1.5f, -2.0f, 0.0009765625f}) g.put<std::uint16_t>(num::f32_to_f16(v));
  const auto f = gguf::parse(reinterpret_cast<const std::uint8_t*>(g.b.data()), g.b.size(), "q.gguf");
  const auto got = gguf::dequantize(reinterpret_cast<const std::uint8_t*>(g.b.data()), *f.find("q"));
  CHECK(got == want);
  CHECK(gguf::dequantize(reinterpret_cast<const std::uint8_t*>(g.b.data()), *f.find("h")) == std::vector<float>{1.5f, -2.0f, 0.0009765625f});
}

TEST_CASE("formats: every truncation of a valid GGUF and safetensors file is refused cleanly") {
  const Model m = test_model(RopeStyle::interleaved, true);
  const fs::path dir = scratch("trunc");
  fs::create_directories(dir);
  gguf::save_model((dir / "a.gguf").string(), m, io::h5::FloatStorage::f16, prov());
  safetensors::save_model((dir / "hf").string(), m, io::h5::FloatStorage::f32, prov());
  for (const fs::path& p : {dir / "a.gguf", dir / "hf" / "model.safetensors"}) {
    std::ifstream in(p, std::ios::binary);
    const std::string full(std::istreambuf_iterator<char>(in), {});
    const bool is_gguf = p.extension() == ".gguf";
    int refused = 0, cases = 0;
    for (std::size_t n = 0; n < full.size(); n += (n < 4096 ? 1 : 997)) {
      const std::string cut = full.substr(0, n);
      ++cases;
      refused += !(is_gguf ? parse_error(cut) : st_error(cut)).empty();
    }
    CHECK(refused == cases);  // a proper prefix is never a valid file
    CHECK((is_gguf ? parse_error(full) : st_error(full)).empty());
  }
}

TEST_CASE("formats: malformed GGUF headers are refused with the field named") {
  auto one_tensor = [](std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t off, std::size_t data) {
    G g;
    g.header(1, 0).tensor("t", ne, type, off).align();
    g.b.append(data, '\0');
    return g.b;
  };
  CHECK(parse_error("GGUX....") .find("bad magic") != std::string::npos);
  { G g; g.header(0, 0, 1); CHECK(parse_error(g.b).find("unsupported GGUF version 1") != std::string::npos); }
  { G g; g.header(1ull << 60, 0); CHECK(parse_error(g.b).find("tensor count") != std::string::npos); }
  { G g; g.header(0, 1ull << 62); CHECK(parse_error(g.b).find("metadata count") != std::string::npos); }
  { G g; g.header(0, 1).put<std::uint64_t>(1ull << 62); g.b.append(16, '\0'); CHECK(parse_error(g.b).find("metadata key length") != std::string::npos); }
  { G g; g.header(0, 1).str("").put<std::uint32_t>(4).put<std::uint32_t>(1); CHECK(parse_error(g.b).find("empty metadata key") != std::string::npos); }
  { G g; g.header(0, 2).kv_u32("a", 1).kv_u32("a", 2); CHECK(parse_error(g.b).find("duplicate metadata key") != std::string::npos); }
  { G g; g.header(0, 1).str("k").put<std::uint32_t>(99); g.b.append(16, '\0'); CHECK(parse_error(g.b).find("unknown metadata type 99") != std::string::npos); }
  { G g; g.header(0, 1).str("k").put<std::uint32_t>(9).put<std::uint32_t>(9).put<std::uint64_t>(1); CHECK(parse_error(g.b).find("nested arrays") != std::string::npos); }
  { G g; g.header(0, 1).str("k").put<std::uint32_t>(9).put<std::uint32_t>(6).put<std::uint64_t>(1ull << 61); CHECK(parse_error(g.b).find("exceeds the file") != std::string::npos); }
  { G g; g.header(0, 1).kv_u32("general.alignment", 0); CHECK(parse_error(g.b).find("power of two") != std::string::npos); }
  { G g; g.header(0, 1).kv_u32("general.alignment", 48); CHECK(parse_error(g.b).find("power of two") != std::string::npos); }
  { G g; g.header(0, 1).str("b").put<std::uint32_t>(7).put<std::uint8_t>(5); CHECK(parse_error(g.b).find("boolean") != std::string::npos); }
  CHECK(parse_error(one_tensor({4, 0}, 0, 0, 64)).find("zero dimension") != std::string::npos);
  CHECK(parse_error(one_tensor({4, 2, 1, 1, 1}, 0, 0, 64)).find("5 dimensions") != std::string::npos);
  CHECK(parse_error(one_tensor({4}, 3, 0, 64)).find("unsupported type 3") != std::string::npos);
  CHECK(parse_error(one_tensor({4}, 0, 7, 64)).find("not aligned") != std::string::npos);
  CHECK(parse_error(one_tensor({40}, 8, 0, 64)).find("not divisible by 32") != std::string::npos);
  CHECK(parse_error(one_tensor({1ull << 39, 1ull << 30}, 0, 0, 64)).find("too large") != std::string::npos);
  CHECK(parse_error(one_tensor({100}, 0, 0, 64)).find("runs past the end") != std::string::npos);
  CHECK(parse_error(one_tensor({4}, 0, 1ull << 62, 64)).find("runs past the end") != std::string::npos);
  { G g; g.header(2, 0).tensor("t", {8}, 0, 0).tensor("t", {8}, 0, 32).align(); g.b.append(64, '\0'); CHECK(parse_error(g.b).find("duplicate tensor name 't'") != std::string::npos); }
  { G g; g.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).align(); g.b.append(96, '\0'); CHECK(parse_error(g.b).find("overlap") != std::string::npos); }
  { G g; g.header(1, 0).tensor("", {8}, 0, 0).align(); g.b.append(32, '\0'); CHECK(parse_error(g.b).find("empty tensor name") != std::string::npos); }
  // Whole-model checks: architecture and tokenizer type are named.
  const fs::path dir = scratch("bad_gguf");
  fs::create_directories(dir);
  { G g; g.header(1, 1).kv_str("general.architecture", "gpt2").tensor("token_embd.weight", {8, 4}, 0, 0).align(); g.b.append(128, '\0');
    write_file(dir / "a.gguf", g.b);
    CHECK_THROWS_WITH_AS(gguf::load_model((dir / "a.gguf").string()), doctest::Contains("architecture 'gpt2' is not supported"), InputError); }
  {
    const Model m = test_model(RopeStyle::interleaved, true, false);
    gguf::save_model((dir / "b.gguf").string(), m, io::h5::FloatStorage::f32, prov());
    std::ifstream in(dir / "b.gguf", std::ios::binary);
    std::string bytes(std::istreambuf_iterator<char>(in), {});
    // Append a tokenizer type key by rewriting the kv count and inserting the pair after the header.
    std::uint64_t nkv;
    std::memcpy(&nkv, bytes.data() + 16, 8);
    ++nkv;
    std::memcpy(bytes.data() + 16, &nkv, 8);
    G kv;
    kv.kv_str("tokenizer.ggml.model", "gpt2");
    bytes.insert(24, kv.b);
    // The tensor data start moves by what is inserted: pad it to a multiple of the alignment.
    G pk;
    pk.kv_str("pad", std::string((64 - (kv.b.size() + 23) % 32) % 32, 'x'));
    REQUIRE((kv.b.size() + pk.b.size()) % 32 == 0);
    bytes.insert(24, pk.b);
    std::memcpy(&nkv, bytes.data() + 16, 8);
    ++nkv;
    std::memcpy(bytes.data() + 16, &nkv, 8);
    write_file(dir / "c.gguf", bytes);
    CHECK_THROWS_WITH_AS(gguf::load_model((dir / "c.gguf").string()), doctest::Contains("tokenizer type 'gpt2' is not supported"), InputError);
  }
}

TEST_CASE("formats: malformed safetensors headers are refused with the tensor named") {
  CHECK(st_error("abc").find("shorter than 8 bytes") != std::string::npos);
  CHECK(st_error(std::string("\xff\xff\xff\xff\xff\xff\xff\x00", 8) + "{}").find("exceeds the file") != std::string::npos);
  CHECK(st_error(st_file("{not json", 0)).find("not valid JSON") != std::string::npos);
  CHECK(st_error(st_file("[1,2]", 0)).find("not a JSON object") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16)).find("duplicate tensor name 'a'") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})", 2)).find("unsupported dtype 'I8'") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", 0)).find("zero dimension") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)).find("negative") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)).find("needs 12") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8)).find("outside the 8 data bytes") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 16)).find("overlap") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"F32","shape":[2]}})", 8)).find("needs dtype, shape and data_offsets") != std::string::npos);
  CHECK(st_error(st_file(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8)).find("empty tensor name") != std::string::npos);
  CHECK(st_error(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"format":"pt"}})", 8)).empty());
  // Whole-model: shape mismatch and missing tensor name the tensor.
  const Model m = test_model(RopeStyle::half, false, false);
  const fs::path dir = scratch("bad_hf");
  safetensors::save_model(dir.string(), m, io::h5::FloatStorage::f32, prov());
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir / "config.json"));
  cfg["intermediate_size"] = 41;
  write_file(dir / "config.json", cfg.dump());
  CHECK_THROWS_WITH_AS(safetensors::load_model(dir.string()), doctest::Contains("shape mismatch: expected [41, 32], got [40, 32]"), InputError);
  cfg["intermediate_size"] = 40;
  cfg["model_type"] = "gpt_neox";
  write_file(dir / "config.json", cfg.dump());
  CHECK_THROWS_WITH_AS(safetensors::load_model(dir.string()), doctest::Contains("model_type 'gpt_neox'"), InputError);
  cfg["model_type"] = "llama";
  cfg["tie_word_embeddings"] = false;
  cfg["num_hidden_layers"] = 3;
  write_file(dir / "config.json", cfg.dump());
  CHECK_THROWS_WITH_AS(safetensors::load_model(dir.string()), doctest::Contains("missing tensor"), InputError);
}

TEST_CASE("formats: every GGUF and safetensors fuzzer finding in test/fuzz/regressions is refused cleanly") {
  // Each gguf-* / safetensors-* file once crashed, exhausted memory or stalled a reader (see
  // test/fuzz/run.sh); now it must give an InputError (or load) quickly.  The OOM input declares a
  // model far larger than the file and must be refused before allocation.  (Every regression
  // input, of any harness, is also replayed through its harness by the ctest cases fuzz/replay-*.)
  int files = 0;
  for (const auto& e : fs::directory_iterator(ICMLKIT_FUZZ_REGRESSIONS)) {
    const std::string stem = e.path().filename().string();
    if (stem.rfind("gguf-", 0) != 0 && stem.rfind("safetensors-", 0) != 0) continue;
    std::ifstream in(e.path(), std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
    CAPTURE(e.path().string());
    ++files;
    if (stem.rfind("gguf-", 0) == 0) {
      std::string msg;
      try {
        gguf::load_model(p, bytes.size(), e.path().string());
      } catch (const InputError& err) {
        msg = err.message();
      }
      // (refused by the size check, or earlier by the name check when its damage reaches a name)
      if (e.path().filename().string().find("oom") != std::string::npos)
        CHECK((msg.find("implies") != std::string::npos || msg.find("control byte") != std::string::npos));
    } else {
      try {
        safetensors::parse(p, bytes.size(), e.path().string());
      } catch (const InputError&) {
      }
    }
  }
  CHECK(files >= 2);
}

TEST_CASE("formats: a checkpoint with a corrupted header byte is refused or loads, never crashes") {
  // Truth: the checkpoints we write use HDF5's 1.8+ format, whose superblock and object headers
  // carry checksums (io::h5::create_file).  Every single-byte change in the first 4 KiB (the
  // superblock, root group, attributes, the first dataset headers) and every 61st byte after it
  // must give an icmlkit::Error or a model; a crash or hang fails the test run.  The earlier
  // format, unchecked, crashed libhdf5 on some of these bytes.
  const fs::path dir = scratch("corrupt");
  fs::create_directories(dir);
  const std::string good = (dir / "m.h5").string(), bad = (dir / "bad.h5").string();
  save_any(good, ModelFormat::native_h5, test_model(RopeStyle::half, false), io::h5::FloatStorage::f32, prov());
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  REQUIRE(bytes.size() > 8192);
  int refused = 0, loaded = 0;
  for (std::size_t at = 0; at < bytes.size(); at += at < 4096 ? 1 : 61) {
    std::string b = bytes;
    b[at] = static_cast<char>(b[at] ^ 0x5a);
    {
      std::ofstream out(bad, std::ios::binary | std::ios::trunc);
      out.write(b.data(), static_cast<std::streamsize>(b.size()));
    }
    try {
      (void)load_any(bad);
      ++loaded;
    } catch (const Error&) {
      ++refused;
    }
  }
  MESSAGE("corrupted copies refused " << refused << ", loaded " << loaded);
  CHECK(refused > 0);
  fs::remove_all(dir);
}

TEST_CASE("formats: a GGUF whose config implies more weights than its bytes can hold is refused before allocating") {
  // The size check allows 18/32 of a byte per weight (Q4_0, the smallest type read); a header
  // claiming an MLP width of 2^24 (billions of weights) must still be refused by it, by name,
  // without allocating them.
  const Model m = test_model(RopeStyle::interleaved, false);
  const fs::path dir = scratch("gguf_implies");
  fs::create_directories(dir);
  gguf::save_model((dir / "m.gguf").string(), m, io::h5::FloatStorage::f32, prov());
  std::ifstream in(dir / "m.gguf", std::ios::binary);
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  const std::string key = "llama.feed_forward_length";
  const std::size_t at = bytes.find(key);
  REQUIRE(at != std::string::npos);
  std::uint32_t type = 0;
  std::memcpy(&type, bytes.data() + at + key.size(), 4);
  REQUIRE((type == 4 || type == 5));  // u32 / i32
  const std::uint32_t huge = 1u << 24;
  std::memcpy(bytes.data() + at + key.size() + 4, &huge, 4);
  std::string msg;
  try {
    gguf::load_model(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(), "m.gguf");
  } catch (const InputError& e) {
    msg = e.message();
  }
  CAPTURE(msg);
  CHECK(msg.find("implies") != std::string::npos);
}

TEST_CASE("formats: config.json keys of the wrong type are refused by name, not by the JSON library") {
  const nlohmann::json good = {{"model_type", "llama"}, {"vocab_size", 40}, {"hidden_size", 16}, {"num_hidden_layers", 1},
                               {"num_attention_heads", 2}, {"intermediate_size", 24}, {"max_position_embeddings", 16}};
  const lm::ModelConfig c = lm::config_from_hf_json(good, "config.json");
  CHECK(c.d_model == 16);
  CHECK(c.n_kv_heads == 2);
  CHECK_FALSE(c.tied);
  // Each of these threw nlohmann's type_error from json::value() before (the fuzzer's
  // fuzz_hf_config accepts only our errors); null takes the default.
  for (const auto& [key, value, what] : std::vector<std::tuple<std::string, nlohmann::json, std::string>>{
           {"attention_bias", "yes", "'attention_bias' is not a boolean"},
           {"tie_word_embeddings", 1, "'tie_word_embeddings' is not a boolean"},
           {"hidden_act", 3, "'hidden_act' is not a string"},
           {"model_type", nlohmann::json::array(), "'model_type' is not a string"}}) {
    nlohmann::json bad = good;
    bad[key] = value;
    try {
      (void)lm::config_from_hf_json(bad, "config.json");
      FAIL("accepted " << key);
    } catch (const InputError& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  }
  nlohmann::json nulls = good;
  nulls["tie_word_embeddings"] = nullptr;
  nulls["hidden_act"] = nullptr;
  CHECK_FALSE(lm::config_from_hf_json(nulls, "config.json").tied);
}
