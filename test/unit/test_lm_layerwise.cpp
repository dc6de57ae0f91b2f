// lm/layerwise: the forward pass step by step (early exit, issue 28).  Against independent truth:
// forward() itself for full and partial runs (bitwise), and the state-copied K/V of skipped
// layers against RMSNorm, the K/V projections and RoPE recomputed here in double.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "lm/forward.hpp"
#include "lm/layerwise.hpp"
#include "lm/model.hpp"
#include "util/error.hpp"

using namespace icmlkit;

namespace {

lm::ModelConfig deep_config() {
  lm::ModelConfig c;
  c.vocab_size = 48;
  c.d_model = 16;
  c.n_layers = 5;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.n_ctx = 64;
  return c;
}

/// K (after RoPE) and V of one residual row x [d] through block l's attention norm and
/// projections, in double: [n_kv * hd] each.
void direct_kv(const lm::Model& m, int l, const float* x, int pos, std::vector<double>& k, std::vector<double>& v) {
  const auto& c = m.config;
  const int d = c.d_model, hd = c.head_dim(), dkv = c.n_kv_heads * hd;
  const auto& L = m.layers[l];
  double ss = 0;
  for (int i = 0; i < d; ++i) ss += double(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / d + c.rms_eps);
  std::vector<double> xn(d);
  for (int i = 0; i < d; ++i) xn[i] = L.attn_norm[i] * x[i] * inv;
  k.assign(dkv, 0.0);
  v.assign(dkv, 0.0);
  for (int o = 0; o < dkv; ++o)
    for (int i = 0; i < d; ++i) {
      k[o] += L.wk.data[std::size_t(o) * d + i] * xn[i];
      v[o] += L.wv.data[std::size_t(o) * d + i] * xn[i];
    }
  for (int h = 0; h < c.n_kv_heads; ++h)  // RoPE, half style
    for (int i = 0; i < hd / 2; ++i) {
      const double a = pos * std::pow(c.rope_theta, -2.0 * i / hd);
      double& x1 = k[h * hd + i];
      double& x2 = k[h * hd + i + hd / 2];
      const double y1 = x1 * std::cos(a) - x2 * std::sin(a), y2 = x2 * std::cos(a) + x1 * std::sin(a);
      x1 = y1;
      x2 = y2;
    }
}

}  // namespace

TEST_CASE("lm layerwise: a full run is forward() bitwise, a partial run is forward() with stop_after") {
  const lm::ModelConfig c = deep_config();
  const lm::Model m = lm::random_model(c, 3, 0.3);
  const std::vector<int> prompt{1, 7, 30, 12, 5, 44};
  lm::KvCache a(c), b(c);
  const auto ref = lm::forward(m, a, lm::Batch::causal(prompt, 0));
  const lm::Batch batch = lm::Batch::causal(prompt, 0);
  lm::LayerwiseForward pass(m, b, batch);
  CHECK(pass.steps() == c.n_layers);
  pass.run(2);
  pass.run(3);
  const auto got = pass.finish();
  CHECK(got.logits.data == ref.logits.data);
  a.commit_all();
  b.commit_all();
  for (int l = 0; l < c.n_layers; ++l)
    for (int j = 0; j < static_cast<int>(prompt.size()); ++j)
      for (int e = 0; e < c.head_dim(); ++e) CHECK(a.key(l, 1, j)[e] == b.key(l, 1, j)[e]);
  for (int k = 0; k <= c.n_layers; ++k) {
    lm::KvCache x(c), y(c);
    lm::ForwardOptions o;
    o.stop_after = k;
    const auto early = lm::forward(m, x, batch, o);
    lm::LayerwiseForward p(m, y, batch);
    p.run(k);
    CHECK(p.done() == k);
    CHECK(p.head({0, 3, 5}).data == lm::apply_head(m, [&] {
            lm::Matrix h(3, c.d_model);
            for (int i = 0; i < 3; ++i)
              for (int e = 0; e < c.d_model; ++e) h.row(i)[e] = p.residual()[std::size_t(std::vector<int>{0, 3, 5}[i]) * c.d_model + e];
            return h;
          }()).data);
    CHECK(p.finish().logits.data == early.logits.data);
  }
  lm::KvCache z(c);
  lm::LayerwiseForward over(m, z, batch);
  CHECK_THROWS_AS(over.run(c.n_layers + 1), InputError);
}

TEST_CASE("lm layerwise: state copying fills the skipped layers' K/V from the exit hidden state") {
  const lm::ModelConfig c = deep_config();
  const lm::Model m = lm::random_model(c, 11, 0.3);
  const int exit = 2, hd = c.head_dim();
  lm::KvCache cache(c);
  const lm::Batch batch = lm::Batch::causal({2, 9, 17, 40}, 3);
  lm::LayerwiseForward pass(m, cache, batch);
  pass.run(exit);
  const std::vector<float> h = pass.residual();
  pass.copy_state();
  CHECK(pass.done() == c.n_layers);
  cache.commit_all();
  double worst = 0;
  for (int r = 0; r < batch.size(); ++r)
    for (int l = exit; l < c.n_layers; ++l) {
      std::vector<double> k, v;
      direct_kv(m, l, h.data() + std::size_t(r) * c.d_model, batch.rows[r].pos, k, v);
      for (int g = 0; g < c.n_kv_heads; ++g)
        for (int e = 0; e < hd; ++e) {
          worst = std::max(worst, std::abs(cache.key(l, g, r)[e] - k[g * hd + e]) / (1 + std::abs(k[g * hd + e])));
          worst = std::max(worst, std::abs(cache.value(l, g, r)[e] - v[g * hd + e]) / (1 + std::abs(v[g * hd + e])));
        }
    }
  CHECK(worst < 1e-5);
  // The layers run keep the K/V the full forward computes (bitwise).
  lm::KvCache full(c);
  lm::forward(m, full, batch);
  full.commit_all();
  for (int l = 0; l < exit; ++l)
    for (int e = 0; e < hd; ++e) CHECK(cache.value(l, 0, 3)[e] == full.value(l, 0, 3)[e]);
  // A state copy differs from the K/V the skipped blocks would have computed.
  CHECK(cache.key(c.n_layers - 1, 0, 1)[0] != full.key(c.n_layers - 1, 0, 1)[0]);
  // skip(): the residual passes unchanged.
  lm::KvCache s(c);
  lm::LayerwiseForward sk(m, s, batch);
  const std::vector<float> emb = sk.residual();
  sk.skip(3);
  CHECK(sk.residual() == emb);
  sk.run(2);
  CHECK(sk.done() == c.n_layers);
}
