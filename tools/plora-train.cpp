// plora-train: PLoRA (issue 33) — many LoRA fine-tuning jobs of a search space trained concurrently on
// one frozen base, packed into shared passes over the base weights.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "cli/array_task.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "lm/lora.hpp"
#include "lm/model_io.hpp"
#include "lm/tokenizer.hpp"
#include "nn/corpus.hpp"
#include "nn/layers.hpp"
#include "nn/lora_run.hpp"
#include "sched/plora_plan.hpp"
#include "sched/plora_space.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/memory.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

namespace {

/// One job's token streams.
struct Streams {
  std::vector<int> train, val;
  std::string sha256;  ///< of the corpus file's bytes
};

/// Reads a job's corpus (its row filter applied: TSV rows whose key column starts with a prefix)
/// and tokenizes its train and validation documents as lm-train does.
Streams load_streams(const sched::JobData& d, const lm::Tokenizer& tok, const lm::ModelConfig& mc) {
  nn::CorpusOptions o = d.corpus;
  if (d.filter.active()) {  // a filter reads the file as TSV rows
    o.format = "tsv";
    o.filter_column = d.filter.column;
    o.filter_prefixes = d.filter.prefixes;
  }
  const nn::Documents docs = nn::read_corpus(d.resolved, o);
  if (docs.train.empty()) throw InputError("no training documents", d.resolved);
  Streams s;
  s.train = nn::tokenize_documents(tok, docs.train, mc.add_bos ? mc.bos_id : -1, d.resolved);
  s.val = nn::tokenize_documents(tok, docs.val, mc.add_bos ? mc.bos_id : -1, d.resolved);
  s.sha256 = docs.sha256;
  return s;
}

/// What plora-train reads of a plora-plan schedule.
struct Schedule {
  std::vector<std::vector<std::string>> groups;  ///< round 0's groups, job names, in execution order
  std::string space_sha256;                      ///< of the space it was planned for ("" = not recorded)
  /// The planner's memory model, for re-packing survivors of successive halving (limit 0 = absent):
  /// each job's adapter + activation bytes, and the bytes the jobs of one group may share.
  std::int64_t job_budget = 0;
  std::map<std::string, std::int64_t> job_bytes;
};

/// A plora-plan schedule: worker `task`'s groups (task >= 0), or every worker's one after another.
Schedule read_schedule(const std::string& path, int task, int tasks, std::string* sha) {
  const nlohmann::json j = io::read_json(path, sha);
  Schedule out;
  if (j.is_object() && j.contains("space_sha256") && j["space_sha256"].is_string()) out.space_sha256 = j["space_sha256"];
  if (j.is_object() && j.contains("memory_model") && j["memory_model"].is_object() && j.contains("memory_bytes") &&
      j["memory_bytes"].is_number_integer()) {
    const auto& m = j["memory_model"];
    if (m.value("base_bytes", nlohmann::json()).is_number_integer() && m.value("overhead_bytes", nlohmann::json()).is_number_integer() &&
        m.contains("jobs") && m["jobs"].is_array()) {
      out.job_budget = j["memory_bytes"].get<std::int64_t>() - m["base_bytes"].get<std::int64_t>() - m["overhead_bytes"].get<std::int64_t>();
      for (const auto& jb : m["jobs"])
        if (jb.is_object() && jb.value("name", nlohmann::json()).is_string() && jb.value("adapter_bytes", nlohmann::json()).is_number_integer() &&
            jb.value("activation_bytes", nlohmann::json()).is_number_integer())
          out.job_bytes[jb["name"].get<std::string>()] = jb["adapter_bytes"].get<std::int64_t>() + jb["activation_bytes"].get<std::int64_t>();
    }
  }
  const nlohmann::json* sch = nullptr;
  if (j.is_object() && j.contains("schedule")) sch = &j["schedule"];
  if (!sch || !sch->is_array()) throw InputError("not a plora-plan schedule (no \"schedule\" array)", path);
  std::vector<std::vector<std::string>>& groups = out.groups;
  int workers = 0;
  for (const auto& w : *sch) {
    if (!w.is_object() || !w.contains("groups") || !w["groups"].is_array())
      throw InputError("a schedule entry lacks its \"groups\" array", path);
    if (w.contains("worker") && !w["worker"].is_number_integer()) throw InputError("a schedule entry's \"worker\" must be an integer", path);
    const int worker = w.value("worker", workers);
    ++workers;
    if (task >= 0 && worker != task) continue;
    for (const auto& g : w["groups"]) {
      if (!g.is_object() || !g.contains("jobs") || !g["jobs"].is_array()) throw InputError("a group lacks its \"jobs\" array", path);
      // successive halving: later rounds' groups name the survivors plora-plan assumed; plora-train
      // runs round 0's groups and restricts them to the real survivors afterwards
      if (g.contains("round") && g["round"].is_number_integer() && g["round"].get<int>() > 0) continue;
      std::vector<std::string> names;
      for (const auto& n : g["jobs"]) {
        if (!n.is_string()) throw InputError("a group's jobs must be job names", path);
        names.push_back(n.get<std::string>());
      }
      groups.push_back(std::move(names));
    }
  }
  if (tasks > 0 && j.contains("workers") && j["workers"].is_number_integer() && j["workers"].get<int>() != tasks)
    throw UsageError(fmt::format("--array-task .../{} but the schedule has {} workers", tasks, j["workers"].get<int>()), "--array-task");
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);
  std::string space_path, model_path, output, schedule_path, array_task, pack = "all";
  std::int64_t eval_every = 0, eval_tokens = 0, log_every = 10;
  bool no_early_stop = false;
  cli::ToolInfo info{
      "plora-train",
      "PLoRA (Yan et al., ICML 2026): trains the LoRA fine-tuning jobs of a search space (SPACE.json, the format of\n"
      "plora-plan) concurrently on one frozen base.  The jobs of a group are packed: each step runs every base\n"
      "projection once over the concatenated micro-batches of all of them, and each job's adapter on its own rows\n"
      "(segmented products; ranks, targets, batches, learning rates and dropout may differ); each job keeps its\n"
      "own AdamW state, warmup-cosine schedule, clipping, data order and dropout stream, so its adapter is bitwise\n"
      "the one `lm-train --lora-rank` trains for the same job alone (ranks, seeds and data as in the space; Adam\n"
      "beta2 0.999, no weight decay unless the space says).  A job leaves its group when it has done its steps (the\n"
      "pack shrinks); the next group starts when the last one ends.  Groups: --schedule (a plora-plan schedule: all\n"
      "its workers' groups one after another, or with --array-task i/N worker i's only, for Slurm-style job arrays),\n"
      "else --pack all (one group of every job) or --pack none (every job alone, one after another: the usual\n"
      "practice).  With early_stop in the space (successive halving), every job trains to the first rung, the\n"
      "ceil(n / eta) with the lowest validation loss go on to the next, and so on (each round runs the schedule's\n"
      "groups restricted to the survivors; a plora-plan schedule's later rounds are its estimate and are not read);\n"
      "--no-early-stop trains every job to its end.  Outputs in the directory\n"
      "-o: <job>/ (the adapter, a PEFT directory: adapter_config.json + adapter_model.safetensors), <job>.jsonl (its\n"
      "log: step, tokens, train_loss, lr, grad_norm, packed_jobs, step_seconds, val_loss when evaluated, then a\n"
      "summary record; an {event: diverged} record when a job's loss or gradient turned non-finite: that job stops,\n"
      "its adapter kept at its last finite step, and the others go on) and summary.json (summary-task<i>.json with --array-task): per job its settings, steps,\n"
      "final train and validation loss, whether halving stopped it, its start and end second; the groups run;\n"
      "makespan_s (wall time), tokens_per_s, peak_rss_bytes, and the job with the lowest validation loss.\n"
      "What the paper does not say (its planner and kernels are not public) is designed here; see plora-plan.",
      "  plora-train data/plora/space16.json --model data/models/kjv7m.h5 -o search\n"
      "  plora-plan data/plora/space16.json --model data/models/kjv7m.h5 --memory 600MiB --workers 1 --throughput table.json -o plan.json\n"
      "  plora-train data/plora/space16.json --model data/models/kjv7m.h5 --schedule plan.json -o search\n"
      "  plora-train data/plora/space16.json --model data/models/kjv7m.h5 --pack none -o sequential\n"};
  CLI::App* app_ptr = nullptr;
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("space", space_path, "The search space (JSON; see plora-plan --help)")->required();
        app.add_option("--model", model_path, "The frozen base (.h5, .gguf or a Hugging Face directory; default: the space's \"base\")");
        app.add_option("-o,--output", output, "Output directory (created; adapters, logs, summary)")->required();
        app.add_option("--schedule", schedule_path, "A plora-plan schedule (JSON) giving the groups");
        app.add_option("--array-task", array_task, "i/N: run worker i's groups of the --schedule (N workers)");
        app.add_option("--pack", pack, "Without --schedule: all (one group) or none (each job alone, in order)")
            ->capture_default_str()->check(CLI::IsMember({"all", "none"}));
        app.add_option("--eval-every", eval_every, "Validation every N of a job's steps (0 = at its end only)")->capture_default_str();
        app.add_option("--eval-tokens", eval_tokens, "Validation tokens per evaluation (0 = all)")->capture_default_str();
        app.add_option("--log-every", log_every, "A log record every N steps of a job")->capture_default_str()->check(cli::int_range(1, 1 << 30));
        app.add_flag("--no-early-stop", no_early_stop, "Ignore the space's early_stop (train every job to its end)");
      },
      [&](cli::Context& ctx) {
        CLI::App* app = app_ptr;
        if (eval_every < 0) throw UsageError("must be >= 0", "--eval-every");
        if (eval_tokens < 0) throw UsageError("must be >= 0", "--eval-tokens");
        if (!schedule_path.empty() && app->count("--pack")) throw UsageError("give --schedule or --pack, not both", "--pack");
        int task = -1, tasks = 0;
        if (!array_task.empty()) {
          if (schedule_path.empty()) throw UsageError("--array-task needs --schedule", "--array-task");
          std::tie(task, tasks) = cli::parse_array_task(array_task);
        }
        if (io::is_stdout(output) || io::is_stream_path(output)) throw UsageError("-o names a directory", "-o");
        if (std::filesystem::exists(output) && !std::filesystem::is_directory(output))
          throw UsageError(fmt::format("-o {} exists and is not a directory", output), "-o");
        io::check_output_dir(output);
        // a new search gets a new directory: one already holding files would mix two searches' adapters
        // (array tasks share one directory, each writing its own jobs and summary-task<i>.json)
        if (task < 0 && std::filesystem::is_directory(output) && !std::filesystem::is_empty(output))
          throw UsageError(fmt::format("-o {} is not empty; give a new directory (or remove this one)", output), "-o");

        std::string space_sha;
        const sched::SearchSpace space = sched::read_space(space_path, &space_sha);
        ctx.prov.add_input(space_path, space_sha);
        if (model_path.empty()) model_path = space.base_resolved;
        if (model_path.empty()) throw UsageError("give the base with --model (the space names none)", "--model");
        const bool halving = space.early_stop.enabled() && !no_early_stop;
        if (halving && task >= 0)
          throw UsageError("successive halving compares every job of the search at each rung, which one array task cannot; "
                           "run the search in one process, or give --no-early-stop",
                           "--array-task");
        std::string schedule_sha;
        Schedule schedule;
        if (!schedule_path.empty()) {
          schedule = read_schedule(schedule_path, task, tasks, &schedule_sha);
          ctx.prov.add_input(schedule_path, schedule_sha);
          if (!schedule.space_sha256.empty() && schedule.space_sha256 != sched::space_sha256(space))
            throw InputError(fmt::format("the schedule was planned for another search space (space SHA-256 {}, this one's {})",
                                         schedule.space_sha256.substr(0, 12), sched::space_sha256(space).substr(0, 12)),
                             schedule_path);
        }
        // the base model is held once, as the trainer's frozen store (the loaded copy is freed below)
        auto base = std::make_unique<lm::Model>(lm::load_any(model_path));
        ctx.prov.add_input(model_path, lm::model_sha256(model_path));
        if (base->tokenizer_model.empty()) throw InputError("the model has no tokenizer", model_path);
        const lm::ModelConfig mc = base->config;
        if (space.seq_len > mc.n_ctx)
          throw InputError(fmt::format("seq_len {} is larger than the model allows (n_ctx = {})", space.seq_len, mc.n_ctx), space_path);
        std::map<std::string, int> index;
        std::vector<nn::LoraJobOptions> opts;
        for (const sched::JobSpec& js : space.jobs) {
          nn::LoraJobOptions o;
          o.name = js.name;
          o.lora.rank = js.rank;
          o.lora.alpha = js.alpha;
          o.lora.rslora = js.rslora;
          o.lora.dropout = js.dropout;
          o.lora.targets = js.targets;
          o.batch = js.batch;
          o.steps = js.steps;
          o.lr = js.lr;
          o.min_lr = js.min_lr;
          o.warmup = js.warmup;
          o.clip = js.clip;
          o.adam.weight_decay = js.weight_decay;
          o.seed = js.seed;
          try {
            lm::check_lora_config(o.lora, mc);
          } catch (const UsageError& e) {
            throw InputError(fmt::format("job '{}': {}", js.name, e.what()), space_path);
          }
          index[js.name] = static_cast<int>(opts.size());
          opts.push_back(o);
        }
        // the groups of round 0, as job indices (the schedule's jobs must be the space's, each once)
        std::vector<std::vector<int>> groups;
        std::vector<int> order;
        if (!schedule_path.empty()) {
          std::vector<char> seen(opts.size(), 0);
          for (const auto& g : schedule.groups) {
            std::vector<int> ids;
            for (const std::string& n : g) {
              const auto it = index.find(n);
              if (it == index.end()) throw InputError(fmt::format("the schedule names job '{}', which the space does not have", n), schedule_path);
              if (seen[std::size_t(it->second)]++) throw InputError(fmt::format("the schedule runs job '{}' twice", n), schedule_path);
              ids.push_back(it->second);
              order.push_back(it->second);
            }
            if (!ids.empty()) groups.push_back(std::move(ids));
          }
          if (task < 0)
            for (std::size_t i = 0; i < seen.size(); ++i)
              if (!seen[i]) throw InputError(fmt::format("the schedule never runs job '{}'", opts[i].name), schedule_path);
          if (order.empty()) throw InputError("the schedule gives this task no job", schedule_path);
        } else {
          for (int i = 0; i < static_cast<int>(opts.size()); ++i) order.push_back(i);
          if (pack == "all") groups.push_back(order);
          else
            for (int i : order) groups.push_back({i});
        }

        // nothing the run writes may be one of its inputs (a job's log or adapter files over the space,
        // the model, the schedule or a corpus)
        {
          std::vector<std::string> inputs{space_path, model_path, schedule_path};
          for (int i : order) inputs.push_back(space.jobs[std::size_t(i)].data.resolved);
          const std::filesystem::path outdir(output);
          std::vector<std::pair<std::string, std::string>> outs{{"summary", (outdir / "summary.json").string()}};
          if (task >= 0) outs.push_back({"summary", (outdir / fmt::format("summary-task{}.json", task)).string()});
          for (int i : order) {
            const std::string& n = opts[std::size_t(i)].name;
            outs.push_back({"job " + n + "'s log", (outdir / (n + ".jsonl")).string()});
            outs.push_back({"job " + n + "'s adapter", (outdir / n / "adapter_config.json").string()});
            outs.push_back({"job " + n + "'s adapter", (outdir / n / "adapter_model.safetensors").string()});
          }
          for (const std::string& in : inputs) {
            if (in.empty() || io::is_stdout(in)) continue;
            for (const auto& [what, path] : outs)
              if (io::same_file_path(in, path))
                throw UsageError(fmt::format("{} would overwrite the input {}; write the output elsewhere", what, in), "-o");
          }
        }
        // data: each distinct data object once
        const lm::Tokenizer tok(base->tokenizer_model, "model tokenizer");
        std::map<std::string, std::unique_ptr<Streams>> data;
        std::vector<const Streams*> job_data(opts.size(), nullptr);
        for (int i : order) {
          const sched::JobSpec& js = space.jobs[std::size_t(i)];
          const std::string key = sched::job_json(js)["data"].dump();
          auto& slot = data[key];
          if (!slot) {
            slot = std::make_unique<Streams>(load_streams(js.data, tok, mc));
            ctx.prov.add_input(js.data.resolved, slot->sha256);
          }
          job_data[std::size_t(i)] = slot.get();
        }
        nn::PackedLoraTrainer trainer(*base, space.seq_len);
        base.reset();
        std::deque<std::vector<int>> idle;  // stable addresses
        for (std::size_t i = 0; i < opts.size(); ++i) {
          if (!job_data[i]) {  // not this task's: registered (indices stay the space's) but never run
            idle.emplace_back(std::size_t(space.seq_len) * std::size_t(opts[i].batch) + 1, 0);
            trainer.add_job(opts[i], &idle.back());
            continue;
          }
          try {
            trainer.add_job(opts[i], &job_data[i]->train);
          } catch (const InputError& e) {
            throw InputError(e.what(), space_path);
          }
        }
        std::filesystem::create_directories(output);
        ctx.prov.extra["space_sha256"] = sched::space_sha256(space);
        ctx.prov.extra["base_sha256"] = trainer.base_sha256();
        ctx.prov.extra["threads"] = threads();

        // per-job logs, opened at their first record
        std::vector<std::unique_ptr<std::ofstream>> logs(opts.size());
        std::vector<nn::LoraRunJob> rj(opts.size());
        for (int i : order) {
          rj[std::size_t(i)].val = &job_data[std::size_t(i)]->val;
          rj[std::size_t(i)].log = [&, i](const nlohmann::json& j) {
            auto& f = logs[std::size_t(i)];
            const std::string path = (std::filesystem::path(output) / (opts[std::size_t(i)].name + ".jsonl")).string();
            if (!f) {
              f = std::make_unique<std::ofstream>(path, std::ios::trunc);
              if (!*f) throw RuntimeError("cannot write log", path);
              nlohmann::json meta = ctx.prov.to_json();
              meta["job"] = opts[std::size_t(i)].to_json();
              *f << nlohmann::json{{"meta", meta}}.dump() << '\n';
            }
            *f << j.dump() << '\n' << std::flush;
            if (!*f) throw RuntimeError("cannot write the log (disk full?)", path);
          };
        }
        nn::LoraRunOptions ro;
        ro.log_every = log_every;
        ro.eval_every = eval_every;
        ro.eval_tokens = eval_tokens;
        if (halving) {
          ro.halving_eta = space.early_stop.eta;
          for (int r : space.early_stop.rungs) ro.rungs.push_back(r);
        }
        // round 0 runs the groups; later halving rounds re-pack the survivors first-fit (largest first)
        // under the schedule's memory budget when it records one, else keep the groups restricted to them
        bool round0 = true;
        auto planner = [&](const std::vector<int>& alive, std::int64_t) {
          std::vector<std::vector<int>> out;
          if (!round0 && schedule.job_budget > 0) {
            std::vector<int> by_size = alive;
            auto bytes = [&](int j) {
              const auto it = schedule.job_bytes.find(opts[std::size_t(j)].name);
              return it == schedule.job_bytes.end() ? schedule.job_budget : it->second;
            };
            std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) { return bytes(a) > bytes(b); });
            std::vector<std::int64_t> used;
            for (int j : by_size) {
              std::size_t g = 0;
              while (g < out.size() && used[g] + bytes(j) > schedule.job_budget) ++g;
              if (g == out.size()) {
                out.emplace_back();
                used.push_back(0);
              }
              out[g].push_back(j);
              used[g] += bytes(j);
            }
            return out;
          }
          round0 = false;
          for (const auto& g : groups) {
            std::vector<int> kept;
            for (int j : g)
              if (std::find(alive.begin(), alive.end(), j) != alive.end()) kept.push_back(j);
            if (!kept.empty()) out.push_back(std::move(kept));
          }
          return out;
        };
        log::info("{} job{} in {} group{}{} on {} ({} of {} tokens per window){}", order.size(), order.size() == 1 ? "" : "s", groups.size(),
                  groups.size() == 1 ? "" : "s", ro.halving_eta ? " (the first round)" : "", model_path, space.seq_len,
                  mc.n_ctx, ro.halving_eta ? fmt::format(", successive halving eta {}", ro.halving_eta) : std::string());
        const auto run = nn::run_lora_jobs(trainer, rj, order, planner, ro, [&](int j, const nn::LoraJobResult& r) {
          lm::LoraAdapter a = trainer.adapter(j);
          a.base_model = model_path;
          io::Provenance p = ctx.prov;
          p.extra["job"] = opts[std::size_t(j)].to_json();
          p.extra["steps_done"] = r.steps;
          p.extra["stopped_early"] = r.stopped_early;
          p.extra["diverged"] = r.diverged;
          lm::write_peft_adapter((std::filesystem::path(output) / opts[std::size_t(j)].name).string(), a, mc, p);
          log::info("{}: {} steps, val loss {}{}", opts[std::size_t(j)].name, r.steps,
                    std::isnan(r.val_loss) ? std::string("-") : fmt::format("{:.4f}", r.val_loss), r.stopped_early ? " (stopped early)" : r.diverged ? " (diverged: non-finite loss; adapter of its last finite step)" : "");
        });

        nlohmann::json jobs = nlohmann::json::array(), grs = nlohmann::json::array();
        int best = -1;
        for (int i : order) {
          const auto& r = run.jobs[std::size_t(i)];
          nlohmann::json jr = opts[std::size_t(i)].to_json();
          jr["steps_done"] = r.steps;
          jr["tokens"] = r.tokens;
          jr["train_loss"] = r.train_loss;
          jr["val_loss"] = std::isnan(r.val_loss) ? nlohmann::json() : nlohmann::json(r.val_loss);
          jr["stopped_early"] = r.stopped_early;
          jr["diverged"] = r.diverged;
          jr["train_tokens"] = static_cast<std::int64_t>(job_data[std::size_t(i)]->train.size());
          jr["val_tokens"] = static_cast<std::int64_t>(job_data[std::size_t(i)]->val.size());
          jr["start_s"] = r.start_s;
          jr["end_s"] = r.end_s;
          jr["busy_s"] = r.busy_s;
          jobs.push_back(jr);
          if (!std::isnan(r.val_loss) && !r.stopped_early && !r.diverged && (best < 0 || r.val_loss < run.jobs[std::size_t(best)].val_loss)) best = i;
        }
        for (const auto& g : run.groups) {
          nlohmann::json names = nlohmann::json::array();
          for (int j : g.jobs) names.push_back(opts[std::size_t(j)].name);
          grs.push_back({{"round", g.round}, {"jobs", names}, {"start_s", g.start_s}, {"end_s", g.end_s}, {"packed_steps", g.packed_steps}});
        }
        nlohmann::json summary{{"meta", ctx.prov.to_json()},
                               {"jobs", jobs},
                               {"groups", grs},
                               {"makespan_s", run.seconds},
                               {"tokens", run.tokens},
                               {"tokens_per_s", double(run.tokens) / std::max(run.seconds, 1e-9)},
                               {"peak_rss_bytes", peak_rss_bytes()},
                               {"base_bytes", trainer.base_bytes()},
                               {"best_job", best >= 0 ? nlohmann::json(opts[std::size_t(best)].name) : nlohmann::json()},
                               {"early_stop", ro.halving_eta ? nlohmann::json{{"eta", ro.halving_eta}, {"rungs", ro.rungs}} : nlohmann::json()}};
        if (task >= 0) summary["array_task"] = {{"task", task}, {"tasks", tasks}};
        int finished_jobs = 0;
        for (int i : order) finished_jobs += !run.jobs[std::size_t(i)].diverged;
        const std::string sp = (std::filesystem::path(output) / (task >= 0 ? fmt::format("summary-task{}.json", task) : "summary.json")).string();
        io::write_json(sp, summary);
        log::info("{} job{} in {:.1f} s ({:.0f} tokens/s){} -> {}", order.size(), order.size() == 1 ? "" : "s", run.seconds, double(run.tokens) / std::max(run.seconds, 1e-9),
                  best >= 0 ? fmt::format("; best {} (val loss {:.4f})", opts[std::size_t(best)].name, run.jobs[std::size_t(best)].val_loss) : std::string(),
                  sp);
        if (finished_jobs == 0) throw RuntimeError("every job diverged (a non-finite loss or gradient); see the logs and summary", sp);
      });
}
