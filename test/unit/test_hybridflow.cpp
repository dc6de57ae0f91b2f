// hybridflow: the plan parser (reference execution.py process_xml_buffer), DAG metrics
// (task_metrics.py), the schedules and the latency simulator (output_performance.py), prices and
// the scorers.  Expected values are hand-worked from the reference's rules, or come from an
// independent brute force (every topological order of a small DAG for the critical path; a
// step-by-step discrete-time simulation for the worker-limited schedule).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "hybridflow/dag.hpp"
#include "hybridflow/plan.hpp"
#include "hybridflow/runner.hpp"
#include "hybridflow/score.hpp"
#include "util/error.hpp"

using namespace icmlkit;
using namespace icmlkit::hybridflow;

namespace {

std::vector<int> ids(const std::vector<Step>& s) {
  std::vector<int> v;
  for (const auto& x : s) v.push_back(x.id);
  return v;
}

}  // namespace

TEST_CASE("hybridflow plan: steps are returned as soon as their tag completes, at any chunking") {
  const std::string plan =
      "Some preamble <Plan>\n<Step ID=\"1\" Task=\"Explain?\" Difficulty=\"3\" Token=\"50\" Rely=\"\"/>\n"
      "<Step ID=\"2\" Task=\"a<b?\" Difficulty=\"7\" Token=\"20\" Rely=\"1\"/>\n"
      "<Step ID=\"3\" Task=\"c?\" Token=\"x\" Rely=\"1\"/>\n"
      "<Step ID=\"4\" Task=\"d?\" Difficulty=\"2\" Rely=\"2,3\"/>\n</Plan> trailing";
  for (std::size_t chunk : {1u, 2u, 3u, 7u, 1000u}) {
    PlanParser p;
    std::vector<int> order;
    std::vector<std::size_t> when;  // the byte offset at which each step was returned
    for (std::size_t at = 0; at < plan.size(); at += chunk) {
      for (const auto& s : p.feed(std::string_view(plan).substr(at, chunk))) {
        order.push_back(s.id);
        when.push_back(std::min(plan.size(), at + chunk));
      }
    }
    p.finish();
    CAPTURE(chunk);
    CHECK(order == std::vector<int>{1, 2, 3, 4});
    CHECK(p.closed());
    // step 1 is complete once its "/>" arrived: at most one chunk later than the byte after it
    const std::size_t end1 = plan.find("/>") + 2;
    CHECK(when[0] >= end1);
    CHECK(when[0] < end1 + chunk);
    const auto& s = p.steps();
    CHECK(s[1].task == "a<b?");
    CHECK(s[1].difficulty == 7);
    CHECK(s[1].token == 20);
    CHECK(s[1].rely == std::vector<int>{1});
    CHECK(s[2].difficulty == 5);  // missing Difficulty -> 5
    CHECK(s[2].token == -1);      // unreadable Token -> absent
    CHECK(s[3].rely == std::vector<int>{2, 3});
  }
}

TEST_CASE("hybridflow plan: the reference's sanitising rules and our guards") {
  std::vector<std::string> warn;
  // ID 1 loses its Rely; a Rely entry >= own ID (or not a number) becomes every earlier ID.
  auto s = parse_plan(
      "<Step ID=\"1\" Task=\"a\" Rely=\"3\"/><Step ID=\"2\" Task=\"b\" Rely=\"1\"/><Step ID=\"3\" Task=\"c\" Rely=\"1,3\"/>"
      "<Step ID=\"4\" Task=\"d\" Rely=\"x\"/><Step ID=\"5\" Task=\"e\" Rely=\"2, 2 ,4\"/>",
      {}, "t", &warn);
  REQUIRE(s.size() == 5);
  CHECK(s[0].rely.empty());
  CHECK(s[2].rely == std::vector<int>{1, 2});
  CHECK(s[3].rely == std::vector<int>{1, 2, 3});
  CHECK(s[4].rely == std::vector<int>{2, 4});  // duplicates merged, blanks ignored
  CHECK(warn.empty());
  // chain: Rely = 1..ID-1; single_rely: ID-1
  auto c = parse_plan("<Step ID=\"1\" Task=\"a\"/><Step ID=\"2\" Task=\"b\"/><Step ID=\"3\" Task=\"c\" Rely=\"\"/>", {true, false}, "t");
  CHECK(c[2].rely == std::vector<int>{1, 2});
  auto c1 = parse_plan("<Step ID=\"1\" Task=\"a\"/><Step ID=\"2\" Task=\"b\"/><Step ID=\"3\" Task=\"c\" Rely=\"\"/>", {true, true}, "t");
  CHECK(c1[2].rely == std::vector<int>{2});
  // guards: no ID, a non-numeric ID, a repeated ID are dropped with a warning; a Rely on a step
  // that never arrives is dropped by finish().
  auto g = parse_plan(
      "<Step Task=\"none\"/><Step ID=\"two\" Task=\"x\"/><Step ID=\"1\" Task=\"a\"/><Step ID=\"1\" Task=\"again\"/>"
      "<Step ID=\"3\" Task=\"c\" Rely=\"1,2\"/>",
      {}, "t", &warn);
  CHECK(ids(g) == std::vector<int>{1, 3});
  CHECK(g[1].rely == std::vector<int>{1});
  CHECK(warn.size() == 4);
  CHECK_THROWS_AS(parse_plan("<Plan></Plan>", {}, "t"), InputError);
  CHECK_THROWS_AS(parse_plan("no steps at all", {}, "t"), InputError);
  // a tag split right after "<Step" waits for more instead of being missed
  PlanParser p;
  CHECK(p.feed("<Step").empty());
  CHECK(p.feed(" ID=\"1\" Task=\"q\"/").empty());
  CHECK(p.feed(">").size() == 1);
  // "<Steps" is not a step tag
  CHECK(parse_plan("<Steps ID=\"9\"/><Step ID=\"1\" Task=\"a\"/>", {}, "t").size() == 1);
  // written back, the plan parses to the same steps
  auto back = parse_plan(plan_xml(s), {}, "t");
  REQUIRE(back.size() == s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    CHECK(back[i].id == s[i].id);
    CHECK(back[i].rely == s[i].rely);
    CHECK(back[i].task == s[i].task);
  }
}

TEST_CASE("hybridflow dag: transitive reduction, depth and compression by hand") {
  // 1 -> 2, 1 -> 3, 2 -> 4, 3 -> 4, 1 -> 4 (redundant), 4 -> 5, 2 -> 5 (redundant)
  std::vector<Step> s(5);
  for (int i = 0; i < 5; ++i) s[i].id = i + 1;
  s[1].rely = {1};
  s[2].rely = {1};
  s[3].rely = {2, 3, 1};
  s[4].rely = {4, 2};
  const DagMetrics m = dag_metrics(s);
  CHECK(m.reduced_edges == std::vector<std::pair<int, int>>{{1, 2}, {1, 3}, {2, 4}, {3, 4}, {4, 5}});
  CHECK(m.depth.at(1) == 0);
  CHECK(m.depth.at(4) == 2);
  CHECK(m.depth.at(5) == 3);
  CHECK(m.levels == 4);
  CHECK(m.compression == doctest::Approx(4.0 / 5.0));
  CHECK(m.max_width == 2);
  // a chain: compression 1; independent steps: 1/n
  std::vector<Step> chain(4), flat(4);
  for (int i = 0; i < 4; ++i) {
    chain[i].id = flat[i].id = i + 1;
    if (i) chain[i].rely = {i};
  }
  CHECK(dag_metrics(chain).compression == 1.0);
  CHECK(dag_metrics(flat).compression == 0.25);
}

TEST_CASE("hybridflow schedule: unlimited workers give the critical path, and a worker limit is respected") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 7);
    std::vector<SimStep> st(n);
    for (int i = 0; i < n; ++i) {
      st[i].id = i + 1;
      for (int j = 1; j <= i; ++j)
        if (rng() % 3 == 0) st[i].deps.push_back(j);
      st[i].available = (rng() % 5) * 0.25;
      st[i].duration = 0.5 + (rng() % 8) * 0.25;
    }
    CAPTURE(trial);
    const Schedule u = schedule(st, 0);
    // the reference simulator: start_i = max(available_i, max finish of deps), in ID order
    std::vector<double> fin(n);
    for (int i = 0; i < n; ++i) {
      double start = st[i].available;
      for (int d : st[i].deps) start = std::max(start, fin[d - 1]);
      fin[i] = start + st[i].duration;
      CHECK(u.start[i] == doctest::Approx(start));
    }
    CHECK(u.makespan == doctest::Approx(*std::max_element(fin.begin(), fin.end())));
    CHECK(u.makespan == doctest::Approx(critical_path(st)));
    for (int w : {1, 2, 3}) {
      const Schedule s = schedule(st, w);
      // no step before its deps finish or before it is available
      for (int i = 0; i < n; ++i) {
        CHECK(s.start[i] >= st[i].available - 1e-12);
        for (int d : st[i].deps) CHECK(s.start[i] >= s.finish[d - 1] - 1e-12);
        CHECK(s.finish[i] == doctest::Approx(s.start[i] + st[i].duration));
      }
      // at most w running at every start instant
      for (int i = 0; i < n; ++i) {
        int running = 0;
        for (int j = 0; j < n; ++j) running += s.start[j] <= s.start[i] + 1e-12 && s.finish[j] > s.start[i] + 1e-12;
        CHECK(running <= w);
      }
      CHECK(s.makespan >= u.makespan - 1e-12);
      if (w == 1) {  // one worker: never idle while a step is ready, so makespan <= sum + latest availability
        double total = 0, last_avail = 0;
        for (const auto& x : st) total += x.duration, last_avail = std::max(last_avail, x.available);
        CHECK(s.makespan <= total + last_avail + 1e-9);
      }
    }
  }
  // the ready order: fewest deps, then lowest ID (one worker, all available at 0)
  std::vector<SimStep> fan = {{1, {}, 0, 1}, {2, {1}, 0, 1}, {3, {1}, 0, 1}, {4, {2, 3}, 0, 1}, {5, {1}, 0, 1}};
  const Schedule f = schedule(fan, 1);
  CHECK(f.start == std::vector<double>{0, 1, 2, 4, 3});
}

TEST_CASE("hybridflow simulator: the reference's speed table, plan streaming and makespan by hand") {
  bool known = false;
  const ModelSpeed g = reference_speed("openai/GPT-4.1", &known);
  CHECK(known);
  CHECK(g.ttft_s == 0.96);
  CHECK(g.tokens_per_s == 50.59);
  CHECK(reference_speed("gpt-4.1-mini").tokens_per_s == 69.59);  // the reference matches -mini first
  const ModelSpeed l = reference_speed("llama-3.2-3b-instruct");
  CHECK(l.ttft_s == doctest::Approx((0.54 + 0.40 + 0.76 + 0.38 + 0.37) / 5));
  reference_speed("my-model", &known);
  CHECK_FALSE(known);
  CHECK(reference_speed("my-model").tokens_per_s == 71.2);

  // Planner at 10 tok/s, ttft 1: "<Plan>" is 6 bytes = 1 token -> 1.1 s, then each step's XML.
  std::vector<Step> s(2);
  s[0].id = 1, s[0].task = "a", s[0].difficulty = 2, s[0].token = 10;
  s[1].id = 2, s[1].task = "b", s[1].difficulty = 7, s[1].token = 40, s[1].rely = {1};
  double planner = 0;
  const auto avail = plan_stream_times(s, {1.0, 10.0}, &planner);
  const std::string x1 = "<Step ID=\"1\" Task=\"a\" Difficulty=\"2\" Token=\"10\" Rely=\"\"/>";
  const std::string x2 = "<Step ID=\"2\" Task=\"b\" Difficulty=\"7\" Token=\"40\" Rely=\"1\"/>";
  CHECK(avail[0] == doctest::Approx(1.1 + static_cast<double>(x1.size() / 4) / 10));
  CHECK(avail[1] == doctest::Approx(avail[0] + static_cast<double>(x2.size() / 4) / 10));
  CHECK(planner == doctest::Approx(avail[1] + 0.1));  // "</Plan>": 7 bytes = 1 token

  // simulate_task under the threshold policy: step 1 edge (2 < 5), step 2 cloud.
  RunConfig cfg;
  cfg.policy = Policy::threshold;
  cfg.planner_speed = {1.0, 10.0};
  cfg.edge_speed = {0.5, 100.0};
  cfg.cloud_speed = {1.0, 20.0};
  cfg.edge.model = "local-3b";
  cfg.cloud.model = "gpt-4.1";
  Task t;
  t.id = "x";
  t.problem = "p";
  const TaskRecord r = simulate_task(t, 0, cfg, plan_xml(s), {}, {});
  REQUIRE(r.steps.size() == 2);
  CHECK(r.steps[0].route == "edge");
  CHECK(r.steps[1].route == "cloud");
  const double f1 = avail[0] + 0.5 + 10.0 / 100.0;
  const double f2 = std::max(avail[1], f1) + 1.0 + 40.0 / 20.0;
  CHECK(r.steps[0].finish_s == doctest::Approx(f1));
  CHECK(r.makespan_s == doctest::Approx(f2));
  CHECK(r.cloud_share() == 0.5);
  // cost: only the cloud call is priced (gpt-4.1: 2 USD / 8 USD per 1M)
  CHECK(r.steps[0].cost_usd == 0.0);
  CHECK(r.steps[1].cost_usd == doctest::Approx(r.steps[1].prompt_tokens * 2e-6 + 40 * 8e-6));
  // a recorded profile overrides the plan's Token
  std::map<int, StepProfile> prof;
  prof[2].cloud = RouteProfile{3.0, 0.2, 100, 60};
  const TaskRecord r2 = simulate_task(t, 0, cfg, plan_xml(s), prof, {});
  CHECK(r2.steps[1].completion_tokens == 60);
  CHECK(r2.makespan_s == doctest::Approx(std::max(avail[1], f1) + 1.0 + 60.0 / 20.0));
  cfg.sim_recorded_latency = true;  // ... or its measured latency; a route without one is an error
  CHECK_THROWS_AS(simulate_task(t, 0, cfg, plan_xml(s), prof, {}), InputError);
  prof[1].edge = RouteProfile{0.25, 0.1, 50, 5};
  const TaskRecord r3 = simulate_task(t, 0, cfg, plan_xml(s), prof, {});
  CHECK(r3.makespan_s == doctest::Approx(std::max(avail[1], avail[0] + 0.25) + 3.0));
  // random routing is seeded: the same seed routes the same way; the share follows --cloud-share
  cfg.sim_recorded_latency = false;
  cfg.policy = Policy::random;
  cfg.cloud_share = 1.0;
  CHECK(simulate_task(t, 3, cfg, plan_xml(s), {}, {}).cloud_share() == 1.0);
  cfg.cloud_share = 0.0;
  CHECK(simulate_task(t, 3, cfg, plan_xml(s), {}, {}).cloud_share() == 0.0);
  cfg.cloud_share = 0.5;
  std::string a, b;
  for (std::size_t k = 0; k < 20; ++k) {
    a += simulate_task(t, k, cfg, plan_xml(s), {}, {}).steps[1].route;
    b += simulate_task(t, k, cfg, plan_xml(s), {}, {}).steps[1].route;
  }
  CHECK(a == b);
  CHECK(a.find("edge") != std::string::npos);
  CHECK(a.find("cloud") != std::string::npos);
}

TEST_CASE("hybridflow prices: the reference's table, substring order and the provider prefix") {
  const auto t = reference_prices();
  CHECK(call_cost(t, "gpt-4.1", 1e6, 1e6) == doctest::Approx(10.0));
  CHECK(call_cost(t, "openai/gpt-4.1-mini", 1e6, 0) == doctest::Approx(0.4));
  CHECK(call_cost(t, "GPT-4o-2024", 0, 1e6) == doctest::Approx(10.0));
  CHECK(call_cost(t, "deepseek-chat", 2e6, 1e6) == doctest::Approx(0.5 + 0.85));
  CHECK(call_cost(t, "kjv7m", 1e6, 1e6) == 0.0);
  CHECK(policy_name(parse_policy("threshold")) == std::string("threshold"));
  CHECK_THROWS_AS(parse_policy("fast"), UsageError);
}

TEST_CASE("hybridflow scorers: letters, integers, solution lists, exact") {
  CHECK(answer_letter("The answer is (C).") == 'C');
  CHECK(answer_letter("I think B. But on reflection the answer: D") == 'D');
  CHECK(answer_letter("Answer: b") == 'B');
  CHECK_FALSE(answer_letter("no option here").has_value());
  CHECK(answer_integer("so 12 + 30 = 42") == 42);
  CHECK(answer_integer("\\boxed{204} and then 7") == 204);
  CHECK(answer_integer("about 1,234 apples") == 1234);
  CHECK(answer_integer("minus -5") == -5);
  CHECK_FALSE(answer_integer("none").has_value());
  CHECK(answer_solution("x <solution>A, b ,C</solution> y") == std::string("a,b,c"));
  CHECK_FALSE(answer_solution("a, b").has_value());
  CHECK(score_answer("letter", "C", "It must be (C)") == true);
  CHECK(score_answer("letter", "C", "It must be (D)") == false);
  CHECK(score_answer("integer", "42", "The total is 42.") == true);
  CHECK(score_answer("integer", "42", "no number") == false);
  CHECK(score_answer("solution", "<solution>1, 2</solution>", "<solution>1,2</solution>") == true);
  CHECK(score_answer("solution", "1, 2", "<solution>2, 1</solution>") == false);
  CHECK(score_answer("exact", " Paris ", "paris") == true);
  CHECK_FALSE(score_answer("exact", "", "x").has_value());
  CHECK_THROWS_AS(score_answer("fuzzy", "a", "a"), UsageError);
  CHECK(judge_verdict("True"));
  CHECK_FALSE(judge_verdict("True or False?"));
  CHECK_FALSE(judge_verdict("no"));
}
