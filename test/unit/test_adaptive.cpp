// decode/adaptive (issue 37): the pass-cost table interpolates and survives its cache; the
// schedule drafts prompt matches exactly when their shadow acceptance pays at the given costs,
// falls back to AR when it does not, gives a lookahead window a trial of N + 1 steps when its
// bound beats the best and keeps it when it measures faster; and adaptive FAFO decodes exactly
// the AR tokens on a random model (whatever arms it runs).
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "decode/adaptive.hpp"
#include "decode/decoder.hpp"
#include "lm/engine.hpp"
#include "lm/model.hpp"

using namespace icmlkit;
using namespace icmlkit::decode;

namespace {

/// A pass cost of a ms + b ms per extra row, measured at 1, 4, 12.
PassCost linear_cost(double a_ms, double b_ms) {
  PassCost pc;
  for (int k : {1, 4, 12}) {
    pc.ks.push_back(k);
    pc.seconds.push_back((a_ms + b_ms * (k - 1)) * 1e-3);
  }
  return pc;
}

/// Runs `steps` steps of a schedule on a synthetic stream: a prompt match of `match_len` tokens is
/// offered each step and the first `good` of them are what the model generates; a step costs the
/// schedule's own pass model (rows -> a + b (rows - 1) ms); window arms accept `window_acc` tokens.
/// Returns the choices made.
std::vector<AdaptiveSchedule::Choice> simulate(AdaptiveSchedule& s, int steps, int match_len, int good, double a_ms,
                                               double b_ms, int window_acc = 1) {
  std::vector<AdaptiveSchedule::Choice> out;
  int next_token = 1000;
  for (int i = 0; i < steps; ++i) {
    std::vector<int> match;
    for (int j = 0; j < match_len; ++j) match.push_back(j < good ? next_token + j : -1 - j);
    const AdaptiveSchedule::Choice c = s.choose(match_len);
    out.push_back(c);
    const int drafted = std::min(c.draft, match_len);
    int accepted = 1 + std::min(drafted, good);
    int rows = 1 + drafted;
    if (c.arm > 0) {
      const Arm& a = s.arm(c.arm);
      rows += a.base_rows() - 1 + a.guesses * (a.ngram - 1);
      accepted = std::max(accepted, window_acc);
    }
    std::vector<int> emitted;
    for (int j = 0; j < accepted; ++j) emitted.push_back(next_token + j);
    next_token += accepted;
    s.observe(c, match, emitted, rows, (a_ms + b_ms * (rows - 1)) * 1e-3);
  }
  return out;
}

}  // namespace

TEST_CASE("adaptive: pass costs interpolate, extrapolate past the last k, and round-trip through the cache") {
  const PassCost pc = linear_cost(1.0, 0.5);
  CHECK(pc.at(1) == doctest::Approx(1e-3));
  CHECK(pc.at(2) == doctest::Approx(1.5e-3));   // between 1 and 4
  CHECK(pc.at(8) == doctest::Approx(4.5e-3));   // between 4 and 12
  CHECK(pc.at(33) == doctest::Approx(17e-3));   // past 12, along the last segment
  CHECK(pc.c(12) == doctest::Approx(6.5));
  PassCost back;
  REQUIRE(back.from_json(pc.to_json()));
  CHECK(back.seconds == pc.seconds);
  CHECK_FALSE(back.from_json(nlohmann::json{{"k", {2, 4}}, {"seconds", {1e-3, 2e-3}}}));  // must start at k = 1
  CHECK_FALSE(back.from_json(nlohmann::json{{"k", {1, 4}}, {"seconds", {1e-3, -2e-3}}}));

  const std::string dir = std::filesystem::temp_directory_path() / "icmlkit_adaptive_test";
  std::filesystem::remove_all(dir);
  const std::string file = dir + "/sub/pass-cost.json";
  PassCost got;
  CHECK_FALSE(load_pass_cost(file, "k1 desc", got));  // absent
  REQUIRE(save_pass_cost(file, "k1 desc", "desc", pc));
  REQUIRE(save_pass_cost(file, "k2 other", "other", linear_cost(2.0, 0.1)));
  REQUIRE(load_pass_cost(file, "k1 desc", got));
  CHECK(got.seconds == pc.seconds);
  CHECK_FALSE(load_pass_cost(file, "k3 none", got));
  // A file that is not a cache (a prompt, a model: anything not in the cache's format) is read
  // as empty and never overwritten; an empty file may be.
  { std::ofstream(file) << "{not json"; }
  CHECK_FALSE(load_pass_cost(file, "k1 desc", got));
  std::string why;
  CHECK_FALSE(save_pass_cost(file, "k1 desc", "desc", pc, &why));
  CHECK(why.find("not a pass-cost cache") != std::string::npos);
  { std::ifstream in(file); std::string text((std::istreambuf_iterator<char>(in)), {}); CHECK(text == "{not json"); }
  { std::ofstream(file) << "{\"k1\": {}}"; }  // JSON, but not ours
  CHECK_FALSE(save_pass_cost(file, "k1 desc", "desc", pc));
  { std::ofstream(file) << ""; }
  CHECK(save_pass_cost(file, "k1 desc", "desc", pc));
  CHECK(load_pass_cost(file, "k1 desc", got));
  CHECK_FALSE(save_pass_cost(dir, "k1 desc", "desc", pc, &why));  // a directory
  std::filesystem::remove_all(dir);
}

TEST_CASE("adaptive: prompt matches are drafted when their shadow acceptance pays, AR otherwise") {
  SUBCASE("matches of 8 always right, rows cheap: drafts them") {
    AdaptiveSchedule s(7, 5, 7, 10, linear_cost(1.0, 0.1));
    const auto ch = simulate(s, 40, 8, 8, 1.0, 0.1);
    CHECK(ch[0].arm == 0);
    CHECK(ch[0].draft == 0);  // the first step measures AR
    int drafted_late = 0;
    for (std::size_t i = 20; i < ch.size(); ++i) drafted_late += ch[i].arm == 0 && ch[i].draft >= 8;
    CHECK(drafted_late >= 15);
  }
  SUBCASE("matches never right: AR") {
    AdaptiveSchedule s(7, 5, 7, 10, linear_cost(1.0, 0.1));
    const auto ch = simulate(s, 40, 8, 0, 1.0, 0.1);
    for (std::size_t i = 20; i < ch.size(); ++i) {
      CAPTURE(i);
      CHECK(ch[i].draft == 0);
    }
  }
  SUBCASE("matches right for 2 tokens, rows expensive: AR (3 tokens cost more than 3 steps)") {
    AdaptiveSchedule s(7, 5, 7, 10, linear_cost(1.0, 1.5));
    const auto ch = simulate(s, 40, 8, 2, 1.0, 1.5);
    for (std::size_t i = 20; i < ch.size(); ++i) CHECK(ch[i].draft == 0);
  }
}

TEST_CASE("adaptive: a lookahead window gets an N + 1 step trial when its bound beats the best, and stays when faster") {
  // Flat costs (a GPU-like c(k) = 1): the windows' bounds beat AR's speed.
  AdaptiveSchedule s(5, 4, 5, 10, linear_cost(1.0, 0.0));
  REQUIRE(s.arms().size() == 3);
  CHECK(s.arm(1).name == "lookahead W3 N3 G3");
  const auto ch = simulate(s, 60, 0, 0, 1.0, 0.0, /*window_acc=*/3);
  // Step 0 measures AR, step 1 starts the first window's trial: N + 1 = 4 steps in a row.
  CHECK(ch[0].arm == 0);
  for (int i = 1; i <= 4; ++i) CHECK(ch[std::size_t(i)].arm == 1);
  // Windows give 3 tokens per step at AR's cost: from then on a window arm runs (but for an AR
  // step re-measured every 24 steps).
  int window_steps = 0;
  for (std::size_t i = 30; i < ch.size(); ++i) window_steps += ch[i].arm > 0;
  CHECK(window_steps >= static_cast<int>(ch.size()) - 30 - 2);
  const nlohmann::json j = s.to_json();
  CHECK(j["arms"][1]["steps"].get<int>() >= 4);
  CHECK(j["time_correction"].get<double>() == doctest::Approx(1.0));
}

TEST_CASE("adaptive: no window trial when even its bound cannot beat AR") {
  // Steep costs (10x a row per extra row): a W3 N3 step has 5 window rows, so it never pays.
  AdaptiveSchedule s(3, 3, 3, 0, linear_cost(1.0, 10.0));
  const auto ch = simulate(s, 30, 0, 0, 1.0, 10.0, 3);
  for (const auto& c : ch) CHECK(c.arm == 0);
}

TEST_CASE("adaptive: FAFO with the adaptive schedule decodes exactly the AR tokens") {
  lm::ModelConfig c;
  c.vocab_size = 40;
  c.d_model = 36;
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.d_ff = 50;
  c.n_ctx = 160;
  c.eos_id = -1;
  c.bos_id = -1;
  c.add_bos = false;
  const lm::Model m = lm::random_model(c, 7, 0.5);
  // A repetitive prompt so that prompt matches exist.
  std::vector<int> prompt;
  for (int i = 0; i < 30; ++i) prompt.push_back((i * 7) % 11 + 2);
  DecodeConfig ar;
  ar.max_new_tokens = 60;
  ar.stop_at_eos = false;
  DecodeConfig ad = ar;
  ad.method = Method::fafo;
  ad.adaptive = true;
  ad.window = 4;
  ad.ngram = 3;
  ad.guesses = 3;
  const DecodeResult want = generate(m, prompt, ar);
  const DecodeResult got = generate(m, prompt, ad);
  CHECK(got.tokens == want.tokens);
  REQUIRE(got.schedule.is_object());
  CHECK(got.schedule["pass_cost_source"] == "measured");
  int accepted = 0, sources = 0, steps = 0;
  for (const auto& st : got.steps) {
    CHECK(st.arm >= 0);
    CHECK(st.arm < static_cast<int>(got.schedule["arms"].size()));
    accepted += st.accepted - 1;
    sources += st.from_prompt + st.from_lookahead + st.from_both;
    ++steps;
  }
  CHECK(accepted == sources);
  int arm_steps = 0;
  for (const auto& a : got.schedule["arms"]) arm_steps += a["steps"].get<int>();
  CHECK(arm_steps == steps);
}

TEST_CASE("adaptive: a calibration that says rows are free is overruled by the steps' measured times") {
  // The schedule believes c(k) = 1 (as a noisy or stale cache could say), so the windows' bounds
  // win and they get trials; the real steps cost 1 ms per row and give 2 tokens: AR is 5x faster.
  AdaptiveSchedule s(5, 4, 5, 0, linear_cost(1.0, 0.0));
  const auto ch = simulate(s, 120, 0, 0, 1.0, 1.0, /*window_acc=*/2);
  int ar = 0;
  for (std::size_t i = 60; i < ch.size(); ++i) ar += ch[i].arm == 0;
  CHECK(ar >= 50);
}
