// Growth of trained mixture-of-experts checkpoints (issue 32; "Beyond Sunk Costs", arXiv
// 2510.08008, as its secondary sources describe it: the paper body is not public).
//
// Depth: every block copied whole (attention, norms, router, experts) either in place
// (interposition: l1 l1' l2 l2' ...) or as a repeated stack (l1 .. ln l1 .. ln).  Neither keeps the
// function.  Width: each moe block's N experts become f N, top-K becomes f K; the copies are the
// source experts plus Gaussian noise of alpha x the source tensor's standard deviation (their
// router rows too), or random new experts (the baseline).  At alpha = 0 a duplicated expert is
// selected with its copies and the block's output is unchanged (an unnormalised sigmoid router
// needs routed_scaling / f for that, which grow_width applies).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "lm/model.hpp"

namespace icmlkit::lm {

/// How depth growth places the copies.
enum class DepthGrowth {
  interpose,  ///< each block repeated in place, f times: l1 l1 .. l2 l2 .. (the paper's choice)
  stack,      ///< the whole stack repeated f times: l1 .. ln l1 .. ln
};

/// How width growth makes the new experts.
enum class WidthGrowth {
  noisy,   ///< copies of the source experts (and router rows) + N(0, (alpha sigma)^2) per tensor
  random,  ///< new experts N(0, sigma^2) and router rows N(0, sigma_router^2); selection bias 0
};

/// "interpose" / "stack" and "noisy" / "random"; the parsers throw UsageError naming `flag`.
const char* depth_growth_name(DepthGrowth g) noexcept;
const char* width_growth_name(WidthGrowth g) noexcept;
DepthGrowth parse_depth_growth(const std::string& name, const std::string& flag);
WidthGrowth parse_width_growth(const std::string& name, const std::string& flag);

/// `m` with n_layers x factor blocks placed by `g` (block_types repeated with them).  Works for
/// any block type.  Throws UsageError when factor < 2.
Model grow_depth(const Model& m, DepthGrowth g, int factor);

/// `m` with every moe / latent-moe block's experts multiplied by `factor` (n_experts and top_k
/// times factor; the shared expert and the latent projections unchanged).  Expert e's copies are
/// experts e + j N (j = 1 .. factor - 1).  noisy: each copied tensor (router rows, gate / up /
/// down experts) gets i.i.d. N(0, (alpha sigma)^2), sigma the population standard deviation of the
/// source layer's whole tensor, the selection bias copied unchanged; random: new rows N(0, sigma^2)
/// (alpha unused).  A sigmoid router without norm_topk has routed_scaling divided by factor.
/// Noise streams come from `seed` (one derived stream per layer and tensor).  Throws UsageError
/// for a model without moe blocks, factor < 2, alpha < 0 / not finite, or an alpha so large that a
/// grown weight is not finite.
Model grow_width(const Model& m, WidthGrowth g, int factor, double alpha, std::uint64_t seed);

/// The recipe of one growth step as JSON ({"depth": "interpose", "factor": 2} or {"width":
/// "noisy", "factor": 2, "alpha": 0.01, "seed": 1}) for the output's provenance.
nlohmann::json depth_recipe(DepthGrowth g, int factor);
/// The growth steps a native checkpoint records in its provenance (root attribute meta, key
/// "growth"; lm-train carries its --init model's forward), or an empty array (other formats, a
/// model never grown).  Throws InputError for an unreadable native file.
nlohmann::json growth_history(const std::string& path);
nlohmann::json width_recipe(WidthGrowth g, int factor, double alpha, std::uint64_t seed);

}  // namespace icmlkit::lm
