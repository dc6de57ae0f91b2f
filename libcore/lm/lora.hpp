// LoRA adapters (Hu et al. 2021) as the Hugging Face PEFT library stores them: the in-memory
// adapter every tool shares, its PEFT directory (adapter_config.json + adapter_model.safetensors)
// and merging into a model.
//
// Math (peft tuners/lora/layer.py): y = W0 x + scaling · B (A (dropout x)), A [r, in], B [out, r],
// scaling = alpha / r, or alpha / sqrt(r) with rsLoRA.  In memory, B's rows follow OUR model's row
// order (a q/k matrix of a rope_style = interleaved model is interleaved, like its W); the PEFT
// files hold Hugging Face's rotate-half order, so the writer and the reader permute q/k lora_B rows
// exactly as the safetensors model writer permutes the base weights (gguf::permute_rope_rows).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/provenance.hpp"
#include "lm/model.hpp"

namespace CLI {
class App;
}

namespace icmlkit::lm {

/// The projections LoRA can adapt, in PEFT's names without "_proj": q, k, v, o (attention), gate,
/// up, down (the llama MLP).
inline const std::vector<std::string>& lora_target_names() {
  static const std::vector<std::string> names{"q", "k", "v", "o", "gate", "up", "down"};
  return names;
}

/// Hyperparameters of one adapter (adapter_config.json's r, lora_alpha, use_rslora, lora_dropout,
/// target_modules).
struct LoraConfig {
  int rank = 8;               ///< r >= 1
  double alpha = 16;          ///< lora_alpha
  bool rslora = false;        ///< scaling alpha / sqrt(r) instead of alpha / r
  double dropout = 0;         ///< lora_dropout p in [0, 1): applied to x before A in training only
  std::vector<std::string> targets{"q", "v"};  ///< subset of lora_target_names(), in that order
  /// alpha / r, or alpha / sqrt(r) with rslora.
  double scaling() const noexcept;
};

/// One adapted projection: layer `layer`'s `target` matrix W [out, in] becomes W + scaling B A.
struct LoraTensor {
  int layer = 0;
  std::string target;     ///< one of lora_target_names()
  int in = 0, out = 0;    ///< the base matrix's columns and rows
  std::vector<float> a;   ///< lora_A [rank, in], row-major
  std::vector<float> b;   ///< lora_B [out, rank], row-major, rows in our model's order
};

/// An adapter for one base model.
struct LoraAdapter {
  LoraConfig config;
  std::vector<LoraTensor> tensors;  ///< by layer, then target in lora_target_names() order
  std::string base_model;           ///< base_model_name_or_path (a path or id; informative)
  /// SHA-256 (hex) of the base model's weights as lm::weights_sha256 computes it, or "" when unknown
  /// (an adapter saved by PEFT): a reader refuses an adapter whose recorded hash differs.
  std::string base_sha256;
};

/// The shape [out, in] of `target` in layer `layer` of `config`.  Throws UsageError for an unknown
/// target, or a gate/up/down target on a block without a llama MLP.
std::pair<int, int> lora_target_shape(const ModelConfig& config, int layer, const std::string& target);

/// An adapter's trainable weights on `config`: the sum over layers and targets of rank (in + out).
/// Throws UsageError as lora_target_shape does.
std::int64_t lora_param_count(const ModelConfig& config, int rank, const std::vector<std::string>& targets);

/// Checks `c` against `config`: 1 <= rank <= min(in, out) of every adapted matrix, dropout in
/// [0, 1), alpha > 0 and finite, targets known and not repeated.  Throws UsageError naming the flag
/// (--lora-rank, --lora-targets, ...).
void check_lora_config(const LoraConfig& c, const ModelConfig& config);

/// SHA-256 (hex) of a model's weights: every tensor of the model contract, in order, as float32
/// bytes with its name (a fingerprint of the base an adapter was trained on; independent of the
/// file format the model was read from).  Each tensor (tensor_slots order) is hashed as its GGUF
/// name, a NUL, its [rows, cols] as two little-endian u64 (cols 0 for a vector) and its values,
/// q/k rows in Hugging Face (rotate-half) order whatever the model's rope_style, so a base's
/// native, GGUF and Hugging Face copies have one hash.  Throws RuntimeError for a model holding
/// f16 compute weights (hold_half).
std::string weights_sha256(const Model& model);

/// Writes `adapter` as a PEFT directory `dir` (created if missing): adapter_config.json (PEFT's
/// keys, plus "icmlkit": provenance and base_sha256) and adapter_model.safetensors (F32, keys
/// base_model.model.model.layers.{L}.{self_attn|mlp}.{T}_proj.lora_{A|B}.weight), each file
/// atomic.  Throws RuntimeError on I/O failure.
void write_peft_adapter(const std::string& dir, const LoraAdapter& adapter, const ModelConfig& base,
                        const io::Provenance& prov);

/// Reads a PEFT directory (or the adapter_config.json / adapter_model.safetensors inside it) for the
/// base `model`: F32/F16/BF16 tensors, per-module ranks from rank_pattern / alpha_pattern are
/// refused in one line (not supported), shapes checked against the base, q/k lora_B rows permuted
/// into our order.  Throws InputError (file and key named) for a missing or malformed file, an
/// unknown key, a shape that does not match the base, or a base_sha256 that differs from the
/// model's.
LoraAdapter read_peft_adapter(const std::string& dir, const Model& model);

/// W += scaling B A for every tensor of `adapter` (float accumulation of the rank-r product, one
/// fused pass per matrix).  Throws InputError when a shape does not match `model`.
void merge_lora(Model& model, const LoraAdapter& adapter);

/// The two files of a PEFT adapter given as its directory or as either file inside it:
/// {adapter_config.json, adapter_model.safetensors}.  Throws InputError for a path that is neither
/// (unreadable_file for one that does not exist).
std::pair<std::string, std::string> peft_adapter_files(const std::string& path);

/// Adds `--lora DIR` (a PEFT LoRA adapter directory merged into the model before it runs) to a
/// tool, writing into `dir`.
void add_lora_flag(CLI::App& app, std::string& dir);

/// A tool's --lora DIR: reads the adapter for `model` (read_peft_adapter), merges it (merge_lora),
/// and records in `prov` both adapter files with their SHA-256 as inputs and "lora": {dir, rank,
/// alpha, rslora, scaling, targets, tensors, base_sha256} in extra.  Returns the adapter.  Throws
/// what those throw (InputError, exit 1: another base, a malformed adapter).
LoraAdapter apply_lora(Model& model, const std::string& dir, io::Provenance& prov);

}  // namespace icmlkit::lm
