// Prompt input shared by the generating tools: token-id lists and text encoding with BOS.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "io/provenance.hpp"
#include "lm/config.hpp"
#include "lm/sampler.hpp"
#include "lm/tokenizer.hpp"

namespace icmlkit::lm {

/// Adds --prompt, --prompt-file and --prompt-ids (raw option values; see parse_token_ids and
/// encode_prompt) and --prompt-tokens N (0..2^24, 0 = all; pass it to resolve_prompt) to a
/// generating tool.
void add_prompt_flags(CLI::App& app, std::string& text, std::string& file, std::string& ids, int& prompt_tokens);

/// Adds --no-text (print no generated text) and --no-stream (print it once at the end rather
/// than as tokens are made) to a generating tool.
void add_text_flags(CLI::App& app, bool& no_text, bool& no_stream);

/// Adds --temperature (>= 0), --top-k (0..2^24) and --top-p ([0, 1]; 0 must still be refused by
/// SamplerConfig::validate) writing into `sc`.
void add_sampler_flags(CLI::App& app, SamplerConfig& sc);

/// Adds --device (cpu | cuda, default cpu) writing into `device` (parse with
/// lm::parse_device, open with lm::open_engine, engine.hpp).
void add_device_flag(CLI::App& app, std::string& device);

/// Adds --weights (auto | f32 | f16 | bf16 | bf16-dot, default auto) writing into `weights`: the compute
/// precision, applied by lm::open_engine_for (engine.hpp).  `help` replaces the flag's
/// description for a tool whose rule differs (lm-eval computes in f32 on the CPU).
void add_weights_flag(CLI::App& app, std::string& weights, const std::string& help = "");

/// Adds --act-quant (none | q8, default none) writing into `act_quant`, applied by
/// lm::open_engine_for (engine.hpp; issue 37).
void add_act_quant_flag(CLI::App& app, std::string& act_quant);

/// Parses "1,450,3186" (whitespace after an id allowed).  Throws UsageError naming `where`
/// for an empty list, an item that is not an integer, or a negative id (all malformed flag
/// values).  Ids are not checked against a vocabulary.
std::vector<int> parse_token_ids(const std::string& text, const std::string& where);

/// Encodes prompt text with the model's tokenizer and prepends bos_id when config.add_bos.
/// Throws InputError when `tok` is null (the model has no tokenizer; names `model_path`), for
/// invalid UTF-8, or when the result is empty.
std::vector<int> encode_prompt(const Tokenizer* tok, const ModelConfig& config, const std::string& text,
                               const std::string& where, const std::string& model_path);

/// Checks the prompt flags after parsing, before any work: at most one of --prompt,
/// --prompt-file, --prompt-ids (UsageError otherwise), and --prompt-ids not empty.
void check_prompt_sources(const CLI::App& app, const std::string& file, const std::string& ids);

/// The prompt as token ids, from whichever source the flags name: --prompt-ids (range-checked
/// against the vocabulary), --prompt text, --prompt-file, or stdin when none is given (the
/// file's SHA-256 goes into `prov`).  Text is encoded with encode_prompt.  `prompt_tokens` > 0
/// keeps the first that many tokens (--prompt-tokens).  Throws UsageError for a malformed id
/// list and InputError for ids outside [0, vocab_size), unreadable files, a model without a
/// tokenizer, an empty prompt, or a prompt shorter than `prompt_tokens`.
std::vector<int> resolve_prompt(const CLI::App& app, const std::string& text, const std::string& file,
                                const std::string& ids, const Tokenizer* tok, const ModelConfig& config,
                                const std::string& model_path, io::Provenance& prov, int prompt_tokens = 0);

}  // namespace icmlkit::lm
