// HybridFlow end to end (arXiv 2512.22137; reference planner/execution.py run_parallel_execution):
// a planner streams an XML plan, each subtask starts as soon as it is parsed and its dependencies
// have finished, a routing policy sends it to the edge or the cloud model, and the edge model
// aggregates the results into the final answer.  Live over OpenAI-compatible endpoints
// (run_task), or simulated from recorded plans and profiles with the reference's latency model
// (simulate_task).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hybridflow/client.hpp"
#include "hybridflow/dag.hpp"
#include "hybridflow/plan.hpp"
#include "hybridflow/router.hpp"

namespace icmlkit::hybridflow {

/// One question of a TASKS.jsonl file: {"id", "problem", "answer"?, "kind"?}.
struct Task {
  std::string id;       ///< a string or an integer in the file, kept as text
  std::string problem;  ///< the question put to the planner and the executors
  std::string answer;   ///< gold answer ("" when absent)
  std::string kind;     ///< scorer: "letter" | "integer" | "solution" | "exact" | "" (= the run's --scorer)
};

/// Reads TASKS.jsonl ("problem" or "question" accepted; ids must be unique).  Throws InputError
/// naming the file and line.
std::vector<Task> read_tasks(const std::string& path, std::string* sha256 = nullptr);

/// Reads recorded plans, JSONL {"id": task id, "plan": "<Plan>...</Plan>"} (or a run's output
/// records, whose "plan" field is the same), keyed by task id.  Throws InputError.
std::map<std::string, std::string> read_plans(const std::string& path, std::string* sha256 = nullptr);

/// Routing policies (--policy): the paper's baselines and its router.
enum class Policy {
  edge,       ///< every subtask on the edge model
  cloud,      ///< every subtask (and the aggregation) on the cloud model
  threshold,  ///< cloud iff the planner's Difficulty >= threshold (reference enable_threshold)
  random,     ///< cloud with probability cloud_share, seeded (reference random_router: share 0.5)
  router,     ///< the utility router (router.hpp), step 1 and the newest parsed step forced to cloud
};
Policy parse_policy(const std::string& name);
const char* policy_name(Policy p);

/// USD per million prompt and completion tokens, matched by lower-cased substring in table order
/// (reference api_pricing.py: the part after a "/" in the name is matched; unknown models cost 0).
struct Price {
  std::vector<std::string> match;  ///< substrings, any of which selects the row
  double prompt = 0, completion = 0;
};
/// The reference's table (gpt-4o 2.5/10, gpt-4.1 2/8, deepseek-chat 0.25/0.85, ...).
std::vector<Price> reference_prices();
/// Reads a pricing JSON: [{"match": ["gpt-4.1"], "prompt": 2, "completion": 8}, ...].  Throws InputError.
std::vector<Price> read_prices(const std::string& path);
/// Cost in USD of one call (0 for a model no row matches).
double call_cost(const std::vector<Price>& table, const std::string& model, double prompt_tokens, double completion_tokens);

/// Everything a run needs.
struct RunConfig {
  Endpoint planner, edge, cloud;   ///< live endpoints (unused in simulation, except names)
  std::optional<Endpoint> embed;   ///< the router's embedding endpoint
  ChatSettings planner_chat{1.0, 0.95, 600, 0};  ///< reference planner: T 1, top-p 0.95, 600 tokens
  ChatSettings executor_chat{0.5, 0.9, 500, 0};  ///< reference executor: T 0.5, top-p 0.9, 500 tokens
  bool max_tokens_from_plan = false;  ///< executor max_tokens = the step's Token (when present)
  std::string planner_system;         ///< planner system prompt (default_planner_prompt())
  Policy policy = Policy::router;
  int threshold = 5;           ///< Difficulty >= threshold -> cloud (threshold policy; router's label)
  double cloud_share = 0.5;    ///< random policy's probability of cloud
  SanitizeOptions sanitize;    ///< chain = HybridFlow-Chain (no DAG parallelism)
  int workers = 4;             ///< concurrent subtasks (reference ThreadPoolExecutor(4)); 0 = unlimited
  int attempts = 3;            ///< tries per call (reference max_attempts 3)
  double retry_delay_s = 5;    ///< first retry's wait; doubled each further retry
  const RouterNet* router = nullptr;
  RouterParams router_params;
  std::uint64_t seed = 0;
  std::vector<Price> prices = reference_prices();
  // simulation
  ModelSpeed planner_speed, edge_speed, cloud_speed;  ///< reference_speed of the model names by default
  bool sim_recorded_latency = false;  ///< a step lasts its profile's measured latency (not the speed table)
};

/// The planner's system prompt: the Explain-Analyze-Generate scheme of the paper (a fixed first
/// "understanding" step, parallel analysis steps, a fixed final answer step, fewer than 7 steps,
/// Difficulty 1-4 edge / 5-9 cloud), in our words with our own examples.
std::string default_planner_prompt();
/// The user message the planner gets ("**Problem**: {problem}\n**Output**:", as the reference).
std::string planner_user_prompt(const std::string& problem);
/// The executor's system and user prompts for `step`, given the results of the steps it relies on
/// (reference build_step_prompt: the problem in the system prompt; the sub-problem and
/// "Task {id}: {task} ; Result: {result}" for every relied-on step that has a result).
std::pair<std::string, std::string> executor_prompts(const std::string& problem, const Step& step,
                                                     const std::map<int, std::pair<std::string, std::string>>& results);
/// The final aggregation prompt (reference: every step and its result, "only the final answer").
std::string aggregation_prompt(const std::string& problem, const std::vector<Step>& steps, const std::map<int, std::string>& results);

/// Per-route recorded cost of one subtask (a profile), for simulation.
struct RouteProfile {
  double latency_s = 0, ttft_s = 0;
  long prompt_tokens = 0, completion_tokens = 0;
};
struct StepProfile {
  std::optional<RouteProfile> edge, cloud;
};

/// What happened to one subtask.
struct StepRecord {
  Step step;
  std::string route;            ///< "edge" | "cloud"
  bool forced = false;          ///< router policy: forced to cloud (step 1, newest step, routing error)
  std::optional<RouteDecision> decision;  ///< router policy
  double available_s = 0;       ///< parsed from the plan (seconds from the task's start)
  double start_s = 0, finish_s = 0;
  double latency_s = 0, ttft_s = 0;
  long prompt_tokens = 0, completion_tokens = 0;
  double cost_usd = 0;
  int attempts = 0;
  std::string result;           ///< the executor's answer ("" when failed)
  std::string error;            ///< last error when every attempt failed
};

/// One task's record (a line of the output).
struct TaskRecord {
  Task task;
  std::string policy, schedule;  ///< policy_name, "dag" | "chain"
  std::string plan;              ///< the plan text as received (or recorded)
  std::vector<std::string> plan_warnings;
  double planner_latency_s = 0, planner_ttft_s = 0;
  long planner_prompt_tokens = 0, planner_completion_tokens = 0;
  double planner_cost_usd = 0;
  std::vector<StepRecord> steps;
  std::optional<DagMetrics> dag;
  std::string aggregation_route;
  double aggregation_latency_s = 0;
  long aggregation_prompt_tokens = 0, aggregation_completion_tokens = 0;
  double aggregation_cost_usd = 0;
  std::string aggregation_error;  ///< the aggregation call failed (the last step's result is the answer)
  std::string final_answer;
  std::optional<bool> correct;   ///< set by the scorer when the task has an answer
  double makespan_s = 0;         ///< start to final answer
  double subtasks_makespan_s = 0;///< start to the last subtask's finish
  std::string error;             ///< the task failed (planner unreachable, no plan): why
  bool simulated = false;
  // derived totals
  long total_tokens() const;
  double total_cost() const;
  double cloud_share() const;  ///< share of subtasks on the cloud
};

/// Runs one task live.  With `recorded_plan`, the planner is not called (every step available at
/// 0).  Calls are retried (`attempts`, doubling waits) except when the server refused the request
/// (client.hpp Refused); a step that still fails is recorded with its error and the steps that
/// rely on it still run (as the reference); a planner that fails, or a plan without steps, ends the
/// task with `error` set; a failed aggregation sets `aggregation_error`.  Throws Unreachable (after
/// the running calls end) when an endpoint cannot be reached at all: the task is then unfinished.
TaskRecord run_task(const Task& task, std::size_t task_index, const RunConfig& cfg, const std::optional<std::string>& recorded_plan);

/// Simulates one task with the reference's model (output_performance.py): the planner streams at
/// cfg.planner_speed (steps available as their tags complete), each step runs for
/// ttft + tokens/throughput of its route's speed, where tokens = the step profile's completion
/// tokens for that route when given, else the plan's Token (1000 when absent, as the reference), or
/// with cfg.sim_recorded_latency the profile's measured latency (InputError when a route has none);
/// scheduling as `schedule` with cfg.workers; routing by cfg.policy at the step's start with the
/// budgets (tokens of steps finished by then, simulated seconds) the router reads; the aggregation
/// (edge, or cloud under the cloud policy) is added after the last step.  Router policy needs
/// `embeddings` (one per step ID).  A plan without steps sets `error`.  The aggregation is not
/// simulated (the reference's simulator stops at the last subtask).
TaskRecord simulate_task(const Task& task, std::size_t task_index, const RunConfig& cfg, const std::string& plan,
                         const std::map<int, StepProfile>& profiles, const std::map<int, std::vector<float>>& embeddings);

/// The record as one JSON object (the output line).
nlohmann::json to_json(const TaskRecord& r);

}  // namespace icmlkit::hybridflow
