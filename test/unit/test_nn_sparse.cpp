// nn/sparse (issue 30): the masks and topology updates of SMET / SET / RigL checked against hand
// computations (block layout with a short last block, magnitude pruning by block sums, regrowth
// among the blocks inactive before the update, RigL's gradient scores, the reference's prune count
// and its cap), the prune-fraction schedules in closed form, and the sparse AdamW arithmetic of
// SMET's parts: a regrown entry's first update by hand in the paper's form and the reference
// code's (local step restarting at 1, compounding warm-up), and the density-aware learning rate.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/sparse.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

TEST_CASE("sparse masks: exact block counts, a short last block, entries and density") {
  Rng rng(1);
  const SparseMask m = random_mask(10, 3, 0.5, rng);  // 4 blocks (3, 3, 3, 1): floor(4 * 0.5) = 2 active
  CHECK(m.num_blocks() == 4);
  REQUIRE(m.blocks.size() == 2);
  CHECK(m.blocks[0] < m.blocks[1]);
  std::size_t want = 0;
  for (std::int32_t b : m.blocks) want += b == 3 ? 1 : 3;
  CHECK(m.active_entries() == want);
  CHECK(m.entries().size() == want);
  CHECK(m.density() == doctest::Approx(double(want) / 10.0));
  SparseMask last{10, 3, {1, 3}};
  CHECK(last.entries() == std::vector<std::int32_t>{3, 4, 5, 9});
  CHECK(sparse_block_count(100, 1, 0.25) == 25);
  CHECK(sparse_block_count(100, 1, 0.001) == 1);  // never empty
  CHECK(sparse_block_count(7, 1, 1.0) == 7);
  // every block equally likely: 4000 masks of 1 block in 4
  std::vector<int> hits(4, 0);
  for (int i = 0; i < 4000; ++i) ++hits[std::size_t(random_mask(4, 1, 0.25, rng).blocks[0])];
  for (int h : hits) CHECK(std::abs(h - 1000) < 120);  // ~4 sigma
}

TEST_CASE("sparse topology: magnitude prune by block sums, regrowth outside the old mask, RigL by |g|") {
  // 6 blocks of 2: |w| sums 3, 0.5, -, 2, -, 0.25 for active blocks 0, 1, 3, 5
  const std::vector<float> w = {1, -2, 0.25f, 0.25f, 0, 0, 2, 0, 0, 0, 0.2f, -0.05f};
  SparseMask m{12, 2, {0, 1, 3, 5}};
  CHECK(prune_count(m, 0.5) == 2);   // keep max(1, floor(4 * 0.5)) = 2
  CHECK(prune_count(m, 0.2) == 1);   // keep floor(3.2) = 3
  CHECK(prune_count(m, 0.9) == 2);   // keep 1 would prune 3, but only 2 blocks are inactive
  SparseMask full{4, 1, {0, 1, 2, 3}};
  CHECK(prune_count(full, 0.5) == 0);  // nothing to regrow into: left as it is
  const auto pruned = magnitude_prune(m, w.data(), 2);
  CHECK(pruned == std::vector<std::int32_t>{1, 5});
  // regrowth by scores: only blocks 2 and 4 (inactive before) qualify, whatever the others score
  std::vector<float> score = {0.9f, 0.99f, 0.1f, 0.95f, 0.2f, 0.97f};
  CHECK(score_regrow(m, score, 1) == std::vector<std::int32_t>{4});
  CHECK(score_regrow(m, score, 2) == std::vector<std::int32_t>{2, 4});
  CHECK_THROWS_AS(score_regrow(m, std::vector<float>(5, 0.f), 1), UsageError);
  // RigL: the pruned blocks compete again with the inactive ones; |g| sums 0, 4, 1, 0, 3, 5
  const std::vector<float> g = {0, 0, -2, 2, 1, 0, 0, 0, 3, 0, 0, -5};
  CHECK(gradient_regrow(m, pruned, g.data(), 2) == std::vector<std::int32_t>{1, 5});
  CHECK(gradient_regrow(m, {1}, g.data(), 2) == std::vector<std::int32_t>{1, 4});
  SparseMask after = m;
  apply_topology(after, pruned, {2, 4});
  CHECK(after.blocks == std::vector<std::int32_t>{0, 2, 3, 4});
}

TEST_CASE("sparse prune schedules: cosine, linear and constant in closed form") {
  SparseOptions o;
  o.prune_rate = 0.2;
  o.prune_rate_min = 0.005;
  CHECK(prune_fraction(o, 0, 1000) == doctest::Approx(0.2));
  CHECK(prune_fraction(o, 500, 1000) == doctest::Approx(0.1025));
  CHECK(prune_fraction(o, 1000, 1000) == doctest::Approx(0.005));
  CHECK(prune_fraction(o, 250, 1000) == doctest::Approx(0.005 + 0.195 * (1 + std::cos(M_PI / 4)) / 2));
  o.schedule = PruneSchedule::linear;
  CHECK(prune_fraction(o, 250, 1000) == doctest::Approx(0.2 - 0.195 / 4));
  CHECK(prune_fraction(o, 2000, 1000) == doctest::Approx(0.005));
  o.schedule = PruneSchedule::constant;
  CHECK(prune_fraction(o, 900, 1000) == doctest::Approx(0.2));
}

TEST_CASE("sparse options: smet implies its parts, bad settings are refused with the flag") {
  SparseOptions o;
  o.method = parse_sparse_method("smet");
  resolve_sparse_options(o, false);
  CHECK(o.local_steps);
  CHECK(o.density_lr);
  CHECK(o.warmup == 100);
  SparseOptions w;
  w.method = SparseMethod::smet;
  w.warmup = 0;
  resolve_sparse_options(w, true);  // an explicit --sparse-warmup 0 turns the warm-up off
  CHECK(w.warmup == 0);
  CHECK(parse_sparse_method("static") == SparseMethod::fixed);
  CHECK(sparse_method_name(SparseMethod::fixed) == "static");
  CHECK_THROWS_AS(parse_sparse_method("magnitude"), UsageError);
  for (double d : {0.0, -0.5, 1.5, std::nan("")}) {
    SparseOptions b;
    b.density = d;
    CHECK_THROWS_WITH_AS(check_sparse_options(b), doctest::Contains("density must lie in (0, 1]"), UsageError);
  }
  SparseOptions u;
  u.update_every = 0;
  CHECK_THROWS_AS(check_sparse_options(u), UsageError);
  SparseOptions p;
  p.prune_rate = 1.0;
  CHECK_THROWS_AS(check_sparse_options(p), UsageError);
}

namespace {
/// One sparse tensor of 6 entries, entries {0, 2, 5} active, its gradient sized to them.
struct OneTensor {
  ParamStore<float> s;
  OneTensor() {
    s.add("blk.0.attn_q.weight", {2, 3}, true);
    s.params[0].value = {0.5f, 0, -0.25f, 0, 0, 1.0f};
  }
};
}  // namespace

// A regrown entry's first update by hand: m = v = 0 before it, gradient g, Adam betas b1, b2.
// Paper form: local step t = 1, so m^ = g, sqrt(v^) = |g|, and the warm-up scales the update by
// 1 / W: w -= lr / W * g / (|g| + eps).  The reference code's: the step restarts at 1 and is
// incremented before the update (t = 2), m is multiplied by t / W and stored so.
TEST_CASE("adamw sparse: a regrown entry's first update equals the hand-computed warm-up update") {
  AdamWOptions o;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  o.weight_decay = 0;
  const double lr = 1e-2;
  const int W = 100;
  for (int code = 0; code < 2; ++code) {
    OneTensor t;
    AdamW opt(t.s, o);
    opt.set_active(0, {0, 2, 5});
    opt.set_per_entry_steps(true);
    opt.set_momentum_warmup(W, code);
    t.s.params[0].grad = {0.1f, -0.2f, 0.3f};
    for (int k = 0; k < 30; ++k) opt.step(t.s, lr);  // 30 steps: the entries' local count is 30
    CHECK(opt.entry_steps(0) == std::vector<std::int32_t>{30, 30, 30});
    // entry 2 is pruned and entry 3 regrown (w = 0)
    t.s.params[0].value[2] = 0;
    opt.set_active(0, {0, 3, 5}, code ? 1 : 0);
    const float w0 = t.s.params[0].value[0], w5 = t.s.params[0].value[5];
    const double g = -0.4;
    t.s.params[0].grad = {0.1f, static_cast<float>(g), 0.3f};
    opt.step(t.s, lr);
    double want;
    if (!code) {
      want = -lr / W * g / (std::fabs(g) + o.eps);
    } else {
      const double tt = 2, m = (1 - o.beta1) * g * (tt / W), v = (1 - o.beta2) * g * g;
      want = -lr / (1 - std::pow(o.beta1, tt)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(o.beta2, tt)) + o.eps);
    }
    INFO("code form " << code);
    CHECK(t.s.params[0].value[3] == doctest::Approx(want).epsilon(1e-5));
    CHECK(t.s.params[0].value[2] == 0.0f);  // pruned: never touched again
    CHECK(t.s.params[0].value[1] == 0.0f);
    CHECK(t.s.params[0].value[0] != w0);    // the kept entries go on
    CHECK(t.s.params[0].value[5] != w5);
    CHECK(opt.entry_steps(0) == std::vector<std::int32_t>{31, code ? 2 : 1, 31});
  }
  // Without local steps (SET + Adam): the regrown entry takes the global count's bias correction,
  // so its first update is (1 - b1) / sqrt(1 - b2) ~ 3.16 x a sign step: the spike SMET removes.
  OneTensor t;
  AdamW opt(t.s, o);
  opt.set_active(0, {0, 2, 5});
  t.s.params[0].grad = {0.1f, -0.2f, 0.3f};
  for (int k = 0; k < 3000; ++k) opt.step(t.s, 1e-6);
  opt.set_active(0, {0, 3, 5});
  t.s.params[0].grad = {0.1f, -0.4f, 0.3f};
  opt.step(t.s, lr);
  const double bc1 = 1 - std::pow(0.9, 3001), bc2 = 1 - std::pow(0.999, 3001);
  CHECK(t.s.params[0].value[3] == doctest::Approx(lr / bc1 * 0.1 * 0.4 / (std::sqrt(0.001 * 0.16) / std::sqrt(bc2) + o.eps)).epsilon(1e-4));
  CHECK(t.s.params[0].value[3] / lr == doctest::Approx(0.1 / std::sqrt(0.001 * bc2) * bc2 / bc1).epsilon(1e-3));
}

TEST_CASE("adamw sparse: the code form's warm-up compounds, the paper's does not, and lr / d scales the step") {
  AdamWOptions o;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.weight_decay = 0;
  const int W = 4;
  // a constant gradient g over steps 1..3 from m = 0: paper m_t = (1 - b1^t) g, stored untouched;
  // code m_t = (b1 m_{t-1} + (1 - b1) g) t / W
  for (int code = 0; code < 2; ++code) {
    OneTensor t;
    AdamW opt(t.s, o);
    opt.set_active(0, {0, 2, 5});
    opt.set_per_entry_steps(true);
    opt.set_momentum_warmup(W, code);
    t.s.params[0].grad = {1.0f, 1.0f, 1.0f};
    double m = 0;
    for (int s = 1; s <= 3; ++s) {
      opt.step(t.s, 1e-3);
      m = 0.9 * m + 0.1;
      if (code) m *= double(s) / W;
    }
    CHECK(opt.state()[0].data->at(0) == doctest::Approx(m).epsilon(1e-6));
  }
  // lr scale: 1 / d multiplies the step exactly as a larger lr does
  OneTensor a, b;
  AdamW oa(a.s, o), ob(b.s, o);
  oa.set_active(0, {0, 2, 5});
  ob.set_active(0, {0, 2, 5});
  ob.set_lr_scale(0, 2.0);
  a.s.params[0].grad = b.s.params[0].grad = {0.3f, -0.1f, 0.2f};
  oa.step(a.s, 2e-3);
  ob.step(b.s, 1e-3);
  CHECK(a.s.params[0].value == b.s.params[0].value);
  CHECK_THROWS_AS(ob.set_lr_scale(0, 0.0), UsageError);
  // a gradient of the wrong size (dense while the state is sparse) is refused, not read past
  b.s.params[0].grad.assign(6, 0.0f);
  CHECK_THROWS_AS(ob.step(b.s, 1e-3), UsageError);
}
