// lm-sweep's grid, data and cell plans (issue 40), and util/subprocess.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "io/json.hpp"
#include "sweep/data.hpp"
#include "sweep/grid.hpp"
#include "util/error.hpp"
#include "util/subprocess.hpp"

using namespace icmlkit;
namespace fs = std::filesystem;

namespace {

nlohmann::json small_grid() {
  return nlohmann::json::parse(R"({
    "data": {"source": "x.txt", "buckets": [{"name": "clean", "share": 0.25}, {"name": "noisy", "share": 0.75, "replace": 0.5}]},
    "models": {"a": {"d_model": 16, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1, "d_ff": 32}},
    "train": {"seq_len": 8, "batch": 2},
    "recipes": {"prop": [0.25, 0.75], "hq": {"clean": 0.8, "noisy": 0.2}, "pure": {"clean": 1}},
    "cells": [{"models": ["a"], "tokens": [1000, 2000], "recipes": ["prop", "hq"]},
              {"role": "rep", "models": ["a"], "tokens": [4000], "recipes": ["pure"], "epochs": [2, 4], "seeds": [1, 2]}]
  })");
}

std::string parse_error(const nlohmann::json& j) {
  try {
    sweep::parse_grid(j, "g.json", "");
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

// Two buckets of units with known token counts (no tokenizer needed for plans).
sweep::PreparedData fake_data() {
  sweep::PreparedData d;
  for (int b = 0; b < 2; ++b) {
    sweep::BucketData bd;
    bd.name = b == 0 ? "clean" : "noisy";
    const int n = b == 0 ? 100 : 300;
    for (int i = 0; i < n; ++i) {
      bd.units.push_back(fmt::format("b{}u{}", b, i));
      bd.tokens.push_back(5 + (i * 7) % 11);  // 5..15 tokens
      bd.total_tokens += bd.tokens.back();
    }
    d.buckets.push_back(std::move(bd));
  }
  return d;
}

}  // namespace

TEST_CASE("sweep grid: cells expand in block order with ids, recipes by array or by name") {
  const auto g = sweep::parse_grid(small_grid(), "g.json", "/base");
  REQUIRE(g.cells.size() == 8);
  CHECK(g.cells[0].id == "a.prop.D1000.Enat.s1");
  CHECK(g.cells[3].id == "a.hq.D2000.Enat.s1");
  CHECK(g.cells[4].id == "a.pure.D4000.E2.s1");
  CHECK(g.cells[5].id == "a.pure.D4000.E2.s2");
  CHECK(g.cells[7].id == "a.pure.D4000.E4.s2");
  CHECK(g.cells[7].role == "rep");
  CHECK(g.cells[0].role == "fit");
  for (std::size_t i = 0; i < g.cells.size(); ++i) CHECK(g.cells[i].index == i);
  CHECK(g.recipes.at("hq") == std::vector<double>{0.8, 0.2});
  CHECK(g.recipes.at("pure") == std::vector<double>{1.0, 0.0});
  CHECK(g.data.source == "/base/x.txt");
  CHECK(g.data.validation == "clean");
  CHECK(g.models.at("a").config.n_ctx == 8);
  CHECK(sweep::train_args(g, g.models.at("a")) == std::vector<std::string>{"--seq-len", "8", "--batch", "2"});
  auto j = small_grid();
  j["models"]["a"]["train"] = {{"lr", 0.002}, {"batch", 4}};
  const auto g2 = sweep::parse_grid(j, "g.json", "");
  CHECK(sweep::train_args(g2, g2.models.at("a")) == std::vector<std::string>{"--seq-len", "8", "--batch", "4", "--lr", "0.002"});
}

TEST_CASE("sweep grid: impossible or malformed grids are refused naming the entry") {
  auto j = small_grid();
  j["recipes"]["hq"] = {{"clean", 1.3}, {"noisy", -0.3}};
  CHECK(parse_error(j).find("cell a.hq.D1000.Enat.s1 (and 1 more): recipes.hq: weight of bucket 'clean' is 1.3, outside [0, 1]") !=
        std::string::npos);
  j = small_grid();
  j["recipes"]["prop"] = {0.25, 0.7};
  CHECK(parse_error(j).find("recipes.prop: weights sum to 0.95, not 1") != std::string::npos);
  j = small_grid();
  j["recipes"]["unused"] = {0.5};
  CHECK(parse_error(j).find("recipes.unused has 1 weights for 2 buckets") != std::string::npos);
  j = small_grid();
  j["data"]["buckets"][1]["share"] = 0.5;
  CHECK(parse_error(j).find("shares sum to 0.75") != std::string::npos);
  j = small_grid();
  j["cells"][1]["epochs"] = {0.5};
  CHECK(parse_error(j).find("epochs 0.5 is below 1") != std::string::npos);
  j = small_grid();
  j["cells"][0]["tokens"] = {15};
  CHECK(parse_error(j).find("cell a.prop.D15.Enat.s1: 15 tokens are less than one optimizer step (batch x accum x seq_len = 16)") !=
        std::string::npos);
  j = small_grid();
  j["cells"].push_back(j["cells"][0]);
  CHECK(parse_error(j).find("cell a.prop.D1000.Enat.s1 is already in the grid") != std::string::npos);
  j = small_grid();
  j["models"]["a"]["train"] = {{"seq_len", 16}};
  CHECK(parse_error(j).find("models.a.train: unknown key 'seq_len'") != std::string::npos);
  j = small_grid();
  j["models"]["a"]["train"] = {{"batch", 8}};
  CHECK(parse_error(j).find("cell a.prop.D1000.Enat.s1: 1000 tokens are less than one optimizer step (batch x accum x seq_len = 64)") ==
        std::string::npos);  // 1000 >= 64: fine
  j["cells"][0]["tokens"] = {40};
  CHECK(parse_error(j).find("cell a.prop.D40.Enat.s1: 40 tokens are less than one optimizer step (batch x accum x seq_len = 64)") !=
        std::string::npos);
  j = small_grid();
  j["recipes"]["x/y"] = {0.5, 0.5};
  CHECK(parse_error(j).find("name 'x/y' must be 1-64 letters, digits") != std::string::npos);
  j = small_grid();
  j["cells"][0]["tokens"] = {1e12};
  CHECK(parse_error(j).find(".tokens[] must be an integer in 1..100000000000") != std::string::npos);
  j = small_grid();
  j["train"]["optimizer"] = "sgd";
  CHECK(parse_error(j).find("train: unknown key 'optimizer'") != std::string::npos);
  j = small_grid();
  j["models"]["a"]["n_kv_heads"] = 3;
  CHECK(parse_error(j).find("n_kv_heads 3 must divide n_heads 2") != std::string::npos);
  j = small_grid();
  j["data"]["validation"] = "web";
  CHECK(parse_error(j).find("no bucket named 'web'") != std::string::npos);
  j = small_grid();
  j["data"]["buckets"][0]["column"] = 2;
  CHECK(parse_error(j).find("belongs to data.source") != std::string::npos);
}

TEST_CASE("sweep degrade: the replaced share is the asked probability, shuffling keeps the words") {
  std::vector<std::string> vocab;
  for (int i = 0; i < 50; ++i) vocab.push_back(fmt::format("V{}", i));
  std::string unit;
  for (int i = 0; i < 200; ++i) unit += fmt::format("w{} ", i);
  sweep::BucketSpec b;
  b.replace = 0.3;
  Rng rng(7);
  sweep::DegradeStats st;
  std::int64_t counted = 0;
  for (int k = 0; k < 100; ++k) {
    const auto out = sweep::degrade(unit, b, vocab, rng, &st);
    std::istringstream in(out);
    std::string w;
    int i = 0;
    while (in >> w) {
      // A word either stays in place or is a vocabulary word.
      if (w != fmt::format("w{}", i)) {
        CHECK(w[0] == 'V');
        ++counted;
      }
      ++i;
    }
    CHECK(i == 200);
  }
  CHECK(st.words == 20000);
  CHECK(st.replaced == counted);  // the stats count exactly the words that changed (no V word equals its w word)
  CHECK(std::abs(double(st.replaced) / 20000.0 - 0.3) < 0.015);  // binomial sd 0.0032
  sweep::BucketSpec sh;
  sh.shuffle = true;
  const auto s = sweep::degrade(unit, sh, vocab, rng);
  std::multiset<std::string> a, c;
  std::istringstream ia(unit), ic(s);
  for (std::string w; ia >> w;) a.insert(w);
  for (std::string w; ic >> w;) c.insert(w);
  CHECK(a == c);
  CHECK(s + " " != unit);
  sweep::BucketSpec clean;
  CHECK(sweep::degrade("keep  this\ttext", clean, vocab, rng) == "keep  this\ttext");
}

TEST_CASE("sweep plan: the written corpus has K_d tokens of each bucket drawn from M_d unique ones") {
  const auto data = fake_data();
  const fs::path dir = fs::temp_directory_path() / fmt::format("icmlkit-sweep-{}", ::getpid());
  fs::create_directories(dir);
  struct Case { std::vector<double> w; std::int64_t D; std::optional<double> epochs; };
  for (const auto& tc : {Case{{0.5, 0.5}, 3000, std::nullopt}, Case{{0.8, 0.2}, 3000, std::nullopt},
                         Case{{0.25, 0.75}, 3000, 3.0}, Case{{1.0, 0.0}, 2500, 5.0}}) {
    sweep::Cell c;
    c.id = "t";
    c.recipe = "r";
    c.tokens = tc.D;
    c.epochs = tc.epochs;
    c.seed = 3;
    const auto plan = sweep::plan_cell(data, c, tc.w, 8);
    const auto path = (dir / "corpus.jsonl").string();
    sweep::write_cell_corpus(data, c, plan, path);
    // Count from the file: tokens and distinct units of each bucket.
    std::map<std::string, std::int64_t> tok_of;
    for (const auto& b : data.buckets)
      for (std::size_t i = 0; i < b.units.size(); ++i) tok_of[b.units[i]] = b.tokens[i];
    std::vector<std::int64_t> consumed(2, 0), unique(2, 0);
    std::set<std::string> seen;
    io::for_each_jsonl(path, [&](const nlohmann::json& j, const std::string&) {
      const auto u = j.at("text").get<std::string>();
      const int b = u[1] - '0';
      consumed[static_cast<std::size_t>(b)] += tok_of.at(u);
      if (seen.insert(u).second) unique[static_cast<std::size_t>(b)] += tok_of.at(u);
    });
    CAPTURE(tc.w[0]);
    CAPTURE(tc.D);
    for (std::size_t b = 0; b < 2; ++b) {
      CHECK(consumed[b] == plan.consumed[b]);
      CHECK(unique[b] == plan.unique[b]);
      const double K = tc.w[b] * double(tc.D);
      CHECK(double(consumed[b]) >= K);
      CHECK(double(consumed[b]) < K + 15);  // overshoot below one unit
      if (!tc.epochs) {  // natural: M_d = min(K_d, T_d), within a unit
        const double M = std::min(K, double(data.buckets[b].total_tokens));
        CHECK(std::abs(double(unique[b]) - M) < 15);
      }
    }
    if (tc.epochs) CHECK(plan.epochs() == doctest::Approx(*tc.epochs).epsilon(0.02));
    if (tc.w[0] == 0.8) CHECK(plan.consumed[0] > 2 * plan.unique[0]);  // the clean bucket (about 1,000 tokens) repeats
  }
  fs::remove_all(dir);
}

TEST_CASE("sweep plan: cells with impossible epochs are refused naming the cell") {
  const auto data = fake_data();
  sweep::Cell c;
  c.id = "a.r.D3000.E1.s1";
  c.recipe = "r";
  c.tokens = 3000;
  c.epochs = 1.0;  // 0.8 x 3000 = 2400 clean tokens wanted, the bucket holds about 1,000
  try {
    sweep::plan_cell(data, c, {0.8, 0.2}, 8);
    FAIL("expected an error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("cell a.r.D3000.E1.s1: recipe 'r' can draw at most") != std::string::npos);
  }
  c.epochs = 400.0;
  c.id = "a.r.D3000.E400.s1";
  try {
    sweep::plan_cell(data, c, {0.5, 0.5}, 8);
    FAIL("expected an error");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("more epochs than the tokens allow") != std::string::npos);
  }
}

TEST_CASE("run_process: exit status, signals, output files, missing programs") {
  CHECK(run_process({"/bin/sh", "-c", "exit 3"}) == 3);
  CHECK(run_process({"/bin/sh", "-c", "kill -9 $$"}) == 128 + 9);
  CHECK(run_process({"/bin/sh", "-c", "kill -TERM $$; exit 0"}) == 128 + 15);  // the child does not start with SIGTERM blocked
  const auto out = (fs::temp_directory_path() / fmt::format("icmlkit-proc-{}.txt", ::getpid())).string();
  CHECK(run_process({"/bin/sh", "-c", "echo hello; echo err >&2"}, out, "/dev/null") == 0);
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  CHECK(line == "hello");
  fs::remove(out);
  CHECK_THROWS_AS(run_process({"/nonexistent/program"}), RuntimeError);
  CHECK(fs::exists(executable_dir()));
}
