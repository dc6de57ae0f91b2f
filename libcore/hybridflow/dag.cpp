#include "hybridflow/dag.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "util/error.hpp"

namespace icmlkit::hybridflow {

namespace {

double mean(std::initializer_list<double> v) { return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size()); }

}  // namespace

DagMetrics dag_metrics(const std::vector<Step>& steps) {
  const std::size_t n = steps.size();
  std::map<int, std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) index[steps[i].id] = i;
  // adjacency (deps -> step) and a topological order (Kahn)
  std::vector<std::vector<std::size_t>> preds(n), succ(n);
  for (std::size_t i = 0; i < n; ++i)
    for (int r : steps[i].rely) {
      auto it = index.find(r);
      if (it == index.end() || it->second == i) continue;
      if (std::find(preds[i].begin(), preds[i].end(), it->second) == preds[i].end()) {
        preds[i].push_back(it->second);
        succ[it->second].push_back(i);
      }
    }
  std::vector<std::size_t> order, indeg(n);
  for (std::size_t i = 0; i < n; ++i) indeg[i] = preds[i].size();
  for (std::size_t i = 0; i < n; ++i)
    if (!indeg[i]) order.push_back(i);
  for (std::size_t k = 0; k < order.size(); ++k)
    for (std::size_t j : succ[order[k]])
      if (--indeg[j] == 0) order.push_back(j);
  if (order.size() != n) throw InputError("the plan's dependencies form a cycle");

  // reach[i]: every node reachable from i (DAGs of a few steps: plain sets suffice)
  std::vector<std::set<std::size_t>> reach(n);
  for (auto it = order.rbegin(); it != order.rend(); ++it)
    for (std::size_t j : succ[*it]) {
      reach[*it].insert(j);
      reach[*it].insert(reach[j].begin(), reach[j].end());
    }
  DagMetrics m;
  for (std::size_t u = 0; u < n; ++u)
    for (std::size_t v : succ[u]) {
      bool redundant = false;
      for (std::size_t w : succ[u])
        if (w != v && reach[w].count(v)) redundant = true;
      if (!redundant) m.reduced_edges.emplace_back(steps[u].id, steps[v].id);
    }
  std::sort(m.reduced_edges.begin(), m.reduced_edges.end());
  std::vector<int> depth(n, 0);
  for (std::size_t k : order)
    for (std::size_t p : preds[k]) depth[k] = std::max(depth[k], depth[p] + 1);
  std::map<int, int> width;
  for (std::size_t i = 0; i < n; ++i) {
    m.depth[steps[i].id] = depth[i];
    m.levels = std::max(m.levels, depth[i] + 1);
    m.max_width = std::max(m.max_width, ++width[depth[i]]);
  }
  m.compression = n ? static_cast<double>(m.levels) / static_cast<double>(n) : 0.0;
  return m;
}

Schedule schedule(const std::vector<SimStep>& steps, int workers) {
  return schedule(steps, workers, [&](std::size_t i, double) { return steps[i].duration; });
}

Schedule schedule(const std::vector<SimStep>& steps, int workers, const std::function<double(std::size_t, double)>& on_start) {
  const std::size_t n = steps.size();
  std::map<int, std::size_t> index;
  for (std::size_t i = 0; i < n; ++i) index[steps[i].id] = i;
  std::vector<std::vector<std::size_t>> deps(n);
  for (std::size_t i = 0; i < n; ++i)
    for (int d : steps[i].deps) {
      auto it = index.find(d);
      if (it != index.end() && it->second != i) deps[i].push_back(it->second);
    }
  Schedule s;
  s.start.assign(n, 0.0);
  s.finish.assign(n, 0.0);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<char> started(n, 0), done(n, 0);
  std::vector<double> busy_until;  // finish times of running steps
  double now = 0;
  std::size_t finished = 0;
  while (finished < n) {
    // Ready at `now`: available, deps done by now, not started.
    std::vector<std::size_t> ready;
    double next_event = inf;
    for (std::size_t i = 0; i < n; ++i) {
      if (started[i]) continue;
      bool deps_done = true;
      double deps_finish = 0;
      for (std::size_t d : deps[i]) {
        if (!started[d] || s.finish[d] > now) deps_done = false;
        if (started[d]) deps_finish = std::max(deps_finish, s.finish[d]);
      }
      if (deps_done && steps[i].available <= now) ready.push_back(i);
      else if (deps_done) next_event = std::min(next_event, steps[i].available);
    }
    std::sort(ready.begin(), ready.end(), [&](std::size_t a, std::size_t b) {
      if (deps[a].size() != deps[b].size()) return deps[a].size() < deps[b].size();
      return steps[a].id < steps[b].id;
    });
    // running = started and finish > now
    std::size_t running = 0;
    for (std::size_t i = 0; i < n; ++i)
      if (started[i] && s.finish[i] > now) ++running;
    for (std::size_t i : ready) {
      if (workers > 0 && running >= static_cast<std::size_t>(workers)) break;
      started[i] = 1;
      s.start[i] = now;
      s.finish[i] = now + on_start(i, now);
      ++running;
    }
    // Advance to the next finish or availability.
    for (std::size_t i = 0; i < n; ++i) {
      if (started[i] && !done[i] && s.finish[i] <= now) {
        done[i] = 1;
        ++finished;
      }
      if (started[i] && s.finish[i] > now) next_event = std::min(next_event, s.finish[i]);
    }
    if (finished == n) break;
    if (next_event == inf) {
      // Nothing running, nothing becomes available: a step whose deps never finish (cannot
      // happen for a DAG, since every dep is a step of the list).
      bool progress = false;
      for (std::size_t i = 0; i < n; ++i)
        if (started[i] && !done[i]) progress = true;
      if (!progress) throw InputError("the plan's dependencies form a cycle");
    } else {
      now = next_event;
    }
  }
  for (double f : s.finish) s.makespan = std::max(s.makespan, f);
  return s;
}

double critical_path(const std::vector<SimStep>& steps) {
  std::map<int, std::size_t> index;
  for (std::size_t i = 0; i < steps.size(); ++i) index[steps[i].id] = i;
  std::vector<double> memo(steps.size(), -1.0);
  std::function<double(std::size_t)> fin = [&](std::size_t i) {
    if (memo[i] >= 0) return memo[i];
    double start = steps[i].available;
    for (int d : steps[i].deps) {
      auto it = index.find(d);
      if (it != index.end() && it->second != i) start = std::max(start, fin(it->second));
    }
    return memo[i] = start + steps[i].duration;
  };
  double m = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) m = std::max(m, fin(i));
  return m;
}

ModelSpeed reference_speed(const std::string& model, bool* known) {
  std::string m = model;
  std::transform(m.begin(), m.end(), m.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  auto has = [&](const char* s) { return m.find(s) != std::string::npos; };
  if (known) *known = true;
  // The reference's table (measured speeds from openrouter.ai, 2025-07), same order of matching.
  if (has("claude-3-5") || has("claude-3.5")) return {mean({0.76, 1.41, 1.75, 1.54, 1.23}), mean({52.59, 49.44, 56.96, 45.58, 52.89})};
  if (has("claude-3-7") || has("claude-3.7")) return {mean({1.41, 3.99, 2.74, 2.40}), mean({56.31, 69.85, 53.88, 90.04})};
  if (has("gemini-2.5-flash-thinking")) return {mean({0.41, 0.59, 1.21}), mean({106.6, 118.1, 86.42})};
  if (has("gemini-2.5-pro")) return {mean({2.20, 2.99, 2.34}), mean({100.7, 94.10, 86.46})};
  if (has("gpt-4o")) return {mean({0.50, 0.97}), mean({110.5, 178.5})};
  if (has("gpt-5")) return {mean({6.96, 7.03, 5.23}), mean({53.20, 53.43, 45.09})};
  if (has("gpt-4.1-mini")) return {0.70, 69.59};
  if (has("gpt-4.1")) return {0.96, 50.59};
  if (has("deepseek-r1") || has("deepseek-reasoner")) return {mean({2.37, 1.18, 0.88, 0.97, 0.51}), mean({44.26, 48.32, 65.32, 35.83, 38.71})};
  if (has("deepseek-chat")) return {mean({1.89, 0.91, 3.13, 0.67, 1.40}), mean({36.14, 54.12, 20.80, 24.61, 24.18})};
  if (has("grok-4")) return {12.65, 36.37};
  if (has("llama3-8b") || has("llama-3-8b")) return {mean({0.55, 0.69, 0.86, 0.48}), mean({89.21, 94.59, 148.4, 15.58})};
  if (has("llama-3.2-3b") || has("llama3.2-3b")) return {mean({0.54, 0.40, 0.76, 0.38, 0.37}), mean({128.3, 53.67, 181.8, 229.9, 96.15})};
  if (has("llama-3.3-70b") || has("llama3.3-70b")) return {mean({0.55, 0.25, 0.72, 0.68, 0.57}), mean({57.97, 40.28, 51.03, 75.79, 41.67})};
  if (has("llama-3.2-1b") || has("llama3.2-1b")) return {mean({1.45, 0.48, 0.31}), mean({17.43, 61.09, 439.1})};
  if (has("qwen3-4b") || has("qwen3-1.7b") || has("qwen3-0.6b")) return {0.69, 184.1};
  if (has("qwen2.5-3b")) return {0.69, 64.53};
  if (has("qwen3-235b-a22b")) return {mean({0.31, 1.34}), mean({52.82, 88.24})};
  if (known) *known = false;
  return {0.5, 71.2};
}

std::vector<double> plan_stream_times(const std::vector<Step>& steps, const ModelSpeed& planner, double* planner_s) {
  std::vector<std::size_t> order(steps.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return steps[a].id < steps[b].id; });
  double t = planner.ttft_s + static_cast<double>(approx_tokens("<Plan>")) / planner.tokens_per_s;
  std::vector<double> avail(steps.size(), 0.0);
  for (std::size_t i : order) {
    const Step& s = steps[i];
    std::string rely;
    for (std::size_t k = 0; k < s.rely.size(); ++k) rely += (k ? "," : "") + std::to_string(s.rely[k]);
    // The reference rebuilds the tag with Token "30" when absent.
    const std::string xml = fmt::format("<Step ID=\"{}\" Task=\"{}\" Difficulty=\"{}\" Token=\"{}\" Rely=\"{}\"/>", s.id, s.task,
                                        s.difficulty, s.token >= 0 ? s.token : 30, rely);
    t += static_cast<double>(approx_tokens(xml)) / planner.tokens_per_s;
    avail[i] = t;
  }
  t += static_cast<double>(approx_tokens("</Plan>")) / planner.tokens_per_s;
  if (planner_s) *planner_s = t;
  return avail;
}

}  // namespace icmlkit::hybridflow
