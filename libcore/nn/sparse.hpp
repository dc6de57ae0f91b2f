// Dynamic sparse training of the attention and MLP matrices (issue 30): SMET (Xiao, ..., Mocanu &
// Hoefler, ICML 2026, arXiv 2606.00888; reference code QiaoXiao7282/SMET @58706b2,
// sparselearning/core_dst.py `Masking`, optimizer_dst.py `Adam_block`) and the baselines its paper
// compares against: a static random mask, SET (Mocanu et al. 2018: magnitude prune, random regrow)
// and RigL (Evci et al. 2020: magnitude prune, regrow by gradient magnitude).
//
// A sparse matrix is split into blocks of `block` consecutive entries of its row-major storage
// (the last one shorter; block 1 = unstructured).  Its mask is the sorted list of active blocks;
// inactive entries are exactly zero.  Every `update_every` steps a fraction p_t of the active blocks
// with the smallest sum |w| is pruned and as many inactive blocks are regrown (at w = 0), so each
// matrix keeps its exact density.  The optimizer side (sparse Adam state, SMET's local steps,
// momentum warm-up and density-aware learning rate) is in nn/adamw.hpp.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/rng.hpp"

namespace icmlkit::nn {

/// `--sparse`: which topology the sparse matrices follow.
enum class SparseMethod {
  dense,   ///< no sparsity (the default)
  fixed,   ///< "static": a random mask drawn once, never updated
  set,     ///< SET: magnitude prune + uniform random regrow, one global Adam step count
  rigl,    ///< RigL: magnitude prune + regrow the inactive blocks of largest |dense gradient|
  smet,    ///< SMET: SET's topology with local steps, momentum warm-up and lr0 / d all on
};

/// How the prune fraction decays from p0 over the run (the reference's prune_rate_decay).
enum class PruneSchedule {
  cosine,    ///< p_t = p_min + (p0 - p_min)(1 + cos(pi t / T)) / 2 (CosineAnnealingLR, T = run steps)
  linear,    ///< p_t = p0 + (p_min - p0) min(t / T, 1)
  constant,  ///< p_t = p0
};

/// Sparse-training settings (all stored in the checkpoint and checked on resume).
struct SparseOptions {
  SparseMethod method = SparseMethod::dense;
  double density = 1.0;        ///< d in (0, 1]: active fraction of each sparse matrix's blocks
  int update_every = 100;      ///< topology update every u steps (the reference's update_frequency)
  double prune_rate = 0.2;     ///< p0 (the reference's prune_rate)
  double prune_rate_min = 0.005;  ///< the schedules' floor (the reference's eta_min / final_value)
  PruneSchedule schedule = PruneSchedule::cosine;
  int block = 1;               ///< entries per block (1 = unstructured)
  /// SMET's parts, one flag each (the paper's ablation ladder; all on for method smet):
  bool local_steps = false;    ///< per-entry Adam step counts, reset with m = v = 0 at regrowth
  int warmup = 0;              ///< W: momentum warm-up over W local steps (0 = off)
  bool density_lr = false;     ///< learning rate lr0 / d on each sparse matrix (d its density)
  /// The reference code's forms where it differs from the paper (default off = the paper's):
  bool code_warmup = false;    ///< m <- min(t/W, 1) m stored (compounds), also on dense tensors for t < W
  bool code_lr = false;        ///< lr divided cumulatively by each sparse matrix's density in turn
  bool code_steps = false;     ///< a regrown entry's step restarts at 1, so its first update uses t = 2
  int probe_steps = 10;        ///< probe-batch losses logged at u + 1 .. u + probe_steps
  /// The paired spike control: at each topology update also train probe_steps steps from the
  /// same state on the same batches without the update, log that branch's probe losses, then
  /// rewind (the run's trajectory is unchanged); it stops at the end of the run.  Needs
  /// 1 <= probe_steps < update_every and a density below 1.  Like probe_steps, not a trajectory setting.
  bool probe_control = false;
  /// Whether any matrix is sparse.
  bool enabled() const noexcept { return method != SparseMethod::dense; }
  /// Whether the topology changes during training (SET, RigL, SMET).
  bool dynamic() const noexcept { return method == SparseMethod::set || method == SparseMethod::rigl || method == SparseMethod::smet; }
  /// The settings as JSON (the checkpoint's /train options under "sparse").
  nlohmann::json to_json() const;
};

/// Parses "dense", "static", "set", "rigl" or "smet"; throws UsageError (--sparse) otherwise.
SparseMethod parse_sparse_method(const std::string& name);
/// The CLI name of a method ("static" for fixed).
std::string sparse_method_name(SparseMethod m);
/// Parses "cosine", "linear" or "constant"; throws UsageError (--prune-schedule) otherwise.
PruneSchedule parse_prune_schedule(const std::string& name);
std::string prune_schedule_name(PruneSchedule s);

/// Fills in what `--sparse smet` implies: local steps, the density-aware learning rate and, unless
/// one was given (`warmup_given`), the warm-up W = 100 (the reference's op_decay_steps).
void resolve_sparse_options(SparseOptions& opt, bool warmup_given) noexcept;

/// Refuses settings no run can use: density outside (0, 1], update interval < 1, block < 1, p0 or
/// p_min outside [0, 1), p_min > p0 (a decaying schedule), W < 0, probe steps < 0, the code's step
/// form without local steps.  Throws UsageError naming the flag.
void check_sparse_options(const SparseOptions& opt);

/// The prune fraction p_t of the topology update after `step` steps of `total` (PruneSchedule).
double prune_fraction(const SparseOptions& opt, std::int64_t step, std::int64_t total) noexcept;

/// The topology of one sparse matrix: `numel` entries in blocks of `block`, the active ones listed.
struct SparseMask {
  std::size_t numel = 0;
  int block = 1;
  std::vector<std::int32_t> blocks;  ///< active block indices, strictly increasing
  /// Blocks in the matrix: ceil(numel / block).
  std::size_t num_blocks() const noexcept { return (numel + std::size_t(block) - 1) / std::size_t(block); }
  /// The active entries (flat indices, increasing).
  std::vector<std::int32_t> entries() const;
  /// Number of active entries.
  std::size_t active_entries() const noexcept;
  /// Active entries / numel.
  double density() const noexcept { return numel ? double(active_entries()) / double(numel) : 0.0; }
  /// The flat entries [first, second) of block `b` (the last block may be shorter).
  std::pair<std::size_t, std::size_t> block_range(std::int32_t b) const noexcept {
    const std::size_t lo = std::size_t(b) * std::size_t(block);
    return {lo, std::min(numel, lo + std::size_t(block))};
  }
};

/// Sets the entries of `blocks` (of `mask`'s layout) in w [numel] to 0.
void zero_blocks(const SparseMask& mask, const std::vector<std::int32_t>& blocks, float* w) noexcept;

/// Blocks of a matrix of `numel` entries at `density`: max(1, floor(num_blocks * density)).
std::size_t sparse_block_count(std::size_t numel, int block, double density) noexcept;

/// A uniformly random mask with exactly sparse_block_count() active blocks (a partial
/// Fisher-Yates shuffle of the block indices by `rng`).  The reference draws each block
/// independently (Bernoulli(d)), so its count varies; ours is exact.
SparseMask random_mask(std::size_t numel, int block, double density, Rng& rng);

/// Number of blocks a topology update prunes (and regrows): n_active - max(1, floor(n_active (1 - p)))
/// as the reference, but at most the number of inactive blocks, so that as many can be regrown and
/// the density stays exact (a full matrix is left as it is).
std::size_t prune_count(const SparseMask& mask, double p) noexcept;

/// Magnitude pruning (the reference's magnitude_prune_block): the `n` active blocks of `mask` with
/// the smallest sum |w| over their entries of `w` [numel], ties by lower block index; returned
/// increasing.
std::vector<std::int32_t> magnitude_prune(const SparseMask& mask, const float* w, std::size_t n);

/// Random regrowth (the reference's random_grow_block): among the blocks that were not active
/// before the update (`mask`, pruned ones included, so a pruned block cannot return at once), the
/// `n` with the largest `score` [num_blocks] (uniform draws: a uniformly random choice; ties by
/// lower index); returned increasing.
std::vector<std::int32_t> score_regrow(const SparseMask& mask, const std::vector<float>& score, std::size_t n);

/// RigL's regrowth: among the blocks not kept (inactive before the update or pruned now, as
/// RigL's ArgTopK over the connections outside the kept set), the `n` with the largest sum |g| of
/// the dense gradient `g` [numel]; ties by lower index; returned increasing.
std::vector<std::int32_t> gradient_regrow(const SparseMask& mask, const std::vector<std::int32_t>& pruned, const float* g,
                                          std::size_t n);

/// Replaces the `pruned` blocks of `mask` by `grown` (both increasing, disjoint from each other's
/// role: pruned active, grown not kept), keeping the list sorted.
void apply_topology(SparseMask& mask, const std::vector<std::int32_t>& pruned, const std::vector<std::int32_t>& grown);

/// The seed of matrix `index`'s random draws at topology update `update` (0 = the initial mask),
/// derived from the run's seed, so that a resumed run draws the same.
std::uint64_t sparse_seed(std::uint64_t seed, std::int64_t update, int index) noexcept;

/// Uniform scores in [0, 1) for the `n` blocks of one regrowth, from `rng` (floats, as torch.rand).
std::vector<float> uniform_scores(std::size_t n, Rng& rng);

}  // namespace icmlkit::nn
