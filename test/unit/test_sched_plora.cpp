// PLoRA's search space, memory model, throughput model, schedule simulator and planner (sched/plora_*.hpp).
// Expected values come from hand counts (memory), hand-simulated schedules, exhaustive enumeration of
// every schedule of small instances (the planner's optimality), and the shipped tables' own points.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lm/model.hpp"
#include "sched/plora_plan.hpp"
#include "sched/plora_space.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::sched;
using OJ = nlohmann::ordered_json;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

SearchSpace space_of(const std::string& text) { return parse_space(OJ::parse(text), "s.json", "dir"); }

const char* kSmallSpace = R"({
  "seq_len": 64,
  "data": {"path": "c.tsv", "column": 2, "filter": {"column": 1, "prefix": ["Ru"]}},
  "defaults": {"steps": 50, "lr": 1e-3, "min_lr": 1e-5},
  "grid": {"rank": [4, 8], "lr": [1e-4, 1e-3, 3e-3]},
  "jobs": [{"name": "big", "rank": 64, "targets": ["v", "q", "down"], "data": {"path": "/abs/other.txt"}}],
  "early_stop": {"eta": 3, "rungs": [10, 20]}
})";

// A tiny llama: d 8, 2 query heads and 1 KV head of width 4, d_ff 12, vocabulary 16, 2 layers, untied.
lm::ModelConfig tiny_config() {
  lm::ModelConfig c;
  c.vocab_size = 16, c.d_model = 8, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.d_ff = 12, c.n_ctx = 64;
  return c;
}

// kjv7m's shape (data/models/README.md): vocab 4096, d 256, 6 layers, 8 query / 4 KV heads, d_ff 688, untied.
lm::ModelConfig kjv7m_config() {
  lm::ModelConfig c;
  c.vocab_size = 4096, c.d_model = 256, c.n_layers = 6, c.n_heads = 8, c.n_kv_heads = 4, c.d_ff = 688, c.n_ctx = 1024;
  return c;
}

ThroughputTable table_of(const std::vector<ThroughputPoint>& pts) {
  ThroughputTable t;
  t.device = "test", t.source = "test", t.seq_len = 64, t.points = pts;
  return t;
}

// A GPU-like table (flat until 4 rows, then linear) and a CPU-like one (proportional to rows).
ThroughputTable gpu_like() {
  std::vector<ThroughputPoint> pts;
  for (int k : {1, 2, 4, 8, 16})
    for (int r : {4, 32}) pts.push_back({k, r, 1, 0.1 * std::max(1.0, k / 4.0) + 1e-4 * k * r});
  return table_of(pts);
}
ThroughputTable cpu_like() {
  std::vector<ThroughputPoint> pts;
  for (int k : {1, 2, 4, 8, 16})
    for (int r : {4, 32}) pts.push_back({k, r, 1, 0.01 + 0.25 * k + 3e-4 * k * r});
  return table_of(pts);
}

std::string repo(const std::string& rel) { return std::string(ICMLKIT_REPO_DATA) + "/" + rel; }

}  // namespace

// ---- the search space --------------------------------------------------------------------------------

TEST_CASE("plora space: grid product in key order with the last key fastest, defaults, explicit jobs, paths") {
  const SearchSpace s = space_of(kSmallSpace);
  REQUIRE(s.jobs.size() == 7);
  // rank is the first key, lr the second (fastest): (4, 1e-4), (4, 1e-3), (4, 3e-3), (8, 1e-4), ...
  const std::vector<std::pair<int, double>> want{{4, 1e-4}, {4, 1e-3}, {4, 3e-3}, {8, 1e-4}, {8, 1e-3}, {8, 3e-3}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(s.jobs[i].name == (i < 10 ? "j0" : "j") + std::to_string(i));
    CHECK(s.jobs[i].rank == want[i].first);
    CHECK(s.jobs[i].lr == want[i].second);
    CHECK(s.jobs[i].steps == 50);             // from the file's defaults
    CHECK(s.jobs[i].alpha == 8);              // built-in default (PEFT's lora_alpha)
    CHECK(s.jobs[i].data.resolved == "dir/c.tsv");
    CHECK(s.jobs[i].data.filter.column == 1);
  }
  const JobSpec& big = s.jobs[6];
  CHECK(big.name == "big");
  CHECK(big.targets == std::vector<std::string>{"q", "v", "down"});  // canonical order
  CHECK(big.data.path == "/abs/other.txt");
  CHECK(big.data.resolved == "/abs/other.txt");
  CHECK_FALSE(big.data.filter.active());  // a job's data replaces the whole default object
  CHECK(big.data.corpus.column == 0);
  CHECK(s.early_stop.eta == 3);
  CHECK(s.early_stop.rungs == std::vector<int>{10, 20});
}

TEST_CASE("plora space: the canonical JSON and hash do not depend on how the file spells the jobs") {
  const SearchSpace a = space_of(R"({"seq_len": 64, "data": {"path": "c.txt"}, "grid": {"rank": [4, 8]}})");
  const SearchSpace b = space_of(R"({"jobs": [{"rank": 4.0, "name": "j00"}, {"name": "j01", "rank": 8, "alpha": 8}],
                                     "data": {"path": "c.txt"}, "seq_len": 64})");
  CHECK(space_json(a).dump() == space_json(b).dump());
  CHECK(space_sha256(a) == space_sha256(b));
  CHECK(space_sha256(a).size() == 64);
  const SearchSpace c = space_of(R"({"seq_len": 64, "data": {"path": "c.txt"}, "grid": {"rank": [4, 16]}})");
  CHECK(space_sha256(a) != space_sha256(c));
  const OJ j = job_json(a.jobs[1]);
  CHECK(j.begin().key() == "name");
  CHECK(j["rank"] == 8);
  CHECK(j["data"]["path"] == "c.txt");
  CHECK_FALSE(j["data"].contains("filter"));
}

TEST_CASE("plora space: one-line errors naming the key and the job") {
  auto err = [](const std::string& text) { return error_of([&] { space_of(text); }); };
  const std::string base = R"("seq_len": 64, "data": {"path": "c.txt"})";
  CHECK(err("{" + base + R"(, "grid": {"rank": [4, 0]}})") == "rank must be an integer >= 1, got 0 (s.json, grid.rank[1])");
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "rank": 0}]})") == "rank must be an integer >= 1, got 0 (s.json, job 'a')");
  CHECK(err("{" + base + R"(, "jobs": [{"rank": 2.5}]})") == "rank must be an integer >= 1, got 2.5 (s.json, jobs[0])");
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "dropout": 1}]})") == "dropout must be in [0, 1), got 1 (s.json, job 'a')");
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "lr": 0}]})") == "lr must be > 0, got 0 (s.json, job 'a')");
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "batch": 0}]})").find("batch must be an integer >= 1") == 0);
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "steps": -3}]})").find("steps must be an integer >= 1") == 0);
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "rnak": 4}]})").find("unknown key 'rnak'") == 0);
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "targets": ["q", "x"]}]})").find("unknown target \"x\"") == 0);
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "targets": ["q", "q"]}]})") == "target 'q' repeated in targets (s.json, job 'a')");
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a"}, {"name": "a"}]})") == "duplicate job name 'a' (s.json, job 'a')");
  CHECK(err("{" + base + R"(, "grid": {"rank": [4]}, "jobs": [{"name": "j00"}]})").find("duplicate job name 'j00'") == 0);
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a b"}]})").find("name 'a b' must be") == 0);
  CHECK(err("{" + base + R"(, "jobs": [{"name": "a", "lr": 1e-4, "min_lr": 1e-3}]})").find("min_lr 0.001 is above lr 0.0001") == 0);
  CHECK(err("{" + base + R"(, "bogus": 1, "grid": {}})").find("unknown key 'bogus'") == 0);
  CHECK(err("{" + base + R"(, "grid": {"rank": []}})").find("grid.rank must be a non-empty array") == 0);
  CHECK(err("{" + base + "}") == "the space has no jobs (give a grid or jobs) (s.json)");
  CHECK(err(R"({"data": {"path": "c.txt"}, "grid": {}})") == "seq_len is missing (tokens per batch row) (s.json)");
  CHECK(err(R"({"seq_len": 8, "grid": {}})") == "the job has no data (give data at the top level or in the job) (s.json, job 'j00')");
  CHECK(err(R"({"seq_len": 8, "data": {"column": 2}, "grid": {}})") == "data needs a path (s.json, data)");
  CHECK(err(R"({"seq_len": 8, "data": {"path": "c.txt", "filter": {"column": 1, "prefix": ["a"]}}, "grid": {}})").find("not read as TSV") !=
        std::string::npos);
  CHECK(err("{" + base + R"(, "grid": {}, "early_stop": {"eta": 1, "rungs": [5]}})").find("early_stop.eta must be an integer >= 2") == 0);
  CHECK(err("{" + base + R"(, "grid": {}, "early_stop": {"eta": 2, "rungs": [5, 5]}})").find("early_stop.rungs must increase") == 0);
  CHECK(err("{" + base + R"(, "grid": {"steps": [10, 100]}, "early_stop": {"eta": 2, "rungs": [10]}})") ==
        "early_stop rung 10 is not below the job's 10 steps (s.json, job 'j00')");
  CHECK(err(R"([1, 2])") == "a search space must be a JSON object (s.json)");
}

TEST_CASE("plora space: read_space resolves paths against the file's directory and reports malformed JSON") {
  std::string sha;
  const SearchSpace s = read_space(repo("plora/space16.json"), &sha);
  CHECK(sha.size() == 64);
  REQUIRE(s.jobs.size() == 16);
  CHECK(s.seq_len == 256);
  CHECK(std::filesystem::exists(s.base_resolved));
  CHECK(std::filesystem::exists(s.jobs[0].data.resolved));
  std::set<int> ranks;
  std::set<double> lrs;
  for (const auto& j : s.jobs) {
    ranks.insert(j.rank), lrs.insert(j.lr);
    CHECK(j.steps == 200);
    CHECK(j.batch == 1);
  }
  CHECK(ranks == std::set<int>{4, 8, 16, 32});
  CHECK(lrs == std::set<double>{1e-4, 3e-4, 1e-3, 3e-3});
  CHECK(error_of([] { read_space(repo("plora/make_tables.py")); }).find("malformed JSON") == 0);
}

// ---- the memory model -------------------------------------------------------------------------------------

// Hand count for tiny_config (d 8, dq 8, dkv 4, d_ff 12, V 16, L 2, 2 heads):
//   weights: embeddings 16x8 + head 16x8 + final norm 8 = 264; a layer q 64 + k 32 + v 32 + o 64 + 2 norms 16
//   + MLP 3x8x12 288 = 496; total 264 + 2x496 = 1256 -> 5024 bytes.
//   adapter rank 2 on q, v: q 2(8 + 8) = 32, v 2(8 + 4) = 24 per layer -> 112 weights -> 16 x 112 = 1792 bytes.
//   activations per token: a layer 4x8 + 2x8 + 2x4 + 3x12 + 2 + 2x2 + (2 + 2) = 102, x2 = 204, + 2x16 + 6x8 = 80
//   -> 284 floats = 1136 bytes; with dropout + L x (8 + 8) = 32 floats -> 1264 bytes.
TEST_CASE("plora memory: the model against a hand count") {
  const lm::ModelConfig c = tiny_config();
  CHECK(base_weight_bytes(c) == 5024);
  JobSpec job;
  job.rank = 2, job.targets = {"q", "v"}, job.batch = 3;
  CHECK(adapter_params(c, 2, {"q", "v"}) == 112);
  CHECK(adapter_bytes(c, job) == 1792);
  CHECK(activation_bytes_per_token(c, job) == 1136);
  CHECK(activation_bytes(c, job, 5) == 1136 * 15);
  job.dropout = 0.1;
  CHECK(activation_bytes_per_token(c, job) == 1264);
  // all seven targets: q 16 + k 12 + v 12 + o 16 + gate 20 + up 20 + down 20 = 116 per unit of rank and layer
  CHECK(adapter_params(c, 1, plora_target_names()) == 2 * 116);
  CHECK(plora_target_shape(c, "down") == std::pair<int, int>{8, 12});
  CHECK(plora_target_shape(c, "k") == std::pair<int, int>{4, 8});

  SearchSpace s;
  s.seq_len = 5;
  s.jobs = {job, job};
  s.jobs[1].dropout = 0, s.jobs[1].name = "b", s.jobs[0].name = "a";
  const MemoryModel m = memory_model(c, s, 5024 + 100 + 1792 + 1264 * 15 + 1792 + 1136 * 15, 100);
  CHECK(m.group_bytes({0, 1}) == m.limit);  // exactly at the limit fits
  CHECK(m.fits({0, 1}));
  CHECK(m.max_jobs_at_once() == 2);
  MemoryModel tight = m;
  tight.limit -= 1;
  CHECK_FALSE(tight.fits({0, 1}));
  CHECK(tight.max_jobs_at_once() == 1);
  // a job alone above the limit: the call fails saying how many bytes are missing
  MemoryModel small = m;
  small.limit = 5024 + 100 + 1792 + 1136 * 15 - 10;
  CHECK(error_of([&] { check_every_job_fits(small, s, "--memory"); }) ==
        "job 'a' alone needs 25876 bytes, 1930 more than the memory limit 23946 (base 5024 + overhead 100 + adapter 1792 + "
        "activations 18960); 2 of 2 jobs do not fit alone (--memory)");
  // the checks against the model: rank above a matrix's width
  s.jobs[0].rank = 5, s.jobs[0].targets = {"k"};
  CHECK(error_of([&] { check_space_for_model(s, c, "s.json"); }) ==
        "rank 5 is above the width of the k projection (4 x 8) of the base (s.json, job 'a')");
}

TEST_CASE("plora memory: byte sizes with suffixes") {
  CHECK(parse_byte_size("1000", "--memory") == 1000);
  CHECK(parse_byte_size("280MB", "--memory") == 280000000);
  CHECK(parse_byte_size("280M", "--memory") == 280000000);
  CHECK(parse_byte_size("2k", "--memory") == 2000);
  CHECK(parse_byte_size("1.5GiB", "--memory") == 1610612736);
  CHECK(parse_byte_size("96MiB", "--memory") == kDefaultOverheadBytes);
  CHECK(parse_byte_size("1e9", "--memory") == 1000000000);
  CHECK(parse_byte_size("80 GiB", "--memory") == 80LL << 30);
  for (const char* bad : {"", "abc", "12X", "-5", "0", "GiB", "1.2.3M"})
    CHECK(error_of([&] { parse_byte_size(bad, "--memory"); }).find("(--memory)") != std::string::npos);
}

// ---- the throughput model ---------------------------------------------------------------------------------

TEST_CASE("plora throughput: the model reproduces the points the table determines and is monotone") {
  // Two ranks at R = 1, 2, 8 (f and g determined there, the line passes through both points), one rank at
  // R = 4 (g interpolated, f from the point): every point reproduced.
  const ThroughputTable t = table_of({{1, 4, 1, 0.10}, {1, 16, 1, 0.13}, {2, 4, 1, 0.11}, {2, 16, 1, 0.17}, {4, 8, 1, 0.30},
                                      {8, 4, 1, 0.60}, {8, 16, 1, 0.90}, {2, 8, 2, 0.30}});
  const ThroughputModel m(t);
  for (const auto& p : t.points) CHECK(m.step_seconds(p.rows(), p.rank_rows()) == doctest::Approx(p.step_seconds).epsilon(1e-9));
  // hand values: at R = 1, g = (0.13 - 0.10) / 12 = 0.0025, f = 0.09; at R = 2, g = 0.06 / 24, f = 0.09
  CHECK(m.g(1) == doctest::Approx(0.0025).epsilon(1e-12));
  CHECK(m.f(1) == doctest::Approx(0.09).epsilon(1e-12));
  CHECK(m.f(2) == doctest::Approx(0.09).epsilon(1e-12));
  // monotone in R at fixed W and in W at fixed R, inside and beyond the knots
  for (double w : {1.0, 10.0, 100.0})
    for (double r = 0.5; r < 40; r += 0.25) CHECK(m.step_seconds(r + 0.25, w) >= m.step_seconds(r, w));
  for (double r : {1.0, 3.0, 30.0}) CHECK(m.step_seconds(r, 50) >= m.step_seconds(r, 10));
  // beyond the last knot the last segment's slope continues
  CHECK(m.f(16) == doctest::Approx(m.f(8) + 8 * (m.f(8) - m.f(4)) / 4).epsilon(1e-12));
}

TEST_CASE("plora throughput: a non-monotone table is made monotone, a one-knot table scales with rows") {
  const ThroughputModel m(table_of({{1, 8, 1, 1.0}, {2, 8, 1, 0.8}, {3, 8, 1, 1.5}}));  // 2 rows measured faster than 1
  CHECK(m.g(2) == 0);                               // one rank: rank is not a variable
  CHECK(m.f(1) == doctest::Approx(0.9).epsilon(1e-12));  // pooled (1.0 + 0.8) / 2
  CHECK(m.f(2) == doctest::Approx(0.9).epsilon(1e-12));
  CHECK(m.f(3) == doctest::Approx(1.5).epsilon(1e-12));
  const ThroughputModel one(table_of({{2, 8, 1, 1.0}, {1, 16, 2, 1.4}}));  // R = 2 only, W 16 and 32
  CHECK(one.step_seconds(2, 16) == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(one.step_seconds(2, 32) == doctest::Approx(1.4).epsilon(1e-12));
  CHECK(one.f(4) == doctest::Approx(2 * one.f(2)).epsilon(1e-12));
}

TEST_CASE("plora throughput: the shipped tables parse, and the model follows their points and is monotone") {
  for (const char* name : {"plora/gpu_table_a100.json", "plora/cpu_table_synthetic.json"}) {
    const ThroughputTable t = read_throughput_table(repo(name));
    CHECK(t.seq_len == 256);
    CHECK(t.source.find("not measured") != std::string::npos);
    const ThroughputModel m(t);
    // ranks 4..32 at each R: a least-squares line per R; the tables' t is nearly linear in W there
    for (const auto& p : t.points) CHECK(m.step_seconds(p.rows(), p.rank_rows()) == doctest::Approx(p.step_seconds).epsilon(2e-3));
    for (double r = 1; r < 24; r += 0.5) CHECK(m.step_seconds(r + 0.5, 8 * (r + 0.5)) >= m.step_seconds(r, 8 * r));
  }
  const std::string bad = error_of([] {
    parse_throughput_table(nlohmann::json::parse(R"({"device": "x", "source": "y", "seq_len": 8,
                                                     "measurements": [{"jobs": 1, "rank": 0, "batch": 1, "step_seconds": 1}]})"),
                           "t.json");
  });
  CHECK(bad == "rank must be an integer >= 1, got 0 (t.json, measurements[0])");
  CHECK(error_of([] { parse_throughput_table(nlohmann::json::parse(R"({"device": "x", "seq_len": 8, "measurements": []})"), "t.json"); })
            .find("measurements must be a non-empty array") == 0);
}

// ---- the simulator ------------------------------------------------------------------------------------------

// One rank, so g = 0 and f(1) = 1, f(2) = 1.5, f(3) = 2 s per step.  Worker 0 runs {A (10 steps), B (20), C (30)},
// then {D (5)}; worker 1 runs {E (40)}.  The group: 10 steps of the 3-pack (20 s), 10 of the 2-pack (15 s),
// 10 alone (10 s) = 45 s, A leaving at 20, B at 35; D then takes 5 s: worker 0 ends at 50, worker 1 at 40.
TEST_CASE("plora simulate: a hand example") {
  const ThroughputModel tp(table_of({{1, 1, 1, 1.0}, {2, 1, 1, 1.5}, {3, 1, 1, 2.0}}));
  PlanProblem p;
  p.throughput = &tp, p.workers = 2, p.fixed_bytes = 100, p.memory_limit = 130;
  for (auto [name, steps] : std::vector<std::pair<const char*, int>>{{"A", 10}, {"B", 20}, {"C", 30}, {"D", 5}, {"E", 40}})
    p.jobs.push_back({name, steps, 1, 1, 10});
  Schedule s;
  s.workers = {{{2, 0, 1}, {3}}, {{4}}};
  const Simulation sim = simulate(p, s);
  CHECK(sim.makespan == doctest::Approx(50));
  CHECK(sim.worker_seconds == std::vector<double>{50, 40});
  REQUIRE(sim.groups.size() == 3);
  CHECK(sim.groups[0].job_end == std::vector<double>{45, 20, 35});
  CHECK(sim.groups[0].end == 45);
  CHECK(sim.groups[0].peak_bytes == 130);
  CHECK(sim.groups[1].start == 45);
  CHECK(sim.max_concurrent == 4);
  CHECK(sim.max_group_jobs == 3);
  // what simulate refuses: a group above the memory limit, a job twice or missing
  s.workers = {{{2, 0, 1, 3}}, {{4}}};
  CHECK(error_of([&] { simulate(p, s); }).find("above the limit 130") != std::string::npos);
  s.workers = {{{2, 0}, {3}}, {{4, 0}}};
  CHECK(error_of([&] { simulate(p, s); }) == "job 'A' is scheduled 2 times");
}

// ---- the planner ----------------------------------------------------------------------------------------------

namespace {

// Every schedule of a small problem: every set partition into fitting groups, every assignment of the
// groups to workers (order within a worker does not change its total).
double brute_force_makespan(const PlanProblem& p) {
  const int n = static_cast<int>(p.jobs.size());
  double best = std::numeric_limits<double>::infinity();
  std::vector<std::vector<int>> groups;
  std::function<void(int)> partition = [&](int j) {
    if (j == n) {
      std::vector<double> d;
      for (const auto& g : groups) d.push_back(group_seconds(p, g));
      std::vector<int> worker(groups.size(), 0);
      std::function<void(std::size_t)> assign = [&](std::size_t g) {
        if (g == groups.size()) {
          std::vector<double> load(std::size_t(p.workers), 0.0);
          for (std::size_t i = 0; i < groups.size(); ++i) load[std::size_t(worker[i])] += d[i];
          best = std::min(best, *std::max_element(load.begin(), load.end()));
          return;
        }
        for (int w = 0; w < p.workers; ++w) worker[g] = w, assign(g + 1);
      };
      assign(0);
      return;
    }
    for (std::size_t i = 0; i < groups.size(); ++i) {  // by index: the recursion grows `groups`
      groups[i].push_back(j);
      std::int64_t b = p.fixed_bytes;
      for (int k : groups[i]) b += p.jobs[std::size_t(k)].bytes;
      if (b <= p.memory_limit) partition(j + 1);
      groups[i].pop_back();
    }
    groups.push_back({j});
    partition(j + 1);
    groups.pop_back();
  };
  partition(0);
  return best;
}

PlanProblem random_problem(Rng& rng, int n, const ThroughputModel* tp) {
  PlanProblem p;
  p.throughput = tp;
  p.workers = 1 + int(rng.below(3));
  p.fixed_bytes = 1000;
  for (int j = 0; j < n; ++j)
    p.jobs.push_back({"j" + std::to_string(j), 10 + int(rng.below(90)), 1 + int(rng.below(2)), 4 << rng.below(4),
                      100 + std::int64_t(rng.below(200))});
  p.memory_limit = p.fixed_bytes + 300 * (1 + std::int64_t(rng.below(5)));  // admits 1 to about 5 jobs
  return p;
}

void check_every_job_once(const PlanProblem& p, const Schedule& s) {
  std::vector<int> count(p.jobs.size(), 0);
  for (const auto& w : s.workers)
    for (const auto& g : w)
      for (int j : g) ++count[std::size_t(j)];
  for (int c : count) CHECK(c == 1);
}

}  // namespace

TEST_CASE("plora plan: exact on small instances (every schedule enumerated) and never worse than a baseline") {
  const ThroughputModel gpu(gpu_like()), cpu(cpu_like());
  Rng rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const ThroughputModel* tp = trial % 2 ? &gpu : &cpu;
    const PlanProblem p = random_problem(rng, 3 + trial % 5, tp);
    const PlanResult r = plan_schedule(p, 1);
    check_every_job_once(p, r.schedule);
    const Simulation sim = simulate(p, r.schedule);  // throws above the memory limit
    for (const auto& g : sim.groups) CHECK(g.peak_bytes <= p.memory_limit);
    CHECK(sim.makespan == doctest::Approx(r.makespan).epsilon(1e-12));
    CHECK(r.makespan == doctest::Approx(brute_force_makespan(p)).epsilon(1e-9));
    for (const Schedule& b : {sequential_schedule(p), max_pack_schedule(p), lpt_schedule(p)}) {
      check_every_job_once(p, b);
      CHECK(r.makespan <= simulate(p, b).makespan);
    }
  }
}

TEST_CASE("plora plan: local search (larger searches) never worse than a baseline, deterministic given the seed") {
  const ThroughputModel gpu(gpu_like()), cpu(cpu_like());
  Rng rng(11);
  int improved = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const PlanProblem p = random_problem(rng, 12 + trial, trial % 2 ? &gpu : &cpu);
    const PlanResult r = plan_schedule(p, 5, 0);  // exact_max_jobs 0: local search
    CHECK(r.how.find("local search") == 0);
    check_every_job_once(p, r.schedule);
    double best_baseline = std::numeric_limits<double>::infinity();
    for (const Schedule& b : {sequential_schedule(p), max_pack_schedule(p), lpt_schedule(p)})
      best_baseline = std::min(best_baseline, simulate(p, b).makespan);
    CHECK(r.makespan <= best_baseline);
    improved += r.makespan < best_baseline * (1 - 1e-9);
    const PlanResult again = plan_schedule(p, 5, 0);
    CHECK(again.makespan == r.makespan);
    CHECK(again.schedule.workers == r.schedule.workers);
    if (trial < 2) CHECK(r.makespan >= plan_schedule(p, 5).makespan * (1 - 1e-12));  // the exact plan is a lower bound
  }
  CHECK(improved >= 4);
}

TEST_CASE("plora plan: space16 at a memory admitting 4 of 16 jobs, on the GPU and the CPU tables") {
  const SearchSpace space = read_space(repo("plora/space16.json"));
  const lm::ModelConfig c = kjv7m_config();
  check_space_for_model(space, c, "space16.json");
  const MemoryModel mem = memory_model(c, space, 280000000);
  CHECK(mem.max_jobs_at_once() == 4);
  for (std::size_t a = 0; a < 16; ++a)  // any 4 fit (the 4 largest too), no 5 do (not even the 5 smallest)
    CHECK(mem.job_bytes(a) <= mem.job_bytes(15));
  CHECK(mem.fits({12, 13, 14, 15}));
  CHECK_FALSE(mem.fits({0, 1, 2, 3, 4}));
  for (const char* name : {"plora/gpu_table_a100.json", "plora/cpu_table_synthetic.json"}) {
    const ThroughputModel tp(read_throughput_table(repo(name)));
    const auto rounds = search_rounds(space, mem, tp, 1);
    REQUIRE(rounds.size() == 1);
    const auto plans = plan_search(rounds, 1);
    REQUIRE(plans.size() == 4);
    CHECK(plans[3].method == "plan");
    double best = plans[0].makespan;
    for (int m = 0; m < 3; ++m) best = std::min(best, plans[std::size_t(m)].makespan);
    CHECK(plans[3].makespan <= best);
    CHECK(plans[3].max_group_jobs <= 4);
    CHECK(plans[0].max_concurrent == 1);
    if (std::string(name).find("gpu") != std::string::npos) {
      // packing pays on the GPU table: the plan is at least 1.33x faster than sequential (it gives 1.40x) and
      // strictly better than max-pack's and lpt's groups of four
      CHECK(plans[3].makespan * 1.33 <= plans[0].makespan);
      CHECK(plans[3].makespan < best * (1 - 1e-6));
    } else {
      CHECK(plans[3].makespan > 0.9 * plans[0].makespan);  // a CPU keeps the FLOPs: little to gain
    }
  }
  // the real file has the shape the test assumes
  const lm::Model m = lm::load_checkpoint(repo("models/kjv7m.h5"));
  CHECK(m.config.n_params() == c.n_params());
  CHECK(m.config.d_ff == c.d_ff);
}

TEST_CASE("plora plan: successive halving rounds keep ceil(n / eta) jobs, the most expensive, each planned") {
  SearchSpace space = read_space(repo("plora/space16.json"));
  space.early_stop.eta = 3, space.early_stop.rungs = {50, 100};
  space.jobs[3].steps = 400;  // the longest job survives the estimate
  const lm::ModelConfig c = kjv7m_config();
  const MemoryModel mem = memory_model(c, space, 280000000);
  const ThroughputModel tp(read_throughput_table(repo("plora/gpu_table_a100.json")));
  const auto rounds = search_rounds(space, mem, tp, 2);
  REQUIRE(rounds.size() == 3);
  CHECK(rounds[0].jobs.size() == 16);
  CHECK(rounds[1].jobs.size() == 6);  // ceil(16 / 3)
  CHECK(rounds[2].jobs.size() == 2);  // ceil(6 / 3)
  CHECK(rounds[0].problem.jobs[0].steps == 50);
  CHECK(rounds[1].from_step == 50);
  CHECK(rounds[1].problem.jobs[0].steps == 50);
  CHECK(std::find(rounds[2].jobs.begin(), rounds[2].jobs.end(), 3) != rounds[2].jobs.end());
  for (std::size_t k = 0; k < rounds[2].jobs.size(); ++k)
    CHECK(rounds[2].problem.jobs[k].steps == space.jobs[std::size_t(rounds[2].jobs[k])].steps - 100);
  // job 3's 350 remaining steps make it the most expensive; then the rank-32 jobs (12..15), then rank 16
  for (int j : rounds[1].jobs) CHECK((space.jobs[std::size_t(j)].rank >= 16 || j == 3));
  const auto plans = plan_search(rounds, 1);
  for (std::size_t m = 0; m < 3; ++m) CHECK(plans[3].makespan <= plans[m].makespan);
  CHECK(plans[3].round_start.size() == 3);
  CHECK(plans[3].round_start[1] == doctest::Approx(plans[3].runs[0].makespan));
  CHECK(plans[3].makespan == doctest::Approx(plans[3].runs[0].makespan + plans[3].runs[1].makespan + plans[3].runs[2].makespan));
}
