// Which combinations each runner supports: the one table (model contract v2, lm/README.md).
//
// A runner (the CPU engine, the CUDA engine, the trainer) asks here before it runs something a
// model or a forward call asks for, and refuses what it lacks with one UsageError (exit 2)
// that names the feature and says what to do instead.
#pragma once

#include <string>

#include "lm/config.hpp"

namespace icmlkit::lm {

/// What runs a model.
enum class Runner { cpu_engine, cuda_engine, trainer };

/// What a model or a forward call may ask for.
enum class Feature {
  block_llama,        ///< a block of type llama
  block_moe,          ///< a block of type moe (issue 31)
  block_latent_moe,   ///< a block of type latent-moe (issue 31)
  block_mlstm_hybrid, ///< a block of type mlstm-hybrid (issue 35)
  block_recdepth,     ///< the recdepth-prelude / core / coda blocks of a recurrent-depth model (issue 36)
  stop_after,         ///< ForwardOptions::stop_after (early exit)
  block_schedule,     ///< ForwardOptions::schedule (repeated or omitted blocks)
  adapters,           ///< ForwardOptions::adapters (unmerged LoRA)
  multi_sequence,     ///< rows of several sequences in one pass (BatchRow::seq)
  attention_records,  ///< ForwardOptions::attn_rows
};

/// "CPU engine", "CUDA engine", "trainer".
const char* runner_name(Runner r) noexcept;
/// "early exit (stop_after)", ...
const char* feature_name(Feature f) noexcept;

/// The table: whether `r` runs `f`.
bool supports(Runner r, Feature f) noexcept;

/// Throws UsageError "the <runner> does not support <feature> (<instead>)" unless supported.
void require(Runner r, Feature f, const std::string& instead = "");

/// The feature a block type needs.
Feature block_feature(BlockType t) noexcept;

/// Requires every block of `config` (UsageError naming the first unsupported block and type).
void require_blocks(Runner r, const ModelConfig& config);

}  // namespace icmlkit::lm
