#include "unlearn/trajectory.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "io/json.hpp"
#include "util/error.hpp"

namespace icmlkit::unlearn {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "icmlkit-trajectory";
constexpr int kVersion = 1;

template <class T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw InputError(fmt::format("missing field '{}'", key), where);
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("field '{}' has the wrong type", key), where);
  }
}

std::string ckpt_name(std::int64_t s) { return fmt::format("ckpt-{:08d}.h5", s); }

}  // namespace

nlohmann::json TrajectoryMeta::to_json() const {
  return {{"format", kFormat},
          {"version", kVersion},
          {"train_options", train_options},
          {"corpus",
           {{"sha256", corpus_sha256},
            {"format", corpus.format},
            {"column", corpus.column},
            {"doc_column", corpus.doc_column},
            {"field", corpus.field},
            {"doc_field", corpus.doc_field},
            {"val_every", corpus.val_every},
            {"filter_column", corpus.filter_column},
            {"filter_prefixes", corpus.filter_prefixes}}},
          {"checkpoint_every", checkpoint_every},
          {"windows", windows},
          {"seq_len", seq_len},
          {"stream_tokens", stream_tokens},
          {"kernels", kernels},
          {"doc_starts", doc_starts}};
}

TrajectoryMeta TrajectoryMeta::from_json(const nlohmann::json& j, const std::string& where) {
  if (field<std::string>(j, "format", where) != kFormat) throw InputError("not a trajectory store", where);
  if (const int v = field<int>(j, "version", where); v != kVersion)
    throw InputError(fmt::format("trajectory version {} (this build reads {})", v, kVersion), where);
  TrajectoryMeta m;
  m.train_options = field<nlohmann::json>(j, "train_options", where);
  const auto c = field<nlohmann::json>(j, "corpus", where);
  m.corpus_sha256 = field<std::string>(c, "sha256", where);
  m.corpus.format = field<std::string>(c, "format", where);
  m.corpus.column = field<int>(c, "column", where);
  m.corpus.doc_column = field<int>(c, "doc_column", where);
  m.corpus.field = field<std::string>(c, "field", where);
  m.corpus.doc_field = field<std::string>(c, "doc_field", where);
  m.corpus.val_every = field<int>(c, "val_every", where);
  m.corpus.filter_column = field<int>(c, "filter_column", where);
  m.corpus.filter_prefixes = field<std::vector<std::string>>(c, "filter_prefixes", where);
  m.checkpoint_every = field<std::int64_t>(j, "checkpoint_every", where);
  m.windows = field<std::int64_t>(j, "windows", where);
  m.seq_len = field<int>(j, "seq_len", where);
  m.stream_tokens = field<std::int64_t>(j, "stream_tokens", where);
  m.doc_starts = field<std::vector<std::int64_t>>(j, "doc_starts", where);
  m.kernels = field<std::string>(j, "kernels", where);
  if (m.checkpoint_every < 1 || m.seq_len < 1 || m.windows < 1) throw InputError("bad checkpoint_every, seq_len or windows", where);
  return m;
}

nn::TrainOptions train_options_from_json(const nlohmann::json& j, const std::string& where) {
  nn::TrainOptions o;
  o.seq_len = field<int>(j, "seq_len", where);
  o.batch = field<int>(j, "batch", where);
  o.accum = field<int>(j, "accum", where);
  o.steps = field<std::int64_t>(j, "steps", where);
  o.lr = field<double>(j, "lr", where);
  o.min_lr = field<double>(j, "min_lr", where);
  o.warmup = field<std::int64_t>(j, "warmup", where);
  o.clip = field<double>(j, "clip", where);
  o.adam.beta1 = field<double>(j, "beta1", where);
  o.adam.beta2 = field<double>(j, "beta2", where);
  o.adam.eps = field<double>(j, "eps", where);
  o.adam.weight_decay = field<double>(j, "weight_decay", where);
  o.optimizer = field<std::string>(j, "optimizer", where);
  o.seed = field<std::uint64_t>(j, "seed", where);
  if (o.to_json() != j)
    throw InputError("the trajectory's training options hold settings this build cannot replay", where);
  return o;
}

void check_trajectory_options(const nn::TrainOptions& opt, const lm::ModelConfig& config) {
  if (opt.optimizer != "sgd" && opt.optimizer != "adamw")
    throw UsageError(fmt::format("a trajectory records SGD or AdamW runs (LMCleaner's linearisation is defined for them), not --optimizer {}",
                                 opt.optimizer),
                     "--trajectory");
  if (opt.sparse.enabled()) throw UsageError("a trajectory does not record sparse training", "--trajectory");
  if (opt.exit.enabled()) throw UsageError("a trajectory does not record the early-exit loss", "--trajectory");
  if (config.has_moe()) throw UsageError("a trajectory does not record models with moe blocks yet", "--trajectory");
}

std::vector<std::int64_t> windows_touching(std::int64_t begin, std::int64_t end, int seq_len, std::int64_t windows) {
  // Window w reads stream positions [w S, w S + S] (inputs and the shifted targets).
  std::vector<std::int64_t> out;
  if (end <= begin) return out;
  const std::int64_t S = seq_len;
  const std::int64_t lo = std::max<std::int64_t>(0, (begin + S - 1) / S - 1);  // the first w with w S + S >= begin
  for (std::int64_t w = lo; w < windows && w * S < end; ++w) out.push_back(w);
  return out;
}

TrajectoryWriter::TrajectoryWriter(std::string dir, const TrajectoryMeta& meta, bool overwrite)
    : dir_(std::move(dir)), every_(meta.checkpoint_every) {
  std::error_code ec;
  if (fs::exists(dir_, ec)) {
    if (!fs::is_directory(dir_, ec)) throw InputError("exists and is not a directory", dir_);
    const bool ours = fs::exists(fs::path(dir_) / "trajectory.json", ec);
    if (!fs::is_empty(dir_, ec)) {
      if (!ours || !overwrite)
        throw InputError(ours ? "holds a trajectory already (--overwrite replaces it)" : "is not empty and holds no trajectory",
                         dir_);
      for (const auto& e : fs::directory_iterator(dir_)) {
        const std::string n = e.path().filename().string();
        if (n == "trajectory.json" || n == "steps.jsonl" || n == "corrections.jsonl" ||
            (n.rfind("ckpt-", 0) == 0 && e.path().extension() == ".h5"))
          fs::remove(e.path(), ec);
      }
    }
  } else if (!fs::create_directories(dir_, ec) || ec) {
    throw InputError("cannot create the directory: " + ec.message(), dir_);
  }
  io::write_json((fs::path(dir_) / "trajectory.json").string(), meta.to_json());
  steps_.open(fs::path(dir_) / "steps.jsonl", std::ios::out | std::ios::trunc);
  if (!steps_) throw InputError("cannot write steps.jsonl", dir_);
}

void TrajectoryWriter::record(const nn::StepStats& st, double clip, const nlohmann::json& extra) {
  nlohmann::json j = {{"step", st.step - 1},
                      {"lr", st.lr},
                      {"windows", st.windows},
                      {"loss", st.loss},
                      {"grad_norm", st.grad_norm},
                      {"clipped", clip > 0 && st.grad_norm > clip}};
  if (extra.is_object()) j.update(extra);
  steps_ << j.dump() << '\n';
  steps_.flush();
  if (!steps_) throw RuntimeError("cannot append to steps.jsonl", dir_);
}

void TrajectoryWriter::record_skip(std::int64_t step, double lr) {
  steps_ << nlohmann::json{{"step", step}, {"lr", lr}, {"windows", nlohmann::json::array()}, {"skipped", true}}.dump() << '\n';
  steps_.flush();
  if (!steps_) throw RuntimeError("cannot append to steps.jsonl", dir_);
}

bool TrajectoryWriter::due(std::int64_t steps_done) const noexcept { return steps_done % every_ == 0; }

void TrajectoryWriter::checkpoint(nn::Trainer& trainer, const io::Provenance& prov) {
  trainer.save((fs::path(dir_) / ckpt_name(trainer.steps_done())).string(), prov);
}

std::int64_t TrajectoryWriter::bytes() const {
  std::int64_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (e.is_regular_file(ec)) n += static_cast<std::int64_t>(e.file_size(ec));
  return n;
}

Trajectory Trajectory::read(const std::string& dir) {
  Trajectory t;
  t.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw InputError("not a trajectory directory (lm-train --trajectory writes one)", dir);
  const std::string meta_path = (fs::path(dir) / "trajectory.json").string();
  if (!fs::exists(meta_path, ec)) throw InputError("no trajectory.json: not a trajectory store", dir);
  t.meta = TrajectoryMeta::from_json(io::read_json(meta_path), meta_path);
  const std::string steps_path = (fs::path(dir) / "steps.jsonl").string();
  std::ifstream in(steps_path);
  if (!in) throw unreadable_file(steps_path);
  std::string line;
  for (std::int64_t ln = 1; std::getline(in, line); ++ln) {
    if (line.empty()) continue;
    const std::string where = fmt::format("{}, line {}", steps_path, ln);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw InputError("malformed JSON", where);
    }
    StepRecord r;
    r.step = field<std::int64_t>(j, "step", where);
    r.lr = field<double>(j, "lr", where);
    r.windows = field<std::vector<std::int64_t>>(j, "windows", where);
    r.skipped = j.value("skipped", false);
    if (!r.skipped) {
      r.loss = field<double>(j, "loss", where);
      r.grad_norm = field<double>(j, "grad_norm", where);
      r.clipped = field<bool>(j, "clipped", where);
    }
    if (r.step != static_cast<std::int64_t>(t.steps.size()))
      throw InputError(fmt::format("step {} where step {} was expected", r.step, t.steps.size()), where);
    for (const std::int64_t w : r.windows)
      if (w < 0 || w >= t.meta.windows) throw InputError(fmt::format("window {} outside the run's {}", w, t.meta.windows), where);
    t.steps.push_back(std::move(r));
  }
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file(ec)) t.bytes += static_cast<std::int64_t>(e.file_size(ec));
    if (n.size() == ckpt_name(0).size() && n.rfind("ckpt-", 0) == 0 && e.path().extension() == ".h5") {
      try {
        t.checkpoints.push_back(std::stoll(n.substr(5, 8)));
      } catch (const std::exception&) {
      }
    }
  }
  std::sort(t.checkpoints.begin(), t.checkpoints.end());
  const std::string corr_path = (fs::path(dir) / "corrections.jsonl").string();
  if (fs::exists(corr_path, ec)) {
    std::ifstream cin(corr_path);
    std::int64_t ln = 0;
    while (std::getline(cin, line)) {
      ++ln;
      if (line.empty()) continue;
      const std::string where = fmt::format("{}, line {}", corr_path, ln);
      try {
        t.corrections.push_back(field<std::int64_t>(nlohmann::json::parse(line), "step", where));
      } catch (const nlohmann::json::exception&) {
        throw InputError("malformed JSON", where);
      }
      if (!std::binary_search(t.checkpoints.begin(), t.checkpoints.end(), t.corrections.back()))
        throw InputError("a correction without its checkpoint", where);
    }
    std::sort(t.corrections.begin(), t.corrections.end());
  }
  if (t.checkpoints.empty()) throw InputError("no checkpoint (ckpt-*.h5) in the trajectory", dir);
  return t;
}

std::string Trajectory::checkpoint_path(std::int64_t s) const { return (fs::path(dir) / ckpt_name(s)).string(); }

std::int64_t Trajectory::checkpoint_before(std::int64_t s) const {
  auto it = std::upper_bound(checkpoints.begin(), checkpoints.end(), s);
  if (it == checkpoints.begin())
    throw InputError(fmt::format("no checkpoint at or before step {}: the trajectory cannot rebuild it", s), dir);
  return *std::prev(it);
}

}  // namespace icmlkit::unlearn
