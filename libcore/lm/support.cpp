#include "lm/support.hpp"

#include <fmt/format.h>

#include "util/error.hpp"

namespace icmlkit::lm {

const char* runner_name(Runner r) noexcept {
  switch (r) {
    case Runner::cpu_engine: return "CPU engine";
    case Runner::cuda_engine: return "CUDA engine";
    case Runner::trainer: return "trainer";
  }
  return "?";
}

const char* feature_name(Feature f) noexcept {
  switch (f) {
    case Feature::block_llama: return "the llama block";
    case Feature::block_moe: return "the moe block";
    case Feature::block_latent_moe: return "the latent-moe block";
    case Feature::block_mlstm_hybrid: return "the mlstm-hybrid block";
    case Feature::block_recdepth: return "recurrent-depth blocks";
    case Feature::stop_after: return "stopping after a block (early exit)";
    case Feature::block_schedule: return "a block schedule (repeated or omitted blocks)";
    case Feature::adapters: return "unmerged adapters";
    case Feature::multi_sequence: return "rows of several sequences in one pass";
    case Feature::attention_records: return "attention records";
  }
  return "?";
}

bool supports(Runner r, Feature f) noexcept {
  switch (r) {
    case Runner::cpu_engine: return true;  // every feature of the contract so far
    case Runner::cuda_engine: return f == Feature::block_llama;
    case Runner::trainer:  // packed windows; nn::llama_loss takes a schedule
      return f == Feature::block_llama || f == Feature::block_moe || f == Feature::block_latent_moe ||
             f == Feature::block_mlstm_hybrid || f == Feature::block_recdepth || f == Feature::multi_sequence ||
             f == Feature::block_schedule;
  }
  return false;
}

void require(Runner r, Feature f, const std::string& instead) {
  if (supports(r, f)) return;
  throw UsageError(fmt::format("the {} does not support {}{}", runner_name(r), feature_name(f),
                               instead.empty() ? std::string() : " (" + instead + ")"));
}

Feature block_feature(BlockType t) noexcept {
  switch (t) {
    case BlockType::llama: return Feature::block_llama;
    case BlockType::moe: return Feature::block_moe;
    case BlockType::latent_moe: return Feature::block_latent_moe;
    case BlockType::mlstm_hybrid: return Feature::block_mlstm_hybrid;
    case BlockType::recdepth_prelude:
    case BlockType::recdepth_core:
    case BlockType::recdepth_coda: return Feature::block_recdepth;
  }
  return Feature::block_llama;
}

void require_blocks(Runner r, const ModelConfig& c) {
  for (int l = 0; l < c.n_layers; ++l)
    if (!supports(r, block_feature(c.block_type(l))))
      throw UsageError(fmt::format("block {}: the {} does not run block type '{}'", l, runner_name(r),
                                   block_type_name(c.block_type(l))));
}

}  // namespace icmlkit::lm
