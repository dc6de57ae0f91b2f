#include "hybridflow/runner.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "io/json.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::hybridflow {

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A JSON value that is a string or an integer, as text ("id" fields).
std::string id_text(const nlohmann::json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  throw InputError("\"id\" must be a string or an integer", where);
}

std::string rely_text(const std::vector<int>& r) {
  std::string s;
  for (std::size_t i = 0; i < r.size(); ++i) s += (i ? "," : "") + std::to_string(r[i]);
  return s;
}

// The uniform draw of task `t`, step `id`: independent of the order steps start in.
double step_draw(std::uint64_t seed, std::size_t t, int id) {
  Rng rng(derive_seed(derive_seed(seed, t + 1), static_cast<std::uint64_t>(id)));
  return rng.uniform();
}

long tokens_or_estimate(long reported, const std::string& text) { return reported >= 0 ? reported : approx_tokens(text); }

}  // namespace

// ---- inputs -------------------------------------------------------------------------------

std::vector<Task> read_tasks(const std::string& path, std::string* sha256) {
  std::vector<Task> tasks;
  std::set<std::string> seen;
  io::for_each_jsonl(path, [&](const nlohmann::json& j, const std::string& where) {
    Task t;
    if (!j.contains("id")) throw InputError("missing \"id\"", where);
    t.id = id_text(j["id"], where);
    const char* key = j.contains("problem") ? "problem" : "question";
    if (!j.contains(key) || !j[key].is_string() || j[key].get<std::string>().empty())
      throw InputError("missing \"problem\" (a non-empty string)", where);
    t.problem = j[key].get<std::string>();
    if (j.contains("answer")) {
      if (j["answer"].is_string()) t.answer = j["answer"].get<std::string>();
      else if (j["answer"].is_number_integer()) t.answer = std::to_string(j["answer"].get<long long>());
      else throw InputError("\"answer\" must be a string or an integer", where);
    }
    if (j.contains("answer_id") && j["answer_id"].is_number_integer()) {  // the reference's GPQA files
      const long long k = j["answer_id"].get<long long>();
      if (k < 0 || k > 9) throw InputError("\"answer_id\" must be 0..9", where);
      t.answer = std::string(1, static_cast<char>('A' + k));
      if (!j.contains("kind")) t.kind = "letter";
    }
    if (j.contains("kind")) {
      if (!j["kind"].is_string()) throw InputError("\"kind\" must be a string", where);
      t.kind = j["kind"].get<std::string>();
      if (t.kind != "letter" && t.kind != "integer" && t.kind != "solution" && t.kind != "exact")
        throw InputError("\"kind\" must be letter, integer, solution or exact, got '" + t.kind + "'", where);
    }
    if (!seen.insert(t.id).second) throw InputError("task id '" + t.id + "' appears twice", where);
    tasks.push_back(std::move(t));
  }, sha256);
  if (tasks.empty()) throw InputError("no tasks", path);
  return tasks;
}

std::map<std::string, std::string> read_plans(const std::string& path, std::string* sha256) {
  std::map<std::string, std::string> plans;
  io::for_each_jsonl(path, [&](const nlohmann::json& j, const std::string& where) {
    if (!j.contains("id")) throw InputError("missing \"id\"", where);
    const std::string id = id_text(j["id"], where);
    if (!j.contains("plan") || !j["plan"].is_string()) throw InputError("missing \"plan\" (the XML text)", where);
    if (!plans.emplace(id, j["plan"].get<std::string>()).second) throw InputError("a second plan for task '" + id + "'", where);
  }, sha256);
  return plans;
}

Policy parse_policy(const std::string& name) {
  if (name == "edge") return Policy::edge;
  if (name == "cloud") return Policy::cloud;
  if (name == "threshold") return Policy::threshold;
  if (name == "random") return Policy::random;
  if (name == "router") return Policy::router;
  throw UsageError("must be one of edge, cloud, threshold, random, router, got '" + name + "'", "--policy");
}

const char* policy_name(Policy p) {
  switch (p) {
    case Policy::edge: return "edge";
    case Policy::cloud: return "cloud";
    case Policy::threshold: return "threshold";
    case Policy::random: return "random";
    case Policy::router: return "router";
  }
  return "?";
}

// ---- pricing ------------------------------------------------------------------------------

std::vector<Price> reference_prices() {
  // USD per 1M tokens, planner/api_pricing.py (openrouter.ai, 2025-07), in its order.
  return {{{"claude-3-5", "claude-3.5"}, 3.0, 15.0},
          {{"claude-3-7", "claude-3.7"}, 3.0, 15.0},
          {{"gemini-2.5-flash-thinking"}, 0.30, 2.50},
          {{"gemini-2.5-pro"}, 1.25, 10.0},
          {{"gpt-4o"}, 2.5, 10.0},
          {{"gpt-5"}, 1.25, 10.0},
          {{"gpt-4.1-mini"}, 0.4, 1.6},
          {{"gpt-4.1"}, 2.0, 8.0},
          {{"deepseek-r1"}, 0.272, 0.272},
          {{"deepseek-chat"}, 0.25, 0.85},
          {{"deepseek-reasoner"}, 0.272, 0.272},
          {{"grok-4"}, 3.0, 15.0},
          {{"llama3-8b", "llama-3-8b", "llama3.1-8b", "llama-3.1-8b"}, 0.03, 0.06},
          {{"llama-3.3-70b", "llama3.3-70b"}, 0.012, 0.036},
          {{"qwen3-235b-a22b"}, 0.10, 0.39}};
}

std::vector<Price> read_prices(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot read file", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    throw InputError("not valid JSON", path);
  }
  if (!j.is_array()) throw InputError("must be a JSON array of {\"match\": [...], \"prompt\": x, \"completion\": y}", path);
  std::vector<Price> table;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string where = fmt::format("{}, entry {}", path, i + 1);
    const auto& e = j[i];
    Price p;
    try {
      if (e.at("match").is_string()) p.match = {e["match"].get<std::string>()};
      else p.match = e.at("match").get<std::vector<std::string>>();
      p.prompt = e.at("prompt").get<double>();
      p.completion = e.at("completion").get<double>();
    } catch (const nlohmann::json::exception&) {
      throw InputError("needs \"match\" (a string or strings), \"prompt\" and \"completion\" (USD per 1M tokens)", where);
    }
    if (p.match.empty() || !(p.prompt >= 0) || !(p.completion >= 0)) throw InputError("prices must be >= 0 and match non-empty", where);
    for (auto& m : p.match) m = lower(m);
    table.push_back(std::move(p));
  }
  return table;
}

double call_cost(const std::vector<Price>& table, const std::string& model, double prompt_tokens, double completion_tokens) {
  std::string name = lower(model);
  if (const auto slash = name.find('/'); slash != std::string::npos) {
    const auto next = name.find('/', slash + 1);
    name = name.substr(slash + 1, next == std::string::npos ? std::string::npos : next - slash - 1);
  }
  for (const auto& p : table)
    for (const auto& m : p.match)
      if (name.find(m) != std::string::npos) return prompt_tokens / 1e6 * p.prompt + completion_tokens / 1e6 * p.completion;
  return 0.0;
}

// ---- prompts ------------------------------------------------------------------------------

std::string default_planner_prompt() {
  return R"(You plan how a team of two AI models solves a problem. Write the plan as XML.

Models:
- Small model (edge): fast and cheap; good at following instructions, summarising, routine arithmetic and common-sense steps.
- Large model (cloud): slower and costly; needed for expert knowledge, deep reasoning, competition mathematics and synthesis.

Structure the plan in three stages:
1. Step ID="1" restates the problem: its Task is exactly "To assist the following agents, what is your understanding of the question after reviewing it, focusing only on essential information and filtering out all irrelevant details?" and its Rely is empty.
2. Analysis steps split the work into small questions. Make them independent wherever you can, so that they run in parallel; each relies on step 1 or on the analysis steps whose answers it needs. Each Task is a self-contained question ending with "?" that does not give away the answer; ask for a formula or fact when one is needed.
3. The last step asks exactly "After reviewing the original question and the thoughts of previous agents, what is the final answer to the question?" and relies on the steps it combines.
Use fewer than 7 steps in all.

Attributes of each <Step/>:
- ID: an integer, 1, 2, 3, ... in order.
- Task: the question for the model.
- Difficulty: 1-9. 1-4: the small model can do it (procedural steps, simple calculations, applying a given formula). 5-9: the large model should (hard reasoning, expert knowledge, synthesis).
- Token: your estimate of the answer's length in tokens.
- Rely: the IDs of the steps it needs, comma-separated, or empty.

Example.
**Problem**: A train leaves at 9:40 and arrives at 13:05. A bus makes the same trip in 20 minutes less. How long does the bus take?
**Output**:
<Plan>
<Step ID="1" Task="To assist the following agents, what is your understanding of the question after reviewing it, focusing only on essential information and filtering out all irrelevant details?" Difficulty="2" Token="50" Rely=""/>
<Step ID="2" Task="How many minutes are there between 9:40 and 13:05?" Difficulty="2" Token="20" Rely="1"/>
<Step ID="3" Task="What is the train's travel time minus 20 minutes, in hours and minutes?" Difficulty="1" Token="15" Rely="2"/>
<Step ID="4" Task="After reviewing the original question and the thoughts of previous agents, what is the final answer to the question?" Difficulty="2" Token="15" Rely="3"/>
</Plan>

Example.
**Problem**: Which of these is a prime number whose digits sum to 10? A. 28 B. 37 C. 55 D. 91
**Output**:
<Plan>
<Step ID="1" Task="To assist the following agents, what is your understanding of the question after reviewing it, focusing only on essential information and filtering out all irrelevant details?" Difficulty="2" Token="40" Rely=""/>
<Step ID="2" Task="Which of the numbers 28, 37, 55 and 91 are prime?" Difficulty="3" Token="30" Rely="1"/>
<Step ID="3" Task="What is the digit sum of each of 28, 37, 55 and 91?" Difficulty="1" Token="30" Rely="1"/>
<Step ID="4" Task="After reviewing the original question and the thoughts of previous agents, what is the final answer to the question?" Difficulty="3" Token="15" Rely="2,3"/>
</Plan>
)";
}

std::string planner_user_prompt(const std::string& problem) { return "**Problem**: " + problem + "\n**Output**:\n"; }

std::pair<std::string, std::string> executor_prompts(const std::string& problem, const Step& step,
                                                     const std::map<int, std::pair<std::string, std::string>>& results) {
  std::string system =
      "You are solving one part of a larger problem.\nThe problem:\n" + problem +
      "\n\nThe problem has been split into sub-problems. You get one of them, together with the answers already found for "
      "the sub-problems it builds on. Reason carefully and answer it.";
  std::string user = "The sub-problem to answer now: " + step.task + "\nGive a short, clear answer.";
  bool any = false;
  for (int r : step.rely) {
    auto it = results.find(r);
    if (it == results.end() || it->second.second.empty()) continue;
    if (!any) user += "\n\nAnswers to the sub-problems it builds on:\n";
    any = true;
    user += fmt::format("Task {}: {} ;\nResult: {}\n", r, it->second.first, it->second.second);
  }
  return {system, user};
}

std::string aggregation_prompt(const std::string& problem, const std::vector<Step>& steps, const std::map<int, std::string>& results) {
  std::vector<const Step*> sorted;
  for (const auto& s : steps) sorted.push_back(&s);
  std::sort(sorted.begin(), sorted.end(), [](const Step* a, const Step* b) { return a->id < b->id; });
  std::string text = "From the results of the steps below, give the final answer to the problem, and nothing else.\n\nPROBLEM:\n" +
                     problem + "\n\nSTEPS:\n";
  for (const Step* s : sorted) {
    auto it = results.find(s->id);
    text += fmt::format("Step {}: {}\n{}\n\n", s->id, s->task, it != results.end() && !it->second.empty() ? it->second : "(no result)");
  }
  return text;
}

// ---- records ------------------------------------------------------------------------------

long TaskRecord::total_tokens() const {
  long t = planner_prompt_tokens + planner_completion_tokens + aggregation_prompt_tokens + aggregation_completion_tokens;
  for (const auto& s : steps) t += s.prompt_tokens + s.completion_tokens;
  return t;
}

double TaskRecord::total_cost() const {
  double c = planner_cost_usd + aggregation_cost_usd;
  for (const auto& s : steps) c += s.cost_usd;
  return c;
}

double TaskRecord::cloud_share() const {
  if (steps.empty()) return 0.0;
  double n = 0;
  for (const auto& s : steps) n += s.route == "cloud";
  return n / static_cast<double>(steps.size());
}

nlohmann::json to_json(const TaskRecord& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps) {
    nlohmann::json j = {{"ID", s.step.id},
                        {"Task", s.step.task},
                        {"Difficulty", s.step.difficulty},
                        {"Token", s.step.token >= 0 ? nlohmann::json(s.step.token) : nlohmann::json(nullptr)},
                        {"Rely", rely_text(s.step.rely)},
                        {"route", s.route},
                        {"forced", s.forced},
                        {"available_s", s.available_s},
                        {"start_s", s.start_s},
                        {"finish_s", s.finish_s},
                        {"latency_s", s.latency_s},
                        {"ttft_s", s.ttft_s},
                        {"prompt_tokens", s.prompt_tokens},
                        {"completion_tokens", s.completion_tokens},
                        {"cost_usd", s.cost_usd},
                        {"attempts", s.attempts},
                        {"Result", s.result}};
    if (!s.error.empty()) j["error"] = s.error;
    if (s.decision)
      j["router"] = {{"s", s.decision->score},   {"r_B", s.decision->r_B},         {"r_L", s.decision->r_L},
                     {"delta_t", s.decision->delta_t}, {"p_cloud", s.decision->p_cloud}, {"u", s.decision->draw}};
    steps.push_back(std::move(j));
  }
  nlohmann::json out = {{"id", r.task.id},
                        {"problem", r.task.problem},
                        {"answer", r.task.answer},
                        {"policy", r.policy},
                        {"schedule", r.schedule},
                        {"simulated", r.simulated},
                        {"plan", r.plan},
                        {"planner", {{"latency_s", r.planner_latency_s}, {"ttft_s", r.planner_ttft_s}, {"prompt_tokens", r.planner_prompt_tokens},
                                     {"completion_tokens", r.planner_completion_tokens}, {"cost_usd", r.planner_cost_usd}}},
                        {"steps", steps},
                        {"aggregation", {{"route", r.aggregation_route}, {"latency_s", r.aggregation_latency_s},
                                         {"error", r.aggregation_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.aggregation_error)},
                                         {"prompt_tokens", r.aggregation_prompt_tokens},
                                         {"completion_tokens", r.aggregation_completion_tokens}, {"cost_usd", r.aggregation_cost_usd}}},
                        {"final_answer", r.final_answer},
                        {"correct", r.correct ? nlohmann::json(*r.correct) : nlohmann::json(nullptr)},
                        {"makespan_s", r.makespan_s},
                        {"subtasks_makespan_s", r.subtasks_makespan_s},
                        {"total_tokens", r.total_tokens()},
                        {"cost_usd", r.total_cost()},
                        {"cloud_share", r.cloud_share()},
                        {"failed_steps", static_cast<int>(std::count_if(r.steps.begin(), r.steps.end(), [](const StepRecord& s) { return !s.error.empty(); }))}};
  if (!r.plan_warnings.empty()) out["plan_warnings"] = r.plan_warnings;
  if (r.dag) {
    nlohmann::json edges = nlohmann::json::array();
    for (auto [a, b] : r.dag->reduced_edges) edges.push_back({a, b});
    out["dag"] = {{"steps", r.steps.size()}, {"levels", r.dag->levels}, {"compression", r.dag->compression},
                  {"max_width", r.dag->max_width}, {"reduced_edges", edges}};
  }
  if (!r.error.empty()) out["error"] = r.error;
  return out;
}

// ---- routing --------------------------------------------------------------------------------

namespace {

// The route of a step under a fixed (non-router) policy.
bool fixed_route_cloud(const RunConfig& cfg, const Step& s, std::size_t task_index) {
  switch (cfg.policy) {
    case Policy::edge: return false;
    case Policy::cloud: return true;
    case Policy::threshold: return s.difficulty >= cfg.threshold;
    case Policy::random: return step_draw(cfg.seed, task_index, s.id) < cfg.cloud_share;
    case Policy::router: break;
  }
  return true;
}

// Calls `f` up to cfg.attempts times with doubling waits; returns its value or rethrows the last error.
template <class F>
auto with_retries(const RunConfig& cfg, int& attempts, F&& f) -> decltype(f()) {
  double wait = cfg.retry_delay_s;
  for (attempts = 1;; ++attempts) {
    try {
      return f();
    } catch (const Unreachable&) {
      throw;
    } catch (const Refused&) {
      throw;
    } catch (const Error&) {
      if (attempts >= std::max(1, cfg.attempts)) throw;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    wait *= 2;
  }
}

}  // namespace

// ---- live run -------------------------------------------------------------------------------

TaskRecord run_task(const Task& task, std::size_t task_index, const RunConfig& cfg, const std::optional<std::string>& recorded_plan) {
  TaskRecord rec;
  rec.task = task;
  rec.policy = policy_name(cfg.policy);
  rec.schedule = cfg.sanitize.chain ? "chain" : "dag";
  const auto t0 = Clock::now();

  std::mutex mu;
  std::condition_variable cv;
  PlanParser parser(cfg.sanitize);
  std::vector<StepRecord> steps;          // arrival order
  std::set<int> submitted, done;
  std::deque<std::size_t> ready;
  bool plan_closed = false;
  std::string abort_error;  // an endpoint cannot be reached: stop taking steps, fail the run
  long tokens_used = 0;
  std::map<int, std::pair<std::string, std::string>> results;  // id -> (task, result)

  // Under the lock: queue every step whose deps are done, in the reference's order.
  auto enqueue_ready = [&] {
    std::vector<std::size_t> now;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const Step& s = steps[i].step;
      if (submitted.count(s.id)) continue;
      if (std::all_of(s.rely.begin(), s.rely.end(), [&](int r) { return done.count(r) > 0; })) now.push_back(i);
    }
    std::sort(now.begin(), now.end(), [&](std::size_t a, std::size_t b) {
      const Step &x = steps[a].step, &y = steps[b].step;
      return x.rely.size() != y.rely.size() ? x.rely.size() < y.rely.size() : x.id < y.id;
    });
    for (std::size_t i : now) {
      submitted.insert(steps[i].step.id);
      ready.push_back(i);
    }
    if (!now.empty()) cv.notify_all();
  };
  auto add_steps = [&](const std::vector<Step>& fresh) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : fresh) {
      StepRecord r;
      r.step = s;
      r.available_s = since(t0);
      steps.push_back(std::move(r));
    }
    enqueue_ready();
  };

  auto run_one = [&](std::size_t i) {
    Step step;
    std::map<int, std::pair<std::string, std::string>> known;
    std::size_t n_parsed;
    long used;
    {
      std::lock_guard<std::mutex> lock(mu);
      step = steps[i].step;
      known = results;
      n_parsed = steps.size();
      used = tokens_used;
    }
    StepRecord out;
    out.step = step;
    out.start_s = since(t0);
    bool cloud;
    if (cfg.policy == Policy::router) {
      const bool forced = step.id == 1 || static_cast<std::size_t>(step.id) == n_parsed;
      if (forced) {
        cloud = true;
        out.forced = true;
      } else {
        try {
          if (!cfg.router || !cfg.embed) throw RuntimeError("the router policy needs --router and --embed");
          const std::string text = task.problem + step.task;
          const auto e = embed(*cfg.embed, {text});
          out.decision = route(*cfg.router, e.at(0), step.rely.size(), text, static_cast<double>(used), since(t0), cfg.router_params,
                               step_draw(cfg.seed, task_index, step.id));
          cloud = out.decision->cloud;
        } catch (const Unreachable&) {
          throw;
        } catch (const Error& e) {  // the reference routes to the cloud when routing fails
          cloud = true;
          out.forced = true;
          out.error = std::string("routing failed, sent to cloud: ") + e.what();
        }
      }
    } else {
      cloud = fixed_route_cloud(cfg, step, task_index);
    }
    out.route = cloud ? "cloud" : "edge";
    const Endpoint& ep = cloud ? cfg.cloud : cfg.edge;
    ChatSettings chat_settings = cfg.executor_chat;
    if (cfg.max_tokens_from_plan && step.token > 0) chat_settings.max_tokens = step.token;
    chat_settings.seed = derive_seed(cfg.seed, (task_index + 1) * 1000 + static_cast<std::uint64_t>(step.id));
    const auto [system, user] = executor_prompts(task.problem, step, known);
    const auto call_start = Clock::now();
    try {
      const ChatResult r = with_retries(cfg, out.attempts, [&] { return chat(ep, system, user, chat_settings); });
      out.result = r.text;
      out.latency_s = r.latency_s;
      out.ttft_s = r.ttft_s;
      out.prompt_tokens = tokens_or_estimate(r.prompt_tokens, system + user);
      out.completion_tokens = tokens_or_estimate(r.completion_tokens, r.text);
      out.cost_usd = call_cost(cfg.prices, ep.model, static_cast<double>(out.prompt_tokens), static_cast<double>(out.completion_tokens));
      if (!out.error.empty() && out.forced) out.error.clear();  // routing fell back, the step itself ran
    } catch (const Unreachable&) {
      throw;
    } catch (const Error& e) {
      out.error = e.what();
      out.latency_s = since(call_start);
    }
    out.finish_s = since(t0);
    std::lock_guard<std::mutex> lock(mu);
    out.available_s = steps[i].available_s;
    tokens_used += out.prompt_tokens + out.completion_tokens;
    results[step.id] = {step.task, out.result};
    done.insert(step.id);
    steps[i] = std::move(out);
    enqueue_ready();
    cv.notify_all();
  };

  const int n_threads = cfg.workers > 0 ? cfg.workers : 16;
  std::vector<std::thread> pool;
  for (int w = 0; w < n_threads; ++w)
    pool.emplace_back([&] {
      for (;;) {
        std::size_t i;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return !ready.empty() || !abort_error.empty() || (plan_closed && done.size() == steps.size()); });
          if (ready.empty() || !abort_error.empty()) return;
          i = ready.front();
          ready.pop_front();
        }
        try {
          run_one(i);
        } catch (const Unreachable& e) {
          std::lock_guard<std::mutex> lock(mu);
          if (abort_error.empty()) abort_error = e.what();
          cv.notify_all();
        } catch (const std::exception& e) {  // never lose the step (or the pool) to an unexpected error
          std::lock_guard<std::mutex> lock(mu);
          steps[i].error = std::string("internal error: ") + e.what();
          done.insert(steps[i].step.id);
          enqueue_ready();
          cv.notify_all();
        }
      }
    });

  // Whatever happens below, the workers are told the plan is over and joined before leaving.
  struct JoinAtExit {
    std::function<void()> f;
    ~JoinAtExit() { f(); }
  } join_at_exit{[&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      plan_closed = true;
    }
    cv.notify_all();
    for (auto& t : pool)
      if (t.joinable()) t.join();
  }};

  // The plan: recorded, or streamed from the planner (steps start as their tags complete).
  if (recorded_plan) {
    rec.plan = *recorded_plan;
    add_steps(parser.feed(*recorded_plan));
  } else {
    const std::string planner_system = cfg.planner_system.empty() ? default_planner_prompt() : cfg.planner_system;
    int attempt = 0;
    double wait = cfg.retry_delay_s;
    for (attempt = 1; attempt <= std::max(1, cfg.attempts); ++attempt) {
      try {
        const ChatResult r = chat(cfg.planner, planner_system, planner_user_prompt(task.problem), cfg.planner_chat, [&](const std::string& d) {
                                    add_steps(parser.feed(d));
                                    return true;
                                  });
        rec.plan = r.text;
        rec.planner_latency_s = r.latency_s;
        rec.planner_ttft_s = r.ttft_s;
        rec.planner_prompt_tokens = tokens_or_estimate(r.prompt_tokens, planner_system + planner_user_prompt(task.problem));
        rec.planner_completion_tokens = tokens_or_estimate(r.completion_tokens, r.text);
        rec.planner_cost_usd = call_cost(cfg.prices, cfg.planner.model, static_cast<double>(rec.planner_prompt_tokens),
                                         static_cast<double>(rec.planner_completion_tokens));
        if (!parser.steps().empty()) break;
        rec.error = "the planner's reply holds no <Step .../> with an ID";
      } catch (const Unreachable&) {
        throw;
      } catch (const Refused& e) {
        rec.error = std::string("planner: ") + e.what();
        break;
      } catch (const Error& e) {
        rec.error = std::string("planner: ") + e.what();
        if (!parser.steps().empty()) break;  // steps already running: keep the plan so far
      }
      if (attempt < std::max(1, cfg.attempts)) {
        std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        wait *= 2;
      }
    }
    if (!parser.steps().empty()) rec.error.clear();
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    parser.finish();
    for (auto& s : steps)  // a truncated plan: Rely entries that never arrived are dropped
      for (const auto& p : parser.steps())
        if (p.id == s.step.id && !submitted.count(p.id)) s.step.rely = p.rely;
    rec.plan_warnings = parser.warnings();
    if (steps.empty() && rec.error.empty()) rec.error = "the plan holds no <Step .../> with an ID";
    plan_closed = true;
    enqueue_ready();
    cv.notify_all();
  }
  for (auto& t : pool) t.join();
  if (!abort_error.empty()) throw Unreachable(abort_error);
  rec.steps = std::move(steps);
  rec.subtasks_makespan_s = 0;
  for (const auto& s : rec.steps) rec.subtasks_makespan_s = std::max(rec.subtasks_makespan_s, s.finish_s);
  if (!rec.error.empty()) {
    rec.makespan_s = since(t0);
    return rec;
  }
  std::vector<Step> plan_steps;
  std::map<int, std::string> res;
  for (const auto& s : rec.steps) {
    plan_steps.push_back(s.step);
    res[s.step.id] = s.result;
  }
  rec.dag = dag_metrics(plan_steps);

  // Aggregation on the edge model (reference), on the cloud under the cloud-only policy.
  const bool agg_cloud = cfg.policy == Policy::cloud;
  const Endpoint& agg = agg_cloud ? cfg.cloud : cfg.edge;
  rec.aggregation_route = agg_cloud ? "cloud" : "edge";
  const std::string prompt = aggregation_prompt(task.problem, plan_steps, res);
  int attempts = 0;
  const auto agg_start = Clock::now();
  try {
    ChatSettings s = cfg.executor_chat;
    s.seed = derive_seed(cfg.seed, (task_index + 1) * 1000);
    const ChatResult r = with_retries(cfg, attempts, [&] { return chat(agg, "", prompt, s); });
    rec.final_answer = r.text;
    rec.aggregation_latency_s = r.latency_s;
    rec.aggregation_prompt_tokens = tokens_or_estimate(r.prompt_tokens, prompt);
    rec.aggregation_completion_tokens = tokens_or_estimate(r.completion_tokens, r.text);
    rec.aggregation_cost_usd = call_cost(cfg.prices, agg.model, static_cast<double>(rec.aggregation_prompt_tokens),
                                         static_cast<double>(rec.aggregation_completion_tokens));
  } catch (const Unreachable&) {
    throw;
  } catch (const Error& e) {
    // The reference falls back to the last step's result.
    int last = -1;
    for (const auto& s : rec.steps)
      if (s.step.id > last) {
        last = s.step.id;
        rec.final_answer = s.result;
      }
    rec.aggregation_error = std::string(e.what()) + " (the last step's result is the answer)";
    rec.aggregation_latency_s = since(agg_start);
  }
  rec.makespan_s = since(t0);
  return rec;
}

// ---- simulation -------------------------------------------------------------------------------

TaskRecord simulate_task(const Task& task, std::size_t task_index, const RunConfig& cfg, const std::string& plan,
                         const std::map<int, StepProfile>& profiles, const std::map<int, std::vector<float>>& embeddings) {
  TaskRecord rec;
  rec.task = task;
  rec.simulated = true;
  rec.policy = policy_name(cfg.policy);
  rec.schedule = cfg.sanitize.chain ? "chain" : "dag";
  rec.plan = plan;
  std::vector<Step> steps;
  try {
    steps = parse_plan(plan, cfg.sanitize, "plan of task " + task.id, &rec.plan_warnings);
  } catch (const InputError&) {  // as a live run: the task fails, the run goes on
    rec.error = "the plan holds no <Step .../> with an ID";
    return rec;
  }
  double planner_s = 0;
  const std::vector<double> avail = plan_stream_times(steps, cfg.planner_speed, &planner_s);
  rec.planner_latency_s = planner_s;
  rec.planner_ttft_s = cfg.planner_speed.ttft_s;
  rec.planner_completion_tokens = approx_tokens(plan);
  std::vector<SimStep> sim(steps.size());
  std::vector<StepRecord> out(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    sim[i] = {steps[i].id, steps[i].rely, avail[i], 0.0};
    out[i].step = steps[i];
    out[i].available_s = avail[i];
    out[i].attempts = 1;
  }
  // Budget state the router reads: tokens of the steps finished by the decision time.
  std::vector<double> finish_at(steps.size(), -1.0);
  // The number of steps parsed by time t (the router's "newest step" rule).
  auto parsed_by = [&](double t) {
    std::size_t n = 0;
    for (double a : avail) n += a <= t;
    return n;
  };
  const Schedule sched = schedule(sim, cfg.workers, [&](std::size_t i, double now) {
    const Step& s = steps[i];
    StepRecord& r = out[i];
    bool cloud;
    if (cfg.policy == Policy::router) {
      if (s.id == 1 || static_cast<std::size_t>(s.id) == parsed_by(now)) {
        cloud = true;
        r.forced = true;
      } else {
        auto e = embeddings.find(s.id);
        if (!cfg.router || e == embeddings.end()) throw InputError("the router policy needs an embedding of every step", "task " + task.id);
        double used = 0;
        for (std::size_t j = 0; j < steps.size(); ++j)
          if (finish_at[j] >= 0 && finish_at[j] <= now) used += static_cast<double>(out[j].prompt_tokens + out[j].completion_tokens);
        r.decision = route(*cfg.router, e->second, s.rely.size(), task.problem + s.task, used, now, cfg.router_params,
                           step_draw(cfg.seed, task_index, s.id));
        cloud = r.decision->cloud;
      }
    } else {
      cloud = fixed_route_cloud(cfg, s, task_index);
    }
    r.route = cloud ? "cloud" : "edge";
    const ModelSpeed& speed = cloud ? cfg.cloud_speed : cfg.edge_speed;
    std::optional<RouteProfile> prof;
    if (auto p = profiles.find(s.id); p != profiles.end()) prof = cloud ? p->second.cloud : p->second.edge;
    const double tokens = prof ? static_cast<double>(prof->completion_tokens) : (s.token >= 0 ? s.token : 1000.0);
    if (cfg.sim_recorded_latency) {
      if (!prof) throw InputError(fmt::format("no {} profile for step {}", r.route, s.id), "task " + task.id);
      r.latency_s = prof->latency_s;
      r.ttft_s = prof->ttft_s;
    } else {
      r.latency_s = task_seconds(speed, tokens);
      r.ttft_s = speed.ttft_s;
    }
    r.completion_tokens = static_cast<long>(tokens);
    r.prompt_tokens = prof ? prof->prompt_tokens : approx_tokens(task.problem + s.task);
    r.cost_usd = call_cost(cfg.prices, cloud ? cfg.cloud.model : cfg.edge.model, static_cast<double>(r.prompt_tokens),
                           static_cast<double>(r.completion_tokens));
    r.start_s = now;
    r.finish_s = now + r.latency_s;
    finish_at[i] = r.finish_s;
    return r.latency_s;
  });
  rec.steps = std::move(out);
  rec.subtasks_makespan_s = sched.makespan;
  rec.makespan_s = sched.makespan;  // the reference simulator stops at the last subtask
  rec.dag = dag_metrics(steps);
  return rec;
}

}  // namespace icmlkit::hybridflow
