// Named model shapes shared by lm-init and lm-train.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "lm/config.hpp"
#include "lm/model.hpp"

namespace icmlkit::lm {

/// Fills the size fields of `c` from preset `name` — tiny (vocab 512, d 64, 2 layers, 4/2 heads,
/// d_ff 172, n_ctx 512), 7m (vocab 4096, d 256, 6 layers, 8/4 heads, d_ff 688, n_ctx 1024, ~6.6M
/// weights), 100m (vocab 32000, d 768, 12 layers, 12/4 heads, d_ff 2048, n_ctx 2048) — except the
/// fields whose flag `is_set("--d-model")` etc. reports as given explicitly.  Throws UsageError
/// for an unknown name.
void apply_preset(const std::string& name, ModelConfig& c, const std::function<bool(const char* flag)>& is_set);

/// The shape used when neither a preset nor flags say otherwise: the tiny preset with vocab_size 0
/// (to be set from a tokenizer or --vocab-size).
ModelConfig default_shape();

/// Adds --d-model, --n-layers, --n-heads, --n-kv-heads, --d-ff and --n-ctx (with range checks)
/// writing into `c`.
void add_shape_flags(CLI::App& app, ModelConfig& c);

/// The text flags of a mixture-of-experts model (the numbers go straight into ModelConfig::moe).
struct MoeFlags {
  std::string kind;               ///< --moe: "" (dense), "standard" or "latent"
  std::string act = "swiglu";     ///< --expert-act
  std::string router = "softmax"; ///< --router
  bool no_norm_topk = false;      ///< --no-norm-topk
};

/// Adds --moe, --experts, --top-k, --d-expert, --d-shared, --latent, --expert-act, --router,
/// --routed-scaling and --no-norm-topk (issue 31), writing into c.moe and `f`.  Call after c.moe
/// holds the defaults to show (e.g. 8 experts, top-2).
void add_moe_flags(CLI::App& app, ModelConfig& c, MoeFlags& f);

/// Applies the parsed MoE flags once the shape is final: with --moe every block becomes moe
/// (standard) or latent-moe (latent); d_expert defaults to d_ff, d_latent to d_model / 4.
/// Throws UsageError for an MoE flag without --moe, --latent with --moe standard, top-K above N
/// or a latent width above d_model.
void apply_moe_flags(const MoeFlags& f, ModelConfig& c, const std::function<bool(const char* flag)>& is_set);

/// The flags of a recurrent-depth model (issue 36): --arch and the block counts.
struct RecdepthFlags {
  std::string arch = "llama";  ///< --arch: llama (the block list of the other flags) or recurrent-depth
  int prelude = 1, core = 2, coda = 1;  ///< --prelude P, --core C, --coda D
  bool no_qk_bias = false;              ///< --no-qk-bias
};

/// Adds --arch, --prelude, --core, --coda, --mean-recurrence, --backprop-depth and --no-qk-bias,
/// writing into `f` and c.recdepth.
void add_recdepth_flags(CLI::App& app, ModelConfig& c, RecdepthFlags& f);

/// Applies them once the shape is final: with --arch recurrent-depth the blocks become P
/// recdepth-prelude, C recdepth-core and D recdepth-coda (n_layers = P + C + D), with Huginn's
/// settings: qk biases, embed_scale sqrt(d_model), state_std sqrt(2/5) (raven_config_minimal's
/// init_values), interleaved RoPE pairs unless --rope-style is given, mean_recurrence default 16, backprop_depth default
/// min(8, mean).  Throws UsageError for a recurrent-depth flag without it, or with --n-layers or --moe.
void apply_recdepth_flags(const RecdepthFlags& f, ModelConfig& c, const std::function<bool(const char* flag)>& is_set);

/// Huginn's initialisation of a recurrent-depth model (raven_modeling_minimal.py _init_weights,
/// "takase"): every matrix N(0, s^2) truncated to ±3 s with s = sqrt(2 / (5 d)), the attention and
/// MLP output projections s / sqrt(2 L_eff) with L_eff = P + C·mean_recurrence + D, norms 1,
/// biases 0; drawn from `seed` (one stream per tensor).
Model random_recdepth_model(const ModelConfig& config, std::uint64_t seed);

}  // namespace icmlkit::lm
