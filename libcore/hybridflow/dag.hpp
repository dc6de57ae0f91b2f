// HybridFlow's dependency graph and its schedules (arXiv 2512.22137, Sec. 3.2; reference
// planner/task_metrics.py, execution.py router()/is_step_ready, output_performance.py
// simulate_task_execution).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hybridflow/plan.hpp"

namespace icmlkit::hybridflow {

/// Structure of a plan's DAG (task_metrics.py calculate_task_metrics).
struct DagMetrics {
  std::vector<std::pair<int, int>> reduced_edges;  ///< (from, to) after transitive reduction, sorted
  std::map<int, int> depth;                        ///< longest path from a root, roots 0
  int levels = 0;                                  ///< max depth + 1 (the reference's "total steps")
  double compression = 0;                          ///< levels / number of steps (1 = a chain)
  int max_width = 0;                               ///< most steps at one depth
};

/// Transitive reduction (an edge u->v is dropped when another path u~>v exists), depths and the
/// compression ratio.  Rely entries naming absent IDs are ignored.  Throws InputError on a cycle
/// (impossible after PlanParser, which only keeps Rely < ID).
DagMetrics dag_metrics(const std::vector<Step>& steps);

/// One step to schedule: when its tag finished streaming, how long it runs, what it waits for.
struct SimStep {
  int id = 0;
  std::vector<int> deps;   ///< IDs (must be in the list; others ignored)
  double available = 0;    ///< seconds: the planner has emitted the step
  double duration = 0;     ///< seconds of execution
};

/// Start and finish times of every step (same order as the input) and the makespan.
struct Schedule {
  std::vector<double> start, finish;
  double makespan = 0;  ///< latest finish (0 for no steps)
};

/// Schedules steps on `workers` executors (0 = unlimited).  A step may start when it is available
/// and all its deps have finished; among ready steps, free workers take them in the reference's
/// order (fewest deps, then lowest ID: execution.py router()).  With unlimited workers this is the
/// reference simulator's start_i = max(available_i, max_{j in deps} finish_j) exactly.
Schedule schedule(const std::vector<SimStep>& steps, int workers);

/// The same, with each step's duration decided when it starts: on_start(index, start time) returns
/// it (SimStep::duration is ignored).  Steps starting at the same instant are asked in the ready
/// order above, so a decision may depend on what started or finished before it.
Schedule schedule(const std::vector<SimStep>& steps, int workers, const std::function<double(std::size_t, double)>& on_start);

/// The longest available-to-finish path through the DAG: max over steps of finish times when
/// workers are unlimited (equals schedule(steps, 0).makespan; computed independently, by
/// recursion over deps, for tests).
double critical_path(const std::vector<SimStep>& steps);

/// A model's speed in the reference simulator: time to first token and decode throughput.
struct ModelSpeed {
  double ttft_s = 0.5;
  double tokens_per_s = 71.2;
};

/// The reference's table (output_performance.py get_model_performance): substring match on the
/// lower-cased name in the reference's order (e.g. "gpt-4.1" -> 0.96 s, 50.59 tok/s; "llama-3.2-3b"
/// -> mean of its five entries); unknown names get the reference's default (0.5 s, 71.2 tok/s) and
/// `known` false.
ModelSpeed reference_speed(const std::string& model, bool* known = nullptr);

/// Execution time of a step in the reference simulator: ttft + tokens / throughput (0 tokens: ttft).
inline double task_seconds(const ModelSpeed& m, double tokens) { return m.ttft_s + (tokens > 0 ? tokens / m.tokens_per_s : 0.0); }

/// The reference's token estimate when its tokenizer is absent (count_tokens fallback): bytes / 4.
inline long approx_tokens(const std::string& text) { return static_cast<long>(text.size() / 4); }

/// When each step becomes available while the planner streams (simulate_task_execution):
/// t = ttft + tok("<Plan>")/thr, then for each step in ID order t += tok(step xml)/thr; the planner
/// finishes at t + tok("</Plan>")/thr (returned in `planner_s`).  The step's XML is rebuilt from its
/// fields as the reference does.
std::vector<double> plan_stream_times(const std::vector<Step>& steps, const ModelSpeed& planner, double* planner_s);

}  // namespace icmlkit::hybridflow
