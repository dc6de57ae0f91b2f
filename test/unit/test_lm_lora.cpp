// lm/lora: PEFT adapter directories (write/read), merging, the q/k row order of the files, and the
// adapters a reader must refuse.  Tiny random models (2 layers, d_model 32) keep it fast.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/json.hpp"
#include "lm/forward.hpp"
#include "lm/gguf.hpp"
#include "lm/lora.hpp"
#include "lm/safetensors.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("icmlkit_test_lora_" + name);
  fs::remove_all(p);
  return p;
}

Model tiny_model(RopeStyle style, std::uint64_t seed = 5) {
  ModelConfig c;
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 40;
  c.n_ctx = 16;
  c.rope_style = style;
  return random_model(c, seed, 0.3);
}

/// An adapter on every target of every layer with A ~ U(-1, 1) / sqrt(in) and B ~ N(0, 0.2^2)
/// (B nonzero, unlike PEFT's initialisation, so the adapter changes the function).
LoraAdapter random_adapter(const Model& m, int rank, std::uint64_t seed, std::vector<std::string> targets = lora_target_names()) {
  LoraAdapter a;
  a.config.rank = rank;
  a.config.alpha = 2.0 * rank;
  a.config.targets = targets;
  a.base_model = "tiny";
  a.base_sha256 = weights_sha256(m);
  Rng rng(seed);
  for (int l = 0; l < m.config.n_layers; ++l)
    for (const auto& t : targets) {
      LoraTensor x;
      x.layer = l;
      x.target = t;
      std::tie(x.out, x.in) = lora_target_shape(m.config, l, t);
      for (int i = 0; i < rank * x.in; ++i) x.a.push_back(static_cast<float>(rng.uniform(-1, 1) / std::sqrt(double(x.in))));
      for (int i = 0; i < x.out * rank; ++i) x.b.push_back(static_cast<float>(0.2 * rng.normal()));
      a.tensors.push_back(std::move(x));
    }
  return a;
}

io::Provenance prov() {
  io::Provenance p;
  p.tool = "test";
  return p;
}

const Matrix& matrix_of(const Model& m, int layer, const std::string& t) {
  const Layer& l = m.layers[std::size_t(layer)];
  if (t == "q") return l.wq;
  if (t == "k") return l.wk;
  if (t == "v") return l.wv;
  if (t == "o") return l.wo;
  if (t == "gate") return l.w_gate;
  if (t == "up") return l.w_up;
  return l.w_down;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

/// Every tensor of a safetensors file, read raw (no permutation), by name.
std::map<std::string, std::vector<float>> raw_tensors(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
  const auto h = safetensors::parse(p, bytes.size(), file.string());
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, e] : h.tensors) out[name] = safetensors::to_floats(p, e);
  return out;
}

json read_config(const fs::path& dir) { return io::read_json((dir / "adapter_config.json").string()); }
void write_config(const fs::path& dir, const json& j) { std::ofstream(dir / "adapter_config.json") << j.dump(2); }

/// Writes a safetensors file holding `tensors` (F32) by hand (an independent little writer).
void write_safetensors(const fs::path& file, const std::vector<std::pair<std::string, std::vector<std::uint64_t>>>& tensors) {
  json h = json::object();
  std::uint64_t off = 0;
  for (const auto& [name, shape] : tensors) {
    std::uint64_t n = 1;
    for (auto d : shape) n *= d;
    h[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {off, off + 4 * n}}};
    off += 4 * n;
  }
  const std::string hs = h.dump();
  std::string bytes(8, '\0');
  const std::uint64_t n = hs.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += hs + std::string(off, '\0');
  std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_error(const fs::path& dir, const Model& m) {
  try {
    read_peft_adapter(dir.string(), m);
  } catch (const InputError& e) {
    return e.message();
  }
  return "";
}

Matrix logits_of(const Model& m) {
  KvCache cache(m.config);
  return forward(m, cache, Batch::causal({1, 7, 33, 50, 3, 42}, 0)).logits;
}

}  // namespace

TEST_CASE("lora: scaling is alpha / r, or alpha / sqrt(r) with rsLoRA (PEFT's update_layer)") {
  LoraConfig c;
  c.rank = 16;
  c.alpha = 32;
  CHECK(c.scaling() == 2.0);
  c.rslora = true;
  CHECK(c.scaling() == 8.0);  // 32 / sqrt(16)
}

TEST_CASE("lora: write then read returns the adapter bitwise, both rope styles") {
  // Expected: the in-memory adapter itself; the writer's and reader's q/k row permutations are
  // inverses, so nothing may change by a bit.
  for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved}) {
    CAPTURE(rope_style_name(style));
    const Model m = tiny_model(style);
    LoraAdapter a = random_adapter(m, 3, 11);
    a.config.rslora = true;
    a.config.dropout = 0.05;
    const fs::path dir = scratch(std::string("rt_") + rope_style_name(style));
    write_peft_adapter(dir.string(), a, m.config, prov());
    const LoraAdapter b = read_peft_adapter(dir.string(), m);
    CHECK(b.config.rank == 3);
    CHECK(b.config.alpha == 6.0);
    CHECK(b.config.rslora);
    CHECK(b.config.dropout == 0.05);
    CHECK(b.config.targets == lora_target_names());
    CHECK(b.base_model == "tiny");
    CHECK(b.base_sha256 == a.base_sha256);
    REQUIRE(b.tensors.size() == a.tensors.size());
    for (std::size_t i = 0; i < a.tensors.size(); ++i) {
      CAPTURE(i);
      CHECK(b.tensors[i].layer == a.tensors[i].layer);
      CHECK(b.tensors[i].target == a.tensors[i].target);
      CHECK(same(b.tensors[i].a, a.tensors[i].a));
      CHECK(same(b.tensors[i].b, a.tensors[i].b));
    }
    // The config holds PEFT's keys; either file names the directory.
    const json j = read_config(dir);
    CHECK(j["peft_type"] == "LORA");
    CHECK(j["task_type"] == "CAUSAL_LM");
    CHECK(j["target_modules"] == json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
    CHECK(j["use_dora"] == false);
    CHECK(j["modules_to_save"].is_null());
    CHECK(j["icmlkit"]["meta"]["tool"] == "test");
    CHECK(read_peft_adapter((dir / "adapter_model.safetensors").string(), m).tensors.size() == a.tensors.size());
    // No temporary is left beside the two files.
    int files = 0;
    for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
    CHECK(files == 2);
  }
}

TEST_CASE("lora: merge_lora equals W + s B A computed in double precision") {
  // Expected: a naive double-precision W + (alpha / r) B A per matrix from the same floats; the
  // float accumulation of a rank-4 sum of terms below 1 is within 1e-6 of it.
  for (bool rs : {false, true}) {
    const Model base = tiny_model(RopeStyle::interleaved);
    LoraAdapter a = random_adapter(base, 4, 3);
    a.config.rslora = rs;
    const double s = rs ? a.config.alpha / 2.0 : a.config.alpha / 4.0;
    Model m = base;
    merge_lora(m, a);
    double worst = 0;
    for (const LoraTensor& t : a.tensors) {
      const Matrix& w0 = matrix_of(base, t.layer, t.target);
      const Matrix& w1 = matrix_of(m, t.layer, t.target);
      for (int o = 0; o < t.out; ++o)
        for (int i = 0; i < t.in; ++i) {
          double d = 0;
          for (int k = 0; k < 4; ++k) d += double(t.b[std::size_t(o) * 4 + k]) * double(t.a[std::size_t(k) * t.in + i]);
          const double want = double(w0.row(o)[i]) + s * d;
          worst = std::max(worst, std::fabs(double(w1.row(o)[i]) - want));
        }
    }
    CHECK(worst < 1e-6);
    // Unadapted tensors are untouched.
    CHECK(same(m.token_embd.data, base.token_embd.data));
    CHECK(same(m.layers[0].attn_norm, base.layers[0].attn_norm));
  }
}

TEST_CASE("lora: the file's q/k lora_B rows are in Hugging Face order (what PEFT needs)") {
  // An interleaved model (as read from GGUF).  Expected: merging in our order and converting to
  // Hugging Face order (the safetensors model writer's q/k permutation) equals merging the Hugging
  // Face base weights with the raw lora_B/lora_A of the adapter file (double precision), which is
  // what PEFT computes on that checkpoint.  Tolerance 1e-6: float rounding of the merge.
  const Model m = tiny_model(RopeStyle::interleaved);
  const LoraAdapter a = random_adapter(m, 3, 21);
  const fs::path dir = scratch("qk_order");
  write_peft_adapter((dir / "adapter").string(), a, m.config, prov());
  safetensors::save_model((dir / "base").string(), m, io::h5::FloatStorage::f32, prov());
  Model merged = m;
  merge_lora(merged, a);
  safetensors::save_model((dir / "merged").string(), merged, io::h5::FloatStorage::f32, prov());
  const auto ad = raw_tensors(dir / "adapter" / "adapter_model.safetensors");
  const auto w_hf = raw_tensors(dir / "base" / "model.safetensors");
  const auto merged_hf = raw_tensors(dir / "merged" / "model.safetensors");
  const double s = a.config.scaling();
  for (int l = 0; l < 2; ++l)
    for (const std::string t : {"q", "k", "v"}) {
      CAPTURE(l);
      CAPTURE(t);
      const std::string stem = "model.layers." + std::to_string(l) + ".self_attn." + t + "_proj";
      const auto& A = ad.at("base_model.model." + stem + ".lora_A.weight");
      const auto& B = ad.at("base_model.model." + stem + ".lora_B.weight");
      const auto& W = w_hf.at(stem + ".weight");
      const auto& got = merged_hf.at(stem + ".weight");
      const int in = 32, out = int(W.size()) / in;
      double worst = 0;
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i) {
          double d = 0;
          for (int k = 0; k < 3; ++k) d += double(B[std::size_t(o) * 3 + k]) * double(A[std::size_t(k) * in + i]);
          worst = std::max(worst, std::fabs(double(got[std::size_t(o) * in + i]) - (double(W[std::size_t(o) * in + i]) + s * d)));
        }
      CHECK(worst < 1e-6);
    }
  // The q rows really moved: the file's B differs from the in-memory (interleaved) one.
  CHECK(!same(ad.at("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"), a.tensors[0].b));
}

TEST_CASE("lora: one adapter file serves the GGUF (interleaved) and Hugging Face (half) copies of a base") {
  // The same base read in both RoPE layouts has one weights_sha256 (the hash reads q/k in
  // Hugging Face order), so the adapter is accepted by both; the merged models compute the same
  // function.  Expected: the interleaved model's merged logits; tolerance 1e-4 (float rounding
  // differs between the two row orders of the same sums).
  const Model inter = tiny_model(RopeStyle::interleaved);
  const fs::path dir = scratch("both");
  safetensors::save_model((dir / "hf").string(), inter, io::h5::FloatStorage::f32, prov());
  const Model half = safetensors::load_model((dir / "hf").string());
  REQUIRE(half.config.rope_style == RopeStyle::half);
  CHECK(weights_sha256(half) == weights_sha256(inter));
  write_peft_adapter((dir / "ad").string(), random_adapter(inter, 2, 5), inter.config, prov());
  Model a = inter, b = half;
  merge_lora(a, read_peft_adapter((dir / "ad").string(), a));
  merge_lora(b, read_peft_adapter((dir / "ad").string(), b));
  const Matrix la = logits_of(a), lb = logits_of(b), l0 = logits_of(inter);
  double diff = 0, moved = 0;
  for (std::size_t i = 0; i < la.data.size(); ++i) {
    diff = std::max(diff, double(std::fabs(la.data[i] - lb.data[i])));
    moved = std::max(moved, double(std::fabs(la.data[i] - l0.data[i])));
  }
  CHECK(diff < 1e-4);
  CHECK(moved > 1e-2);  // the adapter changes the function
}

TEST_CASE("lora: weights_sha256 fingerprints the weights") {
  // Expected: equal for equal weights, different after one weight changes by one ulp.
  Model m = tiny_model(RopeStyle::half);
  const std::string h = weights_sha256(m);
  CHECK(h.size() == 64);
  CHECK(weights_sha256(tiny_model(RopeStyle::half)) == h);
  m.layers[1].w_down.data[7] = std::nextafter(m.layers[1].w_down.data[7], 1.0f);
  CHECK(weights_sha256(m) != h);
}

TEST_CASE("lora: a layer without tensors is accepted (PEFT layers_to_transform)") {
  // Expected: only layer 1's tensors come back, and merging leaves layer 0 bitwise unchanged.
  const Model m = tiny_model(RopeStyle::half);
  LoraAdapter a = random_adapter(m, 2, 9, {"q", "v"});
  a.tensors.erase(a.tensors.begin(), a.tensors.begin() + 2);
  const fs::path dir = scratch("partial");
  write_peft_adapter(dir.string(), a, m.config, prov());
  const LoraAdapter b = read_peft_adapter(dir.string(), m);
  REQUIRE(b.tensors.size() == 2);
  CHECK(b.tensors[0].layer == 1);
  Model merged = m;
  merge_lora(merged, b);
  CHECK(same(merged.layers[0].wq.data, m.layers[0].wq.data));
  CHECK(!same(merged.layers[1].wq.data, m.layers[1].wq.data));
}

TEST_CASE("lora: adapters the reader refuses, each in one line naming what is wrong") {
  // Expected: each malformed or foreign adapter is an InputError whose text names the problem.
  const Model m = tiny_model(RopeStyle::half);
  const LoraAdapter a = random_adapter(m, 2, 1, {"q", "v"});
  const fs::path dir = scratch("refuse");
  const auto fresh = [&] {
    fs::remove_all(dir);
    write_peft_adapter(dir.string(), a, m.config, prov());
    return read_config(dir);
  };
  const auto with = [&](const std::string& key, const json& v) {
    json j = fresh();
    j[key] = v;
    write_config(dir, j);
    return read_error(dir, m);
  };
  CHECK(read_error(dir / "nope", m).find("cannot read file") != std::string::npos);
  // another base: same shapes, other weights (the recorded hash differs)
  fresh();
  CHECK(read_error(dir, tiny_model(RopeStyle::half, 6)).find("another base model") != std::string::npos);
  // another base: other shapes
  {
    ModelConfig c = m.config;
    c.d_model = 48;
    CHECK(read_error(dir, random_model(c, 1)).find("does not fit the base model") != std::string::npos);
  }
  // rank in the config differs from the tensors'
  CHECK(with("r", 4).find("does not fit the base model: expected [4, 32]") != std::string::npos);
  CHECK(with("use_dora", true).find("DoRA") != std::string::npos);
  CHECK(with("rank_pattern", json{{"q_proj", 4}}).find("rank_pattern") != std::string::npos);
  CHECK(with("alpha_pattern", json{{"q_proj", 4}}).find("alpha_pattern") != std::string::npos);
  CHECK(with("bias", "lora_only").find("bias 'lora_only'") != std::string::npos);
  CHECK(with("fan_in_fan_out", true).find("fan_in_fan_out") != std::string::npos);
  CHECK(with("modules_to_save", json{"lm_head"}).find("modules_to_save") != std::string::npos);
  CHECK(with("peft_type", "IA3").find("not LORA") != std::string::npos);
  CHECK(with("target_modules", json{"q_proj", "lm_head"}).find("'lm_head' is not supported") != std::string::npos);
  CHECK(with("target_modules", ".*\\.(q|v)_proj").find("regular expression") != std::string::npos);
  // a tensor whose target the config does not list
  CHECK(with("target_modules", json{"q_proj"}).find("v_proj is not among") != std::string::npos);
  // target_modules as one plain name, and PEFT's all-linear, are read
  fresh();
  json j = read_config(dir);
  j["target_modules"] = "all-linear";
  write_config(dir, j);
  CHECK(read_peft_adapter(dir.string(), m).config.targets == lora_target_names());
  // keys that are not LoRA tensors of a llama model, a lone lora_A, and an empty file
  const fs::path st = dir / "adapter_model.safetensors";
  write_safetensors(st, {{"base_model.model.lm_head.lora_A.weight", {2, 32}}});
  CHECK(read_error(dir, m).find("not a LoRA tensor") != std::string::npos);
  write_safetensors(st, {{"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", {32}}});
  CHECK(read_error(dir, m).find("not a LoRA tensor") != std::string::npos);
  write_safetensors(st, {{"base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight", {2, 32}}});
  CHECK(read_error(dir, m).find("beyond the model's 2 layers") != std::string::npos);
  write_safetensors(st, {{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", {2, 32}}});
  CHECK(read_error(dir, m).find("has lora_A but not lora_B") != std::string::npos);
  write_safetensors(st, {});
  CHECK(read_error(dir, m).find("no tensors") != std::string::npos);
  fs::remove(st);
  CHECK(read_error(dir, m).find("cannot read file") != std::string::npos);
  fs::remove(dir / "adapter_config.json");
  CHECK(read_error(dir, m).find("no adapter_config.json") != std::string::npos);
  // merge_lora refuses a tensor that does not fit the model
  LoraAdapter bad = a;
  bad.tensors[0].in = 31;
  Model mm = m;
  CHECK_THROWS_AS(merge_lora(mm, bad), InputError);
}

TEST_CASE("lora: check_lora_config names the flag") {
  // Expected: the trainer's flags are validated against the base's matrix shapes.
  const Model m = tiny_model(RopeStyle::half);
  LoraConfig c;
  c.rank = 8;
  c.targets = {"q", "down"};
  CHECK_NOTHROW(check_lora_config(c, m.config));
  c.rank = 33;  // q is [32, 32]
  CHECK_THROWS_WITH_AS(check_lora_config(c, m.config), doctest::Contains("exceeds min(out, in) = 32"), UsageError);
  c.rank = 4;
  c.targets = {"q", "q"};
  CHECK_THROWS_WITH_AS(check_lora_config(c, m.config), doctest::Contains("given twice"), UsageError);
  c.targets = {"lm_head"};
  CHECK_THROWS_WITH_AS(check_lora_config(c, m.config), doctest::Contains("unknown LoRA target"), UsageError);
  c.targets = {"q"};
  c.dropout = 1;
  CHECK_THROWS_AS(check_lora_config(c, m.config), UsageError);
  c.dropout = 0;
  c.alpha = 0;
  CHECK_THROWS_AS(check_lora_config(c, m.config), UsageError);
  CHECK(lora_target_shape(m.config, 0, "down") == std::pair<int, int>{32, 40});
  CHECK(lora_target_shape(m.config, 0, "k") == std::pair<int, int>{16, 32});
}
