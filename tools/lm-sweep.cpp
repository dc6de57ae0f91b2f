// lm-sweep: train a grid of small language models (sizes x tokens x data recipes over quality
// buckets x repetition x seeds), one lm-train run per cell, evaluate each on held-out text of
// every bucket, and collect one table that infolaw-fit and mixlaw-fit read directly (issue 40).
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "nn/llama_train.hpp"
#include "nn/trainer.hpp"
#include "sweep/data.hpp"
#include "sweep/grid.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/subprocess.hpp"
#include "util/threads.hpp"
#include "util/timer.hpp"

using namespace icmlkit;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string grid_path, out, table, bin_dir;
  int jobs = 1;
  std::int64_t cell = -1;
  bool dry_run = false, collect = false, keep_corpus = false;
  int measure_steps = 4;
  std::int64_t checkpoint_every = 50;
};

/// Everything fixed about a cell before it runs.
struct Planned {
  const sweep::Cell* cell = nullptr;
  sweep::CellPlan plan;
  lm::ModelConfig config;
  double params = 0, params_total = 0;  // non-embedding (no embedding, no head) and all weights
  double flops = 0;                     // training FLOP: per-token count x tokens
  nlohmann::json spec;
  std::string spec_sha;
};

std::string rel(const fs::path& p, const fs::path& base) { return fs::relative(p, base).generic_string(); }

// The last line of a JSON Lines log as JSON (null when the file is missing, empty or torn).
nlohmann::json last_json_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  if (last.empty()) return nullptr;
  try {
    return nlohmann::json::parse(last);
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

// An advisory lock (flock) on a file, held while the object lives: cells and the data folder
// are locked so that two lm-sweep processes on one folder (a Slurm array, or a rerun started by
// mistake) never train, evaluate or prepare the same thing at once.
class FileLock {
 public:
  FileLock(const fs::path& path, bool wait) {
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd_ < 0) throw RuntimeError(fmt::format("cannot open the lock file {}", path.string()));
    held_ = ::flock(fd_, LOCK_EX | (wait ? 0 : LOCK_NB)) == 0;
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;
  bool held() const noexcept { return held_; }

 private:
  int fd_ = -1;
  bool held_ = false;
};

// A cell another process is running right now (its lock is held): skipped, not failed.
struct CellBusy {};

class Sweep {
 public:
  Sweep(const Args& a, cli::Context& ctx) : a_(a), ctx_(ctx) {}

  void run() {
    grid_ = sweep::read_grid(a_.grid_path);
    ctx_.prov.add_input(a_.grid_path, io::sha256_file(a_.grid_path));
    if (a_.cell >= static_cast<std::int64_t>(grid_.cells.size()))
      throw UsageError(fmt::format("the grid has {} cells (0..{})", grid_.cells.size(), grid_.cells.size() - 1), "--cell");
    if (fs::exists(a_.out) && !fs::is_directory(a_.out))
      throw InputError("the output exists and is not a folder", a_.out);
    table_path_ = a_.table.empty() ? (fs::path(a_.out) / "table.csv").string() : a_.table;
    if (!a_.table.empty()) {
      // Checked before any work, unless it goes into the sweep folder (made below).
      auto norm = [](fs::path p) {
        p = fs::weakly_canonical(fs::absolute(p));
        return p.has_filename() ? p : p.parent_path();  // "run/" -> "run"
      };
      if (norm(fs::path(a_.table).parent_path()) != norm(a_.out)) io::check_output_dir(a_.table);
    }
    const fs::path data_dir = fs::path(a_.out) / "data";
    if (a_.collect && !fs::exists(data_dir / "manifest.json"))
      throw InputError("no sweep data in this folder (run the grid first)", a_.out);
    bins_ = a_.bin_dir.empty() ? executable_dir() : a_.bin_dir;
    if (!a_.collect)
      for (const char* tool : {"lm-train", "lm-eval"})
        if (::access((fs::path(bins_) / tool).c_str(), X_OK) != 0)
          throw InputError(fmt::format("{} is not in {} (give the toolkit's bin folder with --bin-dir)", tool, bins_));
    fs::create_directories(a_.out);
    {
      FileLock lock(fs::path(a_.out) / ".data.lock", true);  // one process prepares the data, the others wait
      data_ = sweep::prepare_data(grid_, data_dir.string());
    }
    plan_all();  // every cell checked before any training
    if (a_.dry_run) return dry_run();
    if (a_.collect) {
      write_table();
      if (table_rows_ == 0) throw InputError("no finished cell of this grid in this folder", a_.out);
      log::info("{} of {} cells in {}", table_rows_, planned_.size(), table_path_);
      return;
    }
    std::vector<std::size_t> to_run;
    if (a_.cell >= 0) to_run.push_back(static_cast<std::size_t>(a_.cell));
    else
      for (std::size_t i = 0; i < planned_.size(); ++i) to_run.push_back(i);
    const int jobs = std::max(1, std::min<int>(a_.jobs, static_cast<int>(to_run.size())));
    threads_per_job_ = threads_per_job(jobs);
    io::install_temporary_cleanup();  // first, so that the forwarding handler chains to it
    forward_termination_to_children();
    log::info("{} cells to run ({} in the grid) as {} job(s) of {} thread(s); output {}", to_run.size(), planned_.size(), jobs,
              threads_per_job_, a_.out);
    std::atomic<std::size_t> next{0};
    std::vector<std::thread> workers;
    for (int j = 0; j < jobs; ++j)
      workers.emplace_back([&] {
        for (std::size_t k; (k = next.fetch_add(1)) < to_run.size();) run_one(to_run[k]);
      });
    for (auto& w : workers) w.join();
    write_table();
    if (!failures_.empty()) {
      for (const auto& f : failures_) log::warn("{}", f);
      throw RuntimeError(fmt::format("{} of {} cells failed (the first: {}); finished cells are kept", failures_.size(),
                                     to_run.size(), failures_.front()));
    }
    if (busy_ > 0)
      throw RuntimeError(fmt::format("{} cell(s) skipped: another lm-sweep is running them, so the table is not complete yet",
                                     busy_));
  }

 private:
  // Threads each of `jobs` concurrent cells gets: -t (0 = every core) shared out, at least one.
  int threads_per_job(int jobs) const {
    const int total = ctx_.common.threads > 0 ? ctx_.common.threads : hardware_threads();
    return std::max(1, total / std::max(1, jobs));
  }

  void plan_all() {
    for (const auto& c : grid_.cells) {
      Planned p;
      p.cell = &c;
      p.plan = sweep::plan_cell(data_, c, grid_.recipes.at(c.recipe), grid_.seq_len);
      p.config = grid_.models.at(c.model).config;
      p.config.vocab_size = data_.vocab_size;
      p.params_total = static_cast<double>(p.config.n_params());
      p.params = p.params_total - static_cast<double>(p.config.vocab_size) * p.config.d_model * (p.config.tied ? 1 : 2);
      p.flops = nn::training_flop_per_token(p.config, grid_.seq_len) * static_cast<double>(c.tokens);
      nlohmann::json model = grid_.models.at(c.model).json;
      p.spec = {{"cell", c.id},
                {"model", c.model},
                {"model_args", sweep::model_args(grid_.models.at(c.model), grid_.seq_len)},
                {"train_args", sweep::train_args(grid_, grid_.models.at(c.model))},
                {"recipe", c.recipe},
                {"weights", p.plan.weights},
                {"tokens", c.tokens},
                {"epochs", c.epochs ? nlohmann::json(*c.epochs) : nlohmann::json()},
                {"seed", c.seed},
                {"data_sha256", data_.manifest["data_sha256"]},
                {"val_tokens", grid_.data.val_tokens}};
      p.spec_sha = io::sha256_hex(p.spec.dump());
      planned_.push_back(std::move(p));
    }
  }

  fs::path cell_dir(const sweep::Cell& c) const { return fs::path(a_.out) / "cells" / c.id; }

  // Tokens per second of each model, from a short lm-train run on the first bucket.
  std::map<std::string, double> measure_speed() {
    std::map<std::string, double> out;
    const fs::path dir = fs::path(a_.out) / "measure";
    fs::create_directories(dir);
    const int threads = threads_per_job(a_.jobs);
    for (const auto& [name, m] : grid_.models) {
      std::vector<std::string> args{(fs::path(bins_) / "lm-train").string(), (fs::path(data_.dir) / "bucket-0.jsonl").string(),
                                    "--format", "jsonl", "--tokenizer", data_.tokenizer_path, "--val-every", "0",
                                    "--eval-every", "0", "--steps", std::to_string(a_.measure_steps), "-t",
                                    std::to_string(threads), "-o", (dir / "m.h5").string(), "--overwrite", "--log",
                                    (dir / "m.jsonl").string(), "-q"};
      for (const auto& x : sweep::model_args(m, grid_.seq_len)) args.push_back(x);
      for (const auto& x : sweep::train_args(grid_, m)) args.push_back(x);
      const int rc = run_process(args, "", (dir / "m.err").string());
      if (rc != 0) throw RuntimeError(fmt::format("measuring model {}: lm-train exited {} ({})", name, rc, (dir / "m.err").string()));
      const auto s = last_json_line((dir / "m.jsonl").string());
      out[name] = s.is_object() && s.contains("summary") ? s["summary"].value("tokens_per_s", 0.0) : 0.0;
    }
    fs::remove_all(dir);
    return out;
  }

  void dry_run() {
    const auto speed = a_.measure_steps > 0 ? measure_speed() : std::map<std::string, double>{};
    double flops = 0, secs = 0;
    fmt::print("{:>5} {:<40} {:<15} {:>10} {:>10} {:>10} {:>7} {:>10} {:>9}\n", "index", "cell", "role", "params", "tokens",
               "unique", "epochs", "flop", "est_s");
    for (const auto& p : planned_) {
      const auto& c = *p.cell;
      const double tps = speed.count(c.model) ? speed.at(c.model) : 0.0;
      const double s = tps > 0 ? static_cast<double>(c.tokens) / tps : std::nan("");
      flops += p.flops;
      secs += s;
      fmt::print("{:>5} {:<40} {:<15} {:>10.4g} {:>10} {:>10} {:>7.3g} {:>10.3g} {:>9}\n", c.index, c.id, c.role, p.params,
                 c.tokens, p.plan.unique_total, p.plan.epochs(), p.flops, tps > 0 ? fmt::format("{:.1f}", s) : "-");
    }
    const int jobs = std::max(1, a_.jobs);
    const int tpj = threads_per_job(jobs);
    if (speed.empty())
      fmt::print("total: {} cells, {:.4g} training FLOP (speed not measured: --measure-steps 0)\n", planned_.size(), flops);
    else
      fmt::print("total: {} cells, {:.4g} training FLOP, about {:.0f} s of training ({:.1f} h) on {} job(s) of {} thread(s); "
                 "evaluation and start-up not counted\n",
                 planned_.size(), flops, secs / jobs, secs / jobs / 3600, jobs, tpj);
  }

  void fail(const sweep::Cell& c, const std::string& what) {
    std::lock_guard<std::mutex> lk(mu_);
    failures_.push_back(fmt::format("cell {} ({}): {}", c.index, c.id, what));
  }

  void run_one(std::size_t i) {
    const auto& p = planned_[i];
    const auto& c = *p.cell;
    try {
      Stopwatch sw;
      const bool ran = run_cell(p);
      std::lock_guard<std::mutex> lk(mu_);
      ++done_;
      const auto r = io::read_json((cell_dir(c) / "result.json").string());
      if (ran)
        log::info("cell {} {} done: loss {:.4f} ({:.0f} s)", c.index, c.id, r["loss"].get<double>(), sw.seconds());
      else
        log::debug("cell {} {} was already done", c.index, c.id);
      write_table_locked();
    } catch (const CellBusy&) {
      std::lock_guard<std::mutex> lk(mu_);
      ++busy_;
      log::info("cell {} {} is being run by another lm-sweep; skipped", c.index, c.id);
    } catch (const Error& e) {
      fail(c, e.message());
    } catch (const std::exception& e) {
      fail(c, e.what());
    }
  }

  // Runs (or resumes) one cell; false when it was already complete.
  bool run_cell(const Planned& p) {
    const auto& c = *p.cell;
    const fs::path dir = cell_dir(c);
    const fs::path result = dir / "result.json", spec = dir / "spec.json";
    for (const auto& f : {result, spec})
      if (fs::exists(f)) {
        const auto j = io::read_json(f.string());
        if (j.value("spec_sha256", "") != p.spec_sha)
          throw InputError(fmt::format("{} was made from another cell spec (grid changed?); move the folder away to rerun it",
                                       f.string()));
        if (f == result) return false;
      }
    fs::create_directories(dir);
    FileLock lock(dir / ".lock", false);
    if (!lock.held()) throw CellBusy{};
    if (fs::exists(result)) return false;  // finished by another process meanwhile
    nlohmann::json sj = p.spec;
    sj["spec_sha256"] = p.spec_sha;
    io::write_json(spec.string(), sj);
    const fs::path corpus = dir / "corpus.jsonl", model = dir / "model.h5", log = dir / "train.jsonl",
                   err = dir / "train.err";
    auto finished = [&] {
      const auto s = last_json_line(log.string());
      return s.is_object() && s.contains("summary") && s["summary"].value("finished", false) && fs::exists(model);
    };
    if (!finished()) {
      if (!fs::exists(corpus)) sweep::write_cell_corpus(data_, c, p.plan, corpus.string());
      std::vector<std::string> args{(fs::path(bins_) / "lm-train").string(), corpus.string(), "--format", "jsonl",
                                    "--tokenizer", data_.tokenizer_path, "--val-every", "0", "--eval-every", "0",
                                    "--tokens", std::to_string(c.tokens), "--seed", std::to_string(c.seed), "-t",
                                    std::to_string(threads_per_job_), "-o", model.string(), "--log", log.string(),
                                    "--checkpoint-every", std::to_string(a_.checkpoint_every), "-q"};
      for (const auto& x : p.spec["model_args"]) args.push_back(x.get<std::string>());
      for (const auto& x : p.spec["train_args"]) args.push_back(x.get<std::string>());
      args.push_back(nn::holds_training_state(model.string()) ? "--resume" : "--overwrite");
      const int rc = run_process(args, "", err.string());
      if (rc != 0) throw RuntimeError(fmt::format("lm-train exited with status {} (see {})", rc, err.string()));
      if (!finished()) throw RuntimeError(fmt::format("lm-train ended without a summary line in {}", log.string()));
    }
    auto summary = last_json_line(log.string())["summary"];
    if (!summary.value("train_loss", nlohmann::json()).is_number()) {
      // Killed after its last checkpoint but before the summary, a cell resumes with no step left
      // to run, and lm-train's summary has no loss: the log's last step line has it.
      std::ifstream in(log);
      for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("step") && j.value("train_loss", nlohmann::json()).is_number())
          summary["train_loss"] = j["train_loss"];
      }
    }
    if (!summary.value("train_loss", nlohmann::json()).is_number() || !(summary.value("tokens", 0.0) > 0))
      throw RuntimeError(fmt::format("lm-train's log {} has no training loss", log.string()));
    nlohmann::json losses = nlohmann::json::array();
    for (std::size_t b = 0; b < data_.buckets.size(); ++b) {
      const fs::path ev = dir / fmt::format("eval-{}.json", b);
      if (!fs::exists(ev)) {
        std::vector<std::string> args{(fs::path(bins_) / "lm-eval").string(), model.string(), data_.val_paths[b], "--format",
                                      "jsonl", "--seq-len", std::to_string(grid_.seq_len), "--max-tokens",
                                      std::to_string(grid_.data.val_tokens), "-t", std::to_string(threads_per_job_), "-o",
                                      ev.string(), "-q"};
        const fs::path eerr = dir / fmt::format("eval-{}.err", b);
        const int rc = run_process(args, "", eerr.string());
        if (rc != 0) throw RuntimeError(fmt::format("lm-eval exited with status {} (see {})", rc, eerr.string()));
        fs::remove(eerr);
      }
      const auto e = io::read_json(ev.string());
      losses.push_back({{"bucket", data_.buckets[b].name}, {"loss", e["loss"]}, {"tokens", e["tokens"]}});
    }
    nlohmann::json r = p.spec;
    r["spec_sha256"] = p.spec_sha;
    r["index"] = c.index;
    r["role"] = c.role;
    r["params"] = p.params;
    r["params_total"] = p.params_total;
    r["d_model"] = p.config.d_model;
    r["n_layers"] = p.config.n_layers;
    r["trained_tokens"] = summary["tokens"];
    r["steps"] = summary["steps"];
    r["train_loss"] = summary["train_loss"];
    r["seconds"] = summary["seconds"];
    r["tokens_per_s"] = summary["tokens_per_s"];
    r["flops"] = p.flops;
    r["unique_tokens"] = p.plan.unique_total;
    r["corpus_tokens"] = p.plan.tokens_total;
    r["epochs_realised"] = p.plan.epochs();
    r["source_tokens"] = p.plan.source_tokens;
    r["unique_per_bucket"] = p.plan.unique;
    r["consumed_per_bucket"] = p.plan.consumed;
    r["losses"] = losses;
    r["loss"] = losses[data_.validation]["loss"];
    r["checkpoint"] = rel(model, a_.out);
    r["checkpoint_sha256"] = io::sha256_file(model.string());
    r["log"] = rel(log, a_.out);
    io::write_json(result.string(), r);
    if (!a_.keep_corpus) fs::remove(corpus);
    if (fs::exists(err) && fs::file_size(err) == 0) fs::remove(err);
    return true;
  }

  void write_table() {
    std::lock_guard<std::mutex> lk(mu_);
    write_table_locked();
  }

  // The table of every finished cell of this grid, in grid order, rewritten atomically.
  void write_table_locked() {
    std::vector<nlohmann::json> rows;
    for (const auto& p : planned_) {
      const fs::path f = cell_dir(*p.cell) / "result.json";
      if (!fs::exists(f)) continue;
      auto r = io::read_json(f.string());
      if (r.value("spec_sha256", "") != p.spec_sha) continue;
      // Index and role are the grid's now (neither is part of the cell spec: an edited grid may
      // renumber a finished cell or move it between fit and held-out).
      r["index"] = p.cell->index;
      r["role"] = p.cell->role;
      rows.push_back(std::move(r));
    }
    table_rows_ = rows.size();
    if (rows.empty()) {  // nothing of this grid: no table, and no stale one from an earlier grid
      fs::remove(table_path_);
      fs::remove(table_path_ + ".meta.json");
      return;
    }
    const std::size_t nb = data_.buckets.size();
    io::Table t;
    auto num = [&](const std::string& name, auto get) {
      std::vector<double> v;
      for (const auto& r : rows) v.push_back(get(r));
      t.set_column(name, std::move(v));
    };
    auto txt = [&](const std::string& name, auto get) {
      std::vector<std::string> v;
      for (const auto& r : rows) v.push_back(get(r));
      t.set_column(name, std::move(v));
    };
    num("index", [](const nlohmann::json& r) { return r["index"].get<double>(); });
    txt("cell", [](const nlohmann::json& r) { return r["cell"].get<std::string>(); });
    txt("role", [](const nlohmann::json& r) { return r["role"].get<std::string>(); });
    txt("model", [](const nlohmann::json& r) { return r["model"].get<std::string>(); });
    txt("recipe", [](const nlohmann::json& r) { return r["recipe"].get<std::string>(); });
    num("seed", [](const nlohmann::json& r) { return r["seed"].get<double>(); });
    num("params", [](const nlohmann::json& r) { return r["params"].get<double>(); });
    num("params_total", [](const nlohmann::json& r) { return r["params_total"].get<double>(); });
    num("d_model", [](const nlohmann::json& r) { return r["d_model"].get<double>(); });
    num("n_layers", [](const nlohmann::json& r) { return r["n_layers"].get<double>(); });
    num("tokens", [](const nlohmann::json& r) { return r["trained_tokens"].get<double>(); });
    // The corpus ends a fraction of a step past D (whole units), which is never trained: a cell
    // cannot have seen more unique tokens than it trained on.
    auto unique = [](const nlohmann::json& r) {
      return std::min(r["unique_tokens"].get<double>(), r["trained_tokens"].get<double>());
    };
    num("unique_tokens", unique);
    num("epochs", [&](const nlohmann::json& r) { return r["trained_tokens"].get<double>() / unique(r); });
    num("source_tokens", [](const nlohmann::json& r) { return r["source_tokens"].get<double>(); });
    for (std::size_t b = 0; b < nb; ++b)
      num(fmt::format("w{}", b), [b](const nlohmann::json& r) { return r["weights"][b].get<double>(); });
    for (std::size_t b = 0; b < nb; ++b)
      num(fmt::format("u{}", b), [b](const nlohmann::json& r) { return r["unique_per_bucket"][b].get<double>(); });
    num("loss", [](const nlohmann::json& r) { return r["loss"].get<double>(); });
    for (std::size_t b = 0; b < nb; ++b)
      num(fmt::format("loss{}", b), [b](const nlohmann::json& r) { return r["losses"][b]["loss"].get<double>(); });
    num("train_loss", [](const nlohmann::json& r) { return r["train_loss"].get<double>(); });
    num("flops", [](const nlohmann::json& r) { return r["flops"].get<double>(); });
    num("seconds", [](const nlohmann::json& r) { return r["seconds"].get<double>(); });
    txt("checkpoint", [](const nlohmann::json& r) { return r["checkpoint"].get<std::string>(); });
    io::Provenance prov = ctx_.prov;
    nlohmann::json buckets = nlohmann::json::array();
    for (const auto& b : data_.manifest["buckets"]) buckets.push_back({{"name", b["name"]}, {"made", b["made"]}, {"share", b["share"]}});
    prov.extra["grid"] = grid_.name;
    prov.extra["cells_in_grid"] = planned_.size();
    prov.extra["cells_in_table"] = rows.size();
    prov.extra["buckets"] = buckets;
    prov.extra["shares"] = data_.manifest["shares"];
    prov.extra["source_tokens"] = data_.manifest["source_tokens"];
    prov.extra["validation"] = grid_.data.validation;
    prov.extra["columns"] =
        "params: weights without the token embedding and LM head (Kaplan's N); params_total: all weights; tokens: tokens "
        "trained (D, InfoLaw's K); unique_tokens: distinct tokens in the cell's corpus (U); epochs = tokens / unique_tokens; "
        "source_tokens: the source size S the cell drew from (InfoLaw); wB: recipe weight of bucket B; uB: its unique tokens; "
        "loss: held-out loss (nats/token) on the validation bucket; lossB: on bucket B's held-out text; flops: training FLOP "
        "(6 x matrix weights + attention, per token, x tokens); checkpoint: relative to the sweep folder; unique_tokens is "
        "capped at tokens (the corpus ends up to a step past D, in whole units, and that tail is never trained)";
    std::vector<nlohmann::json> runs;
    for (const auto& r : rows)
      runs.push_back({{"cell", r["cell"]}, {"seed", r["seed"]}, {"checkpoint", r["checkpoint"]},
                      {"checkpoint_sha256", r["checkpoint_sha256"]}});
    prov.extra["runs"] = runs;
    t.write(table_path_, &prov);
  }

  const Args& a_;
  cli::Context& ctx_;
  sweep::Grid grid_;
  sweep::PreparedData data_;
  std::vector<Planned> planned_;
  std::string bins_, table_path_;
  int threads_per_job_ = 1;
  std::mutex mu_;
  std::vector<std::string> failures_;
  std::size_t done_ = 0, busy_ = 0, table_rows_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  cli::ToolInfo info{
      "lm-sweep",
      "Train a grid of small language models for scaling laws: model sizes x training tokens D x data recipes "
      "(mixture weights over quality buckets) x repetition (epochs over a capped unique subset) x seeds, each cell "
      "one lm-train run on its own corpus, evaluated on every bucket's held-out text by lm-eval, and one table of all "
      "finished cells (OUT/table.csv) in the layouts infolaw-fit and mixlaw-fit read.\n"
      "Data (the grid's \"data\" section, made once into OUT/data): buckets made from a source corpus (a share of its "
      "training documents each, degraded by shuffling each unit's words and/or replacing each word with probability "
      "\"replace\" by a random word of the source's vocabulary, so quality has a measurable meaning) or read from "
      "files; units are lines or documents; one tokenizer for every cell; validation on each bucket's held-out "
      "documents, the \"validation\" bucket's loss being the table's loss.\n"
      "A cell with weights w and D tokens takes K_d = w_d D tokens of bucket d drawn from M_d = min(K_d, x T_d) unique "
      "tokens (T_d the bucket's size; InfoLaw's K_d, M_d, R_d): x = 1 unless the cell asks for epochs E, then x is "
      "solved so that D / sum M_d = E.  Impossible cells (E too large for D, E too small for the buckets, weights "
      "outside [0, 1] or not summing to 1) are refused before any training, naming the cell.\n"
      "Finished cells (OUT/cells/ID/result.json) are skipped and a cell killed mid-training resumes from its "
      "checkpoint (lm-train --resume), so a killed sweep continues where it stopped; the table is rebuilt from the "
      "results after every cell, one row per cell.  --cell I runs cell I alone (a Slurm array task: "
      "--array=0-(cells-1)); --collect rebuilds the table only.  Runs lm-train and lm-eval from this program's folder "
      "(or --bin-dir).  --seed is not used: each cell's seed comes from the grid.",
      "  lm-sweep test/cli/fixtures/sweep/grid-ci.json -o sweep-ci/ --dry-run\n"
      "  lm-sweep data/scaling/sweep/grid.json -o sweep/ --jobs 2 -t 2\n"
      "  lm-sweep grid.json -o sweep/ --cell $SLURM_ARRAY_TASK_ID -t $SLURM_CPUS_PER_TASK\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("grid", a.grid_path, "Grid (JSON): data, models, train, recipes, cells")->required();
        app.add_option("-o,--output", a.out, "Sweep folder (made if missing): data/, cells/, table.csv")->required();
        app.add_option("--jobs", a.jobs, "Cells trained at once; each gets max(1, threads / jobs) threads")
            ->capture_default_str()
            ->check(cli::int_range(1, 256));
        auto* cell = app.add_option("--cell", a.cell, "Run only the cell with this 0-based index (a Slurm array task id)")
                         ->check(cli::int_range(0, 1 << 30));
        app.add_flag("--dry-run", a.dry_run,
                     "Prepare the data, check every cell and print each with its FLOP and estimated seconds (from "
                     "tokens/s measured by a short lm-train run of each model); train nothing");
        app.add_option("--measure-steps", a.measure_steps, "--dry-run: training steps of each model's speed measurement (0 = none)")
            ->capture_default_str()
            ->check(cli::int_range(0, 100000));
        auto* collect = app.add_flag("--collect", a.collect, "Only rebuild the table from the finished cells (after a Slurm array)");
        collect->excludes(cell);
        app.add_option("--table", a.table, "The table's path (.csv, .json, .jsonl; default OUT/table.csv)");
        app.add_option("--checkpoint-every", a.checkpoint_every, "lm-train checkpoints every N steps (what a killed cell resumes from)")
            ->capture_default_str()
            ->check(cli::int_range(1, 1 << 30));
        app.add_flag("--keep-corpus", a.keep_corpus, "Keep each cell's training corpus (OUT/cells/ID/corpus.jsonl) after it finishes");
        app.add_option("--bin-dir", a.bin_dir, "Folder of lm-train and lm-eval (default: this program's folder)");
      },
      [&](cli::Context& ctx) {
        if (a.dry_run && a.collect) throw UsageError("--dry-run and --collect do different things; give one", "--collect");
        if (!a.table.empty()) io::require_output_extension(a.table, "--table", {".csv", ".json", ".jsonl"}, "table");
        Sweep s(a, ctx);
        s.run();
      });
}
