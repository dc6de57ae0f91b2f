// The CUDA engine against the CPU engine (kernels/engine.hpp states the tolerances tested
// here).  In the nvcc build (unit_tests) every test prints one "skipped" line and passes when no
// CUDA device exists; `make -f Makefile.shortcuts gpu-check` runs them on a GPU machine.  Every
// build also runs them on the CPU through the CUDA emulator (test/cuda_emu, unit_tests_cuda_emu).
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "decode/decoder.hpp"
#include "kernels/device.hpp"
#include "kernels/engine.hpp"
#include "lm/engine.hpp"
#include "lm/model.hpp"
#include "lm/model_io.hpp"
#include "lm/sampler.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;
using kernels::CudaEngine;
using kernels::WeightPrecision;
using kernels::kInvariantRows;

namespace {

bool no_device(const char* test) {
  if (kernels::device_count() > 0) return false;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  std::fprintf(stderr, "%s: skipped (no CUDA device: %s)\n", test, e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
  return true;
}

ModelConfig cfg(RopeStyle style, bool tied, int hd = 16) {
  ModelConfig c;
  c.vocab_size = 97;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_model = c.n_heads * hd;
  c.n_layers = 3;
  c.d_ff = 80;
  c.n_ctx = 192;
  c.rope_style = style;
  c.tied = tied;
  return c;
}

Model model_in(const ModelConfig& c, io::h5::FloatStorage st, std::uint64_t seed) {
  Model m = random_model(c, seed, 0.15);
  Rng rng(seed + 1);
  for (auto& l : m.layers)
    for (auto* v : {&l.attn_norm, &l.ffn_norm})
      for (auto& w : *v) w = static_cast<float>(0.5 + rng.uniform());
  round_weights(m, st);
  m.stored = st;
  return m;
}

double max_abs(const Matrix& a) {
  double mx = 0;
  for (float v : a.data) mx = std::max(mx, double(std::fabs(v)));
  return mx;
}

/// |a - b|, infinite when either is NaN or infinite (std::max would drop a NaN gap).
double diff(float a, float b) {
  const double d = std::fabs(double(a) - double(b));
  return std::isfinite(a) && std::isfinite(b) ? d : HUGE_VAL;
}

/// max |cpu - gpu| / (1 + max |cpu|) over two matrices of the same shape.
double rel_gap(const Matrix& cpu, const Matrix& gpu) {
  REQUIRE(gpu.data.size() == cpu.data.size());
  const double scale = 1.0 + max_abs(cpu);
  double gap = 0;
  for (std::size_t i = 0; i < cpu.data.size(); ++i) gap = std::max(gap, diff(cpu.data[i], gpu.data[i]) / scale);
  return gap;
}

/// The same prefill + tree-masked, multi-view steps on both engines; max |logit difference|
/// relative to 1 + max |logit| over both forwards.  The commits take each of the CUDA engine's
/// row paths: the prefill as an explicit reversed list of 140 rows (a device list), the step's
/// rows {0, 3, 1} (passed by value in the launch), and commit_all (no list).
double forward_gap(Engine& cpu, Engine& gpu) {
  std::vector<int> prompt(140);  // > 128 keys: the attention kernel's split path
  for (int i = 0; i < 140; ++i) prompt[i] = (i * 31 + 7) % cpu.config().vocab_size;
  double gap = 0;
  auto cmp = [&gap](const ForwardResult& a, const ForwardResult& b) {
    REQUIRE(a.logits.rows == b.logits.rows);
    const double scale = 1.0 + max_abs(a.logits);
    for (std::size_t i = 0; i < a.logits.data.size(); ++i) gap = std::max(gap, diff(a.logits.data[i], b.logits.data[i]) / scale);
  };
  for (Engine* e : {&cpu, &gpu}) e->clear();
  const Batch pre = Batch::causal(prompt, 0);
  cmp(cpu.forward(pre), gpu.forward(pre));
  std::vector<int> reversed(prompt.size());
  for (std::size_t i = 0; i < reversed.size(); ++i) reversed[i] = static_cast<int>(reversed.size() - 1 - i);
  cpu.commit(reversed);
  gpu.commit(reversed);
  const ModelConfig& c = cpu.config();
  std::vector<std::vector<std::int32_t>> lists(std::size_t(c.n_layers) * c.n_kv_heads);
  for (std::size_t i = 0; i < lists.size(); ++i)
    for (int s = 0; s < static_cast<int>(prompt.size()); ++s)
      if (s < 2 || s % 2 == int(i % 2)) lists[i].push_back(s);
  Batch b;
  const int v = b.add_view(View::per_head(lists));
  const int n = static_cast<int>(prompt.size());
  b.add(4, n);
  b.add(8, n + 1, 0, {0});
  b.add(12, n + 1, 0, {0});
  b.add(16, n + 2, v, {0, 1});
  b.add(20, n + 3, b.add_view(View::prefix(3)), {0, 2});
  cmp(cpu.forward(b), gpu.forward(b));
  cpu.commit({0, 3, 1});
  gpu.commit({0, 3, 1});
  Batch b2;
  b2.add(24, n + 3);
  b2.add(28, n + 4, 0, {0});
  cmp(cpu.forward(b2), gpu.forward(b2));
  cpu.commit_all();
  gpu.commit_all();
  cmp(cpu.forward(Batch::causal({32}, n + 5)), gpu.forward(Batch::causal({32}, n + 5)));
  return gap;
}

}  // namespace

TEST_CASE("cuda: forward matches the CPU engine on random models (f32, f16, bf16, both RoPE pairings)") {
  if (no_device("cuda: forward")) return;
  // Tolerance (kernels/engine.hpp): 2e-3 relative for f32/f16 weights, 2e-2 for bf16 (the bf16
  // split keeps ~17 bits of each activation; f32 accumulation in a different order).
  for (RopeStyle style : {RopeStyle::half, RopeStyle::interleaved})
    for (bool tied : {false, true})
      for (auto st : {io::h5::FloatStorage::f32, io::h5::FloatStorage::f16, io::h5::FloatStorage::bf16}) {
        const Model m = model_in(cfg(style, tied), st, 31);
        CpuEngine cpu(m);
        for (bool inv : {true, false}) {
          CudaEngine gpu(m, inv);
          const double tol = st == io::h5::FloatStorage::bf16 ? 2e-2 : 2e-3;
          const double gap = forward_gap(cpu, gpu);
          INFO("style " << std::string(rope_style_name(style)) << " tied " << tied << " storage " << int(st) << " invariant " << inv << " gap " << gap);
          CHECK(gap <= tol);
        }
      }
}

TEST_CASE("cuda: head_dim 128 and a GQA group of 4 match the CPU engine") {
  if (no_device("cuda: head_dim 128")) return;
  ModelConfig c = cfg(RopeStyle::half, false, 128);
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.d_model = 8 * 128;
  const Model m = model_in(c, io::h5::FloatStorage::f16, 5);
  CpuEngine cpu(m);
  CudaEngine gpu(m);
  CHECK(forward_gap(cpu, gpu) <= 2e-3);
}

TEST_CASE("cuda: hidden states and skipped sublayers match the CPU engine") {
  if (no_device("cuda: hidden and skips")) return;
  // Truth: the CPU engine with the same options.  The embedding output is a widened f16 row on
  // both devices (bitwise); later residual streams and the logits within the logits tolerance
  // (2e-3 relative to 1 + max |value|, kernels/engine.hpp).  The hidden path is eager only (its
  // per-layer host copies), and skip lists are never graphed: repeats use the same launches.
  const Model m = model_in(cfg(RopeStyle::interleaved, false), io::h5::FloatStorage::f16, 19);
  CpuEngine cpu(m);
  CudaEngine gpu(m);
  ForwardOptions opt;
  opt.hidden = true;
  opt.skip_attn = {0, 1, 0};
  opt.skip_mlp = {0, 0, 1};
  const Batch b = Batch::causal({3, 1, 4, 1, 5, 9, 2, 6}, 0);
  for (int rep = 0; rep < 3; ++rep) {
    const ForwardResult a = cpu.forward(b, opt), g = gpu.forward(b, opt);
    REQUIRE(g.hidden.size() == a.hidden.size());
    CHECK(g.hidden[0].data == a.hidden[0].data);
    for (std::size_t l = 1; l < a.hidden.size(); ++l) {
      INFO("layer " << l);
      CHECK(rel_gap(a.hidden[l], g.hidden[l]) <= 2e-3);
    }
    CHECK(rel_gap(a.logits, g.logits) <= 2e-3);
  }
}

TEST_CASE("cuda: batch-invariant mode gives a row the same bits alone and in any batch") {
  if (no_device("cuda: batch invariance")) return;
  // Truth: the property itself (kernels/engine.hpp) — the row decoded alone is the reference.
  const Model m = model_in(cfg(RopeStyle::interleaved, false), io::h5::FloatStorage::bf16, 77);
  CudaEngine gpu(m, true);
  CHECK(gpu.invariant_rows() == kInvariantRows);
  gpu.forward(Batch::causal({1, 2, 3, 4, 5, 6}, 0));
  gpu.commit_all();
  // The default chunk (kInvariantRows), then chunks of 16 (set_invariant_rows): batches below, at and
  // above one and two chunks.
  for (const auto& [rows, sizes] : {std::pair{kInvariantRows, std::vector<int>{2, 5, 31, 32, 33, 64, 65, 130}},
                                    std::pair{16, std::vector<int>{2, 15, 16, 17, 40}}}) {
    gpu.set_invariant_rows(rows);
    Batch alone;
    alone.add(9, 6);
    const ForwardResult ref = gpu.forward(alone);
    for (int k : sizes) {
      for (int at : {0, k / 2, k - 1}) {
        Batch b;
        Rng rng(k * 100 + at);
        for (int r = 0; r < k; ++r) b.add(r == at ? 9 : static_cast<int>(rng.uniform() * 97), 6 + (r == at ? 0 : r % 5));
        const ForwardResult fr = gpu.forward(b);
        INFO("chunk " << rows << " batch " << k << " row " << at);
        CHECK(std::equal(ref.logits.data.begin(), ref.logits.data.end(), fr.logits.row(at)));
      }
    }
  }
}

TEST_CASE("cuda: CUDA graph replay gives the eager launches' bits") {
  if (no_device("cuda: graphs")) return;
  // Truth: the eager engine (graphs off); a graph replays the same kernels on the same inputs.
  const Model m = model_in(cfg(RopeStyle::half, false), io::h5::FloatStorage::f16, 12);
  CudaEngine eager(m), graphed(m);
  eager.set_graphs(false);
  graphed.set_graphs(true);
  std::vector<int> ctx{1, 9, 4, 33};
  ForwardOptions last;
  last.all_logits = false;
  last.logits_rows = {3};
  ForwardResult a = eager.forward(Batch::causal(ctx, 0), last), b = graphed.forward(Batch::causal(ctx, 0), last);
  eager.commit_all();
  graphed.commit_all();
  last.logits_rows = {0};
  for (int step = 0; step < 12; ++step) {  // the one-row shape is captured at its third use
    REQUIRE(a.logits.data == b.logits.data);
    const int t = static_cast<int>(std::max_element(a.logits.data.begin(), a.logits.data.end()) - a.logits.data.begin());
    Batch nb;
    nb.add(t, static_cast<int>(ctx.size()));
    ctx.push_back(t);
    a = eager.forward(nb, last);
    b = graphed.forward(nb, last);
    eager.commit_all();
    graphed.commit_all();
  }
  CHECK(graphed.graphs());
  CHECK(graphed.stats().graph_replays >= 9);

  // Verification-like batches of 5, 6 and 13 rows (tree masks, a second view): graphed, they are
  // padded to 8, 8 and 16 rows with a fixed metadata layout, and batches of one padded size
  // share a graph whatever their masks.  Every real row keeps the eager engine's bits.
  const std::vector<std::vector<std::int32_t>> lists(std::size_t(m.config.n_layers) * m.config.n_kv_heads, {0, 2, 5, 7});
  const long long replays = graphed.stats().graph_replays;
  for (int rep = 0; rep < 4; ++rep)
    for (int rows : {5, 6, 13}) {
      Batch vb;
      const int v = vb.add_view(View::per_head(lists));
      const int n = static_cast<int>(ctx.size());
      vb.add(ctx.back(), n);
      for (int r = 1; r < rows; ++r) {
        std::vector<int> att;
        for (int p = (r - 1) % (1 + rep); p >= 0; p -= 2) att.push_back(p);  // masks vary by rep
        vb.add((r * 7 + rep) % 97, n + 1 + r % 3, r % 2 ? v : 0, att);
      }
      ForwardOptions all;
      INFO("rows " << rows << " rep " << rep);
      const ForwardResult ea = eager.forward(vb, all), gb = graphed.forward(vb, all);
      REQUIRE(gb.logits_rows == ea.logits_rows);
      CHECK(ea.logits.data == gb.logits.data);
    }
  CHECK(graphed.stats().graph_replays > replays);  // the 8-row shape: seen 8 times, masks differing
}

TEST_CASE("cuda: forward_greedy returns the argmax of the logits forward() returns, and its probability") {
  if (no_device("cuda: forward_greedy")) return;
  // Truth: argmax with lowest-id ties (lm::top_ids) of the engine's own logits.
  const Model m = model_in(cfg(RopeStyle::half, true), io::h5::FloatStorage::bf16, 8);
  CudaEngine gpu(m);
  const Batch b = Batch::causal({1, 2, 3, 4, 5, 6, 7, 8}, 0);
  for (int rep = 0; rep < 4; ++rep) {  // the third use replays a CUDA graph
    const ForwardResult fr = gpu.forward(b);
    const std::vector<int> ids = gpu.forward_greedy(b);
    REQUIRE(ids.size() == 8);
    for (int r = 0; r < 8; ++r) CHECK(ids[r] == top_ids(fr.logits.row(r), m.config.vocab_size, 1)[0]);
    ForwardOptions only;  // the same through forward(): no logits come back
    only.greedy_only = true;
    only.greedy_prob = true;
    const ForwardResult g = gpu.forward(b, only);
    CHECK(g.logits.rows == 0);
    CHECK(g.greedy == ids);
    // Its probability (f32 online max-and-sum on the device) against the same logits' softmax in double.
    REQUIRE(g.greedy_prob.size() == 8);
    for (int r = 0; r < 8; ++r)
      CHECK(g.greedy_prob[r] == doctest::Approx(greedy_probability(fr.logits.row(r), m.config.vocab_size, ids[r])).epsilon(1e-5));
  }
}

TEST_CASE("cuda: a greedy decode step is one graph of 1 + 10 n_layers + 3 launches") {
  if (no_device("cuda: graph nodes")) return;
  // Truth: the count of the engine's launches (kernels/engine.hpp, graph_nodes): each residual
  // add rides in the next RMSNorm and the argmax reads the LM head's output.  The emulator's
  // cuBLAS is one node per GEMM; a GPU's cuBLAS may add its own kernels (split-K reductions).
  for (auto st : {io::h5::FloatStorage::bf16, io::h5::FloatStorage::f16}) {
    const Model m = model_in(cfg(RopeStyle::half, true), st, 8);
    CudaEngine gpu(m);
    gpu.forward(Batch::causal({1, 2, 3}, 0));
    gpu.commit_all();
    ForwardOptions only;
    only.greedy_only = true;
    for (int step = 0; step < 3; ++step) {  // the third step is captured
      Batch b;
      b.add(4 + step, 3 + step);
      gpu.forward(b, only);
      gpu.commit_all();
    }
    const int per_layer = st == io::h5::FloatStorage::f16 ? 11 : 10;
    const int ours = 1 + per_layer * m.config.n_layers + 3;
    INFO("storage " << int(st) << " graph nodes " << gpu.graph_nodes());
#if defined(ICMLKIT_CUDA_EMU)
    CHECK(gpu.graph_nodes() == ours);
#else
    CHECK(gpu.graph_nodes() >= ours);
#endif
  }
}

TEST_CASE("cuda: FAFO's batches of varying size and masks replay from a few CUDA graphs") {
  if (no_device("cuda: FAFO graphs")) return;
  // Truth: the AR tokens (bitwise batch invariance), and the engine's own counts: most
  // verification forwards are replayed (before padding and the fixed layout: under a quarter).
  const Model m = model_in(cfg(RopeStyle::half, true), io::h5::FloatStorage::bf16, 5);
  CudaEngine gpu(m, true);
  decode::DecodeConfig ar;
  ar.max_new_tokens = 60;
  ar.stop_at_eos = false;
  const std::vector<int> prompt{1, 5, 7, 5, 7, 5, 9, 5, 7};
  const auto base = decode::generate(gpu, prompt, ar);
  decode::DecodeConfig dc = ar;
  dc.method = decode::Method::fafo;
  dc.kv.budget = 8;
  const auto before = gpu.stats();
  const auto r = decode::generate(gpu, prompt, dc);
  CHECK(r.tokens == base.tokens);
  const long long forwards = gpu.stats().forwards - before.forwards, replays = gpu.stats().graph_replays - before.graph_replays;
  INFO("forwards " << forwards << " replays " << replays << " captures " << gpu.stats().graph_captures - before.graph_captures);
  CHECK(forwards == static_cast<long long>(r.steps.size()) + 1);
  MESSAGE("forwards " << forwards << ", replayed from graphs " << replays);
  CHECK(replays * 2 >= forwards);
  CHECK(gpu.stats().host_prep_ns > before.host_prep_ns);  // every forward's preparation is timed
}

TEST_CASE("cuda: greedy FAFO and lookahead decode exactly the AR tokens on the GPU") {
  if (no_device("cuda: greedy FAFO")) return;
  const Model m = model_in(cfg(RopeStyle::half, true), io::h5::FloatStorage::bf16, 3);
  CudaEngine gpu(m, true);
  decode::DecodeConfig ar;
  ar.max_new_tokens = 40;
  ar.stop_at_eos = false;
  const auto base = decode::generate(gpu, {1, 5, 7, 5, 7, 5}, ar);
  for (auto method : {decode::Method::fafo, decode::Method::lookahead, decode::Method::prompt_lookup}) {
    decode::DecodeConfig dc = ar;
    dc.method = method;
    dc.kv.budget = 8;
    const auto r = decode::generate(gpu, {1, 5, 7, 5, 7, 5}, dc);
    CHECK(r.tokens == base.tokens);
  }
}

TEST_CASE("cuda: demo model data/models/kjv7m.h5 greedy decode agrees with the CPU") {
  if (no_device("cuda: kjv7m")) return;
  // The repository's data/ as compiled in; ICMLKIT_REPO_DATA overrides it (gpu_check.sh
  // --bundle runs these tests from a copy of the repository at another path).
  const char* data_env = std::getenv("ICMLKIT_REPO_DATA");
  const std::string path = std::string(data_env != nullptr ? data_env : ICMLKIT_REPO_DATA) + "/models/kjv7m.h5";
  if (!std::filesystem::exists(path)) {
    std::fprintf(stderr, "cuda: kjv7m: skipped (%s absent)\n", path.c_str());
    return;
  }
  const Model m = load_any(path);
  CpuEngine cpu(m);
  CudaEngine gpu(m);
  CHECK(forward_gap(cpu, gpu) <= (m.stored == io::h5::FloatStorage::bf16 ? 2e-2 : 2e-3));
  // Greedy decode: the tokens agree until a step whose CPU top-2 margin is inside the tolerance.
  std::vector<int> ctx{1, 400, 17, 900, 33};
  cpu.clear();
  gpu.clear();
  ForwardOptions last;
  last.all_logits = false;
  last.logits_rows = {static_cast<int>(ctx.size()) - 1};
  ForwardResult a = cpu.forward(Batch::causal(ctx, 0), last), b = gpu.forward(Batch::causal(ctx, 0), last);
  cpu.commit_all();
  gpu.commit_all();
  for (int step = 0; step < 48; ++step) {
    const int V = m.config.vocab_size;
    const float* la = a.logits.row(0);
    const int ta = static_cast<int>(std::max_element(la, la + V) - la);
    const int tb = static_cast<int>(std::max_element(b.logits.row(0), b.logits.row(0) + V) - b.logits.row(0));
    if (ta != tb) {
      std::vector<float> s(la, la + V);
      std::nth_element(s.begin(), s.begin() + 1, s.end(), std::greater<float>());
      const double margin = (s[0] - s[1]) / (1.0 + std::fabs(s[0]));
      INFO("step " << step << " cpu " << ta << " cuda " << tb << " margin " << margin);
      CHECK(margin <= 2e-2);
      break;
    }
    Batch nb;
    nb.add(ta, static_cast<int>(ctx.size()));
    ctx.push_back(ta);
    a = cpu.forward(nb);
    b = gpu.forward(nb);
    cpu.commit_all();
    gpu.commit_all();
  }
}

TEST_CASE("cuda: refused options and bad commits raise the engine's errors") {
  if (no_device("cuda: errors")) return;
  const Model m = model_in(cfg(RopeStyle::half, false), io::h5::FloatStorage::f32, 1);
  CudaEngine gpu(m);
  Batch b = Batch::causal({1, 2, 3}, 0);
  ForwardOptions opt;
  opt.attn_rows = {0};
  CHECK_THROWS_AS(gpu.forward(b, opt), UsageError);
  // Contract v2's CPU-only hooks are refused through lm/support.hpp's table (exit 2).
  ForwardOptions early;
  early.stop_after = 1;
  CHECK_THROWS_WITH_AS(gpu.forward(b, early), doctest::Contains("the CUDA engine does not support stopping after a block"), UsageError);
  ForwardOptions sched;
  sched.schedule = {0, 0};
  CHECK_THROWS_AS(gpu.forward(b, sched), UsageError);
  const std::vector<Adapter> ads{Adapter{0, Projection::attn_q, Matrix(1, m.config.d_model), Matrix(m.config.d_model, 1), 1.0f}};
  ForwardOptions lora;
  lora.adapters = &ads;
  CHECK_THROWS_AS(gpu.forward(b, lora), UsageError);
  Batch two = b;
  two.rows[2].seq = 1;
  two.rows[2].attend.clear();
  CHECK_THROWS_WITH_AS(gpu.forward(two), doctest::Contains("outside the 1 cache(s)"), InputError);
  gpu.forward(b);
  CHECK_THROWS_AS(gpu.commit({3}), InputError);
  gpu.commit({0, 2});
  CHECK(gpu.size() == 2);
  gpu.truncate(1);
  CHECK(gpu.size() == 1);
  Batch bad;
  bad.add(500, 0);
  CHECK_THROWS_AS(gpu.forward(bad), InputError);
  CHECK_THROWS_AS(gpu.set_invariant_rows(0), UsageError);
  CHECK_THROWS_AS(gpu.set_invariant_rows(1025), UsageError);
  CHECK(gpu.invariant_rows() == kInvariantRows);
  for (const char* v : {"abc", "16x", "", "0", "-3", "99999999999"}) {
    setenv("ICMLKIT_CUDA_INVARIANT_ROWS", v, 1);
    INFO("ICMLKIT_CUDA_INVARIANT_ROWS=" << std::string(v));
    CHECK_THROWS_AS(CudaEngine{m}, UsageError);
  }
  setenv("ICMLKIT_CUDA_INVARIANT_ROWS", "16", 1);
  CHECK(CudaEngine(m).invariant_rows() == 16);
  unsetenv("ICMLKIT_CUDA_INVARIANT_ROWS");
  setenv("ICMLKIT_CUDA_GRAPHS", "banana", 1);
  CHECK_THROWS_AS(CudaEngine{m}, UsageError);
  setenv("ICMLKIT_CUDA_GRAPHS", "0", 1);
  CHECK_FALSE(CudaEngine(m).graphs());
  unsetenv("ICMLKIT_CUDA_GRAPHS");

  // The settings programs record, and the precision open_engine passes on (lm-generate --weights).
  const Model half = model_in(cfg(RopeStyle::half, false), io::h5::FloatStorage::bf16, 1);
  CHECK(kernels::make_cuda_engine(half, true, "auto")->settings() ==
        nlohmann::json{{"weights", "bf16"}, {"batch_invariant", true}, {"invariant_rows", 32}, {"cuda_graphs", true}});
  CHECK(lm::open_engine(half, Device::cuda, "f32")->settings()["weights"] == "f32");
  CHECK_THROWS_AS(kernels::make_cuda_engine(half, true, "fp8"), UsageError);
}

TEST_CASE("cuda: f16 models whose activations pass f16's range (65504) match the CPU engine") {
  if (no_device("cuda: f16 range")) return;
  // Truth: the CPU engine (f32 activations).  Large RMSNorm weights put GEMM inputs of 1e5 and
  // more into the gate/up and QKV products — "massive activations" — where a 16-bit copy of the
  // activation would be infinite.
  for (float gain : {3e4f, 3e5f}) {
    Model m = model_in(cfg(RopeStyle::half, false), io::h5::FloatStorage::f16, 23);
    for (auto& w : m.layers[1].ffn_norm) w *= gain;
    for (auto& w : m.layers[2].attn_norm) w *= gain;
    CpuEngine cpu(m);
    CudaEngine gpu(m);
    REQUIRE(gpu.weight_type() == dm::WType::f16);
    const double gap = forward_gap(cpu, gpu);
    INFO("gain " << gain << " gap " << gap);
    CHECK(gap <= 2e-3);
  }
}
