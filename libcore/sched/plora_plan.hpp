// PLoRA's planner (issue 33): pack many LoRA jobs on one frozen base into concurrent groups and
// order them over workers to minimise the makespan of the whole search under a memory limit.
//
// The paper (arXiv 2508.02932) publishes neither its planner nor its cost model; the authors'
// earlier prototype maximised the packed LoRA memory with an integer program.  This planner
// minimises the simulated makespan instead, from three parts, each a function below:
//
//  * a memory model (bytes of the base, of each job's adapter state and activations) from the
//    base's ModelConfig, as this toolkit's CPU trainer holds them;
//  * a throughput model: the step time of any pack, fitted to a table of timed packs of identical
//    jobs (ThroughputModel);
//  * a schedule simulator: per worker an ordered list of groups; a group's jobs start together and
//    run packed; a job leaves when it has done its steps (the pack shrinks and its step time is
//    re-evaluated); the group ends with its last job and the worker's next group starts then.
//
// Methods: sequential (each job alone, jobs dealt round-robin to the workers: `lm-train --lora`
// run K times), max-pack (groups filled in the given order while the next job fits, handed to the
// first free worker), lpt (jobs by solo time, longest first, each group filled first-fit, the
// longest groups first to the least-loaded worker) and plan (an exact dynamic program over job
// subsets when it is affordable, else local search from the best baseline; never worse than the
// best baseline, by construction).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lm/config.hpp"
#include "sched/plora_space.hpp"

namespace icmlkit::sched {

// ---- memory model ---------------------------------------------------------------------------------

/// The fixed overhead of a trainer process besides the base and the jobs (process, corpus,
/// tokenizer): 96 MiB, the default of --overhead; meant to be calibrated from plora-train's peak
/// resident-memory report.
inline constexpr std::int64_t kDefaultOverheadBytes = std::int64_t(96) << 20;

/// The shape {out, in} of the projection `target` (q, k, v, o, gate, up, down) of a llama block of
/// `config`: q [n_heads hd, d], k and v [n_kv_heads hd, d], o [d, n_heads hd], gate and up
/// [d_ff, d], down [d, d_ff].  Throws UsageError for an unknown target.
std::pair<int, int> plora_target_shape(const lm::ModelConfig& config, const std::string& target);

/// Refuses what the memory model cannot cost or the trainer cannot run: a base with other than
/// llama blocks, a job whose rank exceeds min(in, out) of one of its target matrices.  Throws
/// InputError naming `where` and the job.
void check_space_for_model(const SearchSpace& space, const lm::ModelConfig& config, const std::string& where);

/// Bytes of the frozen base: 4 x every weight (float32; no gradient, no optimizer state).
std::int64_t base_weight_bytes(const lm::ModelConfig& config);

/// P, an adapter's trainable weights: sum over layers and targets of rank x (in + out).
std::int64_t adapter_params(const lm::ModelConfig& config, int rank, const std::vector<std::string>& targets);

/// A job's adapter state in bytes: 4 x 4 x P (float32 value, gradient, AdamW m and v).
std::int64_t adapter_bytes(const lm::ModelConfig& config, const JobSpec& job);

/// Activation bytes per token the trainer keeps from a job's forward for its backward:
/// 4 x [L x (4d + 2 dq + 2 dkv + 3 d_ff + 2 + 2 n_heads + sum over targets of r) + 2 V + 6 d], plus
/// with dropout > 0 another 4 x L x sum over targets of in (the dropped inputs).  d = d_model,
/// dq = n_heads x head_dim, dkv = n_kv_heads x head_dim, V = vocab_size, L = n_layers.
std::int64_t activation_bytes_per_token(const lm::ModelConfig& config, const JobSpec& job);

/// activation_bytes_per_token x batch x seq_len.
std::int64_t activation_bytes(const lm::ModelConfig& config, const JobSpec& job, int seq_len);

/// The memory model of one search on one base: fixed bytes and each job's bytes.  A group (a set of
/// jobs packed together) fits when base + overhead + sum of its jobs' adapter + activation bytes
/// <= limit.
struct MemoryModel {
  std::int64_t base = 0;      ///< base_weight_bytes
  std::int64_t overhead = 0;  ///< fixed process overhead
  std::int64_t limit = 0;     ///< bytes available to one worker
  std::vector<std::int64_t> adapter;     ///< per job, adapter_bytes
  std::vector<std::int64_t> activation;  ///< per job, activation_bytes
  /// adapter + activation bytes of job j.
  std::int64_t job_bytes(std::size_t j) const { return adapter.at(j) + activation.at(j); }
  /// base + overhead + the jobs' bytes: the peak of a group (it only shrinks as jobs finish).
  std::int64_t group_bytes(const std::vector<int>& jobs) const;
  /// group_bytes(jobs) <= limit.
  bool fits(const std::vector<int>& jobs) const { return group_bytes(jobs) <= limit; }
  /// The most jobs of the search that fit at once (the cheapest ones).
  int max_jobs_at_once() const;
};

/// The memory model of `space` on `config` with a per-worker `limit` and `overhead` bytes.
MemoryModel memory_model(const lm::ModelConfig& config, const SearchSpace& space, std::int64_t limit,
                         std::int64_t overhead = kDefaultOverheadBytes);

/// Throws InputError (naming `where`, the --memory flag) when some job alone exceeds the limit:
/// "job 'j15' alone needs 123456789 bytes, 23456789 more than the memory limit 100000000 (base ...,
/// overhead ..., job ...); 3 jobs do not fit".  Names the job missing the most.
void check_every_job_fits(const MemoryModel& mem, const SearchSpace& space, const std::string& where);


/// Parses a byte count with an optional suffix: K, M, G, T (powers of 1000, also KB, MB, GB, TB),
/// KiB, MiB, GiB, TiB (powers of 1024), any case; the number may have a fraction ("1.5GiB"), the
/// result is rounded down.  Throws UsageError naming `flag` for anything else, or a result < 1 or
/// above 2^62.
std::int64_t parse_byte_size(const std::string& text, const std::string& flag);

// ---- throughput model -----------------------------------------------------------------------------

/// One timed pack: `jobs` identical jobs of rank `rank` and batch `batch` packed, one step each.
struct ThroughputPoint {
  int jobs = 1;
  int rank = 1;
  int batch = 1;
  double step_seconds = 0;  ///< > 0
  /// R, the pack's batch rows: jobs x batch.
  double rows() const noexcept { return double(jobs) * batch; }
  /// W, the pack's rank-weighted rows: jobs x batch x rank.
  double rank_rows() const noexcept { return double(jobs) * batch * rank; }
};

/// TABLE.json: {"device": "...", "source": "...", "seq_len": 256, "measurements": [{"jobs": k,
/// "rank": r, "batch": b, "step_seconds": t}, ...]} (optional keys: "model", "notes", "meta").
struct ThroughputTable {
  std::string device;  ///< what ran (or was modelled)
  std::string source;  ///< how the numbers were obtained
  std::string model;   ///< the base model the table times ("" = not stated)
  int seq_len = 0;     ///< tokens per row the table was timed at
  std::vector<ThroughputPoint> points;
};

/// Builds a table from its JSON; throws InputError naming `where` and the measurement index for an
/// unknown key, a missing field, jobs/rank/batch < 1, step_seconds not > 0 and finite, no
/// measurements.
ThroughputTable parse_throughput_table(const nlohmann::json& j, const std::string& where);

/// Reads TABLE.json with parse_throughput_table; `file_sha256` receives the bytes' SHA-256.
ThroughputTable read_throughput_table(const std::string& path, std::string* file_sha256 = nullptr);

/// The step time of an arbitrary pack from a table of identical-job packs:
///   t(pack) = f(R) + g(R) x W,  R = sum of batch_j (rows), W = sum of batch_j x rank_j,
/// with f and g piecewise linear in R through knots at the table's distinct R.  At a knot whose
/// points have at least two distinct W, (f, g) is the least-squares line t = f + g W (g clamped to
/// >= 0, then f to >= 0), which passes through the points when there are two W (or the points are
/// collinear); at a knot with one W, g is interpolated linearly in R from the knots that determine
/// it (held constant beyond them; 0 when no knot does, i.e. a one-rank table ignores rank) and f is
/// the mean of t - g W, which reproduces the knot's point(s) exactly.  Then g and f are made
/// non-decreasing in R (pool-adjacent-violators, weighted by points), so a pack never gets faster by
/// adding rows; a monotone table keeps its values.  Beyond the last knot f and g continue the last
/// segment's slope; below the first knot the first segment's, but f never below f(R1) R / R1; a
/// one-knot table scales f in proportion to R (as a compute-bound CPU does) and keeps g constant.
/// Job count and target modules are not variables: the table is for one target set.
class ThroughputModel {
 public:
  /// Fits the model to `table` (non-empty).
  explicit ThroughputModel(const ThroughputTable& table);
  /// Seconds of one packed step of `rows` rows and `rank_rows` rank-weighted rows (> 0 for rows >= 1).
  double step_seconds(double rows, double rank_rows) const;
  /// f(R), seconds.
  double f(double rows) const;
  /// g(R), seconds per rank-weighted row.
  double g(double rows) const;
  /// The knots: rows, f, g and whether the table determined g there.
  nlohmann::json to_json() const;
  /// The table the model was fitted to.
  const ThroughputTable& table() const noexcept { return table_; }

 private:
  double interp(const std::vector<double>& y, double rows, bool floor_proportional) const;
  ThroughputTable table_;
  std::vector<double> r_, f_, g_;
  std::vector<bool> g_known_;
};

// ---- schedules and their simulation ----------------------------------------------------------------

/// One job as the planner sees it.
struct PlanJob {
  std::string name;
  int steps = 1;            ///< steps to run
  int batch = 1;            ///< rows per step
  int rank = 1;
  std::int64_t bytes = 0;   ///< adapter + activation bytes
};

/// A planning problem: the jobs, the memory per worker, the workers and the step-time model.
struct PlanProblem {
  std::vector<PlanJob> jobs;
  std::int64_t fixed_bytes = 0;   ///< base + overhead
  std::int64_t memory_limit = 0;  ///< per worker
  int workers = 1;
  const ThroughputModel* throughput = nullptr;  ///< not owned, must outlive the problem
};

/// A schedule: per worker, an ordered list of groups of job indices (into PlanProblem::jobs).
struct Schedule {
  std::vector<std::vector<std::vector<int>>> workers;
};

/// One group's timing in a simulated schedule.
struct GroupRun {
  int worker = 0;
  std::vector<int> jobs;         ///< job indices, as scheduled
  double start = 0, end = 0;     ///< seconds from the start of the schedule
  std::vector<double> job_end;   ///< per job of `jobs`, when it leaves the pack
  std::int64_t peak_bytes = 0;   ///< fixed bytes + the group's jobs' bytes (at its start)
};

/// A simulated schedule.
struct Simulation {
  double makespan = 0;                ///< max over workers of their total time
  std::vector<double> worker_seconds; ///< per worker
  std::vector<GroupRun> groups;       ///< worker by worker, in order
  int max_concurrent = 0;             ///< most jobs running at one time, over all workers
  int max_group_jobs = 0;             ///< largest group
};

/// Seconds a group takes: the jobs start together; while m jobs remain the pack steps at
/// throughput->step_seconds(their rows, their rank rows); each job leaves after its steps.  Fills
/// `job_end` (per job of `jobs`, seconds from the group's start) when given.
double group_seconds(const PlanProblem& p, const std::vector<int>& jobs, std::vector<double>* job_end = nullptr);

/// Simulates `s`: each worker runs its groups back to back.  Throws RuntimeError when a group
/// exceeds the memory limit or the schedule does not hold every job exactly once.
Simulation simulate(const PlanProblem& p, const Schedule& s);

/// Every job alone, jobs dealt round-robin to the workers in the given order.
Schedule sequential_schedule(const PlanProblem& p);
/// Groups filled in the given order while the next job fits; each to the first free worker.
Schedule max_pack_schedule(const PlanProblem& p);
/// Longest-processing-time first: jobs by solo time descending; each group takes, in that order,
/// every remaining job that fits; groups by duration descending, each to the least-loaded worker.
Schedule lpt_schedule(const PlanProblem& p);

/// The planner's answer and how it was found.
struct PlanResult {
  Schedule schedule;
  double makespan = 0;
  std::string how;  ///< one sentence: the method that produced it and whether it is optimal
};

/// Minimises the simulated makespan under the memory limit.  With at most `exact_max_jobs` jobs
/// (<= 20) and an affordable cost (3^K / 2 subset pairs x max(1, workers - 1) <= 4e8) it is exact in the
/// model: a dynamic program gives the least total group time of every job subset (a set partition
/// into fitting groups), then the best split of the jobs over the workers.  Otherwise: local search
/// from the best baseline (move a job to another or a new group, swap two jobs, merge two groups,
/// move a group to another worker; first improvement in a seeded order, then random kicks, keeping
/// the best), deterministic given `seed`.  The result is never worse than any baseline: the best
/// baseline is returned when nothing beats it.  Throws InputError when a job alone does not fit.
PlanResult plan_schedule(const PlanProblem& p, std::uint64_t seed, int exact_max_jobs = 16);

// ---- a whole search, with optional successive halving ------------------------------------------------

/// One round of a search: all jobs when there is no early stopping; with successive halving round i
/// runs the survivors from rung i-1 (0 for the first) to rung i (the last round: to each job's
/// steps).  The survivors of a round are ceil(n / eta) of the previous round's n; which survive is
/// known only when training, so the estimate takes the most expensive ones: the longest solo time
/// from the rung to the job's last step (ties: the earlier job).
struct SearchRound {
  int index = 0;
  int from_step = 0;           ///< steps done before the round
  int to_step = -1;            ///< rung ending the round; -1 = each job's own steps
  std::vector<int> jobs;       ///< indices into the space's jobs
  PlanProblem problem;         ///< the round's jobs (steps = the round's steps)
};

/// The rounds of `space` (one round without early stopping).
std::vector<SearchRound> search_rounds(const SearchSpace& space, const MemoryModel& mem, const ThroughputModel& tp,
                                       int workers);

/// A method's schedule of a whole search: per round a schedule and its simulation; the makespan is
/// the sum of the rounds' (a round starts when the previous one has ended, since halving needs all
/// validation losses at the rung).
struct SearchPlan {
  std::string method;                 ///< sequential, max-pack, lpt or plan
  std::vector<Schedule> schedules;    ///< per round
  std::vector<Simulation> runs;       ///< per round
  std::vector<double> round_start;    ///< per round, seconds
  double makespan = 0;
  int groups = 0;                     ///< over all rounds
  int max_concurrent = 0;
  int max_group_jobs = 0;
  std::string how;                    ///< for plan: how each round was chosen
};

/// The four methods (sequential, max-pack, lpt, plan, in that order) on every round.
std::vector<SearchPlan> plan_search(const std::vector<SearchRound>& rounds, std::uint64_t seed, int exact_max_jobs = 16);

}  // namespace icmlkit::sched
