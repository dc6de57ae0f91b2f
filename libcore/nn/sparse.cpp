#include "nn/sparse.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "util/error.hpp"

namespace icmlkit::nn {

nlohmann::json SparseOptions::to_json() const {
  return {{"method", sparse_method_name(method)},
          {"density", density},
          {"update_every", update_every},
          {"prune_rate", prune_rate},
          {"prune_rate_min", prune_rate_min},
          {"prune_schedule", prune_schedule_name(schedule)},
          {"block", block},
          {"local_steps", local_steps},
          {"warmup", warmup},
          {"density_lr", density_lr},
          {"code_warmup", code_warmup},
          {"code_lr", code_lr},
          {"code_steps", code_steps}};
}

SparseMethod parse_sparse_method(const std::string& s) {
  if (s == "dense") return SparseMethod::dense;
  if (s == "static") return SparseMethod::fixed;
  if (s == "set") return SparseMethod::set;
  if (s == "rigl") return SparseMethod::rigl;
  if (s == "smet") return SparseMethod::smet;
  throw UsageError(fmt::format("unknown sparse method '{}' (dense, static, set, rigl or smet)", s), "--sparse");
}

std::string sparse_method_name(SparseMethod m) {
  switch (m) {
    case SparseMethod::dense: return "dense";
    case SparseMethod::fixed: return "static";
    case SparseMethod::set: return "set";
    case SparseMethod::rigl: return "rigl";
    case SparseMethod::smet: return "smet";
  }
  return "?";
}

PruneSchedule parse_prune_schedule(const std::string& s) {
  if (s == "cosine") return PruneSchedule::cosine;
  if (s == "linear") return PruneSchedule::linear;
  if (s == "constant") return PruneSchedule::constant;
  throw UsageError(fmt::format("unknown prune schedule '{}' (cosine, linear or constant)", s), "--prune-schedule");
}

std::string prune_schedule_name(PruneSchedule s) {
  switch (s) {
    case PruneSchedule::cosine: return "cosine";
    case PruneSchedule::linear: return "linear";
    case PruneSchedule::constant: return "constant";
  }
  return "?";
}

void resolve_sparse_options(SparseOptions& o, bool warmup_given) noexcept {
  if (o.method != SparseMethod::smet) return;
  o.local_steps = true;
  o.density_lr = true;
  if (!warmup_given) o.warmup = 100;  // op_decay_steps
}

void check_sparse_options(const SparseOptions& o) {
  if (!(o.density > 0.0 && o.density <= 1.0))
    throw UsageError(fmt::format("the density must lie in (0, 1] (got {})", o.density), "--density");
  if (o.update_every < 1) throw UsageError(fmt::format("the topology update interval must be >= 1 step (got {})", o.update_every), "--update-every");
  if (o.block < 1) throw UsageError(fmt::format("the sparse block size must be >= 1 (got {})", o.block), "--sparse-block");
  if (!(o.prune_rate >= 0.0 && o.prune_rate < 1.0))
    throw UsageError(fmt::format("the prune fraction must lie in [0, 1) (got {})", o.prune_rate), "--prune-rate");
  if (!(o.prune_rate_min >= 0.0 && o.prune_rate_min < 1.0))
    throw UsageError(fmt::format("the final prune fraction must lie in [0, 1) (got {})", o.prune_rate_min), "--prune-rate-min");
  if (o.warmup < 0) throw UsageError(fmt::format("the momentum warm-up must be >= 0 steps (got {})", o.warmup), "--sparse-warmup");
  if (o.probe_steps < 0) throw UsageError(fmt::format("the probe window must be >= 0 steps (got {})", o.probe_steps), "--probe-steps");
  if (o.probe_control && (o.probe_steps < 1 || o.probe_steps >= o.update_every))
    throw UsageError(fmt::format("--probe-control pairs the {} probe steps after an update with its control: they must lie in [1, --update-every "
                                 "{}) so that the next update does not fall inside the window",
                                 o.probe_steps, o.update_every),
                     "--probe-steps");
  if (o.probe_control && o.density >= 1.0)
    throw UsageError("--probe-control needs --density below 1 (at density 1 every matrix stays dense and no topology update happens)",
                     "--probe-control");
  if (o.schedule != PruneSchedule::constant && o.prune_rate_min > o.prune_rate)
    throw UsageError(fmt::format("the final prune fraction {} exceeds p0 = {}: the {} schedule decays from --prune-rate to --prune-rate-min",
                                 o.prune_rate_min, o.prune_rate, prune_schedule_name(o.schedule)),
                     "--prune-rate-min");
  if (o.code_steps && !o.local_steps)
    throw UsageError("--sparse-code-form steps changes the local step counts, which need --sparse-local-steps or --sparse smet",
                     "--sparse-code-form");
}

double prune_fraction(const SparseOptions& o, std::int64_t step, std::int64_t total) noexcept {
  const double p0 = o.prune_rate, p1 = o.prune_rate_min;
  const double T = double(std::max<std::int64_t>(total, 1)), t = double(step);
  switch (o.schedule) {
    case PruneSchedule::cosine: return p1 + (p0 - p1) * (1.0 + std::cos(M_PI * t / T)) / 2.0;
    case PruneSchedule::linear: return p0 + (p1 - p0) * std::min(t / T, 1.0);
    case PruneSchedule::constant: return p0;
  }
  return p0;
}

std::vector<std::int32_t> SparseMask::entries() const {
  std::vector<std::int32_t> e;
  e.reserve(active_entries());
  for (std::int32_t b : blocks) {
    const auto [lo, hi] = block_range(b);
    for (std::size_t j = lo; j < hi; ++j) e.push_back(static_cast<std::int32_t>(j));
  }
  return e;
}

void zero_blocks(const SparseMask& mask, const std::vector<std::int32_t>& blocks, float* w) noexcept {
  for (std::int32_t b : blocks) {
    const auto [lo, hi] = mask.block_range(b);
    std::fill(w + lo, w + hi, 0.0f);
  }
}

std::size_t SparseMask::active_entries() const noexcept {
  std::size_t n = blocks.size() * std::size_t(block);
  if (!blocks.empty() && std::size_t(blocks.back()) == num_blocks() - 1) n -= num_blocks() * std::size_t(block) - numel;
  return n;
}

std::size_t sparse_block_count(std::size_t numel, int block, double density) noexcept {
  const std::size_t nb = (numel + std::size_t(block) - 1) / std::size_t(block);
  return std::min(nb, std::max<std::size_t>(1, static_cast<std::size_t>(std::floor(double(nb) * density))));
}

SparseMask random_mask(std::size_t numel, int block, double density, Rng& rng) {
  SparseMask m;
  m.numel = numel;
  m.block = block;
  const std::size_t nb = m.num_blocks(), k = sparse_block_count(numel, block, density);
  std::vector<std::int32_t> all(nb);
  std::iota(all.begin(), all.end(), 0);
  for (std::size_t i = 0; i < k; ++i) std::swap(all[i], all[i + rng.below(nb - i)]);
  m.blocks.assign(all.begin(), all.begin() + std::ptrdiff_t(k));
  std::sort(m.blocks.begin(), m.blocks.end());
  return m;
}

std::size_t prune_count(const SparseMask& mask, double p) noexcept {
  const std::size_t n = mask.blocks.size();
  const std::size_t keep = std::max<std::size_t>(1, static_cast<std::size_t>(double(n) * (1.0 - p)));
  const std::size_t inactive = mask.num_blocks() - n;
  return std::min(n > keep ? n - keep : 0, inactive);
}

namespace {
/// Sum of |x| over block b of `m`'s layout.
double block_abs_sum(const SparseMask& m, const float* x, std::int32_t b) {
  const auto [lo, hi] = m.block_range(b);
  double s = 0;
  for (std::size_t j = lo; j < hi; ++j) s += std::fabs(double(x[j]));
  return s;
}

/// The `n` candidates of largest score (ties: lower index first), increasing.
template <class Score>
std::vector<std::int32_t> top_n(std::vector<std::int32_t> cand, std::size_t n, Score score) {
  n = std::min(n, cand.size());
  std::vector<std::pair<double, std::int32_t>> s;
  s.reserve(cand.size());
  for (std::int32_t c : cand) s.emplace_back(score(c), c);
  std::partial_sort(s.begin(), s.begin() + std::ptrdiff_t(n), s.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::int32_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = s[i].second;
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

std::vector<std::int32_t> magnitude_prune(const SparseMask& mask, const float* w, std::size_t n) {
  // the n smallest = the top n of -score
  return top_n(mask.blocks, n, [&](std::int32_t b) { return -block_abs_sum(mask, w, b); });
}

std::vector<std::int32_t> score_regrow(const SparseMask& mask, const std::vector<float>& score, std::size_t n) {
  const std::size_t nb = mask.num_blocks();
  if (score.size() != nb) throw UsageError(fmt::format("regrowth: {} scores for {} blocks", score.size(), nb));
  std::vector<std::int32_t> cand;
  cand.reserve(nb - mask.blocks.size());
  for (std::size_t b = 0, a = 0; b < nb; ++b) {
    if (a < mask.blocks.size() && std::size_t(mask.blocks[a]) == b) {
      ++a;
      continue;
    }
    cand.push_back(static_cast<std::int32_t>(b));
  }
  return top_n(std::move(cand), n, [&](std::int32_t b) { return double(score[std::size_t(b)]); });
}

std::vector<std::int32_t> gradient_regrow(const SparseMask& mask, const std::vector<std::int32_t>& pruned, const float* g,
                                          std::size_t n) {
  const std::size_t nb = mask.num_blocks();
  std::vector<char> kept(nb, 0);
  for (std::int32_t b : mask.blocks) kept[std::size_t(b)] = 1;
  for (std::int32_t b : pruned) kept[std::size_t(b)] = 0;
  std::vector<std::int32_t> cand;
  for (std::size_t b = 0; b < nb; ++b)
    if (!kept[b]) cand.push_back(static_cast<std::int32_t>(b));
  return top_n(std::move(cand), n, [&](std::int32_t b) { return block_abs_sum(mask, g, b); });
}

void apply_topology(SparseMask& mask, const std::vector<std::int32_t>& pruned, const std::vector<std::int32_t>& grown) {
  std::vector<std::int32_t> kept;
  kept.reserve(mask.blocks.size());
  std::set_difference(mask.blocks.begin(), mask.blocks.end(), pruned.begin(), pruned.end(), std::back_inserter(kept));
  std::vector<std::int32_t> out;
  out.reserve(kept.size() + grown.size());
  std::set_union(kept.begin(), kept.end(), grown.begin(), grown.end(), std::back_inserter(out));
  mask.blocks = std::move(out);
}

std::uint64_t sparse_seed(std::uint64_t seed, std::int64_t update, int index) noexcept {
  return derive_seed(derive_seed(derive_seed(seed, 0x534d4554ULL), std::uint64_t(update)), std::uint64_t(index));
}

std::vector<float> uniform_scores(std::size_t n, Rng& rng) {
  std::vector<float> s(n);
  for (auto& x : s) x = static_cast<float>(rng.bits() >> 40) * 0x1.0p-24f;
  return s;
}

}  // namespace icmlkit::nn
