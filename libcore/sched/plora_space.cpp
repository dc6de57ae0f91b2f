#include "sched/plora_space.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/lora.hpp"
#include "util/error.hpp"

namespace icmlkit::sched {

namespace {

using OJ = nlohmann::ordered_json;
constexpr std::size_t kMaxJobs = 100000;

// A value as the file wrote it, shortened for a one-line message.
std::string shown(const OJ& v) {
  std::string s = v.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string place(const std::string& file, const std::string& ctx) { return ctx.empty() ? file : file + ", " + ctx; }

// Whole numbers: JSON integers, or floats with no fraction (8.0), within [lo, hi].
long long whole(const OJ& v, const std::string& key, long long lo, long long hi, const std::string& where) {
  const std::string range = hi == std::numeric_limits<int>::max() ? fmt::format(">= {}", lo) : fmt::format("in {}..{}", lo, hi);
  const std::string msg = fmt::format("{} must be an integer {}, got {}", key, range, shown(v));
  long long x = 0;
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi)) throw InputError(msg, where);
    x = static_cast<long long>(v.get<std::uint64_t>());
  } else if (v.is_number_integer()) {
    x = v.get<long long>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9e15)) throw InputError(msg, where);
    x = static_cast<long long>(d);
  } else {
    throw InputError(msg, where);
  }
  if (x < lo || x > hi) throw InputError(msg, where);
  return x;
}

int whole_int(const OJ& v, const std::string& key, int lo, const std::string& where) {
  return static_cast<int>(whole(v, key, lo, std::numeric_limits<int>::max(), where));
}

double real(const OJ& v, const std::string& key, const std::string& where) {
  if (!v.is_number() || !std::isfinite(v.get<double>()))
    throw InputError(fmt::format("{} must be a finite number, got {}", key, shown(v)), where);
  return v.get<double>();
}

std::string text(const OJ& v, const std::string& key, const std::string& where, bool allow_empty = false) {
  if (!v.is_string() || (!allow_empty && v.get<std::string>().empty()))
    throw InputError(fmt::format("{} must be a{} string, got {}", key, allow_empty ? "" : " non-empty", shown(v)), where);
  return v.get<std::string>();
}

std::string resolve(const std::string& path, const std::string& base_dir) {
  if (base_dir.empty() || path.empty() || path == "-" || path.front() == '/') return path;
  return (std::filesystem::path(base_dir) / path).lexically_normal().string();
}

bool tsv_name(const std::string& path) {
  auto ends = [&](const std::string& s) { return path.size() >= s.size() && path.compare(path.size() - s.size(), s.size(), s) == 0; };
  return ends(".tsv") || ends(".tsv.gz");
}

JobData parse_data(const OJ& d, const std::string& where, const std::string& base_dir) {
  if (!d.is_object()) throw InputError(fmt::format("data must be an object, got {}", shown(d)), where);
  JobData out;
  bool has_path = false;
  for (auto it = d.begin(); it != d.end(); ++it) {
    const std::string& k = it.key();
    const OJ& v = it.value();
    const std::string key = "data." + k;
    if (k == "path") {
      out.path = text(v, key, where), has_path = true;
    } else if (k == "format") {
      out.corpus.format = text(v, key, where);
      if (out.corpus.format != "auto" && out.corpus.format != "text" && out.corpus.format != "tsv" && out.corpus.format != "jsonl")
        throw InputError(fmt::format("data.format must be auto, text, tsv or jsonl, got {}", shown(v)), where);
    } else if (k == "column") {
      out.corpus.column = whole_int(v, key, 0, where);
    } else if (k == "doc_column") {
      out.corpus.doc_column = whole_int(v, key, 0, where);
    } else if (k == "field") {
      out.corpus.field = text(v, key, where);
    } else if (k == "doc_field") {
      out.corpus.doc_field = text(v, key, where, true);
    } else if (k == "val_every") {
      out.corpus.val_every = whole_int(v, key, 0, where);
    } else if (k == "filter") {
      if (!v.is_object()) throw InputError(fmt::format("data.filter must be an object, got {}", shown(v)), where);
      bool has_col = false, has_prefix = false;
      for (auto f = v.begin(); f != v.end(); ++f) {
        if (f.key() == "column") {
          out.filter.column = whole_int(f.value(), "data.filter.column", 1, where), has_col = true;
        } else if (f.key() == "prefix") {
          const OJ& p = f.value();
          if (!p.is_array() || p.empty())
            throw InputError(fmt::format("data.filter.prefix must be a non-empty array of strings, got {}", shown(p)), where);
          for (const auto& s : p) out.filter.prefixes.push_back(text(s, "data.filter.prefix[]", where));
          has_prefix = true;
        } else {
          throw InputError(fmt::format("unknown key data.filter.{} (column, prefix)", f.key()), where);
        }
      }
      if (!has_col || !has_prefix) throw InputError("data.filter needs both column and prefix", where);
    } else {
      throw InputError(fmt::format("unknown key data.{} (path, format, column, doc_column, field, doc_field, val_every, filter)", k), where);
    }
  }
  if (!has_path) throw InputError("data needs a path", where);
  if (out.filter.active()) {
    const auto& f = out.corpus.format;
    if (!(f == "tsv" || (f == "auto" && tsv_name(out.path))))
      throw InputError(fmt::format("data.filter keeps TSV rows, but '{}' is not read as TSV (format {})", out.path, f), where);
  }
  out.resolved = resolve(out.path, base_dir);
  return out;
}

// Sets one field of `job` from the file; `has_data` records that data was given.
void apply_field(JobSpec& job, const std::string& key, const OJ& v, const std::string& where, const std::string& base_dir,
                 bool& has_data) {
  if (key == "rank") {
    job.rank = whole_int(v, "rank", 1, where);
  } else if (key == "alpha") {
    job.alpha = real(v, "alpha", where);
    if (!(job.alpha > 0)) throw InputError(fmt::format("alpha must be > 0, got {}", shown(v)), where);
  } else if (key == "rslora") {
    if (!v.is_boolean()) throw InputError(fmt::format("rslora must be true or false, got {}", shown(v)), where);
    job.rslora = v.get<bool>();
  } else if (key == "dropout") {
    job.dropout = real(v, "dropout", where);
    if (!(job.dropout >= 0 && job.dropout < 1)) throw InputError(fmt::format("dropout must be in [0, 1), got {}", shown(v)), where);
  } else if (key == "targets") {
    if (!v.is_array() || v.empty())
      throw InputError(fmt::format("targets must be a non-empty array of q, k, v, o, gate, up, down, got {}", shown(v)), where);
    std::set<std::string> seen;
    for (const auto& t : v) {
      const std::string name = t.is_string() ? t.get<std::string>() : shown(t);
      const auto& known = plora_target_names();
      if (!t.is_string() || std::find(known.begin(), known.end(), name) == known.end())
        throw InputError(fmt::format("unknown target {} in targets (q, k, v, o, gate, up, down)", shown(t)), where);
      if (!seen.insert(name).second) throw InputError(fmt::format("target '{}' repeated in targets", name), where);
    }
    job.targets.clear();
    for (const auto& t : plora_target_names())
      if (seen.count(t)) job.targets.push_back(t);
  } else if (key == "lr") {
    job.lr = real(v, "lr", where);
    if (!(job.lr > 0)) throw InputError(fmt::format("lr must be > 0, got {}", shown(v)), where);
  } else if (key == "min_lr") {
    job.min_lr = real(v, "min_lr", where);
    if (!(job.min_lr >= 0)) throw InputError(fmt::format("min_lr must be >= 0, got {}", shown(v)), where);
  } else if (key == "warmup") {
    job.warmup = whole_int(v, "warmup", 0, where);
  } else if (key == "batch") {
    job.batch = whole_int(v, "batch", 1, where);
  } else if (key == "steps") {
    job.steps = whole_int(v, "steps", 1, where);
  } else if (key == "seed") {
    if (v.is_number_unsigned()) job.seed = v.get<std::uint64_t>();
    else job.seed = static_cast<std::uint64_t>(whole(v, "seed", 0, std::numeric_limits<long long>::max(), where));
  } else if (key == "weight_decay") {
    job.weight_decay = real(v, "weight_decay", where);
    if (!(job.weight_decay >= 0)) throw InputError(fmt::format("weight_decay must be >= 0, got {}", shown(v)), where);
  } else if (key == "clip") {
    job.clip = real(v, "clip", where);
    if (!(job.clip >= 0)) throw InputError(fmt::format("clip must be >= 0 (0 = off), got {}", shown(v)), where);
  } else if (key == "data") {
    job.data = parse_data(v, where, base_dir);
    has_data = true;
  } else {
    throw InputError(fmt::format("unknown key '{}' (rank, alpha, rslora, dropout, targets, lr, min_lr, warmup, batch, steps, seed, "
                                 "weight_decay, clip, data{})",
                                 key, key == "name" ? "; a name belongs to one job" : ""),
                     where);
  }
}

bool good_name(const std::string& n) {
  if (n.empty() || n.size() > 64 || n.front() == '.') return false;
  auto ends = [&](const std::string& suffix) {
    return n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends(".json") || ends(".jsonl")) return false;  // plora-train writes <name>/, <name>.jsonl and summary.json side by side
  return std::all_of(n.begin(), n.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

std::string default_name(std::size_t index) { return fmt::format("j{:02d}", index); }

}  // namespace

const std::vector<std::string>& plora_target_names() { return lm::lora_target_names(); }

SearchSpace parse_space(const OJ& j, const std::string& where, const std::string& base_dir) {
  if (!j.is_object()) throw InputError("a search space must be a JSON object", where);
  SearchSpace space;
  JobSpec defaults;
  bool default_data = false, has_seq = false;
  const OJ* grid = nullptr;
  const OJ* jobs = nullptr;
  const OJ* early = nullptr;
  // the top level: defaults first (the jobs below build on them, whatever the key order)
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const OJ& v = it.value();
    if (k == "base") {
      space.base = text(v, "base", where);
      space.base_resolved = resolve(space.base, base_dir);
    } else if (k == "seq_len") {
      space.seq_len = whole_int(v, "seq_len", 1, where), has_seq = true;
    } else if (k == "data") {
      defaults.data = parse_data(v, place(where, "data"), base_dir), default_data = true;
    } else if (k == "defaults") {
      if (!v.is_object()) throw InputError(fmt::format("defaults must be an object, got {}", shown(v)), where);
    } else if (k == "grid") {
      if (!v.is_object()) throw InputError(fmt::format("grid must be an object of arrays, got {}", shown(v)), where);
      grid = &v;
    } else if (k == "jobs") {
      if (!v.is_array()) throw InputError(fmt::format("jobs must be an array of objects, got {}", shown(v)), where);
      jobs = &v;
    } else if (k == "early_stop") {
      early = &v;
    } else if (k == "description") {
      text(v, "description", where, true);
    } else {
      throw InputError(fmt::format("unknown key '{}' (base, seq_len, data, defaults, grid, jobs, early_stop, description)", k), where);
    }
  }
  if (!has_seq) throw InputError("seq_len is missing (tokens per batch row)", where);
  if (j.contains("defaults"))
    for (auto it = j["defaults"].begin(); it != j["defaults"].end(); ++it)
      apply_field(defaults, it.key(), it.value(), place(where, "defaults"), base_dir, default_data);

  // the grid: every value checked once, then the product (last key fastest)
  std::vector<std::string> axes;
  std::vector<const OJ*> values;
  std::size_t n_grid = 0;
  if (grid) {
    n_grid = 1;
    for (auto it = grid->begin(); it != grid->end(); ++it) {
      const std::string axis_where = place(where, "grid." + it.key());
      if (!it.value().is_array() || it.value().empty())
        throw InputError(fmt::format("grid.{} must be a non-empty array of values, got {}", it.key(), shown(it.value())), axis_where);
      for (std::size_t i = 0; i < it.value().size(); ++i) {
        JobSpec scratch;
        bool d = false;
        apply_field(scratch, it.key(), it.value()[i], place(where, fmt::format("grid.{}[{}]", it.key(), i)), base_dir, d);
      }
      axes.push_back(it.key());
      values.push_back(&it.value());
      if (n_grid > kMaxJobs / it.value().size())
        throw InputError(fmt::format("the grid has more than {} points", kMaxJobs), place(where, "grid"));
      n_grid *= it.value().size();
    }
  }
  const std::size_t n_explicit = jobs ? jobs->size() : 0;
  if (n_grid + n_explicit == 0) throw InputError("the space has no jobs (give a grid or jobs)", where);
  if (n_grid + n_explicit > kMaxJobs) throw InputError(fmt::format("the space has more than {} jobs", kMaxJobs), where);

  std::vector<bool> has_data;
  for (std::size_t g = 0; g < n_grid; ++g) {
    JobSpec job = defaults;
    job.name = default_name(space.jobs.size());
    bool d = default_data;
    std::size_t rest = g;
    for (std::size_t a = axes.size(); a-- > 0;) {
      const std::size_t n = values[a]->size();
      apply_field(job, axes[a], (*values[a])[rest % n], place(where, fmt::format("grid.{}[{}]", axes[a], rest % n)), base_dir, d);
      rest /= n;
    }
    space.jobs.push_back(std::move(job));
    has_data.push_back(d);
  }
  for (std::size_t e = 0; e < n_explicit; ++e) {
    const OJ& o = (*jobs)[e];
    const std::size_t index = space.jobs.size();
    std::string ctx = fmt::format("jobs[{}]", e);
    if (!o.is_object()) throw InputError(fmt::format("a job must be an object, got {}", shown(o)), place(where, ctx));
    JobSpec job = defaults;
    job.name = default_name(index);
    if (o.contains("name")) {
      job.name = text(o["name"], "name", place(where, ctx));
      ctx = fmt::format("job '{}'", job.name);
    }
    bool d = default_data;
    for (auto it = o.begin(); it != o.end(); ++it)
      if (it.key() != "name") apply_field(job, it.key(), it.value(), place(where, ctx), base_dir, d);
    space.jobs.push_back(std::move(job));
    has_data.push_back(d);
  }

  // whole-job checks, each error naming its job
  std::set<std::string> names;
  int min_steps = std::numeric_limits<int>::max();
  for (std::size_t i = 0; i < space.jobs.size(); ++i) {
    const JobSpec& job = space.jobs[i];
    const std::string at = place(where, fmt::format("job '{}'", job.name));
    if (!good_name(job.name))
      throw InputError(fmt::format("name '{}' must be 1-64 letters, digits, '.', '_' or '-', not starting with '.' nor ending in .json or .jsonl", job.name), at);
    if (!names.insert(job.name).second) throw InputError(fmt::format("duplicate job name '{}'", job.name), at);
    if (!has_data[i]) throw InputError("the job has no data (give data at the top level or in the job)", at);
    if (job.min_lr > job.lr) throw InputError(fmt::format("min_lr {} is above lr {}", job.min_lr, job.lr), at);
    min_steps = std::min(min_steps, job.steps);
  }

  if (early) {
    if (!early->is_object()) throw InputError(fmt::format("early_stop must be an object, got {}", shown(*early)), where);
    bool has_eta = false, has_rungs = false;
    for (auto it = early->begin(); it != early->end(); ++it) {
      if (it.key() == "eta") {
        space.early_stop.eta = whole_int(it.value(), "early_stop.eta", 2, where), has_eta = true;
      } else if (it.key() == "rungs") {
        if (!it.value().is_array() || it.value().empty())
          throw InputError(fmt::format("early_stop.rungs must be a non-empty array of step counts, got {}", shown(it.value())), where);
        for (const auto& r : it.value()) {
          const int rung = whole_int(r, "early_stop.rungs[]", 1, where);
          if (!space.early_stop.rungs.empty() && rung <= space.early_stop.rungs.back())
            throw InputError(fmt::format("early_stop.rungs must increase, got {} after {}", rung, space.early_stop.rungs.back()), where);
          space.early_stop.rungs.push_back(rung);
        }
        has_rungs = true;
      } else {
        throw InputError(fmt::format("unknown key early_stop.{} (eta, rungs)", it.key()), where);
      }
    }
    if (!has_eta || !has_rungs) throw InputError("early_stop needs eta and rungs", where);
    for (const auto& job : space.jobs)
      if (space.early_stop.rungs.back() >= job.steps)
        throw InputError(fmt::format("early_stop rung {} is not below the job's {} steps", space.early_stop.rungs.back(), job.steps),
                         place(where, fmt::format("job '{}'", job.name)));
  }
  return space;
}

SearchSpace read_space(const std::string& path, std::string* file_sha256) {
  const std::string bytes = io::read_file(path);
  if (file_sha256) *file_sha256 = io::sha256_hex(bytes);
  const std::string where = io::is_stdout(path) ? "<stdin>" : path;
  OJ j;
  try {
    j = OJ::parse(bytes);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError("malformed JSON", fmt::format("{}, byte {}", where, e.byte));
  } catch (const nlohmann::json::exception&) {
    throw InputError("a number in the JSON is out of range", where);
  }
  const std::string dir = io::is_stdout(path) ? "" : std::filesystem::path(path).parent_path().string();
  return parse_space(j, where, dir);
}

OJ job_json(const JobSpec& job) {
  OJ j;
  j["name"] = job.name;
  j["rank"] = job.rank;
  j["alpha"] = job.alpha;
  j["rslora"] = job.rslora;
  j["dropout"] = job.dropout;
  j["targets"] = job.targets;
  j["lr"] = job.lr;
  j["min_lr"] = job.min_lr;
  j["warmup"] = job.warmup;
  j["batch"] = job.batch;
  j["steps"] = job.steps;
  j["seed"] = job.seed;
  j["weight_decay"] = job.weight_decay;
  j["clip"] = job.clip;
  OJ d;
  d["path"] = job.data.path;
  d["format"] = job.data.corpus.format;
  d["column"] = job.data.corpus.column;
  d["doc_column"] = job.data.corpus.doc_column;
  d["field"] = job.data.corpus.field;
  d["doc_field"] = job.data.corpus.doc_field;
  d["val_every"] = job.data.corpus.val_every;
  if (job.data.filter.active()) d["filter"] = OJ{{"column", job.data.filter.column}, {"prefix", job.data.filter.prefixes}};
  j["data"] = std::move(d);
  return j;
}

OJ space_json(const SearchSpace& space) {
  OJ j;
  j["base"] = space.base.empty() ? OJ(nullptr) : OJ(space.base);
  j["seq_len"] = space.seq_len;
  j["jobs"] = OJ::array();
  for (const auto& job : space.jobs) j["jobs"].push_back(job_json(job));
  j["early_stop"] = space.early_stop.enabled() ? OJ{{"eta", space.early_stop.eta}, {"rungs", space.early_stop.rungs}} : OJ(nullptr);
  return j;
}

std::string space_sha256(const SearchSpace& space) { return io::sha256_hex(space_json(space).dump()); }

}  // namespace icmlkit::sched
