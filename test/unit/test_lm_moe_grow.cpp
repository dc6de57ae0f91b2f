// Growth of moe checkpoints (lm/moe_grow.hpp, issue 32): width growth at alpha = 0 keeps the
// engine's logits for every router (the unnormalised sigmoid router through its halved scaling,
// which is shown to be needed), the noise and the random experts have the stated spread, depth
// growth places the copies as stated, and growing twice composes.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/model.hpp"
#include "lm/moe_grow.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;

namespace {

ModelConfig grow_config(BlockType t, RouterKind router, bool norm, int shared) {
  ModelConfig c;
  c.vocab_size = 41;
  c.d_model = 16;
  c.n_layers = 3;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 20;
  c.n_ctx = 32;
  c.block_types = {t, BlockType::llama, t};
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.moe.d_expert = 8;
  c.moe.d_shared = shared;
  c.moe.d_latent = 6;
  c.moe.router = router;
  c.moe.norm_topk = norm;
  c.moe.routed_scaling = 1.25;
  return c;
}

Model grow_model(const ModelConfig& c, std::uint64_t seed) {
  Model m = random_model(c, seed, 0.35);
  Rng rng(seed + 3);
  for (auto& l : m.layers)
    for (float& b : l.router_bias) b = static_cast<float>(0.2 * rng.normal());
  return m;
}

/// The engine's logits of one sequence.
std::vector<float> logits_of(const Model& m, const std::vector<int>& toks) {
  KvCache kv(m.config);
  return forward(m, kv, Batch::causal(toks, 0)).logits.data;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i) w = std::max(w, double(std::abs(a[i] - b[i])));
  return w;
}

double stddev(const std::vector<double>& v) {
  double mean = 0, ss = 0;
  for (double x : v) mean += x / double(v.size());
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / double(v.size()));
}

const std::vector<int> kToks{3, 17, 5, 40, 2, 9, 33, 12, 8, 1, 27, 19};

}  // namespace

TEST_CASE("moe growth: width at alpha = 0 with top-K doubled keeps the logits for every router") {
  for (BlockType t : {BlockType::moe, BlockType::latent_moe})
    for (RouterKind router : {RouterKind::softmax, RouterKind::sigmoid})
      for (bool norm : {true, false}) {
        const ModelConfig c = grow_config(t, router, norm, router == RouterKind::sigmoid ? 6 : 0);
        const Model m = grow_model(c, 21);
        const Model g = grow_width(m, WidthGrowth::noisy, 2, 0.0, 5);
        CHECK(g.config.moe.n_experts == 8);
        CHECK(g.config.moe.top_k == 4);
        CHECK(g.layers[0].router.rows == 8);
        CHECK(g.layers[2].down_exps.rows == 8 * (t == BlockType::latent_moe ? 6 : 16));
        const double d = max_diff(logits_of(m, kToks), logits_of(g, kToks));
        INFO(block_type_name(t) << " " << router_kind_name(router) << " norm " << norm << " max diff " << d);
        CHECK(d < 1e-5);
        const bool rescaled = router == RouterKind::sigmoid && !norm;
        CHECK(g.config.moe.routed_scaling == doctest::Approx(rescaled ? 0.625 : 1.25));
        if (rescaled) {  // the halved scaling is what keeps it: without it the routed sum doubles
          Model h = g;
          h.config.moe.routed_scaling = c.moe.routed_scaling;
          CHECK(max_diff(logits_of(m, kToks), logits_of(h, kToks)) > 1e-3);
        }
      }
}

TEST_CASE("moe growth: width noise and random experts have the stated spread, the originals stay") {
  const ModelConfig c = grow_config(BlockType::moe, RouterKind::sigmoid, true, 0);
  const Model m = grow_model(c, 4);
  const double alpha = 0.1;
  const Model g = grow_width(m, WidthGrowth::noisy, 3, alpha, 8);
  const Model r = grow_width(m, WidthGrowth::random, 2, 0.0, 8);
  CHECK(g.config.moe.n_experts == 12);
  CHECK(g.config.moe.top_k == 6);
  for (int l : {0, 2}) {
    const Matrix& src = m.layers[std::size_t(l)].up_exps;
    const Matrix& big = g.layers[std::size_t(l)].up_exps;
    const std::size_t n = src.data.size();
    std::vector<double> v(src.data.begin(), src.data.end()), noise, fresh;
    for (std::size_t i = 0; i < n; ++i) CHECK(big.data[i] == src.data[i]);  // expert e itself unchanged
    for (std::size_t i = n; i < 3 * n; ++i) noise.push_back(double(big.data[i]) - src.data[i % n]);
    const double sigma = stddev(v);
    CHECK(stddev(noise) == doctest::Approx(alpha * sigma).epsilon(0.05));
    for (std::size_t i = n; i < 2 * n; ++i) fresh.push_back(r.layers[std::size_t(l)].up_exps.data[i]);
    CHECK(stddev(fresh) == doctest::Approx(sigma).epsilon(0.05));
    // the router rows of the copies carry noise too; the selection bias is copied (noisy) or 0 (random)
    CHECK(g.layers[std::size_t(l)].router.data[std::size_t(4 * c.d_model)] != m.layers[std::size_t(l)].router.data[0]);
    CHECK(g.layers[std::size_t(l)].router_bias[5] == m.layers[std::size_t(l)].router_bias[1]);
    CHECK(r.layers[std::size_t(l)].router_bias[5] == 0.0f);
  }
  // the llama block is untouched, and a different seed draws different noise
  CHECK(g.layers[1].w_up.data == m.layers[1].w_up.data);
  CHECK(grow_width(m, WidthGrowth::noisy, 3, alpha, 9).layers[0].up_exps.data != g.layers[0].up_exps.data);
}

TEST_CASE("moe growth: interposition and stacking place every copy as stated") {
  const ModelConfig c = grow_config(BlockType::latent_moe, RouterKind::softmax, true, 6);
  const Model m = grow_model(c, 7);
  const Model in = grow_depth(m, DepthGrowth::interpose, 2), st = grow_depth(m, DepthGrowth::stack, 2);
  REQUIRE(in.config.n_layers == 6);
  REQUIRE(st.config.n_layers == 6);
  for (int i = 0; i < 6; ++i) {
    const Layer &a = in.layers[std::size_t(i)], &b = st.layers[std::size_t(i)];
    const Layer &sa = m.layers[std::size_t(i / 2)], &sb = m.layers[std::size_t(i % 3)];
    CHECK(a.wq.data == sa.wq.data);
    CHECK(a.attn_norm == sa.attn_norm);
    CHECK(a.ffn_norm == sa.ffn_norm);
    CHECK(a.latent_down.data == sa.latent_down.data);
    CHECK(in.config.block_type(i) == c.block_type(i / 2));
    CHECK(b.wo.data == sb.wo.data);
    CHECK(b.up_exps.data == sb.up_exps.data);
    CHECK(st.config.block_type(i) == c.block_type(i % 3));
  }
  CHECK(in.token_embd.data == m.token_embd.data);
  CHECK(in.output.data == m.output.data);
  // depth growth changes the function (it is not an identity)
  CHECK(max_diff(logits_of(m, kToks), logits_of(in, kToks)) > 1e-3);
}

TEST_CASE("moe growth: growing twice composes, bad requests are refused") {
  const ModelConfig c = grow_config(BlockType::moe, RouterKind::softmax, false, 0);
  const Model m = grow_model(c, 12);
  const Model twice = grow_width(grow_depth(grow_width(m, WidthGrowth::noisy, 2, 0.0, 1), DepthGrowth::interpose, 2),
                                 WidthGrowth::noisy, 2, 0.0, 2);
  CHECK(twice.config.n_layers == 6);
  CHECK(twice.config.moe.n_experts == 16);
  CHECK(twice.config.moe.top_k == 8);
  // width growth commutes with depth growth at alpha = 0: the same function as depth growth alone
  CHECK(max_diff(logits_of(grow_depth(m, DepthGrowth::interpose, 2), kToks), logits_of(twice, kToks)) < 1e-5);
  ModelConfig dense = c;
  dense.block_types.clear();
  const Model dm = random_model(dense, 1, 0.3);
  CHECK_THROWS_WITH_AS(grow_width(dm, WidthGrowth::noisy, 2, 0.01, 1), doctest::Contains("dense"), UsageError);
  CHECK_THROWS_WITH_AS(grow_width(m, WidthGrowth::noisy, 2, -0.1, 1), doctest::Contains("alpha must be >= 0"), UsageError);
  CHECK_THROWS_AS(grow_width(m, WidthGrowth::noisy, 1, 0.01, 1), UsageError);
  CHECK_THROWS_AS(grow_depth(m, DepthGrowth::stack, 1), UsageError);
  CHECK(grow_depth(dm, DepthGrowth::stack, 2).config.n_layers == 6);  // depth growth takes dense models too
}
