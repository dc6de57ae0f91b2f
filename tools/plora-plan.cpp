// plora-plan: pack a LoRA hyperparameter search (many jobs on one frozen base) into concurrent groups
// over workers, minimising the makespan under a memory limit (PLoRA, issue 33), with its baselines.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include <fmt/core.h>

#include "cli/array_task.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/gnuplot.hpp"
#include "io/json.hpp"
#include "lm/model_io.hpp"
#include "nn/plora.hpp"
#include "sched/plora_plan.hpp"
#include "sched/plora_space.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"

using namespace icmlkit;
using namespace icmlkit::sched;

namespace {

// The picture: one row per job, a bar per job and round from its start to its end, coloured by
// worker; dashed lines at the group boundaries.
void draw(io::AtomicFile& png, const SearchSpace& space, const std::vector<SearchRound>& rounds, const SearchPlan& sp, int workers,
          std::int64_t memory) {
  std::string data;
  std::set<double> bounds;
  for (std::size_t r = 0; r < rounds.size(); ++r)
    for (const auto& g : sp.runs[r].groups) {
      const double t0 = sp.round_start[r];
      for (std::size_t k = 0; k < g.jobs.size(); ++k) {
        const int job = rounds[r].jobs[std::size_t(g.jobs[k])];
        data += fmt::format("{} {} {} {}\n", t0 + g.start, job, g.job_end[k] - g.start, g.worker + 1);
      }
      bounds.insert(t0 + g.start);
      bounds.insert(t0 + g.end);
    }
  const int n = static_cast<int>(space.jobs.size());
  const int height = std::clamp(140 + 22 * n, 400, 4000);
  io::gnuplot_png(
      png, data,
      [&](const std::string& dat) {
        std::string s = fmt::format(
            "set title {}\nset xlabel 'seconds (modelled)'\nset ylabel 'job'\nset yrange [{}:-1]\nset grid xtics\nset key outside right\n",
            io::gnuplot_quote(fmt::format("plora-plan: {}, makespan {:.4g} s, {} worker{}, memory {} bytes", sp.method, sp.makespan,
                                          workers, workers == 1 ? "" : "s", memory)),
            n);
        s += "set ytics (";
        for (int j = 0; j < n; ++j) s += fmt::format("{}{} {}", j ? ", " : "", io::gnuplot_quote(space.jobs[std::size_t(j)].name), j);
        s += ")\n";
        int arrows = 0;
        for (double b : bounds)
          if (b > 0 && arrows++ < 400) s += fmt::format("set arrow from {},graph 0 to {},graph 1 nohead dashtype 2 lc rgb 'gray60'\n", b, b);
        s += fmt::format("plot {} using 1:2:3:(0):4 with vectors nohead lw 8 lc variable notitle", dat);
        for (int w = 0; w < std::min(workers, 16); ++w) s += fmt::format(", NaN with lines lw 8 lc {} title 'worker {}'", w + 1, w);
        return s + "\n";
      },
      1100, height);
}

}  // namespace

int main(int argc, char** argv) {
  std::string space_path, model_path, memory_text, overhead_text = "96MiB", table_path, method = "plan", output = "-", plot, array_task,
      save_table;
  bool profile = false;
  int profile_steps = 10;
  int workers = 1, exact_max = 16;
  cli::ToolInfo info{
      "plora-plan",
      "Plans a LoRA hyperparameter search on one frozen base (PLoRA, arXiv 2508.02932): packs the jobs of SPACE.json into\n"
      "groups that run concurrently (each packed step runs the base projections once over all the group's rows and each\n"
      "job's adapter on its own rows) and orders the groups over --workers workers, each with --memory bytes, to\n"
      "minimise the makespan of the whole search.  The paper publishes neither its planner nor its cost model; this one\n"
      "minimises a simulated makespan from a memory model and a throughput model:\n"
      "  memory of a group = base (4 x weights) + --overhead + per job 16 x P (adapter value, gradient, AdamW m, v;\n"
      "  P = sum over layers and targets of r (in + out)) + its activations, 4 x [L (4d + 2dq + 2dkv + 3 d_ff + 2 +\n"
      "  2 heads + sum of r over targets) + 2V + 6d] bytes per token of batch x seq_len (+ 4 L x sum of target inputs\n"
      "  with dropout); a group fits when that is <= --memory;\n"
      "  step time of a pack = f(R) + g(R) W, R = sum of batch rows, W = sum of batch x rank, f and g piecewise linear\n"
      "  in R, fitted to --throughput TABLE.json (timed packs of k identical jobs; made non-decreasing in R);\n"
      "  a group's jobs start together, a job leaves after its steps (the pack shrinks and steps faster), the group\n"
      "  ends with its last job and the worker's next group starts; the makespan is the busiest worker's time.\n"
      "Methods, all in the output: sequential (each job alone, dealt round-robin: lm-train --lora run K times),\n"
      "max-pack (groups filled in the file's order while the next job fits, each to the first free worker), lpt\n"
      "(longest solo time first, first-fit groups, longest groups to the least-loaded worker) and plan: exact in the\n"
      "model for up to --exact-max-jobs jobs (a dynamic program over job subsets: the least total time of every\n"
      "subset's partition into fitting groups, then the best split over the workers), else local search from the best\n"
      "baseline (moves, swaps, merges, worker changes; seeded by --seed); never worse than the best baseline.\n"
      "With early_stop in the space (successive halving), round i runs the survivors from rung i-1 to rung i and\n"
      "ceil(n / eta) survive each rung; the estimate assumes the most expensive survivors; rounds are planned one\n"
      "after another.  Output (JSON, stdout or -o): meta, space_sha256, memory_bytes, workers, memory_model (base,\n"
      "overhead, per job adapter and activation bytes), throughput_model (its source and knots), methods (makespan_s,\n"
      "groups, max_concurrent_jobs, speedup_vs_sequential of each), how_chosen, and the --method's schedule: per\n"
      "worker its groups (round, jobs, steps, start_s, end_s, job_end_s, peak_bytes).  --array-task i/N keeps worker\n"
      "i's part only (Slurm job arrays: i = $SLURM_ARRAY_TASK_ID counted from 0, N = --workers).  SPACE.json's format\n"
      "is in the man page.  A job that does not fit --memory alone fails the call, saying how many bytes are missing.",
      "  plora-plan data/plora/space16.json --memory 280MB --throughput data/plora/gpu_table_a100.json | jq .methods\n"
      "  plora-plan data/plora/space16.json --memory 1GiB --workers 2 --throughput data/plora/cpu_table_synthetic.json -o schedule.json --plot schedule.png\n"
      "  plora-plan space.json --memory 80GiB --workers 8 --throughput table.json --array-task $SLURM_ARRAY_TASK_ID/8 -o part.json\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("space", space_path, "SPACE.json: the search (see the man page; - = stdin)")->required();
        app.add_option("--model", model_path, "The base model (any format lm tools read; default: the space's \"base\")");
        app.add_option("--memory", memory_text, "Bytes per worker: a number with K, M, G, T (powers of 1000) or KiB, MiB, GiB, TiB")
            ->required();
        app.add_option("--overhead", overhead_text, "Fixed bytes of a trainer process besides base and jobs (calibrate from plora-train's peak RSS)")
            ->capture_default_str();
        app.add_option("--workers", workers, "Workers (machines or GPUs), each with --memory bytes")->capture_default_str()->check(cli::int_range(1, 4096));
        app.add_option("--throughput", table_path, "TABLE.json: timed packs {device, source, seq_len, measurements: [{jobs, rank, batch, step_seconds}]}");
        app.add_flag("--profile", profile, "Instead of --throughput: time packs of k = 1, 2, 4, ... identical jobs (up to the most that fit --memory) on this machine's CPU trainer at the space's smallest and largest rank, its first job's targets and batch (median of --profile-steps steps after a warm-up)");
        app.add_option("--profile-steps", profile_steps, "Timed steps per pack with --profile")->capture_default_str()->check(cli::int_range(1, 1000));
        app.add_option("--save-throughput", save_table, "With --profile: also write the measured table (TABLE.json) here");
        app.add_option("--method", method, "The schedule written in full: plan, max-pack, lpt or sequential")
            ->capture_default_str()
            ->check(CLI::IsMember({"plan", "max-pack", "lpt", "sequential"}));
        app.add_option("--exact-max-jobs", exact_max, "Plan exactly (subset dynamic program) up to this many jobs per round, else local search (0..18)")
            ->capture_default_str()
            ->check(cli::int_range(0, 18));
        app.add_option("--array-task", array_task, "i/N: write only worker i's schedule (0-based; N must equal --workers)");
        app.add_option("--plot", plot, "A PNG of the schedule: a bar per job from its start to its end, coloured by worker");
        app.add_option("-o,--output", output, "Output JSON (- = stdout)")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        const std::int64_t memory = parse_byte_size(memory_text, "--memory");
        const std::int64_t overhead = parse_byte_size(overhead_text, "--overhead");
        std::optional<std::pair<int, int>> task;
        if (!array_task.empty()) {
          task = cli::parse_array_task(array_task);
          if (task->second != workers)
            throw UsageError(fmt::format("N = {} must equal --workers {}", task->second, workers), "--array-task");
        }
        if (!plot.empty()) {
          io::require_output_extension(plot, "--plot", {".png"}, "the picture is PNG");
          io::check_distinct_outputs({{"-o", output}, {"--plot", plot}, {"--save-throughput", save_table}}, {space_path, table_path, model_path});
          io::require_gnuplot("--plot");
        } else {
          io::check_distinct_outputs({{"-o", output}, {"--save-throughput", save_table}}, {space_path, table_path, model_path});
        }
        if (!save_table.empty()) {  // checked now, not after the profile
          io::require_output_extension(save_table, "--save-throughput", {".json"}, "the table is JSON");
          io::check_output_dir(save_table);
        }

        std::string space_sha, table_sha;
        const SearchSpace space = read_space(space_path, &space_sha);
        ctx.prov.add_input(space_path, space_sha);
        if (task && space.early_stop.enabled())
          throw UsageError("successive halving (the space's early_stop) compares every job at each rung, which one array task "
                           "cannot; plan it for one process (plora-train refuses such a part too)",
                           "--array-task");
        const std::string base = model_path.empty() ? space.base_resolved : model_path;
        if (base.empty()) throw UsageError("no base model: give --model or \"base\" in the space", "--model");
        const lm::Model model = lm::load_any(base);
        ctx.prov.add_input(base, lm::model_sha256(base));
        if (profile == !table_path.empty()) throw UsageError("give --throughput TABLE.json or --profile", "--throughput");
        if (!save_table.empty() && !profile) throw UsageError("--save-throughput needs --profile", "--save-throughput");
        ThroughputTable table;
        if (!profile) {
          table = read_throughput_table(table_path, &table_sha);
          ctx.prov.add_input(table_path, table_sha);
        }
        if (profile) {  // this machine's trainer, timed now
          check_space_for_model(space, model.config, io::is_stdout(space_path) ? "<stdin>" : space_path);
          const MemoryModel pm = memory_model(model.config, space, memory, overhead);
          check_every_job_fits(pm, space, "--memory");
          int lo = space.jobs[0].rank, hi = lo;
          for (const auto& j : space.jobs) {
            lo = std::min(lo, j.rank);
            hi = std::max(hi, j.rank);
          }
          const int kmax = std::max(1, std::min<int>(static_cast<int>(space.jobs.size()), pm.max_jobs_at_once()));
          std::vector<int> ks;
          for (int k = 1; k < kmax; k *= 2) ks.push_back(k);
          ks.push_back(kmax);
          table.device = fmt::format("this machine's CPU trainer ({} threads)", threads());
          table.source = fmt::format("plora-plan --profile: median of {} timed packed steps (after one warm-up) of k identical jobs on random tokens", profile_steps);
          table.model = base;
          table.seq_len = space.seq_len;
          nlohmann::json rows = nlohmann::json::array();
          bool noisy = false;
          for (int r : lo == hi ? std::vector<int>{lo} : std::vector<int>{lo, hi}) {
            lm::LoraConfig lc;
            lc.rank = r;
            lc.alpha = 2.0 * r;
            lc.targets = space.jobs[0].targets;
            for (const auto& t : nn::profile_packing(model, space.seq_len, lc, space.jobs[0].batch, ks, profile_steps)) {
              table.points.push_back({t.jobs, t.rank, t.batch, t.step_seconds});
              rows.push_back({{"jobs", t.jobs}, {"rank", t.rank}, {"batch", t.batch}, {"step_seconds", t.step_seconds}});
              log::debug("profile: {} jobs of rank {}: {:.4f} s per step", t.jobs, t.rank, t.step_seconds);
              if (t.max_seconds > 1.5 * t.min_seconds && !noisy) {
                noisy = true;
                log::warn("profile: the steps of {} packed jobs (rank {}) took {:.3f} to {:.3f} s: the machine is busy, and the table "
                          "(and the plan) may not reflect it when idle",
                          t.jobs, t.rank, t.min_seconds, t.max_seconds);
              }
            }
          }
          if (!save_table.empty())
            io::write_json(save_table, nlohmann::json{{"device", table.device}, {"source", table.source}, {"model", table.model},
                                                      {"seq_len", table.seq_len}, {"measurements", rows}, {"meta", ctx.prov.to_json()}});
          table_path = save_table.empty() ? "(profiled)" : save_table;
        }
        if (table.seq_len != space.seq_len)
          throw InputError(fmt::format("the table was timed at seq_len {}, the space trains at seq_len {}", table.seq_len, space.seq_len),
                           table_path);
        const std::string space_where = io::is_stdout(space_path) ? "<stdin>" : space_path;
        check_space_for_model(space, model.config, space_where);
        const MemoryModel mem = memory_model(model.config, space, memory, overhead);
        check_every_job_fits(mem, space, "--memory");
        const ThroughputModel tp(table);

        const std::vector<SearchRound> rounds = search_rounds(space, mem, tp, workers);
        const std::vector<SearchPlan> plans = plan_search(rounds, ctx.common.seed, exact_max);
        const SearchPlan* chosen = nullptr;
        for (const auto& sp : plans)
          if (sp.method == method) chosen = &sp;

        nlohmann::json out;
        out["space"] = space_path;
        out["space_sha256"] = space_sha256(space);
        out["model"] = {{"path", base},
                        {"params", model.config.n_params()},
                        {"d_model", model.config.d_model},
                        {"n_layers", model.config.n_layers},
                        {"n_heads", model.config.n_heads},
                        {"n_kv_heads", model.config.n_kv_heads},
                        {"d_ff", model.config.d_ff},
                        {"vocab_size", model.config.vocab_size}};
        out["memory_bytes"] = memory;
        out["workers"] = workers;
        out["seq_len"] = space.seq_len;
        nlohmann::json jobs = nlohmann::json::array();
        for (std::size_t j = 0; j < space.jobs.size(); ++j) {
          const JobSpec& job = space.jobs[j];
          const double step = tp.step_seconds(job.batch, double(job.batch) * job.rank);
          jobs.push_back({{"name", job.name},
                          {"rank", job.rank},
                          {"batch", job.batch},
                          {"steps", job.steps},
                          {"targets", job.targets},
                          {"adapter_params", adapter_params(model.config, job.rank, job.targets)},
                          {"adapter_bytes", mem.adapter[j]},
                          {"activation_bytes", mem.activation[j]},
                          {"solo_step_s", step},
                          {"solo_s", step * job.steps}});
        }
        out["memory_model"] = {{"base_bytes", mem.base},
                               {"overhead_bytes", mem.overhead},
                               {"max_jobs_at_once", mem.max_jobs_at_once()},
                               {"jobs", jobs}};
        out["throughput_model"] = tp.to_json();
        out["throughput_model"]["path"] = table_path;
        if (space.early_stop.enabled()) {
          nlohmann::json rs = nlohmann::json::array();
          for (const auto& r : rounds)
            rs.push_back({{"round", r.index}, {"from_step", r.from_step}, {"to_step", r.to_step < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.to_step)},
                          {"jobs", r.jobs.size()}});
          out["early_stop"] = {{"eta", space.early_stop.eta},
                               {"rungs", space.early_stop.rungs},
                               {"rounds", rs},
                               {"assumption", "the survivors of each rung are the most expensive ones (longest solo time for the round)"}};
        } else {
          out["early_stop"] = nullptr;
        }
        const double seq_span = plans.front().makespan;
        for (const auto& sp : plans)
          out["methods"][sp.method] = {{"makespan_s", sp.makespan},
                                       {"groups", sp.groups},
                                       {"max_concurrent_jobs", sp.max_concurrent},
                                       {"max_group_jobs", sp.max_group_jobs},
                                       {"speedup_vs_sequential", seq_span / sp.makespan}};
        out["method"] = method;
        out["how_chosen"] = method == "plan" ? plans.back().how
                                             : fmt::format("the {} baseline, as --method asked (plan: {})", method, plans.back().how);
        nlohmann::json schedule = nlohmann::json::array();
        for (int w = 0; w < workers; ++w) {
          if (task && task->first != w) continue;
          nlohmann::json groups = nlohmann::json::array();
          for (std::size_t r = 0; r < rounds.size(); ++r)
            for (const auto& g : chosen->runs[r].groups) {
              if (g.worker != w) continue;
              nlohmann::json names = nlohmann::json::array(), steps = nlohmann::json::array(), ends = nlohmann::json::array();
              for (std::size_t k = 0; k < g.jobs.size(); ++k) {
                const PlanJob& pj = rounds[r].problem.jobs[std::size_t(g.jobs[k])];
                names.push_back(pj.name);
                steps.push_back(pj.steps);
                ends.push_back(chosen->round_start[r] + g.job_end[k]);
              }
              groups.push_back({{"round", rounds[r].index},
                                {"from_step", rounds[r].from_step},
                                {"jobs", names},
                                {"steps", steps},
                                {"start_s", chosen->round_start[r] + g.start},
                                {"end_s", chosen->round_start[r] + g.end},
                                {"job_end_s", ends},
                                {"peak_bytes", g.peak_bytes}});
            }
          schedule.push_back({{"worker", w}, {"groups", groups}});
        }
        out["schedule"] = schedule;
        if (task) out["array_task"] = {{"index", task->first}, {"count", task->second}};
        out["meta"] = ctx.prov.to_json();

        std::optional<io::AtomicFile> png;  // committed with the JSON, so that a failure leaves neither
        if (!plot.empty()) {
          png.emplace(plot);
          draw(*png, space, rounds, *chosen, workers, memory);
        }
        io::write_json(output, out);
        if (png) png->commit();
      });
}
