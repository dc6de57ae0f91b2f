// Named model shapes shared by lm-init and lm-train.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "lm/config.hpp"

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

}  // namespace icmlkit::lm
