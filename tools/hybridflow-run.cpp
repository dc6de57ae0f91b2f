// hybridflow-run: HybridFlow's edge-cloud subtask routing over a dependency DAG (arXiv 2512.22137),
// live over OpenAI-compatible endpoints or simulated with the reference's latency model, with the
// paper's baselines (edge-only, cloud-only, chain, fixed threshold, random) (issue 39).
#include <fmt/core.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "cli/run_tool.hpp"
#include "hybridflow/runner.hpp"
#include "hybridflow/score.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

using namespace icmlkit;
using namespace icmlkit::hybridflow;

namespace {

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Profiles keyed by (task id, step id) from a profiles JSONL with "task_id" and "step_id" fields.
std::map<std::string, std::map<int, StepProfile>> read_step_profiles(const std::string& path) {
  std::map<std::string, std::map<int, StepProfile>> out;
  auto route = [](const nlohmann::json& r) {
    RouteProfile p;
    p.latency_s = r.at("latency_ms").get<double>() / 1000.0;
    p.ttft_s = r.contains("ttft_ms") ? r["ttft_ms"].get<double>() / 1000.0 : 0.0;
    const auto& u = r.at("usage");
    p.completion_tokens = u.at("completion_tokens").get<long>();
    p.prompt_tokens = u.contains("prompt_tokens") ? u["prompt_tokens"].get<long>() : u.at("total_tokens").get<long>() - p.completion_tokens;
    return p;
  };
  io::for_each_jsonl(path, [&](const nlohmann::json& j, const std::string& where) {
    try {
      const std::string tid = j.at("task_id").is_string() ? j["task_id"].get<std::string>() : std::to_string(j["task_id"].get<long long>());
      const int sid = j.at("step_id").get<int>();
      StepProfile sp;
      if (j.contains("edge")) sp.edge = route(j["edge"]);
      if (j.contains("cloud")) sp.cloud = route(j["cloud"]);
      out[tid][sid] = sp;
    } catch (const nlohmann::json::exception&) {
      throw InputError("a profile row needs task_id, step_id and edge/cloud {latency_ms, usage{completion_tokens, total_tokens}}", where);
    }
  });
  return out;
}

// A task run that did not fully succeed: the task failed, a step failed, or the aggregation did.
bool has_failures(const nlohmann::json& r) {
  return !r.value("error", nlohmann::json()).is_null() || r.value("failed_steps", 0) > 0 ||
         !r["aggregation"].value("error", nlohmann::json()).is_null();
}

// Per-policy totals over output records (the kept ones of a resumed run included).  Means are over
// the task runs that did not fail as a whole (a failed task has no steps to average).
struct Aggregate {
  std::size_t tasks = 0, failed = 0, with_failures = 0, scored = 0, correct = 0, steps = 0, cloud_steps = 0, ok = 0;
  double makespan = 0, subtasks_makespan = 0, tokens = 0, cost = 0, compression = 0;
  void add(const nlohmann::json& r) {
    ++tasks;
    with_failures += has_failures(r);
    if (!r.value("error", nlohmann::json()).is_null()) {
      ++failed;
      return;
    }
    ++ok;
    if (r["correct"].is_boolean()) ++scored, correct += r["correct"].get<bool>();
    makespan += r["makespan_s"].get<double>();
    subtasks_makespan += r["subtasks_makespan_s"].get<double>();
    tokens += r["total_tokens"].get<double>();
    cost += r["cost_usd"].get<double>();
    for (const auto& s : r["steps"]) ++steps, cloud_steps += s["route"] == "cloud";
    if (r.contains("dag")) compression += r["dag"]["compression"].get<double>();
  }
  nlohmann::json json() const {
    const double n = ok ? static_cast<double>(ok) : 1.0;
    return {{"tasks", tasks},
            {"failed_tasks", failed},
            {"tasks_with_failures", with_failures},
            {"mean_makespan_s", makespan / n},
            {"mean_subtasks_makespan_s", subtasks_makespan / n},
            {"mean_tokens", tokens / n},
            {"total_cost_usd", cost},
            {"mean_cost_usd", cost / n},
            {"cloud_share", steps ? static_cast<double>(cloud_steps) / static_cast<double>(steps) : 0.0},
            {"mean_compression", compression / n},
            {"scored", scored},
            {"accuracy", scored ? nlohmann::json(static_cast<double>(correct) / static_cast<double>(scored)) : nlohmann::json(nullptr)}};
  }
};

std::string record_key(const nlohmann::json& j) {
  return j.at("id").get<std::string>() + "\x1f" + j.at("policy").get<std::string>() + "\x1f" + j.at("schedule").get<std::string>();
}

// The complete records of an output file to keep when resuming: a torn last line (a killed run) is
// dropped, and so are task runs that failed as a whole (no plan, an unreachable planner), so that
// they run again.  Throws InputError when a line is not a hybridflow-run record.
std::vector<nlohmann::json> kept_records(const std::string& path) {
  std::vector<nlohmann::json> kept;
  std::ifstream in(path);
  if (!in) return kept;
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline after it: torn
    try {
      auto j = nlohmann::json::parse(line);
      record_key(j);
      (void)j.at("steps"), (void)j.at("makespan_s"), (void)j.at("aggregation");
      if (j.value("error", nlohmann::json()).is_null()) kept.push_back(std::move(j));
    } catch (const std::exception&) {
      throw InputError("not a hybridflow-run output line; cannot resume", path);
    }
  }
  return kept;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tasks_path, output = "-", summary_path, plans_path, profiles_path, record_path;
  std::string planner_url, edge_url, cloud_url, embed_url, judge_url;
  std::string planner_model = "planner", edge_model = "edge", cloud_model = "cloud", embed_model = "embed", judge_model = "judge";
  std::string key_env, policies = "router", schedule_name = "dag", router_path, planner_prompt_path, pricing_path;
  std::string scorer = "exact", budget = "default", sim_latency = "table";
  bool simulate = false, resume = false, single_rely = false, max_tokens_from_plan = false;
  int threshold = 5, workers = 4, attempts = 3, executor_max_tokens = 500, planner_max_tokens = 600;
  double cloud_share = 0.5, retry_delay = 5, timeout = 120;
  double tau = 0.1, delta0 = 0, alpha_B = 0.5, alpha_L = 0.5, B_max = -1, L_max = -1;
  std::size_t limit = 0;
  std::vector<std::string> stop;

  cli::ToolInfo info{
      "hybridflow-run",
      "HybridFlow (arXiv 2512.22137): a planner writes an XML plan of subtasks with dependencies (<Step ID Task\n"
      "Difficulty Token Rely/>); each subtask starts as soon as its tag has streamed in and the steps it relies on have\n"
      "finished (up to --workers at once), goes to the edge or the cloud model by the routing --policy, gets the\n"
      "results of the steps it relies on, and the edge model aggregates all results into the final answer.  Every\n"
      "endpoint is any OpenAI-compatible server (lm-serve, llama.cpp's server, vLLM, a hosted API; the key from the\n"
      "environment variable --api-key-env).\n"
      "Policies: edge, cloud (every subtask and the aggregation there), threshold (cloud iff Difficulty >= --threshold:\n"
      "the paper's fixed threshold), random (cloud with probability --cloud-share, seeded), router (the utility router:\n"
      "s = sigmoid(MLP(embedding of question+subtask, meta, r_B, r_L)), delta_t = clip(delta0 + alpha_B r_B + alpha_L\n"
      "r_L, 0, 1), cloud iff u < sigmoid((s - delta_t)/tau); step 1 and the newest parsed step always go to the cloud;\n"
      "r_B = tokens used / B_max, r_L = seconds elapsed / L_max).  --schedule chain makes every step rely on all earlier\n"
      "ones (HybridFlow-Chain, no DAG parallelism).  A comma list of policies runs each in turn per task.\n"
      "Failures: each call is tried --attempts times with waits of --retry-delay seconds doubling; a step that still\n"
      "fails is recorded with its error and the steps relying on it run without its result (as the reference); a planner\n"
      "that fails, or a plan without steps, fails the task.  No call outlives --timeout.\n"
      "--simulate replays --plans without any model: the reference's latency model (planner streaming at the planner\n"
      "model's speed, step = TTFT + tokens/throughput of its route's model, from the reference's table of model names,\n"
      "tokens from --profiles when given, else the plan's Token), or --sim-latency recorded (the profiles' measured\n"
      "latencies).\n"
      "TASKS: JSONL {\"id\", \"problem\", \"answer\"?, \"kind\"?: letter|integer|solution|exact}.  Output: JSONL, one record\n"
      "per task and policy, appended as each finishes (a killed run keeps them; --resume skips them): plan, per step\n"
      "route, times, tokens, cost, result, router values; DAG levels and compression; final answer, correct; totals.\n"
      "The summary (stdout when -o is a file, or --summary) aggregates per policy over the whole output (means over\n"
      "the task runs that did not fail as a whole).  Exit 0 when every task run succeeded; 1 when any had a failed task,\n"
      "step or aggregation (all records still written), or when an endpoint cannot be reached at all (the run stops;\n"
      "--resume continues it, re-running tasks that failed as a whole).  A server's refusal (HTTP 4xx other than 408\n"
      "and 429, e.g. a prompt longer than the model's context) is not retried.  The simulator does not time the\n"
      "aggregation (as the reference).  --record-profiles runs every subtask on both models and writes\n"
      "hybridflow-train-router's profile rows.",
      "  hybridflow-run tasks.jsonl --planner http://127.0.0.1:8000/v1 --edge http://127.0.0.1:8001/v1 --cloud https://api.openai.com/v1 --cloud-model gpt-4.1 --api-key-env OPENAI_API_KEY --policy threshold -o out.jsonl\n"
      "  hybridflow-run data/hybridflow/tasks.jsonl --plans data/hybridflow/plans.jsonl --profiles data/hybridflow/profiles.jsonl --simulate --edge-model llama-3.2-3b --cloud-model gpt-4.1 --policy edge,cloud,threshold,random -o sim.jsonl\n"
      "  hybridflow-run tasks.jsonl --plans plans.jsonl --edge $E --cloud $C --record-profiles profiles.jsonl\n"};

  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("tasks", tasks_path, "Tasks JSONL {id, problem, answer?, kind?}")->required();
        app.add_option("-o,--output", output, "Records JSONL, one line per task and policy, appended as each finishes; an existing file is replaced unless --resume (- = stdout)")->capture_default_str();
        app.add_option("--summary", summary_path, "Summary JSON per policy (default: stdout when -o is a file)");
        app.add_option("--planner", planner_url, "Planner endpoint base URL (http://host:port/v1)");
        app.add_option("--edge", edge_url, "Edge (small) model endpoint base URL");
        app.add_option("--cloud", cloud_url, "Cloud (large) model endpoint base URL");
        app.add_option("--embed", embed_url, "Embedding endpoint for the router (/v1/embeddings)");
        app.add_option("--planner-model", planner_model, "Planner model name (sent; prices; simulation speed)")->capture_default_str();
        app.add_option("--edge-model", edge_model, "Edge model name")->capture_default_str();
        app.add_option("--cloud-model", cloud_model, "Cloud model name")->capture_default_str();
        app.add_option("--embed-model", embed_model, "Embedding model name")->capture_default_str();
        app.add_option("--api-key-env", key_env, "Environment variable holding the API key sent to every endpoint");
        app.add_option("--plans", plans_path, "Recorded plans JSONL {id, plan} (no planner call)");
        app.add_option("--policy", policies, "edge|cloud|threshold|random|router, or a comma list")->capture_default_str();
        app.add_option("--schedule", schedule_name, "dag (the plan's dependencies) or chain (every step relies on all earlier)")
            ->check(CLI::IsMember({"dag", "chain"}))
            ->capture_default_str();
        app.add_flag("--single-rely", single_rely, "With --schedule chain: each step relies on the previous one only");
        app.add_option("--threshold", threshold, "Difficulty at or above which the threshold policy uses the cloud")
            ->check(cli::int_range(1, 10))
            ->capture_default_str();
        app.add_option("--cloud-share", cloud_share, "Random policy: probability of the cloud")->check(CLI::Range(0.0, 1.0))->capture_default_str();
        app.add_option("--workers", workers, "Subtasks run at once (0 = unlimited)")->check(cli::int_range(0, 64))->capture_default_str();
        app.add_option("--attempts", attempts, "Tries per call before a step is recorded as failed")->check(cli::int_range(1, 20))->capture_default_str();
        app.add_option("--retry-delay", retry_delay, "Seconds before the first retry (doubling)")->check(cli::non_negative())->capture_default_str();
        app.add_option("--timeout", timeout, "Deadline of one call, seconds")->check(cli::positive())->capture_default_str();
        app.add_option("--executor-max-tokens", executor_max_tokens, "max_tokens of subtask and aggregation calls")
            ->check(cli::int_range(1, 1000000))
            ->capture_default_str();
        app.add_option("--stop", stop, "Stop sequence of subtask and aggregation calls (repeatable; the OpenAI \"stop\")");
        app.add_flag("--max-tokens-from-plan", max_tokens_from_plan, "Cap each subtask at the plan's Token estimate");
        app.add_option("--planner-max-tokens", planner_max_tokens, "max_tokens of the planner call")->check(cli::int_range(1, 1000000))->capture_default_str();
        app.add_option("--planner-prompt", planner_prompt_path, "A file with the planner's system prompt (default: ours, EAG scheme)");
        app.add_option("--router", router_path, "Router weights (safetensors: hybridflow-train-router, or the reference's converted)");
        app.add_option("--budget", budget, "Router budgets B_max/L_max preset: low (512 tokens, 10 s), default (2048, 25), high (8192, 50)")
            ->check(CLI::IsMember({"low", "default", "high"}))
            ->capture_default_str();
        app.add_option("--B-max", B_max, "Router token budget (overrides --budget)")->check(cli::positive());
        app.add_option("--L-max", L_max, "Router latency budget, seconds (overrides --budget)")->check(cli::positive());
        app.add_option("--tau", tau, "Router temperature")->check(cli::positive())->capture_default_str();
        app.add_option("--delta0", delta0, "Router base threshold")->capture_default_str();
        app.add_option("--alpha-B", alpha_B, "Router threshold slope in r_B")->capture_default_str();
        app.add_option("--alpha-L", alpha_L, "Router threshold slope in r_L")->capture_default_str();
        app.add_option("--pricing", pricing_path, "Pricing JSON [{match, prompt, completion}] USD per 1M tokens (default: the reference's)");
        app.add_option("--scorer", scorer, "Scorer for tasks without a kind: letter, integer, solution, exact")
            ->check(CLI::IsMember({"letter", "integer", "solution", "exact"}))
            ->capture_default_str();
        app.add_option("--judge", judge_url, "An LLM judge endpoint (True/False verdict, as the reference) instead of the scorers");
        app.add_option("--judge-model", judge_model, "Judge model name")->capture_default_str();
        app.add_flag("--simulate", simulate, "Replay --plans with the latency model, no endpoint (except --embed for the router)");
        app.add_option("--profiles", profiles_path, "Simulation: per-step profiles JSONL (task_id, step_id, edge/cloud)");
        app.add_option("--sim-latency", sim_latency, "Simulation latency: table (reference speeds x tokens) or recorded (profiles)")
            ->check(CLI::IsMember({"table", "recorded"}))
            ->capture_default_str();
        app.add_option("--record-profiles", record_path, "Run every subtask on both models; write profile rows (JSONL)");
        app.add_flag("--resume", resume, "Keep the records already in -o and skip their tasks");
        app.add_option("--limit", limit, "Only the first N tasks");
      },
      [&](cli::Context& ctx) {
        RunConfig cfg;
        std::vector<Policy> policy_list;
        for (const auto& p : split_list(policies)) policy_list.push_back(parse_policy(p));
        if (policy_list.empty()) throw UsageError("no policy given", "--policy");
        const bool recording = !record_path.empty();
        const bool want_router = !recording && std::find(policy_list.begin(), policy_list.end(), Policy::router) != policy_list.end();
        if (simulate && recording) throw UsageError("--record-profiles runs the models; it cannot be simulated", "--simulate");
        if (simulate && plans_path.empty()) throw UsageError("--simulate replays recorded plans: give --plans", "--simulate");
        if (!simulate && !profiles_path.empty()) throw UsageError("--profiles is for --simulate", "--profiles");
        if (sim_latency == "recorded" && profiles_path.empty()) throw UsageError("--sim-latency recorded needs --profiles", "--sim-latency");
        if (recording && plans_path.empty()) throw UsageError("--record-profiles needs --plans (the same plan on both models)", "--record-profiles");
        if (resume && io::is_stdout(output)) throw UsageError("--resume needs -o FILE", "--resume");
        if (!simulate) {
          if (edge_url.empty()) throw UsageError("live runs need the edge endpoint", "--edge");
          if (cloud_url.empty()) throw UsageError("live runs need the cloud endpoint", "--cloud");
          if (plans_path.empty() && planner_url.empty()) throw UsageError("give --planner, or recorded --plans", "--planner");
        }
        if (want_router) {
          if (router_path.empty())
            throw UsageError("the router policy (the default) needs --router WEIGHTS, or choose --policy edge|cloud|threshold|random", "--router");
          if (embed_url.empty()) throw UsageError("the router policy needs --embed URL (its embedding endpoint)", "--embed");
        }
        const std::string key = key_env.empty() ? std::string() : (std::getenv(key_env.c_str()) ? std::getenv(key_env.c_str()) : "");
        if (!key_env.empty() && key.empty()) throw UsageError("environment variable " + key_env + " is not set", "--api-key-env");
        for (auto [url, flag] : {std::pair{&planner_url, "--planner"}, {&edge_url, "--edge"}, {&cloud_url, "--cloud"},
                                 {&embed_url, "--embed"}, {&judge_url, "--judge"}})
          if (!url->empty()) check_base_url(*url, flag);
        cfg.planner = {planner_url, planner_model, key, timeout};
        cfg.edge = {edge_url, edge_model, key, timeout};
        cfg.cloud = {cloud_url, cloud_model, key, timeout};
        if (!embed_url.empty()) cfg.embed = Endpoint{embed_url, embed_model, key, timeout};
        cfg.planner_chat.max_tokens = planner_max_tokens;
        cfg.executor_chat.max_tokens = executor_max_tokens;
        cfg.executor_chat.stop = stop;
        cfg.max_tokens_from_plan = max_tokens_from_plan;
        cfg.threshold = threshold;
        cfg.cloud_share = cloud_share;
        cfg.sanitize.chain = schedule_name == "chain";
        cfg.sanitize.single_rely = single_rely;
        if (single_rely && !cfg.sanitize.chain) throw UsageError("--single-rely applies to --schedule chain", "--single-rely");
        cfg.workers = workers;
        cfg.attempts = attempts;
        cfg.retry_delay_s = retry_delay;
        cfg.seed = ctx.common.seed;
        cfg.router_params.tau = tau;
        cfg.router_params.delta0 = delta0;
        cfg.router_params.alpha_B = alpha_B;
        cfg.router_params.alpha_L = alpha_L;
        cfg.router_params.B_max = budget == "low" ? 512 : budget == "high" ? 8192 : 2048;
        cfg.router_params.L_max = budget == "low" ? 10 : budget == "high" ? 50 : 25;
        if (B_max > 0) cfg.router_params.B_max = B_max;
        if (L_max > 0) cfg.router_params.L_max = L_max;
        if (!pricing_path.empty()) {
          cfg.prices = read_prices(pricing_path);
          ctx.prov.add_input(pricing_path, "");
        }
        if (!planner_prompt_path.empty()) {
          std::ifstream in(planner_prompt_path);
          if (!in) throw InputError("cannot read file", planner_prompt_path);
          cfg.planner_system.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        cfg.sim_recorded_latency = sim_latency == "recorded";
        cfg.planner_speed = reference_speed(planner_model);
        cfg.edge_speed = reference_speed(edge_model);
        cfg.cloud_speed = reference_speed(cloud_model);
        std::optional<RouterNet> net;
        if (want_router) {
          net = load_router(router_path);
          cfg.router = &*net;
          ctx.prov.add_input(router_path, "");
        }

        std::string sha;
        std::vector<Task> tasks = read_tasks(tasks_path, &sha);
        ctx.prov.add_input(tasks_path, sha);
        if (limit && tasks.size() > limit) tasks.resize(limit);
        std::map<std::string, std::string> plans;
        if (!plans_path.empty()) {
          plans = read_plans(plans_path, &sha);
          ctx.prov.add_input(plans_path, sha);
          for (const auto& t : tasks)
            if (!plans.count(t.id)) throw InputError("no recorded plan for task '" + t.id + "'", plans_path);
        }
        std::map<std::string, std::map<int, StepProfile>> profiles;
        if (!profiles_path.empty()) profiles = read_step_profiles(profiles_path);

        // ---- record profiles: each task's plan on the edge, then on the cloud ----
        if (recording) {
          io::check_distinct_outputs({{"--record-profiles", record_path}}, {tasks_path, plans_path});
          io::AtomicFile file(record_path);
          std::ofstream out(file.temp_path());
          std::size_t rows = 0;
          for (std::size_t t = 0; t < tasks.size(); ++t) {
            RunConfig c = cfg;
            c.policy = Policy::edge;
            const TaskRecord e = run_task(tasks[t], t, c, plans.at(tasks[t].id));
            c.policy = Policy::cloud;
            const TaskRecord k = run_task(tasks[t], t, c, plans.at(tasks[t].id));
            for (const auto& se : e.steps)
              for (const auto& sk : k.steps) {
                if (se.step.id != sk.step.id || !se.error.empty() || !sk.error.empty()) continue;
                auto side = [](const StepRecord& s) {
                  return nlohmann::json{{"latency_ms", s.latency_s * 1000.0},
                                        {"ttft_ms", s.ttft_s * 1000.0},
                                        {"usage", {{"prompt_tokens", s.prompt_tokens},
                                                   {"completion_tokens", s.completion_tokens},
                                                   {"total_tokens", s.prompt_tokens + s.completion_tokens}}}};
                };
                std::vector<int> deps = se.step.rely;
                nlohmann::json row = {{"id", tasks[t].id + ":" + std::to_string(se.step.id)},
                                      {"task_id", tasks[t].id},
                                      {"step_id", se.step.id},
                                      {"task", tasks[t].problem},
                                      {"subtask", {{"description", se.step.task}, {"depends_on", deps}}},
                                      {"difficulty", se.step.difficulty},
                                      {"edge", side(se)},
                                      {"cloud", side(sk)}};
                out << row.dump() << "\n";
                ++rows;
              }
            log::info("task {} ({}/{}): profiled steps: {}", tasks[t].id, t + 1, tasks.size(), e.steps.size());
          }
          out.close();
          if (!out) throw RuntimeError("cannot write", record_path);
          file.commit();
          std::cout << nlohmann::json{{"profiles", rows}, {"tasks", tasks.size()}, {"file", record_path}}.dump() << "\n";
          return;
        }

        // ---- output: appended as each task finishes; the file is (re)written at the first record,
        // so a run that fails before any leaves an existing file as it was ----
        std::set<std::string> done;
        std::map<std::string, Aggregate> agg;
        std::vector<nlohmann::json> kept;
        std::ofstream file_out;
        const bool to_stdout = io::is_stdout(output);
        if (!to_stdout) {
          io::check_distinct_outputs({{"-o", output}}, {tasks_path, plans_path, profiles_path});
          if (resume) kept = kept_records(output);
          for (const auto& j : kept) {
            done.insert(record_key(j));
            agg[j["policy"].get<std::string>()].add(j);
          }
        }
        bool opened = false;
        std::size_t runs_with_failures = 0;
        for (const auto& j : kept) runs_with_failures += has_failures(j);
        auto emit = [&](const TaskRecord& r) {
          const nlohmann::json j = to_json(r);
          agg[r.policy].add(j);
          runs_with_failures += has_failures(j);
          const std::string line = j.dump() + "\n";
          if (to_stdout) {
            std::cout << line << std::flush;
            return;
          }
          if (!opened) {
            std::string text;
            for (const auto& k : kept) text += k.dump() + "\n";
            io::AtomicFile f(output);
            io::write_text(f.temp_path().string(), text);
            f.commit();
            file_out.open(output, std::ios::app | std::ios::binary);
            if (!file_out) throw RuntimeError("cannot write", output);
            opened = true;
          }
          file_out << line << std::flush;
          if (!file_out) throw RuntimeError("cannot write", output);
        };

        std::optional<Endpoint> judge;
        if (!judge_url.empty()) judge = Endpoint{judge_url, judge_model, key, timeout};
        for (std::size_t t = 0; t < tasks.size(); ++t) {
          const Task& task = tasks[t];
          // Simulation: per-step embeddings for the router, fetched once per task.
          std::map<int, std::vector<float>> embeddings;
          std::map<int, StepProfile> task_profiles;
          if (simulate && profiles.count(task.id)) task_profiles = profiles[task.id];
          for (Policy p : policy_list) {
            RunConfig c = cfg;
            c.policy = p;
            const std::string key_done = task.id + "\x1f" + policy_name(p) + "\x1f" + schedule_name;
            if (done.count(key_done)) continue;
            TaskRecord r;
            if (simulate) {
              if (p == Policy::router && embeddings.empty()) {
                std::vector<Step> steps;
                try {
                  steps = parse_plan(plans.at(task.id), cfg.sanitize, plans_path);
                } catch (const InputError&) {  // no steps: simulate_task records the failed task
                }
                std::vector<std::string> texts;
                for (const auto& s : steps) texts.push_back(task.problem + s.task);
                const auto e = embed(*cfg.embed, texts);
                for (std::size_t i = 0; i < steps.size(); ++i) embeddings[steps[i].id] = e[i];
              }
              r = simulate_task(task, t, c, plans.at(task.id), task_profiles, embeddings);
            } else {
              const auto plan = plans.count(task.id) ? std::optional<std::string>(plans.at(task.id)) : std::nullopt;
              try {
                r = run_task(task, t, c, plan);
              } catch (const Unreachable& e) {
                throw RuntimeError(std::string(e.what()) + "; stopped at task " + task.id +
                                   (to_stdout ? "" : ", finished tasks are in " + output + " (--resume continues)"));
              }
            }
            if (!simulate && r.error.empty() && !task.answer.empty()) {
              if (judge) {
                try {
                  r.correct = judge_verdict(chat(*judge, "", judge_prompt(task.problem, task.answer, r.final_answer), {0.0, 1.0, 16, 0}).text);
                } catch (const Error& e) {
                  r.plan_warnings.push_back(std::string("judge failed: ") + e.what());
                }
              } else {
                r.correct = score_answer(task.kind.empty() ? scorer : task.kind, task.answer, r.final_answer);
              }
            }
            emit(r);
            log::info("task {} ({}/{}) {}: {:.2f} s, steps: {}, cloud share {:.2f}{}", task.id, t + 1, tasks.size(), policy_name(p), r.makespan_s,
                      r.steps.size(), r.cloud_share(), r.error.empty() ? "" : ", failed: " + r.error);
          }
        }
        nlohmann::json summary = {{"schedule", schedule_name}, {"simulated", simulate}, {"policies", nlohmann::json::object()}};
        for (const auto& [name, a] : agg) summary["policies"][name] = a.json();
        summary["meta"] = ctx.prov.to_json();
        if (!summary_path.empty()) io::write_json(summary_path, summary);
        else if (!to_stdout) std::cout << summary.dump(2) << "\n";
        std::size_t runs = 0;
        for (const auto& [name, a] : agg) runs += a.tasks;
        if (runs_with_failures > 0)
          throw RuntimeError(fmt::format("{} of {} task runs had failures (a failed task, step or aggregation; see the records' "
                                         "\"error\" fields)", runs_with_failures, runs));
      });
}
