// decode/early_exit and decode/exit_calibration (issue 28): never exiting equals the full model,
// the proxy head's logits are the full head's rows bitwise, the top-2 gap against its definition,
// and the calibration's teacher-forced simulation against the runtime decode step on the same rows.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "decode/early_exit.hpp"
#include "decode/exit_calibration.hpp"
#include "lm/forward.hpp"
#include "lm/layerwise.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"
#include "util/error.hpp"

using namespace icmlkit;

namespace {

lm::ModelConfig exit_config() {
  lm::ModelConfig c;
  c.vocab_size = 64;
  c.d_model = 16;
  c.n_layers = 6;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.n_ctx = 96;
  return c;
}

/// Prefills `prompt` into `cache` (committed) and returns the greedy token after it.
int prefill(const lm::Model& m, lm::KvCache& cache, const std::vector<int>& prompt) {
  lm::ForwardOptions o;
  o.greedy_only = true;
  o.all_logits = false;
  o.logits_rows = {static_cast<int>(prompt.size()) - 1};
  const auto fr = lm::forward(m, cache, lm::Batch::causal(prompt, 0), o);
  cache.commit_all();
  return fr.greedy[0];
}

std::vector<int> decode_all(const lm::Model& m, const std::vector<int>& prompt, int n, const decode::ExitConfig& cfg) {
  lm::KvCache cache(m.config);
  std::vector<int> out{prefill(m, cache, prompt)};
  const auto cost = decode::StepCost::of(m.config, 10);
  for (int t = 1; t < n; ++t)
    out.push_back(decode::exit_decode_step(m, cache, out.back(), static_cast<int>(prompt.size()) + t - 1, t, cfg, cost).token);
  return out;
}

}  // namespace

TEST_CASE("decode exit: a threshold above 1 never exits and equals the full model token for token") {
  const lm::ModelConfig c = exit_config();
  const lm::Model m = lm::random_model(c, 21, 0.4);
  const std::vector<int> prompt{1, 9, 33, 4, 17};
  decode::ExitConfig full;
  full.max_new = 24;
  const auto ref = decode_all(m, prompt, 24, full);
  // The full method is the engine's greedy decoding.
  {
    lm::KvCache cache(c);
    auto fr = lm::forward(m, cache, lm::Batch::causal(prompt, 0));
    cache.commit_all();
    std::vector<int> ar{lm::greedy_token(fr.logits.row(static_cast<int>(prompt.size()) - 1), c.vocab_size)};
    for (int t = 1; t < 24; ++t) {
      lm::Batch b;
      b.add(ar.back(), static_cast<int>(prompt.size()) + t - 1);
      fr = lm::forward(m, cache, b);
      cache.commit_all();
      ar.push_back(lm::greedy_token(fr.logits.row(0), c.vocab_size));
    }
    CHECK(ar == ref);
  }
  for (auto method : {decode::ExitMethod::wave, decode::ExitMethod::calm, decode::ExitMethod::dvp}) {
    decode::ExitConfig cfg;
    cfg.method = method;
    cfg.threshold = 1.5;
    cfg.window_start = 2;
    cfg.window_end = 4;
    cfg.proxy_k = 8;
    cfg.min_layer = 1;
    cfg.dvp_layer = 1;
    cfg.max_new = 24;
    cfg.validate(c);
    CHECK(decode_all(m, prompt, 24, cfg) == ref);
  }
  // A layerskip exit at the last block is the full model too.
  decode::ExitConfig ls;
  ls.method = decode::ExitMethod::layerskip;
  ls.exit_layer = c.n_layers;
  CHECK(decode_all(m, prompt, 24, ls) == ref);
}

TEST_CASE("decode exit: the proxy head is the full head's rows bitwise, and the top-2 gap is p1 - p2") {
  const lm::ModelConfig c = exit_config();
  const lm::Model m = lm::random_model(c, 5, 0.4);
  lm::KvCache cache(c);
  const lm::Batch b = lm::Batch::causal({1, 2, 3}, 0);
  lm::LayerwiseForward pass(m, cache, b);
  pass.run(3);
  const std::vector<int> ids{40, 3, 17, 63, 0};
  const lm::Matrix full = pass.head({2}), proxy = pass.head({2}, ids);
  for (std::size_t i = 0; i < ids.size(); ++i) CHECK(proxy.row(0)[i] == full.row(0)[ids[i]]);
  const std::vector<float> z{0.5f, 2.0f, -1.0f, 1.5f};
  double sum = 0;
  for (float v : z) sum += std::exp(double(v));
  int best = -1;
  CHECK(decode::top2_gap(z.data(), 4, &best) == doctest::Approx((std::exp(2.0) - std::exp(1.5)) / sum).epsilon(1e-12));
  CHECK(best == 1);
}

TEST_CASE("decode exit: the calibration's simulation predicts the runtime decode step on the same rows") {
  const lm::ModelConfig c = exit_config();
  const lm::Model m = lm::random_model(c, 8, 0.6);
  std::vector<int> toks;
  for (int i = 0; i < 40; ++i) toks.push_back((i * 13 + 5) % c.vocab_size);
  decode::LensData lens = decode::make_lens(c, {8, 16});
  decode::add_lens_window(m, toks, lens);
  REQUIRE(lens.tokens() == toks.size());
  const auto agree = decode::depth_agreement(lens);
  CHECK(agree.back() == 1.0);
  const auto sat = decode::saturation_histogram(lens);
  std::int64_t total = 0;
  for (auto v : sat) total += v;
  CHECK(total == static_cast<std::int64_t>(toks.size()));
  const auto cost = decode::StepCost::of(c, 20);
  // For each row r >= 1, the decode step on token r after a full prefill of tokens < r sees the
  // lens's hidden states: its exit depth and token must be the simulation's.
  for (const double tau : {0.05, 0.2}) {
    decode::ExitConfig w;
    w.method = decode::ExitMethod::wave;
    w.window_start = 2;
    w.window_end = 4;
    w.proxy_k = 8;
    w.threshold = tau;
    decode::ExitConfig cm;
    cm.method = decode::ExitMethod::calm;
    cm.min_layer = 1;
    cm.threshold = tau;
    int exits = 0;
    for (int r = 1; r < 40; r += 3) {
      lm::KvCache cache(c);
      lm::forward(m, cache, lm::Batch::causal(std::vector<int>(toks.begin(), toks.begin() + r), 0));
      cache.commit_all();
      lm::KvCache cache2 = cache;
      const auto sw = decode::exit_decode_step(m, cache, toks[r], r, 1, w, cost);
      const auto sc = decode::exit_decode_step(m, cache2, toks[r], r, 1, cm, cost);
      int f = c.n_layers;
      for (int l = w.window_start; l <= w.window_end; ++l)
        if (lens.proxy_gap[w.window_start - 1][0][l - w.window_start][r] >= tau) {
          f = l;
          break;
        }
      CHECK(sw.depth == f);
      if (f < c.n_layers) {
        ++exits;
        CHECK((sw.token == lens.final_argmax[r]) == bool(lens.proxy_ok[w.window_start - 1][0][f - w.window_start][r]));
      } else {
        CHECK(sw.token == lens.final_argmax[r]);
      }
      int g = c.n_layers;
      for (int l = 1; l < c.n_layers; ++l)
        if (lens.gap[l - 1][r] >= tau) {
          g = l;
          break;
        }
      CHECK(sc.depth == g);
      CHECK(sc.token == (g < c.n_layers ? lens.argmax[g - 1][r] : lens.final_argmax[r]));
    }
    if (tau == 0.05) CHECK(exits > 0);
  }
  // The search meets a reachable target, and a never-exiting setting has agreement 1.
  const auto ch = decode::calibrate(lens, decode::ExitMethod::wave, 0.5, cost);
  CHECK(ch.met);
  CHECK(ch.agreement >= 0.5);
  decode::ExitConfig never;
  never.method = decode::ExitMethod::wave;
  never.window_start = 1;
  never.window_end = 5;
  never.proxy_k = 16;
  never.threshold = 1.5;
  const auto sim = decode::simulate(lens, never, cost);
  CHECK(sim.agreement == 1.0);
  CHECK(sim.exit_rate == 0.0);
  CHECK(sim.mean_depth == c.n_layers);
}

TEST_CASE("decode exit: settings are validated, skipdecode's schedule falls linearly") {
  const lm::ModelConfig c = exit_config();
  decode::ExitConfig w;
  w.method = decode::ExitMethod::wave;
  w.window_start = 3;
  w.window_end = 2;
  CHECK_THROWS_AS(w.validate(c), UsageError);
  w.window_end = 6;  // the last block is not an exit
  CHECK_THROWS_AS(w.validate(c), UsageError);
  w.window_end = 5;
  w.proxy_k = 65;
  CHECK_THROWS_AS(w.validate(c), UsageError);
  w.proxy_k = 64;
  CHECK_NOTHROW(w.validate(c));
  decode::ExitConfig s;
  s.method = decode::ExitMethod::skipdecode;
  s.skip_max = 6;
  s.skip_min = 2;
  s.max_new = 5;
  CHECK(decode::skipdecode_blocks(s, 0) == 6);
  CHECK(decode::skipdecode_blocks(s, 2) == 4);
  CHECK(decode::skipdecode_blocks(s, 4) == 2);
  CHECK_THROWS_AS(decode::parse_exit_method("early"), UsageError);
}

TEST_CASE("decode exit: lossless drafting with any exit rule equals the full model token for token") {
  const lm::ModelConfig c = exit_config();
  const lm::Model m = lm::random_model(c, 21, 0.4);
  const std::vector<int> prompt{1, 9, 33, 4, 17};
  decode::ExitConfig full;
  full.max_new = 30;
  const auto ref = decode_all(m, prompt, 30, full);
  const auto cost = decode::StepCost::of(c, 10);
  int some_rejected = 0;
  // layerskip twice: at block 2 and at the last block (its drafts are then the full model's own,
  // and the reused depth stops one block short of the end).
  const std::vector<std::pair<decode::ExitMethod, int>> rules{
      {decode::ExitMethod::wave, 2},      {decode::ExitMethod::layerskip, 2}, {decode::ExitMethod::layerskip, c.n_layers},
      {decode::ExitMethod::skipdecode, 2}, {decode::ExitMethod::calm, 2},      {decode::ExitMethod::dvp, 2}};
  for (const auto& [method, exit_layer] : rules) {
    decode::ExitConfig cfg;
    cfg.method = method;
    cfg.threshold = 0.05;  // exits often: drafts go wrong
    cfg.window_start = 1;
    cfg.window_end = 3;
    cfg.proxy_k = 8;
    cfg.exit_layer = exit_layer;
    cfg.skip_min = 2;
    cfg.skip_max = 4;
    cfg.min_layer = 2;
    cfg.dvp_layer = 2;
    cfg.max_new = 30;
    for (int draft : {1, 3, 5}) {
      // Without and with the verifier's reuse of the drafts' shared blocks (LayerSkip's KV
      // reuse): the same tokens, and a cache bitwise equal, slot by slot, to the plain verifier's.
      std::vector<float> plain_kv;
      for (bool reuse : {false, true}) {
        INFO("method " << decode::exit_method_name(method) << " draft " << draft << " reuse " << reuse);
        lm::KvCache cache(c);
        const int first = prefill(m, cache, prompt);
        decode::LosslessStats st;
        const auto out = decode::lossless_generate(m, cache, first, static_cast<int>(prompt.size()), 30, draft, cfg, cost, st, reuse);
        CHECK(out == ref);
        CHECK(st.accepted <= st.drafted);
        CHECK(st.rounds > 0);
        CHECK(st.reused_depth == (reuse ? decode::shared_depth(cfg, c.n_layers) : 0));
        if (exit_layer == c.n_layers) CHECK(st.accepted == st.drafted);  // the full model's own drafts
        // The cache holds exactly the verified tokens but the last: the full model's K/V.
        CHECK(cache.size() == static_cast<int>(prompt.size()) + 29);
        std::vector<float> kv;
        for (int l = 0; l < c.n_layers; ++l)
          for (int h = 0; h < c.n_kv_heads; ++h)
            for (int sl = 0; sl < cache.size(); ++sl) {
              kv.insert(kv.end(), cache.key(l, h, sl), cache.key(l, h, sl) + c.head_dim());
              kv.insert(kv.end(), cache.value(l, h, sl), cache.value(l, h, sl) + c.head_dim());
            }
        if (!reuse) plain_kv = kv;
        else CHECK(kv == plain_kv);
        some_rejected += st.accepted < st.drafted;
      }
    }
  }
  CHECK(some_rejected > 0);
}
