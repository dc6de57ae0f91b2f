#include "sched/plora_plan.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/table.hpp"
#include "lm/lora.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::sched {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

// ---- memory model ---------------------------------------------------------------------------------

std::pair<int, int> plora_target_shape(const lm::ModelConfig& c, const std::string& target) {
  return lm::lora_target_shape(c, -1, target);  // a llama block's
}

void check_space_for_model(const SearchSpace& space, const lm::ModelConfig& config, const std::string& where) {
  for (int l = 0; l < config.n_layers; ++l)
    if (config.block_type(l) != lm::BlockType::llama)
      throw InputError(fmt::format("the memory model covers llama blocks only; block {} of the base is {}", l,
                                   lm::block_type_name(config.block_type(l))),
                       where);
  for (const auto& job : space.jobs)
    for (const auto& t : job.targets) {
      const auto [out, in] = plora_target_shape(config, t);
      if (job.rank > std::min(in, out))
        throw InputError(fmt::format("rank {} is above the width of the {} projection ({} x {}) of the base", job.rank, t, out, in),
                         fmt::format("{}, job '{}'", where, job.name));
    }
}


std::int64_t base_weight_bytes(const lm::ModelConfig& config) { return 4 * config.n_params(); }

std::int64_t adapter_params(const lm::ModelConfig& config, int rank, const std::vector<std::string>& targets) {
  return lm::lora_param_count(config, rank, targets);
}

std::int64_t adapter_bytes(const lm::ModelConfig& config, const JobSpec& job) {
  return 16 * adapter_params(config, job.rank, job.targets);
}

std::int64_t activation_bytes_per_token(const lm::ModelConfig& c, const JobSpec& job) {
  const std::int64_t d = c.d_model, dq = std::int64_t(c.n_heads) * c.head_dim(), dkv = std::int64_t(c.n_kv_heads) * c.head_dim();
  const std::int64_t ranks = std::int64_t(job.rank) * std::int64_t(job.targets.size());
  const std::int64_t per_layer = 4 * d + 2 * dq + 2 * dkv + 3 * std::int64_t(c.d_ff) + 2 + 2 * std::int64_t(c.n_heads) + ranks;
  std::int64_t floats = c.n_layers * per_layer + 2 * std::int64_t(c.vocab_size) + 6 * d;
  if (job.dropout > 0) {
    std::int64_t ins = 0;
    for (const auto& t : job.targets) ins += plora_target_shape(c, t).second;
    floats += c.n_layers * ins;
  }
  return 4 * floats;
}

std::int64_t activation_bytes(const lm::ModelConfig& config, const JobSpec& job, int seq_len) {
  return activation_bytes_per_token(config, job) * job.batch * seq_len;
}

std::int64_t MemoryModel::group_bytes(const std::vector<int>& jobs) const {
  std::int64_t b = base + overhead;
  for (int j : jobs) b += job_bytes(static_cast<std::size_t>(j));
  return b;
}

int MemoryModel::max_jobs_at_once() const {
  std::vector<std::int64_t> each;
  for (std::size_t j = 0; j < adapter.size(); ++j) each.push_back(job_bytes(j));
  std::sort(each.begin(), each.end());
  std::int64_t used = base + overhead;
  int n = 0;
  for (std::int64_t b : each) {
    if (used + b > limit) break;
    used += b, ++n;
  }
  return n;
}

MemoryModel memory_model(const lm::ModelConfig& config, const SearchSpace& space, std::int64_t limit, std::int64_t overhead) {
  MemoryModel m;
  m.base = base_weight_bytes(config);
  m.overhead = overhead;
  m.limit = limit;
  for (const auto& job : space.jobs) {
    m.adapter.push_back(adapter_bytes(config, job));
    m.activation.push_back(activation_bytes(config, job, space.seq_len));
  }
  return m;
}

void check_every_job_fits(const MemoryModel& mem, const SearchSpace& space, const std::string& where) {
  int misfits = 0;
  std::size_t worst = 0;
  std::int64_t worst_missing = 0;
  for (std::size_t j = 0; j < space.jobs.size(); ++j) {
    const std::int64_t missing = mem.group_bytes({int(j)}) - mem.limit;
    if (missing > 0) {
      ++misfits;
      if (missing > worst_missing) worst_missing = missing, worst = j;
    }
  }
  if (misfits == 0) return;
  throw InputError(fmt::format("job '{}' alone needs {} bytes, {} more than the memory limit {} (base {} + overhead {} + adapter {} + "
                               "activations {}); {} of {} jobs do not fit alone",
                               space.jobs[worst].name, mem.group_bytes({int(worst)}), worst_missing, mem.limit, mem.base, mem.overhead,
                               mem.adapter[worst], mem.activation[worst], misfits, space.jobs.size()),
                   where);
}

std::int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  std::string s = text;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t cut = s.size();
  while (cut > 0 && std::isalpha(static_cast<unsigned char>(s[cut - 1]))) --cut;
  std::string unit = s.substr(cut);
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  static const std::map<std::string, double> units{
      {"", 1},          {"b", 1},          {"k", 1e3},        {"kb", 1e3},       {"m", 1e6},         {"mb", 1e6},
      {"g", 1e9},       {"gb", 1e9},       {"t", 1e12},       {"tb", 1e12},      {"kib", 1024.0},    {"mib", 1048576.0},
      {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  const auto u = units.find(unit);
  const auto number = io::parse_double(s.substr(0, cut));
  const std::string msg = fmt::format("'{}' is not a byte count (a number with an optional K, M, G, T, KiB, MiB, GiB or TiB)", text);
  if (u == units.end() || !number || !std::isfinite(*number) || *number < 0) throw UsageError(msg, flag);
  const double bytes = std::floor(*number * u->second);
  if (bytes < 1 || bytes > 4.6e18) throw UsageError(fmt::format("'{}' must be between 1 byte and 4 EiB", text), flag);
  return static_cast<std::int64_t>(bytes);
}

// ---- throughput model -----------------------------------------------------------------------------

ThroughputTable parse_throughput_table(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError("a throughput table must be a JSON object", where);
  ThroughputTable t;
  bool has_seq = false, has_points = false, has_device = false, has_source = false;
  auto str = [&](const nlohmann::json& v, const std::string& key) {
    if (!v.is_string() || v.get<std::string>().empty()) throw InputError(fmt::format("{} must be a non-empty string", key), where);
    return v.get<std::string>();
  };
  auto whole = [&](const nlohmann::json& v, const std::string& key, const std::string& at) {
    const bool ok = v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
                    v.get<double>() >= 1 && v.get<double>() <= 1e9;
    if (!ok) throw InputError(fmt::format("{} must be an integer >= 1, got {}", key, v.dump()), at);
    return static_cast<int>(v.get<double>());
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (k == "device") {
      t.device = str(it.value(), k), has_device = true;
    } else if (k == "source") {
      t.source = str(it.value(), k), has_source = true;
    } else if (k == "model") {
      t.model = str(it.value(), k);
    } else if (k == "seq_len") {
      t.seq_len = whole(it.value(), k, where), has_seq = true;
    } else if (k == "notes" || k == "meta") {
      // informative only
    } else if (k == "measurements") {
      if (!it.value().is_array() || it.value().empty()) throw InputError("measurements must be a non-empty array", where);
      has_points = true;
      for (std::size_t i = 0; i < it.value().size(); ++i) {
        const auto& m = it.value()[i];
        const std::string at = fmt::format("{}, measurements[{}]", where, i);
        if (!m.is_object()) throw InputError("a measurement must be an object {jobs, rank, batch, step_seconds}", at);
        ThroughputPoint p;
        bool seen[4] = {false, false, false, false};
        for (auto f = m.begin(); f != m.end(); ++f) {
          if (f.key() == "jobs") p.jobs = whole(f.value(), "jobs", at), seen[0] = true;
          else if (f.key() == "rank") p.rank = whole(f.value(), "rank", at), seen[1] = true;
          else if (f.key() == "batch") p.batch = whole(f.value(), "batch", at), seen[2] = true;
          else if (f.key() == "step_seconds") {
            const auto& v = f.value();
            if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
              throw InputError(fmt::format("step_seconds must be a finite number > 0, got {}", v.dump()), at);
            p.step_seconds = v.get<double>(), seen[3] = true;
          } else {
            throw InputError(fmt::format("unknown key '{}' (jobs, rank, batch, step_seconds)", f.key()), at);
          }
        }
        for (int s = 0; s < 4; ++s)
          if (!seen[s])
            throw InputError(fmt::format("missing {}", std::array<const char*, 4>{"jobs", "rank", "batch", "step_seconds"}[s]), at);
        t.points.push_back(p);
      }
    } else {
      throw InputError(fmt::format("unknown key '{}' (device, source, model, seq_len, measurements, notes, meta)", k), where);
    }
  }
  if (!has_device) throw InputError("device is missing", where);
  if (!has_source) throw InputError("source is missing (how the numbers were obtained)", where);
  if (!has_seq) throw InputError("seq_len is missing", where);
  if (!has_points) throw InputError("measurements are missing", where);
  return t;
}

ThroughputTable read_throughput_table(const std::string& path, std::string* file_sha256) {
  return parse_throughput_table(io::read_json(path, file_sha256), io::is_stdout(path) ? "<stdin>" : path);
}

namespace {
// Weighted pool-adjacent-violators: the non-decreasing sequence closest to y in weighted least squares.
void make_non_decreasing(std::vector<double>& y, const std::vector<double>& w) {
  struct Block {
    double sum, weight;
    std::size_t n;
  };
  std::vector<Block> blocks;
  for (std::size_t i = 0; i < y.size(); ++i) {
    blocks.push_back({y[i] * w[i], w[i], 1});
    while (blocks.size() > 1) {
      const Block& b = blocks.back();
      const Block& a = blocks[blocks.size() - 2];
      if (a.sum / a.weight <= b.sum / b.weight) break;
      Block merged{a.sum + b.sum, a.weight + b.weight, a.n + b.n};
      blocks.pop_back();
      blocks.back() = merged;
    }
  }
  std::size_t i = 0;
  for (const auto& b : blocks)
    for (std::size_t k = 0; k < b.n; ++k) {
      const double v = b.n == 1 ? y[i] : b.sum / b.weight;  // a lone block keeps its exact value
      y[i++] = v;
    }
}
}  // namespace

ThroughputModel::ThroughputModel(const ThroughputTable& table) : table_(table) {
  if (table.points.empty()) throw InputError("the throughput table has no measurements");
  std::map<double, std::vector<ThroughputPoint>> by_rows;
  for (const auto& p : table.points) by_rows[p.rows()].push_back(p);
  std::vector<double> weight;
  std::vector<const std::vector<ThroughputPoint>*> pts;
  for (const auto& [rows, ps] : by_rows) {
    r_.push_back(rows);
    pts.push_back(&ps);
    weight.push_back(double(ps.size()));
    std::set<double> ws;
    for (const auto& p : ps) ws.insert(p.rank_rows());
    double f = 0, g = 0;
    bool known = ws.size() >= 2;
    if (known) {  // least squares t = f + g W
      double mw = 0, mt = 0;
      for (const auto& p : ps) mw += p.rank_rows(), mt += p.step_seconds;
      mw /= ps.size(), mt /= ps.size();
      double sww = 0, swt = 0;
      for (const auto& p : ps) sww += (p.rank_rows() - mw) * (p.rank_rows() - mw), swt += (p.rank_rows() - mw) * (p.step_seconds - mt);
      g = swt / sww;
      f = mt - g * mw;
      if (g < 0) g = 0, f = mt;
      if (f < 0) {  // through the origin
        double tw = 0, w2 = 0;
        for (const auto& p : ps) tw += p.step_seconds * p.rank_rows(), w2 += p.rank_rows() * p.rank_rows();
        f = 0, g = tw / w2;
      }
    }
    f_.push_back(f);
    g_.push_back(g);
    g_known_.push_back(known);
  }
  // g where the table does not determine it: interpolated between the knots that do
  std::vector<std::size_t> known_at;
  for (std::size_t k = 0; k < r_.size(); ++k)
    if (g_known_[k]) known_at.push_back(k);
  for (std::size_t k = 0; k < r_.size(); ++k) {
    if (g_known_[k]) continue;
    if (known_at.empty()) {
      g_[k] = 0;
      continue;
    }
    const auto hi = std::upper_bound(known_at.begin(), known_at.end(), k);
    if (hi == known_at.begin()) g_[k] = g_[known_at.front()];
    else if (hi == known_at.end()) g_[k] = g_[known_at.back()];
    else {
      const std::size_t a = *(hi - 1), b = *hi;
      g_[k] = g_[a] + (g_[b] - g_[a]) * (r_[k] - r_[a]) / (r_[b] - r_[a]);
    }
  }
  const std::vector<double> g_before = g_;
  make_non_decreasing(g_, weight);
  for (std::size_t k = 0; k < r_.size(); ++k) {
    if (g_known_[k] && g_[k] == g_before[k]) continue;  // the fitted line stands
    double s = 0;
    for (const auto& p : *pts[k]) s += p.step_seconds - g_[k] * p.rank_rows();
    f_[k] = std::max(0.0, s / double(pts[k]->size()));
  }
  make_non_decreasing(f_, weight);
}

double ThroughputModel::interp(const std::vector<double>& y, double rows, bool floor_proportional) const {
  const std::size_t n = r_.size();
  if (n == 1) return floor_proportional ? y[0] * rows / r_[0] : y[0];
  std::size_t a;
  if (rows <= r_[0]) a = 0;
  else if (rows >= r_[n - 1]) a = n - 2;
  else a = static_cast<std::size_t>(std::upper_bound(r_.begin(), r_.end(), rows) - r_.begin()) - 1;
  const double slope = (y[a + 1] - y[a]) / (r_[a + 1] - r_[a]);
  double v = y[a] + slope * (rows - r_[a]);
  if (rows < r_[0]) v = std::max(v, floor_proportional ? y[0] * rows / r_[0] : 0.0);
  return std::max(v, 0.0);
}

double ThroughputModel::f(double rows) const { return interp(f_, rows, true); }
double ThroughputModel::g(double rows) const { return interp(g_, rows, false); }
double ThroughputModel::step_seconds(double rows, double rank_rows) const { return f(rows) + g(rows) * rank_rows; }

nlohmann::json ThroughputModel::to_json() const {
  nlohmann::json knots = nlohmann::json::array();
  for (std::size_t k = 0; k < r_.size(); ++k)
    knots.push_back({{"rows", r_[k]}, {"f_s", f_[k]}, {"g_s", g_[k]}, {"g_from_table", bool(g_known_[k])}});
  return {{"form", "t(pack) = f(R) + g(R) W; R = sum of batch rows, W = sum of batch x rank; f, g piecewise linear in R"},
          {"device", table_.device},
          {"source", table_.source},
          {"model", table_.model},
          {"seq_len", table_.seq_len},
          {"measurements", table_.points.size()},
          {"knots", knots}};
}

// ---- schedules and their simulation ----------------------------------------------------------------

namespace {

std::int64_t group_bytes(const PlanProblem& p, const std::vector<int>& jobs) {
  std::int64_t b = p.fixed_bytes;
  for (int j : jobs) b += p.jobs[static_cast<std::size_t>(j)].bytes;
  return b;
}

bool fits(const PlanProblem& p, const std::vector<int>& jobs) { return group_bytes(p, jobs) <= p.memory_limit; }

double solo_seconds(const PlanProblem& p, int j) { return group_seconds(p, {j}); }

// Assigns groups (in the given order) to the least-loaded worker (lowest index on ties).
Schedule to_least_loaded(const PlanProblem& p, const std::vector<std::vector<int>>& groups) {
  Schedule s;
  s.workers.assign(static_cast<std::size_t>(p.workers), {});
  std::vector<double> load(static_cast<std::size_t>(p.workers), 0.0);
  for (const auto& g : groups) {
    const auto w = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    s.workers[w].push_back(g);
    load[w] += group_seconds(p, g);
  }
  return s;
}

}  // namespace

double group_seconds(const PlanProblem& p, const std::vector<int>& jobs, std::vector<double>* job_end) {
  std::vector<std::size_t> order(jobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return p.jobs[static_cast<std::size_t>(jobs[a])].steps < p.jobs[static_cast<std::size_t>(jobs[b])].steps;
  });
  std::int64_t rows = 0, rank_rows = 0;
  for (int j : jobs) {
    const PlanJob& job = p.jobs[static_cast<std::size_t>(j)];
    rows += job.batch, rank_rows += std::int64_t(job.batch) * job.rank;
  }
  if (job_end) job_end->assign(jobs.size(), 0.0);
  double t = 0;
  int done = 0;
  for (std::size_t i = 0; i < order.size();) {
    const int steps = p.jobs[static_cast<std::size_t>(jobs[order[i]])].steps;
    const double step = p.throughput->step_seconds(double(rows), double(rank_rows));
    if (!(step > 0) || !std::isfinite(step)) throw RuntimeError(fmt::format("the throughput model gives a step time of {} s", step));
    t += double(steps - done) * step;
    done = steps;
    for (; i < order.size() && p.jobs[static_cast<std::size_t>(jobs[order[i]])].steps == steps; ++i) {
      const PlanJob& job = p.jobs[static_cast<std::size_t>(jobs[order[i]])];
      rows -= job.batch, rank_rows -= std::int64_t(job.batch) * job.rank;
      if (job_end) (*job_end)[order[i]] = t;
    }
  }
  return t;
}

Simulation simulate(const PlanProblem& p, const Schedule& s) {
  Simulation sim;
  std::vector<int> seen(p.jobs.size(), 0);
  std::vector<std::pair<double, int>> events;  // (time, +1 start / -1 end)
  for (std::size_t w = 0; w < s.workers.size(); ++w) {
    double t = 0;
    for (const auto& g : s.workers[w]) {
      if (g.empty()) throw RuntimeError(fmt::format("an empty group on worker {}", w));
      GroupRun run;
      run.worker = static_cast<int>(w);
      run.jobs = g;
      run.start = t;
      run.peak_bytes = group_bytes(p, g);
      if (run.peak_bytes > p.memory_limit)
        throw RuntimeError(fmt::format("a group of {} jobs needs {} bytes, above the limit {}", g.size(), run.peak_bytes, p.memory_limit));
      for (int j : g) {
        if (j < 0 || static_cast<std::size_t>(j) >= p.jobs.size()) throw RuntimeError(fmt::format("no job {} in the problem", j));
        ++seen[static_cast<std::size_t>(j)];
      }
      const double d = group_seconds(p, g, &run.job_end);
      for (double& e : run.job_end) {
        e += t;
        events.push_back({t, +1});
        events.push_back({e, -1});
      }
      t += d;
      run.end = t;
      sim.max_group_jobs = std::max(sim.max_group_jobs, static_cast<int>(g.size()));
      sim.groups.push_back(std::move(run));
    }
    sim.worker_seconds.push_back(t);
    sim.makespan = std::max(sim.makespan, t);
  }
  for (std::size_t j = 0; j < seen.size(); ++j)
    if (seen[j] != 1) throw RuntimeError(fmt::format("job '{}' is scheduled {} times", p.jobs[j].name, seen[j]));
  std::sort(events.begin(), events.end());  // at equal times the ends (-1) come first
  int running = 0;
  for (const auto& e : events) sim.max_concurrent = std::max(sim.max_concurrent, running += e.second);
  return sim;
}

Schedule sequential_schedule(const PlanProblem& p) {
  Schedule s;
  s.workers.assign(static_cast<std::size_t>(p.workers), {});
  for (std::size_t j = 0; j < p.jobs.size(); ++j) s.workers[j % s.workers.size()].push_back({int(j)});
  return s;
}

Schedule max_pack_schedule(const PlanProblem& p) {
  std::vector<std::vector<int>> groups;
  std::vector<int> cur;
  for (std::size_t j = 0; j < p.jobs.size(); ++j) {
    std::vector<int> next = cur;
    next.push_back(int(j));
    if (!cur.empty() && !fits(p, next)) {
      groups.push_back(cur);
      next = {int(j)};
    }
    cur = std::move(next);
  }
  if (!cur.empty()) groups.push_back(cur);
  return to_least_loaded(p, groups);
}

Schedule lpt_schedule(const PlanProblem& p) {
  std::vector<int> order(p.jobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> solo(p.jobs.size());
  for (std::size_t j = 0; j < p.jobs.size(); ++j) solo[j] = solo_seconds(p, int(j));
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return solo[std::size_t(a)] > solo[std::size_t(b)]; });
  std::vector<std::vector<int>> groups;
  std::vector<bool> placed(p.jobs.size(), false);
  for (std::size_t left = p.jobs.size(); left > 0;) {
    std::vector<int> g;
    for (int j : order) {
      if (placed[std::size_t(j)]) continue;
      g.push_back(j);
      if (g.size() > 1 && !fits(p, g)) g.pop_back();
      else placed[std::size_t(j)] = true, --left;
    }
    groups.push_back(g);
  }
  std::vector<double> dur;
  for (const auto& g : groups) dur.push_back(group_seconds(p, g));
  std::vector<std::size_t> idx(groups.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return dur[a] > dur[b]; });
  std::vector<std::vector<int>> sorted;
  for (std::size_t i : idx) sorted.push_back(groups[i]);
  return to_least_loaded(p, sorted);
}

// ---- the planner ------------------------------------------------------------------------------------

namespace {

// Exact in the model: the least total group time of every subset, then the best split over workers.
// Returns false (and leaves `out` alone) when the dynamic program would cost too much.
bool exact_plan(const PlanProblem& p, int exact_max_jobs, Schedule& out, std::string& how) {
  const int n = static_cast<int>(p.jobs.size());
  const int workers = std::min(p.workers, n);
  if (n == 0 || n > std::min(exact_max_jobs, 20)) return false;
  const double pairs = std::pow(3.0, n) / 2;
  if (pairs * std::max(1, workers - 1) > 4e8) return false;
  const std::uint32_t full = (std::uint32_t(1) << n) - 1;
  std::vector<std::int64_t> bytes(std::size_t(full) + 1, 0);
  std::vector<double> dur(std::size_t(full) + 1, kInf);
  std::vector<int> by_steps(static_cast<std::size_t>(n));
  std::iota(by_steps.begin(), by_steps.end(), 0);
  std::stable_sort(by_steps.begin(), by_steps.end(), [&](int a, int b) { return p.jobs[std::size_t(a)].steps < p.jobs[std::size_t(b)].steps; });
  std::vector<int> members;
  for (std::uint32_t s = 1; s <= full; ++s) {
    const int low = __builtin_ctz(s);
    bytes[s] = bytes[s & (s - 1)] + p.jobs[std::size_t(low)].bytes;
    if (p.fixed_bytes + bytes[s] > p.memory_limit) continue;
    members.clear();
    for (int j : by_steps)
      if (s >> j & 1u) members.push_back(j);
    dur[s] = group_seconds(p, members);
  }
  // best[S]: least sum of group times over partitions of S into fitting groups
  std::vector<double> best(std::size_t(full) + 1, kInf);
  std::vector<std::uint32_t> best_group(std::size_t(full) + 1, 0);
  best[0] = 0;
  for (std::uint32_t s = 1; s <= full; ++s) {
    const std::uint32_t low = s & (~s + 1), rest = s ^ low;
    double v = kInf;
    std::uint32_t arg = 0;
    for (std::uint32_t sub = rest;; sub = (sub - 1) & rest) {
      const std::uint32_t g = sub | low;
      if (dur[g] < kInf) {
        const double c = dur[g] + best[s ^ g];
        if (c < v) v = c, arg = g;
      }
      if (sub == 0) break;
    }
    best[s] = v, best_group[s] = arg;
  }
  // span[w][S]: least makespan of S on w + 1 workers; the worker taking S's lowest job takes T
  std::vector<std::vector<double>> span{best};
  std::vector<std::vector<std::uint32_t>> take{{}};
  for (int w = 1; w < workers; ++w) {
    const bool top = w == workers - 1;
    std::vector<double> cur(std::size_t(full) + 1, kInf);
    std::vector<std::uint32_t> arg(std::size_t(full) + 1, 0);
    cur[0] = 0;
    for (std::uint32_t s = top ? full : 1; s <= full; ++s) {
      const std::uint32_t low = s & (~s + 1), rest = s ^ low;
      double v = kInf;
      std::uint32_t a = 0;
      for (std::uint32_t sub = rest;; sub = (sub - 1) & rest) {
        const std::uint32_t t = sub | low;
        const double c = std::max(best[t], span[std::size_t(w - 1)][s ^ t]);
        if (c < v) v = c, a = t;
        if (sub == 0) break;
      }
      cur[s] = v, arg[s] = a;
    }
    span.push_back(std::move(cur));
    take.push_back(std::move(arg));
  }
  if (!(span.back()[full] < kInf)) return false;
  out.workers.assign(static_cast<std::size_t>(p.workers), {});
  std::uint32_t left = full;
  for (int w = workers - 1; w >= 0 && left; --w) {
    const std::uint32_t mine = w == 0 ? left : take[std::size_t(w)][left];
    left ^= mine;
    auto& groups = out.workers[std::size_t(workers - 1 - w)];
    for (std::uint32_t s = mine; s; s ^= best_group[s]) {
      std::vector<int> g;
      for (int j = 0; j < n; ++j)
        if (best_group[s] >> j & 1u) g.push_back(j);
      groups.push_back(std::move(g));
    }
  }
  how = fmt::format("exact in the model: a dynamic program over the {} subsets of the {} jobs (the least total group time of each, "
                    "then the best split over {} worker{}), so no schedule of groups has a smaller makespan",
                    std::uint64_t(full) + 1, n, workers, workers == 1 ? "" : "s");
  return true;
}

// Local search over groups and their workers; objective (makespan, total busy time), lexicographic.
class LocalSearch {
 public:
  LocalSearch(const PlanProblem& p, std::uint64_t seed) : p_(p), rng_(seed) {}

  Schedule run(const Schedule& start, std::string& how) {
    load(start);
    improve();
    State best = state_;
    double best_obj[2] = {obj_[0], obj_[1]};
    const int kicks = 40;
    int accepted = 0;
    for (int k = 0; k < kicks && evals_ < kBudget && generated_ < kMoveBudget; ++k) {
      kick();
      improve();
      if (better(obj_[0], obj_[1], best_obj[0], best_obj[1])) {
        best = state_, best_obj[0] = obj_[0], best_obj[1] = obj_[1], ++accepted;
      } else {
        state_ = best, recompute();
      }
    }
    state_ = best;
    recompute();
    how = fmt::format("local search from the best baseline ({} jobs): moves, swaps, merges and worker changes with the simulator as "
                      "objective, {} random kicks ({} improved), {} group evaluations",
                      p_.jobs.size(), kicks, accepted, evals_);
    Schedule s;
    s.workers.assign(static_cast<std::size_t>(p_.workers), {});
    for (std::size_t g = 0; g < state_.groups.size(); ++g) s.workers[std::size_t(state_.worker[g])].push_back(state_.groups[g]);
    return s;
  }

 private:
  struct State {
    std::vector<std::vector<int>> groups;
    std::vector<int> worker;
    std::vector<double> dur;
  };
  static constexpr long kBudget = 400000;      // group evaluations
  static constexpr long kMoveBudget = 20000000;  // moves listed (large searches list many per pass)

  static bool better(double m1, double s1, double m2, double s2) {
    const double tol = 1e-12;
    if (m1 < m2 - tol * m2) return true;
    if (m1 > m2 + tol * m2) return false;
    return s1 < s2 - tol * s2;
  }

  void load(const Schedule& s) {
    state_ = {};
    for (std::size_t w = 0; w < s.workers.size(); ++w)
      for (const auto& g : s.workers[w]) state_.groups.push_back(g), state_.worker.push_back(int(w));
    recompute();
  }

  void recompute() {
    state_.dur.clear();
    for (const auto& g : state_.groups) state_.dur.push_back(dur(g));
    loads_.assign(static_cast<std::size_t>(p_.workers), 0.0);
    for (std::size_t g = 0; g < state_.groups.size(); ++g) loads_[std::size_t(state_.worker[g])] += state_.dur[g];
    objective(loads_, obj_);
  }

  double dur(const std::vector<int>& g) {
    ++evals_;
    return g.empty() ? 0.0 : group_seconds(p_, g);
  }

  static void objective(const std::vector<double>& loads, double* o) {
    o[0] = *std::max_element(loads.begin(), loads.end());
    o[1] = std::accumulate(loads.begin(), loads.end(), 0.0);
  }

  // A candidate: groups a and b (b may be a new group, index == size) replaced by ga, gb on workers wa, wb.
  bool try_change(std::size_t a, std::size_t b, std::vector<int> ga, std::vector<int> gb, int wa, int wb) {
    if ((!ga.empty() && !fits(p_, ga)) || (!gb.empty() && !fits(p_, gb))) return false;
    std::vector<double> loads = loads_;
    const double da = dur(ga), db = dur(gb);
    loads[std::size_t(state_.worker[a])] -= state_.dur[a];
    if (b < state_.groups.size()) loads[std::size_t(state_.worker[b])] -= state_.dur[b];
    loads[std::size_t(wa)] += da;
    loads[std::size_t(wb)] += db;
    double o[2];
    objective(loads, o);
    if (!better(o[0], o[1], obj_[0], obj_[1])) return false;
    if (b == state_.groups.size()) state_.groups.push_back({}), state_.worker.push_back(wb), state_.dur.push_back(0);
    state_.groups[a] = std::move(ga), state_.worker[a] = wa, state_.dur[a] = da;
    state_.groups[b] = std::move(gb), state_.worker[b] = wb, state_.dur[b] = db;
    for (std::size_t g = state_.groups.size(); g-- > 0;)
      if (state_.groups[g].empty()) {
        state_.groups.erase(state_.groups.begin() + long(g));
        state_.worker.erase(state_.worker.begin() + long(g));
        state_.dur.erase(state_.dur.begin() + long(g));
      }
    loads_ = loads;
    obj_[0] = o[0], obj_[1] = o[1];
    return true;
  }

  // Group a to worker w, when that improves.
  bool try_move_group(std::size_t a, int w) {
    std::vector<double> loads = loads_;
    loads[std::size_t(state_.worker[a])] -= state_.dur[a];
    loads[std::size_t(w)] += state_.dur[a];
    double o[2];
    objective(loads, o);
    if (!better(o[0], o[1], obj_[0], obj_[1])) return false;
    state_.worker[a] = w;
    loads_ = loads;
    obj_[0] = o[0], obj_[1] = o[1];
    return true;
  }

  // One pass over every move in a seeded order; true when one improved.
  bool pass() {
    const std::size_t G = state_.groups.size();
    const int W = p_.workers;
    std::vector<std::array<std::size_t, 5>> moves;  // kind, a, b, x, y
    for (std::size_t a = 0; a < G; ++a) {
      for (std::size_t i = 0; i < state_.groups[a].size(); ++i) {
        for (std::size_t b = 0; b < G; ++b)
          if (b != a) moves.push_back({0, a, b, i, 0});  // relocate job i of a into b
        for (int w = 0; w < W; ++w) moves.push_back({1, a, std::size_t(w), i, 0});  // job i of a to a new group on w
      }
      for (std::size_t b = a + 1; b < G; ++b) {
        moves.push_back({2, a, b, 0, 0});  // merge b into a
        for (std::size_t i = 0; i < state_.groups[a].size(); ++i)
          for (std::size_t k = 0; k < state_.groups[b].size(); ++k) moves.push_back({3, a, b, i, k});  // swap
      }
      for (int w = 0; w < W; ++w)
        if (w != state_.worker[a]) moves.push_back({4, a, std::size_t(w), 0, 0});  // group a to worker w
    }
    generated_ += static_cast<long>(moves.size());
    for (std::size_t i = moves.size(); i > 1; --i) std::swap(moves[i - 1], moves[rng_.below(i)]);
    for (const auto& m : moves) {
      if (evals_ >= kBudget || generated_ >= kMoveBudget) return false;
      const std::size_t a = m[1], b = m[2];
      std::vector<int> ga = state_.groups[a];
      switch (m[0]) {
        case 0: {
          std::vector<int> gb = state_.groups[b];
          gb.push_back(ga[m[3]]);
          ga.erase(ga.begin() + long(m[3]));
          if (try_change(a, b, ga, gb, state_.worker[a], state_.worker[b])) return true;
          break;
        }
        case 1: {
          if (ga.size() == 1 && state_.worker[a] == int(b)) break;
          std::vector<int> gb{ga[m[3]]};
          ga.erase(ga.begin() + long(m[3]));
          if (try_change(a, state_.groups.size(), ga, gb, state_.worker[a], int(b))) return true;
          break;
        }
        case 2: {
          std::vector<int> gb = state_.groups[b];
          ga.insert(ga.end(), gb.begin(), gb.end());
          if (try_change(a, b, ga, {}, state_.worker[a], state_.worker[b])) return true;
          break;
        }
        case 3: {
          std::vector<int> gb = state_.groups[b];
          std::swap(ga[m[3]], gb[m[4]]);
          if (try_change(a, b, ga, gb, state_.worker[a], state_.worker[b])) return true;
          break;
        }
        case 4: {
          if (try_move_group(a, int(b))) return true;
          break;
        }
      }
    }
    return false;
  }

  void improve() {
    while (evals_ < kBudget && generated_ < kMoveBudget && pass()) {
    }
  }

  // A random perturbation: two jobs moved to random groups they fit in (or new groups).
  void kick() {
    for (int k = 0; k < 2; ++k) {
      const std::size_t a = rng_.below(state_.groups.size());
      const std::size_t i = rng_.below(state_.groups[a].size());
      const int job = state_.groups[a][i];
      const std::size_t b = rng_.below(state_.groups.size() + 1);
      if (b == a) continue;
      std::vector<int> gb = b < state_.groups.size() ? state_.groups[b] : std::vector<int>{};
      gb.push_back(job);
      if (!fits(p_, gb)) continue;
      state_.groups[a].erase(state_.groups[a].begin() + long(i));
      if (b < state_.groups.size()) state_.groups[b] = gb;
      else state_.groups.push_back(gb), state_.worker.push_back(int(rng_.below(std::uint64_t(p_.workers))));
      if (state_.groups[a].empty()) state_.groups.erase(state_.groups.begin() + long(a)), state_.worker.erase(state_.worker.begin() + long(a));
    }
    recompute();
  }

  const PlanProblem& p_;
  Rng rng_;
  State state_;
  std::vector<double> loads_;
  double obj_[2] = {0, 0};
  long evals_ = 0, generated_ = 0;
};

}  // namespace

PlanResult plan_schedule(const PlanProblem& p, std::uint64_t seed, int exact_max_jobs) {
  for (std::size_t j = 0; j < p.jobs.size(); ++j)
    if (!fits(p, {int(j)}))
      throw InputError(fmt::format("job '{}' alone needs {} bytes, {} more than the memory limit {}", p.jobs[j].name,
                                   group_bytes(p, {int(j)}), group_bytes(p, {int(j)}) - p.memory_limit, p.memory_limit));
  const std::vector<std::pair<std::string, Schedule>> baselines{
      {"sequential", sequential_schedule(p)}, {"max-pack", max_pack_schedule(p)}, {"lpt", lpt_schedule(p)}};
  std::size_t best = 0;
  std::vector<double> spans;
  for (const auto& [name, s] : baselines) spans.push_back(simulate(p, s).makespan);
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i] < spans[best]) best = i;
  PlanResult r;
  Schedule candidate;
  std::string how;
  const bool exact = exact_plan(p, exact_max_jobs, candidate, how);
  if (!exact) {
    LocalSearch search(p, seed);
    candidate = search.run(baselines[best].second, how);
  }
  const double span = simulate(p, candidate).makespan;
  if (span <= spans[best]) {
    r.schedule = std::move(candidate), r.makespan = span, r.how = how;
    if (span >= spans[best] * (1 - 1e-12)) r.how += fmt::format("; the same makespan as the best baseline, {}", baselines[best].first);
  } else {  // rounding can put an optimum a few ulps above an equal baseline
    r.schedule = baselines[best].second, r.makespan = spans[best];
    r.how = fmt::format("the best baseline, {} (nothing shorter found)", baselines[best].first);
  }
  return r;
}

// ---- a whole search -----------------------------------------------------------------------------------

std::vector<SearchRound> search_rounds(const SearchSpace& space, const MemoryModel& mem, const ThroughputModel& tp, int workers) {
  std::vector<SearchRound> rounds;
  const auto& rungs = space.early_stop.rungs;
  const std::size_t n_rounds = space.early_stop.enabled() ? rungs.size() + 1 : 1;
  std::vector<int> alive(space.jobs.size());
  std::iota(alive.begin(), alive.end(), 0);
  for (std::size_t i = 0; i < n_rounds; ++i) {
    SearchRound r;
    r.index = static_cast<int>(i);
    r.from_step = i == 0 ? 0 : rungs[i - 1];
    r.to_step = i + 1 < n_rounds ? rungs[i] : -1;
    auto steps_of = [&](int j) { return (r.to_step < 0 ? space.jobs[std::size_t(j)].steps : r.to_step) - r.from_step; };
    auto remaining = [&](int j) {  // solo seconds from this round's start to the job's end
      const JobSpec& job = space.jobs[std::size_t(j)];
      return tp.step_seconds(job.batch, double(job.batch) * job.rank) * (job.steps - r.from_step);
    };
    if (i > 0) {  // ceil(n / eta) survivors, assumed the most expensive
      const std::size_t keep = (alive.size() + std::size_t(space.early_stop.eta) - 1) / std::size_t(space.early_stop.eta);
      std::stable_sort(alive.begin(), alive.end(), [&](int a, int b) { return remaining(a) > remaining(b); });
      alive.resize(keep);
      std::sort(alive.begin(), alive.end());
    }
    r.jobs = alive;
    r.problem.fixed_bytes = mem.base + mem.overhead;
    r.problem.memory_limit = mem.limit;
    r.problem.workers = workers;
    r.problem.throughput = &tp;
    for (int j : alive) {
      const JobSpec& job = space.jobs[std::size_t(j)];
      r.problem.jobs.push_back({job.name, steps_of(j), job.batch, job.rank, mem.job_bytes(std::size_t(j))});
    }
    rounds.push_back(std::move(r));
  }
  return rounds;
}

std::vector<SearchPlan> plan_search(const std::vector<SearchRound>& rounds, std::uint64_t seed, int exact_max_jobs) {
  std::vector<SearchPlan> out;
  for (const char* method : {"sequential", "max-pack", "lpt", "plan"}) {
    SearchPlan sp;
    sp.method = method;
    double t = 0;
    std::vector<std::string> hows;
    for (const auto& r : rounds) {
      Schedule s;
      if (sp.method == "sequential") s = sequential_schedule(r.problem);
      else if (sp.method == "max-pack") s = max_pack_schedule(r.problem);
      else if (sp.method == "lpt") s = lpt_schedule(r.problem);
      else {
        PlanResult pr = plan_schedule(r.problem, derive_seed(seed, std::uint64_t(r.index)), exact_max_jobs);
        s = std::move(pr.schedule);
        hows.push_back(rounds.size() > 1 ? fmt::format("round {}: {}", r.index, pr.how) : pr.how);
      }
      Simulation sim = simulate(r.problem, s);
      sp.round_start.push_back(t);
      t += sim.makespan;
      sp.groups += static_cast<int>(sim.groups.size());
      sp.max_concurrent = std::max(sp.max_concurrent, sim.max_concurrent);
      sp.max_group_jobs = std::max(sp.max_group_jobs, sim.max_group_jobs);
      sp.schedules.push_back(std::move(s));
      sp.runs.push_back(std::move(sim));
    }
    sp.makespan = t;
    for (std::size_t i = 0; i < hows.size(); ++i) sp.how += (i ? "; " : "") + hows[i];
    out.push_back(std::move(sp));
  }
  return out;
}

}  // namespace icmlkit::sched
