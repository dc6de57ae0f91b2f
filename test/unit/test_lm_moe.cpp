// The moe and latent-moe blocks of model contract v2 on the CPU engine (lm/moe.hpp, issue 31):
// the routed FFN against a plain double-precision reference, the router's selection and weights
// by hand, a one-expert moe model against the llama model with the same MLP (bitwise), latent-moe
// with identity projections against moe (bitwise), batch invariance, the checkpoint round trip
// and the parameter count against the tensors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <vector>

#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/model.hpp"
#include "lm/moe.hpp"
#include "lm/gguf.hpp"
#include "lm/safetensors.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;

namespace {

ModelConfig moe_config(BlockType t, ExpertAct act, RouterKind router, int shared) {
  ModelConfig c;
  c.vocab_size = 53;
  c.d_model = 24;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 40;
  c.n_ctx = 32;
  c.block_types = {BlockType::llama, t};  // a llama block, then a routed one
  c.moe.n_experts = 5;
  c.moe.top_k = 2;
  c.moe.d_expert = 12;
  c.moe.d_shared = shared;
  c.moe.d_latent = 8;
  c.moe.act = act;
  c.moe.router = router;
  c.moe.routed_scaling = 1.5;
  return c;
}

Model moe_model(const ModelConfig& c, std::uint64_t seed) {
  Model m = random_model(c, seed, 0.3);
  Rng rng(seed + 1);
  for (auto& l : m.layers)
    for (float& b : l.router_bias) b = static_cast<float>(0.2 * rng.normal());
  return m;
}

std::vector<float> random_rows(int R, int d, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(std::size_t(R) * d);
  for (float& v : x) v = static_cast<float>(rng.normal());
  return x;
}

// y = W u in double, W [rows, cols] starting at row `row0` of a stacked matrix
std::vector<double> matvec(const Matrix& W, int row0, int rows, const std::vector<double>& u) {
  std::vector<double> y(rows, 0.0);
  for (int o = 0; o < rows; ++o)
    for (int k = 0; k < W.cols; ++k) y[o] += double(W.row(row0 + o)[k]) * u[k];
  return y;
}

std::vector<double> ref_expert(const MoeConfig& e, const Matrix& G, const Matrix& U, const Matrix& D, int gu0, int d0, int m, int w,
                               const std::vector<double>& u) {
  std::vector<double> up = matvec(U, gu0, m, u), h(m);
  if (e.act == ExpertAct::relu2) {
    for (int i = 0; i < m; ++i) h[i] = up[i] > 0 ? up[i] * up[i] : 0.0;
  } else {
    const std::vector<double> g = matvec(G, gu0, m, u);
    for (int i = 0; i < m; ++i) h[i] = g[i] / (1 + std::exp(-g[i])) * up[i];
  }
  return matvec(D, d0, w, h);
}

// The routed FFN of one row, in double, straight from the definitions.
std::vector<double> ref_moe_row(const ModelConfig& c, const Layer& L, BlockType t, const float* xn) {
  const MoeConfig& e = c.moe;
  const int d = c.d_model, N = e.n_experts, K = e.top_k, m = e.d_expert;
  const bool latent = t == BlockType::latent_moe;
  const int w = latent ? e.d_latent : d;
  std::vector<double> x(xn, xn + d);
  const std::vector<double> logit = matvec(L.router, 0, N, x);
  std::vector<double> score(N), key(N);
  if (e.router == RouterKind::softmax) {
    double mx = *std::max_element(logit.begin(), logit.end()), s = 0;
    for (int j = 0; j < N; ++j) s += std::exp(logit[j] - mx);
    for (int j = 0; j < N; ++j) key[j] = score[j] = std::exp(logit[j] - mx) / s;
  } else {
    for (int j = 0; j < N; ++j) {
      score[j] = 1 / (1 + std::exp(-logit[j]));
      key[j] = score[j] + L.router_bias[j];
    }
  }
  std::vector<int> order(N);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return key[a] > key[b]; });
  double sum = 0;
  for (int k = 0; k < K; ++k) sum += score[order[k]];
  const std::vector<double> u = latent ? matvec(L.latent_down, 0, w, x) : x;
  std::vector<double> acc(w, 0.0);
  for (int k = 0; k < K; ++k) {
    const int ex = order[k];
    const double g = score[ex] * (e.norm_topk ? 1 / sum : 1.0) * e.routed_scaling;
    const std::vector<double> y = ref_expert(e, L.gate_exps, L.up_exps, L.down_exps, ex * m, ex * w, m, w, u);
    for (int i = 0; i < w; ++i) acc[i] += g * y[i];
  }
  std::vector<double> out = latent ? matvec(L.latent_up, 0, d, acc) : acc;
  if (e.d_shared > 0) {
    const std::vector<double> s = ref_expert(e, L.gate_shexp, L.up_shexp, L.down_shexp, 0, 0, e.d_shared, d, x);
    for (int i = 0; i < d; ++i) out[i] += s[i];
  }
  return out;
}

bool same_bits(const float* a, const float* b, int n) { return std::equal(a, a + n, b); }

}  // namespace

// Tolerance: float32 products of length <= 24 on O(1) inputs with weights of std 0.3; the
// measured error is ~1e-6 of the largest output.
TEST_CASE("lm moe: the routed FFN matches a double-precision reference for every variant") {
  for (BlockType t : {BlockType::moe, BlockType::latent_moe})
    for (ExpertAct act : {ExpertAct::swiglu, ExpertAct::relu2})
      for (RouterKind router : {RouterKind::softmax, RouterKind::sigmoid})
        for (int shared : {0, 10})
          for (bool norm : {true, false}) {
            ModelConfig c = moe_config(t, act, router, shared);
            c.moe.norm_topk = norm;
            CAPTURE(block_type_name(t));
            CAPTURE(expert_act_name(act));
            CAPTURE(router_kind_name(router));
            CAPTURE(shared);
            CAPTURE(norm);
            const Model m = moe_model(c, 3);
            const Layer& L = m.layers[1];
            const int R = 7, d = c.d_model;
            const std::vector<float> xn = random_rows(R, d, 11);
            std::vector<float> out(std::size_t(R) * d);
            MoeWork w;
            std::vector<long long> load(std::size_t(c.moe.n_experts), 0);
            moe_ffn(c, L, t, xn.data(), R, out.data(), w, &load);
            CHECK(std::accumulate(load.begin(), load.end(), 0LL) == R * c.moe.top_k);
            for (int r = 0; r < R; ++r) {
              const std::vector<double> ref = ref_moe_row(c, L, t, xn.data() + std::size_t(r) * d);
              double scale = 0, err = 0;
              for (int i = 0; i < d; ++i) {
                scale = std::max(scale, std::abs(ref[i]));
                err = std::max(err, std::abs(ref[i] - out[std::size_t(r) * d + i]));
              }
              CHECK(err <= 1e-5 * std::max(scale, 1e-3));
            }
          }
}

// By hand: logits (0, 2, 1, 3) with K = 2.  softmax selects experts 3 then 1 with weights
// e^3 / (e^3 + e^2) and e^2 / (e^3 + e^2) (norm_topk); sigmoid with bias (5, 0, 0, 0) selects 0
// (s = 0.5, key 5.5) then 3, weights 0.5 / (0.5 + sigmoid(3)) and sigmoid(3) / (...), times scaling.
TEST_CASE("lm moe: the router selects and weights as defined") {
  MoeConfig c;
  c.n_experts = 4;
  c.top_k = 2;
  c.routed_scaling = 2.0;
  const float logits[4] = {0, 2, 1, 3};
  int ex[2];
  float w[2];
  moe_route(c, logits, nullptr, 1, ex, w);
  CHECK(ex[0] == 3);
  CHECK(ex[1] == 1);
  CHECK(w[0] == doctest::Approx(2.0 * std::exp(3.0) / (std::exp(3.0) + std::exp(2.0))).epsilon(1e-6));
  CHECK(w[1] == doctest::Approx(2.0 * std::exp(2.0) / (std::exp(3.0) + std::exp(2.0))).epsilon(1e-6));
  c.norm_topk = false;
  moe_route(c, logits, nullptr, 1, ex, w);
  const double z = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(w[0] == doctest::Approx(2.0 * std::exp(3.0) / z).epsilon(1e-6));
  c.norm_topk = true;
  c.router = RouterKind::sigmoid;
  const float bias[4] = {5, 0, 0, 0};
  moe_route(c, logits, bias, 1, ex, w);
  const double s3 = 1 / (1 + std::exp(-3.0));
  CHECK(ex[0] == 0);
  CHECK(ex[1] == 3);
  CHECK(w[0] == doctest::Approx(2.0 * 0.5 / (0.5 + s3)).epsilon(1e-6));
  CHECK(w[1] == doctest::Approx(2.0 * s3 / (0.5 + s3)).epsilon(1e-6));
  // ties: the lower index first
  const float flat[4] = {1, 1, 1, 1};
  c.router = RouterKind::softmax;
  moe_route(c, flat, nullptr, 1, ex, w);
  CHECK(ex[0] == 0);
  CHECK(ex[1] == 1);
}

// A moe block with one expert (K = 1, softmax, normalised: weight exactly 1) whose matrices are a
// llama block's MLP is that llama block, bit for bit; a latent-moe block with l = d and identity
// projections is the moe block with the same experts, bit for bit.
TEST_CASE("lm moe: one expert is the llama MLP and identity projections are plain moe, bitwise") {
  ModelConfig lc = moe_config(BlockType::moe, ExpertAct::swiglu, RouterKind::softmax, 0);
  lc.block_types = {BlockType::llama, BlockType::llama};
  const Model llama = random_model(lc, 5, 0.3);
  ModelConfig mc = lc;
  mc.block_types = {BlockType::llama, BlockType::moe};
  mc.moe.n_experts = 1;
  mc.moe.top_k = 1;
  mc.moe.d_expert = lc.d_ff;
  mc.moe.routed_scaling = 1.0;
  Model moe = allocate_model(mc);
  moe.token_embd = llama.token_embd;
  moe.output = llama.output;
  moe.output_norm = llama.output_norm;
  moe.layers[0] = llama.layers[0];
  Layer& L = moe.layers[1];
  const Layer& S = llama.layers[1];
  L.attn_norm = S.attn_norm, L.ffn_norm = S.ffn_norm, L.wq = S.wq, L.wk = S.wk, L.wv = S.wv, L.wo = S.wo;
  L.gate_exps = S.w_gate, L.up_exps = S.w_up, L.down_exps = S.w_down;
  const std::vector<int> toks{1, 9, 30, 4, 17, 52};
  KvCache a(llama.config), b(moe.config);
  const ForwardResult ra = forward(llama, a, Batch::causal(toks, 0)), rb = forward(moe, b, Batch::causal(toks, 0));
  CHECK(same_bits(ra.logits.data.data(), rb.logits.data.data(), static_cast<int>(ra.logits.data.size())));

  ModelConfig pc = moe_config(BlockType::moe, ExpertAct::relu2, RouterKind::sigmoid, 10);
  const Model plain = moe_model(pc, 8);
  ModelConfig qc = pc;
  qc.block_types = {BlockType::llama, BlockType::latent_moe};
  qc.moe.d_latent = pc.d_model;
  Model lat = allocate_model(qc);
  const auto src = tensor_slots(plain);
  auto dst = tensor_slots(lat);
  for (const auto& s : src)
    for (auto& t : dst)
      if (t.gguf == s.gguf) std::copy_n(s.data, std::size_t(s.rows) * std::max(s.cols, 1), t.data);
  for (Matrix* I : {&lat.layers[1].latent_down, &lat.layers[1].latent_up})
    for (int i = 0; i < I->rows; ++i) I->row(i)[i] = 1.0f;
  KvCache c1(plain.config), c2(lat.config);
  const ForwardResult r1 = forward(plain, c1, Batch::causal(toks, 0)), r2 = forward(lat, c2, Batch::causal(toks, 0));
  CHECK(same_bits(r1.logits.data.data(), r2.logits.data.data(), static_cast<int>(r1.logits.data.size())));
}

// A row's logits do not depend on the rows routed with it: the prefill's last row equals the same
// token decoded alone after the others, and independent drafts in batches of 1..9 give row 0 the
// same bits, at 1 and 2 threads.
TEST_CASE("lm moe: logits are batch invariant through the routed experts") {
  for (BlockType t : {BlockType::moe, BlockType::latent_moe}) {
    CAPTURE(block_type_name(t));
    const Model m = moe_model(moe_config(t, ExpertAct::swiglu, RouterKind::sigmoid, 10), 4);
    const std::vector<int> toks{3, 1, 4, 1, 5, 9, 2, 6};
    KvCache full(m.config);
    const ForwardResult all = forward(m, full, Batch::causal(toks, 0));
    KvCache base(m.config);
    forward(m, base, Batch::causal({toks.begin(), toks.end() - 1}, 0));
    base.commit_all();
    Batch one;
    one.add(toks.back(), 7);
    KvCache c1 = base;
    const ForwardResult alone = forward(m, c1, one);
    const int V = m.config.vocab_size;
    CHECK(same_bits(all.logits.row(7), alone.logits.row(0), V));
    for (int th : {1, 2}) {
      set_threads(th);
      for (int k : {1, 2, 5, 9}) {
        Batch b;
        for (int i = 0; i < k; ++i) b.add(i == 0 ? toks.back() : (7 * i) % V, 7);
        KvCache c = base;
        const ForwardResult r = forward(m, c, b);
        CHECK(same_bits(r.logits.row(0), alone.logits.row(0), V));
      }
    }
    set_threads(0);
  }
}

// The checkpoint holds the moe settings and tensors: a round trip gives the same config and bitwise
// the same logits; n_params equals the tensors' element count; GGUF and safetensors keep it too.
TEST_CASE("lm moe: checkpoint, GGUF and safetensors round trips, parameter count") {
  const auto dir = std::filesystem::temp_directory_path() / "icmlkit_moe_ck";
  std::filesystem::create_directories(dir);
  for (BlockType t : {BlockType::moe, BlockType::latent_moe}) {
    ModelConfig c = moe_config(t, ExpertAct::relu2, RouterKind::sigmoid, 10);
    c.moe.norm_topk = false;
    const Model m = moe_model(c, 9);
    std::int64_t count = 0;
    for (const auto& s : tensor_slots(m)) count += std::int64_t(s.rows) * std::max(s.cols, 1);
    CHECK(count == c.n_params());
    const std::string path = (dir / "m.h5").string();
    save_checkpoint(path, m, io::h5::FloatStorage::f32, io::Provenance{});
    const Model r = load_checkpoint(path);
    CHECK(r.config.block_types == c.block_types);
    CHECK(r.config.moe.n_experts == 5);
    CHECK(r.config.moe.d_latent == 8);
    CHECK(r.config.moe.act == ExpertAct::relu2);
    CHECK(r.config.moe.router == RouterKind::sigmoid);
    CHECK_FALSE(r.config.moe.norm_topk);
    CHECK(r.config.moe.routed_scaling == 1.5);
    CHECK(r.layers[1].router_bias == m.layers[1].router_bias);
    const std::vector<int> toks{2, 7, 1, 8};
    KvCache a(m.config), b(r.config);
    const ForwardResult fa = forward(m, a, Batch::causal(toks, 0)), fb = forward(r, b, Batch::causal(toks, 0));
    CHECK(same_bits(fa.logits.data.data(), fb.logits.data.data(), static_cast<int>(fa.logits.data.size())));
    // GGUF and safetensors (icmlkit-moe / icmlkit_moe: a sigmoid router) keep every setting and
    // tensor; the logits agree to rounding (GGUF's q/k rows are permuted to the interleaved RoPE)
    gguf::save_model((dir / "m.gguf").string(), m, io::h5::FloatStorage::f32, io::Provenance{});
    safetensors::save_model((dir / "hf").string(), m, io::h5::FloatStorage::f32, io::Provenance{});
    for (const Model& o : {gguf::load_model((dir / "m.gguf").string()), safetensors::load_model((dir / "hf").string())}) {
      CHECK(o.config.block_types == c.block_types);
      CHECK(o.config.moe.n_experts == c.moe.n_experts);
      CHECK(o.config.moe.top_k == c.moe.top_k);
      CHECK(o.config.moe.d_expert == c.moe.d_expert);
      CHECK(o.config.moe.d_shared == c.moe.d_shared);
      CHECK(o.config.moe.d_latent == c.moe.d_latent);
      CHECK(o.config.moe.act == c.moe.act);
      CHECK(o.config.moe.router == c.moe.router);
      CHECK(o.config.moe.norm_topk == c.moe.norm_topk);
      CHECK(o.config.moe.routed_scaling == c.moe.routed_scaling);
      CHECK(o.config.d_ff == c.d_ff);
      CHECK(o.layers[1].down_exps.data == m.layers[1].down_exps.data);
      CHECK(o.layers[1].router_bias == m.layers[1].router_bias);
      KvCache k(o.config);
      const ForwardResult fo = forward(o, k, Batch::causal(toks, 0));
      double worst = 0;
      for (std::size_t i = 0; i < fa.logits.data.size(); ++i) worst = std::max(worst, double(std::abs(fo.logits.data[i] - fa.logits.data[i])));
      CHECK(worst < 1e-5);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("lm moe: configurations the contract refuses") {
  ModelConfig c = moe_config(BlockType::moe, ExpertAct::swiglu, RouterKind::softmax, 0);
  c.moe.top_k = 6;
  CHECK_THROWS_WITH_AS(c.validate("x"), doctest::Contains("top_k must lie in [1, n_experts = 5]"), InputError);
  c = moe_config(BlockType::latent_moe, ExpertAct::swiglu, RouterKind::softmax, 0);
  c.moe.d_latent = 30;
  CHECK_THROWS_WITH_AS(c.validate("x"), doctest::Contains("d_latent must lie in [1, d_model = 24]"), InputError);
  c = moe_config(BlockType::moe, ExpertAct::swiglu, RouterKind::softmax, 0);
  c.block_types = {BlockType::moe, BlockType::moe};
  c.d_ff = 0;  // no llama block: d_ff unused
  CHECK_NOTHROW(c.validate("x"));
}
