// decode/recdepth_sampler (issue 36): ar against the engine's own decode loop, the diffusion-forcing
// sampler's degenerate case (inner recurrence r, wavefront 1, no EMA, no noise) against ar token
// for token, ar-adaptive at threshold 0 (never exits) and at +inf (one iteration) against hand
// loops, the freeze indexing against the reference's clear_last_k_entries arithmetic worked by
// hand, determinism across thread counts, KL and scoring against direct double computations.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "decode/recdepth_sampler.hpp"
#include "lm/forward.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

namespace {

lm::ModelConfig rd_config() {
  lm::ModelConfig c;
  c.vocab_size = 64;
  c.d_model = 16;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.n_ctx = 96;
  c.block_types = {lm::BlockType::recdepth_prelude, lm::BlockType::recdepth_core, lm::BlockType::recdepth_core,
                   lm::BlockType::recdepth_coda};
  c.recdepth.mean_recurrence = 4;
  c.recdepth.backprop_depth = 2;
  c.recdepth.qk_bias = true;
  c.recdepth.state_std = 0.63;
  c.recdepth.embed_scale = 4.0;  // sqrt(d_model)
  c.eos_id = -1;
  return c;
}

const lm::Model& rd_model() {
  static const lm::Model m = lm::random_model(rd_config(), 36, 0.35);
  return m;
}

const std::vector<int> kPrompt{1, 9, 33, 4, 17, 50};
constexpr std::uint64_t kSeed = 7;

/// AR decoding written directly on lm::forward: the prompt at recurrence r, then one row per
/// token at recurrence `step_r`, every state from (kSeed, position); greedy unless `sc` samples.
std::vector<int> engine_ar(const lm::Model& m, int r, int step_r, int n, lm::SamplerConfig sc = {}) {
  lm::KvCache cache(m.config);
  lm::Sampler sampler(sc);
  lm::ForwardOptions o;
  o.recurrence = r;
  o.state_seed = kSeed;
  auto fr = lm::forward(m, cache, lm::Batch::causal(kPrompt, 0), o);
  cache.commit_all();
  std::vector<int> out{sampler.sample(fr.logits.row(static_cast<int>(kPrompt.size()) - 1), m.config.vocab_size)};
  o.recurrence = step_r;
  while (static_cast<int>(out.size()) < n) {
    lm::Batch b;
    b.add(out.back(), static_cast<int>(kPrompt.size() + out.size()) - 1);
    fr = lm::forward(m, cache, b, o);
    cache.commit_all();
    out.push_back(sampler.sample(fr.logits.row(0), m.config.vocab_size));
  }
  return out;
}

decode::RecdepthSampleConfig base(decode::RecdepthMethod method, int n) {
  decode::RecdepthSampleConfig c;
  c.method = method;
  c.max_new_tokens = n;
  c.state_seed = kSeed;
  return c;
}

decode::RecdepthSampleConfig degenerate(int r, int n) {
  decode::RecdepthSampleConfig c = base(decode::RecdepthMethod::diffusion_forcing, n);
  c.recurrence = r;
  c.inner_recurrence = r;
  c.max_wavefront = 1;
  c.headway = 1;
  c.ema = 0;
  c.state_noise = 0;
  return c;
}

}  // namespace

TEST_CASE("recdepth sampler: ar equals the engine's own prefill-and-decode loop") {
  const lm::Model& m = rd_model();
  for (int r : {0, 3}) {
    auto cfg = base(decode::RecdepthMethod::ar, 20);
    cfg.recurrence = r;
    const auto res = decode::recdepth_generate(m, kPrompt, cfg);
    const int rr = r > 0 ? r : m.config.recdepth.mean_recurrence;
    CHECK(res.tokens == engine_ar(m, rr, rr, 20));
    CHECK(res.recurrence == rr);
    CHECK(res.forwards == 19);
    CHECK(res.core_iterations == 19LL * rr);
    CHECK(res.stop_reason == "max_new_tokens");
  }
  // The model is not degenerate: the greedy continuation uses several ids.
  const auto toks = engine_ar(m, 4, 4, 20);
  int distinct = 0;
  for (int v = 0; v < m.config.vocab_size; ++v) distinct += std::find(toks.begin(), toks.end(), v) != toks.end();
  CHECK(distinct >= 4);
}

TEST_CASE("recdepth sampler: diffusion forcing with inner r, wavefront 1, no EMA and no noise reproduces ar token for token") {
  const lm::Model& m = rd_model();
  for (int r : {4, 3})
    for (auto rule : {decode::FreezeRule::latent_diff, decode::FreezeRule::token_stability, decode::FreezeRule::fixed}) {
      CAPTURE(r);
      CAPTURE(decode::freeze_rule_name(rule));
      auto cfg = degenerate(r, 24);
      cfg.freeze = rule;
      const auto df = decode::recdepth_generate(m, kPrompt, cfg);
      CHECK(df.tokens == engine_ar(m, r, r, 24));
      REQUIRE(df.steps.size() == 23);
      for (const auto& s : df.steps) {
        CHECK(s.wavefront == 1);
        CHECK(s.committed == 1);
        CHECK(s.core_iterations == r);
      }
      for (int it : df.recurrence_per_token) CHECK(it == r);
    }
  // Sampling too: one row per step draws from the same generator in the same order.
  lm::SamplerConfig sc;
  sc.temperature = 1.3;
  sc.top_p = 0.95;
  sc.seed = 11;
  auto cfg = degenerate(4, 24);
  cfg.sampler = sc;
  auto ar = base(decode::RecdepthMethod::ar, 24);
  ar.sampler = sc;
  const auto a = decode::recdepth_generate(m, kPrompt, ar);
  CHECK(decode::recdepth_generate(m, kPrompt, cfg).tokens == a.tokens);
  CHECK(a.tokens == engine_ar(m, 4, 4, 24, sc));
  CHECK(a.tokens != engine_ar(m, 4, 4, 24));  // the draw differs from greedy somewhere
}

TEST_CASE("recdepth sampler: ar-adaptive at threshold 0 equals ar, at +inf it is one iteration per token") {
  const lm::Model& m = rd_model();
  auto cfg = base(decode::RecdepthMethod::ar_adaptive, 16);
  cfg.kl_threshold = 0;
  const auto never = decode::recdepth_generate(m, kPrompt, cfg);
  CHECK(never.tokens == engine_ar(m, 4, 4, 16));
  CHECK(never.core_iterations == 15 * 4);
  CHECK(never.coda_rows == 15 * 4);
  for (const auto& s : never.steps) CHECK(s.kl >= 0);
  // KL(p_0 uniform || p_1) >= 0 is always below +inf: every token exits after its first iteration,
  // which is decoding at recurrence 1 after a prefill at r (the latest-KV cache then holds each
  // generated row's iteration-1 K/V).
  cfg.kl_threshold = 1e300;
  const auto once = decode::recdepth_generate(m, kPrompt, cfg);
  CHECK(once.tokens == engine_ar(m, 4, 1, 16));
  CHECK(once.core_iterations == 15);
  CHECK(once.recurrence_per_token.front() == 4);
  for (std::size_t i = 1; i < once.recurrence_per_token.size(); ++i) CHECK(once.recurrence_per_token[i] == 1);
  // A middling threshold lands in between and records what it spent.
  cfg.kl_threshold = 0.05;
  const auto mid = decode::recdepth_generate(m, kPrompt, cfg);
  long long sum = 0;
  for (std::size_t i = 1; i < mid.recurrence_per_token.size(); ++i) sum += mid.recurrence_per_token[i];
  CHECK(sum == mid.core_iterations);
  CHECK(mid.core_iterations >= 15);
  CHECK(mid.core_iterations <= 60);
}

TEST_CASE("recdepth sampler: the freeze position follows the reference's indexing") {
  // Reference (generate_diffusion_style): with cache_index c and the last i with delta_i < exit_t,
  // k = c + i + 1, clear_last_k_entries(len - headway_in_step - k + 1) leaves k - 1 = c + i cache
  // entries and frozen_tokens = current_sequence[:k]: position c + i is the last frozen one.
  decode::RecdepthSampleConfig cfg;
  cfg.inner_recurrence = 4;
  cfg.headway = 2;
  cfg.exit_threshold = 0.03;
  const std::vector<double> delta{0.01, 0.2, 0.02, 0.5, 0.04};
  const std::vector<int> stable{9, 0, 3, 1, 0};
  cfg.freeze = decode::FreezeRule::latent_diff;
  CHECK(decode::df_freeze_position(cfg, 32, 10, 0, delta, stable) == 12);  // the LAST below 0.03 (i = 2), not the first run
  CHECK(decode::df_freeze_position(cfg, 32, 10, 0, {0.5, 0.2}, {0, 0}) == 10);
  cfg.exit_threshold = 0.6;
  CHECK(decode::df_freeze_position(cfg, 32, 10, 0, delta, stable) == 14);
  // token-stability: counts > r / inner (32 / 4 = 8 in the reference's defaults); entry 0 (the
  // already frozen position) never counts.
  cfg.freeze = decode::FreezeRule::token_stability;
  CHECK(decode::df_freeze_position(cfg, 32, 10, 0, delta, stable) == 10);
  CHECK(decode::df_freeze_position(cfg, 8, 10, 0, delta, stable) == 12);  // 8 / 4 = 2: entry 2 (3 > 2)
  CHECK(decode::df_freeze_position(cfg, 4, 10, 0, delta, stable) == 12);  // 4 / 4 = 1: entry 3 (1) is not > 1
  CHECK(decode::df_freeze_position(cfg, 2, 10, 0, delta, stable) == 13);  // 2 / 4 = 0: entry 3 (1 > 0)
  // fixed: nothing until step > r / inner, then headway positions (at most the wavefront).
  cfg.freeze = decode::FreezeRule::fixed;
  CHECK(decode::df_freeze_position(cfg, 32, 10, 8, delta, stable) == 10);
  CHECK(decode::df_freeze_position(cfg, 32, 10, 9, delta, stable) == 12);
  CHECK(decode::df_freeze_position(cfg, 32, 10, 9, {0.1}, {0}) == 11);
}

TEST_CASE("recdepth sampler: diffusion forcing is deterministic across thread counts") {
  const lm::Model& m = rd_model();
  const int before = threads();
  auto fixed = base(decode::RecdepthMethod::diffusion_forcing, 20);
  fixed.freeze = decode::FreezeRule::fixed;
  fixed.ema = 0;
  fixed.state_noise = 0;
  fixed.inner_recurrence = 1;
  fixed.headway = 2;
  fixed.max_wavefront = 6;
  auto defaults = base(decode::RecdepthMethod::diffusion_forcing, 20);
  defaults.inner_recurrence = 1;
  defaults.headway = 2;
  for (const auto& cfg : {fixed, defaults}) {
    set_threads(1);
    const auto a = decode::recdepth_generate(m, kPrompt, cfg);
    set_threads(3);
    const auto b = decode::recdepth_generate(m, kPrompt, cfg);
    set_threads(before);
    CHECK(a.tokens == b.tokens);
    CHECK(a.recurrence_per_token == b.recurrence_per_token);
    REQUIRE(a.steps.size() == b.steps.size());
    for (std::size_t i = 0; i < a.steps.size(); ++i) {
      CHECK(a.steps[i].wavefront == b.steps[i].wavefront);
      CHECK(a.steps[i].committed == b.steps[i].committed);
    }
    CHECK(a.tokens.size() == 20);
    int widest = 0;
    for (const auto& s : a.steps) widest = std::max(widest, s.wavefront);
    CHECK(widest > 1);  // a real wavefront ran
  }
}

TEST_CASE("recdepth sampler: diffusion-forcing bookkeeping") {
  const lm::Model& m = rd_model();
  // latent-diff at threshold 0 never fires (delta >= 0), so only the cap at r freezes: every token
  // is predicted by a row with exactly r = 4 iterations (inner 2 divides 4), and the wavefront
  // runs ahead of the commits.
  auto cfg = base(decode::RecdepthMethod::diffusion_forcing, 18);
  cfg.inner_recurrence = 2;
  cfg.exit_threshold = 0;
  cfg.headway = 1;
  cfg.max_wavefront = 3;
  std::vector<int> streamed;
  const auto res = decode::recdepth_generate(m, kPrompt, cfg, [&](const std::vector<int>& t) { streamed.insert(streamed.end(), t.begin(), t.end()); });
  CHECK(res.tokens.size() == 18);
  CHECK(streamed == res.tokens);
  for (int it : res.recurrence_per_token) CHECK(it == 4);
  long long iters = 0;
  int committed = 0, frozen = 1;
  for (const auto& s : res.steps) {
    CHECK(s.wavefront >= 1);
    CHECK(s.wavefront <= 3);
    CHECK(s.max_iterations <= 4);
    CHECK(s.core_iterations == 2LL * s.wavefront);
    CHECK(s.frozen == frozen + s.committed);
    frozen = s.frozen;
    iters += s.core_iterations;
    committed += s.committed;
  }
  CHECK(committed == 17);
  CHECK(iters == res.core_iterations);
  CHECK(res.forwards == static_cast<long long>(res.steps.size()));
  // With the pipeline two rows deep (r / inner = 2), a token is frozen every step after the first.
  CHECK(res.steps.size() == 18);
  // The first token is the prefill's: the same for every method.
  CHECK(res.tokens.front() == engine_ar(m, 4, 4, 1).front());
  // An exit threshold above every delta freezes as far as the wavefront reaches each step.
  cfg.exit_threshold = 1e9;
  cfg.headway = 2;
  cfg.max_wavefront = 8;
  const auto eager = decode::recdepth_generate(m, kPrompt, cfg);
  CHECK(eager.tokens.size() == 18);
  for (std::size_t i = 1; i < eager.steps.size(); ++i) CHECK(eager.steps[i].committed >= 1);
  CHECK(eager.steps.size() < res.steps.size());
}

TEST_CASE("recdepth sampler: stops at eos and at n_ctx") {
  lm::Model m = rd_model();
  const auto ref = engine_ar(m, 4, 4, 12);
  m.config.eos_id = ref[5];
  std::size_t first = 0;
  while (ref[first] != m.config.eos_id) ++first;
  const std::vector<int> want(ref.begin(), ref.begin() + std::ptrdiff_t(first) + 1);
  const auto ar = decode::recdepth_generate(m, kPrompt, base(decode::RecdepthMethod::ar, 12));
  CHECK(ar.tokens == want);
  CHECK(ar.stop_reason == "eos");
  CHECK(decode::recdepth_generate(m, kPrompt, degenerate(4, 12)).tokens == want);
  auto wide = base(decode::RecdepthMethod::diffusion_forcing, 40);
  wide.headway = 3;
  const auto df = decode::recdepth_generate(m, kPrompt, wide);
  if (df.stop_reason == "eos") {
    CHECK(df.tokens.back() == m.config.eos_id);
    CHECK(std::count(df.tokens.begin(), df.tokens.end(), m.config.eos_id) == 1);
  } else {
    CHECK(df.tokens.size() == 40);
  }
  m.config.eos_id = -1;
  m.config.n_ctx = 10;  // 6 prompt tokens: positions 6..9 hold 4 generated tokens
  for (auto method : {decode::RecdepthMethod::ar, decode::RecdepthMethod::ar_adaptive, decode::RecdepthMethod::diffusion_forcing}) {
    const auto r = decode::recdepth_generate(m, kPrompt, base(method, 30));
    CHECK(r.tokens.size() == 4);
    CHECK(r.stop_reason == "n_ctx");
  }
}

TEST_CASE("recdepth sampler: KL of logits against a direct computation") {
  const std::vector<float> p{0.5f, -1.0f, 2.0f, 0.0f}, q{1.5f, 0.25f, -0.5f, 0.0f};
  auto softmax = [](const std::vector<float>& x) {
    std::vector<double> e;
    double s = 0;
    for (float v : x) s += std::exp(double(v));
    for (float v : x) e.push_back(std::exp(double(v)) / s);
    return e;
  };
  const auto P = softmax(p), Qd = softmax(q);
  double want = 0, want_u = 0;
  for (std::size_t i = 0; i < P.size(); ++i) {
    want += P[i] * std::log(P[i] / Qd[i]);
    want_u += 0.25 * std::log(0.25 / Qd[i]);
  }
  CHECK(decode::kl_logits(p.data(), q.data(), 4) == doctest::Approx(want).epsilon(1e-12));
  CHECK(decode::kl_logits(nullptr, q.data(), 4) == doctest::Approx(want_u).epsilon(1e-12));
  CHECK(decode::kl_logits(p.data(), p.data(), 4) == 0.0);
  const std::vector<float> shifted{10.5f, 9.0f, 12.0f, 10.0f};  // softmax is shift-invariant
  CHECK(decode::kl_logits(shifted.data(), p.data(), 4) == doctest::Approx(0.0).epsilon(1e-12));
}

TEST_CASE("recdepth sampler: score_continuation is the teacher-forced mean NLL at recurrence r") {
  const lm::Model& m = rd_model();
  const std::vector<int> cont{3, 8, 60, 2, 2};
  const auto s = decode::score_continuation(m, kPrompt, cont, 4, kSeed);
  std::vector<int> all = kPrompt;
  all.insert(all.end(), cont.begin(), cont.end());
  lm::KvCache cache(m.config);
  lm::ForwardOptions o;
  o.recurrence = 4;
  o.state_seed = kSeed;
  const auto fr = lm::forward(m, cache, lm::Batch::causal(all, 0), o);
  double nll = 0;
  for (std::size_t j = 0; j < cont.size(); ++j) {
    const float* row = fr.logits.row(static_cast<int>(kPrompt.size() + j) - 1);
    double z = 0;
    for (int v = 0; v < m.config.vocab_size; ++v) z += std::exp(double(row[v]));
    nll -= double(row[cont[j]]) - std::log(z);
  }
  CHECK(s.tokens == 5);
  CHECK(s.mean_nll == doctest::Approx(nll / 5).epsilon(1e-9));
  CHECK(s.perplexity == doctest::Approx(std::exp(nll / 5)).epsilon(1e-9));
  CHECK(decode::agreement({1, 2, 3}, {1, 5, 3, 4}) == doctest::Approx(2.0 / 3));
  CHECK(decode::agreement({}, {1}) == 0.0);
}

TEST_CASE("recdepth sampler: refuses a llama model and bad settings") {
  lm::ModelConfig c = rd_config();
  c.block_types.clear();
  c.n_layers = 3;
  const lm::Model llama = lm::random_model(c, 1, 0.1);
  try {
    decode::recdepth_generate(llama, kPrompt, base(decode::RecdepthMethod::ar, 4));
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("not a recurrent-depth model: its blocks are 3 llama") != std::string::npos);
  }
  const lm::Model& m = rd_model();
  auto bad = base(decode::RecdepthMethod::diffusion_forcing, 4);
  bad.inner_recurrence = 0;
  CHECK_THROWS_AS(decode::recdepth_generate(m, kPrompt, bad), UsageError);
  bad = base(decode::RecdepthMethod::diffusion_forcing, 4);
  bad.headway = 3;
  bad.max_wavefront = 2;
  CHECK_THROWS_AS(decode::recdepth_generate(m, kPrompt, bad), UsageError);
  CHECK_THROWS_AS(decode::recdepth_generate(m, {}, base(decode::RecdepthMethod::ar, 4)), InputError);
  CHECK_THROWS_AS(decode::recdepth_generate(m, {1, 64}, base(decode::RecdepthMethod::ar, 4)), InputError);
  CHECK_THROWS_AS(decode::parse_recdepth_method("diffusion"), UsageError);
  CHECK(decode::parse_freeze_rule("token-stability") == decode::FreezeRule::token_stability);
}
