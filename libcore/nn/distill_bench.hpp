// The benchmarks of issue 35's miniature of "Effective Distillation to Hybrid xLSTM
// Architectures" (arXiv 2603.15590): every score higher-is-better, so that the Win-and-Tie rate
// C_alpha (eval/winrate.hpp) compares a student with its teacher; and the engine's prefill and
// decode speed and memory against context length.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lm/model.hpp"

namespace icmlkit::nn {

/// The held-out data the benchmarks read (prepared once per corpus, shared by every model).
struct BenchData {
  std::vector<std::string> groups;            ///< e.g. "law", "prophets", "gospels", "epistles"
  std::vector<std::vector<int>> group_tokens;  ///< per group: its held-out documents' token stream
  std::vector<int> pool;                       ///< every held-out token (passages, fillers, prompts)
};

/// The benchmarks' sizes.
struct BenchOptions {
  int seq_len = 512;                       ///< window of the accuracy benchmarks
  std::int64_t group_tokens = 8192;        ///< targets scored per group (fewer when the group has fewer)
  std::vector<int> distances{64, 256, 768};  ///< repeated-passage recall: tokens between the copies
  int passage = 32;                        ///< tokens of a repeated passage
  int passages = 16;                       ///< passages per distance
  int prompts = 16;                        ///< greedy-agreement prompts
  int prompt_len = 64;                     ///< tokens of a prompt
  int continuation = 64;                   ///< the teacher's greedy continuation scored
  std::uint64_t seed = 0;                  ///< where passages, fillers and prompts are cut from the pool
};

/// The teacher's greedy continuations of the agreement prompts (CPU engine, KV cache), each
/// prompt followed by its continuation [prompts][prompt_len + continuation].  Throws InputError
/// when the pool is too short for the prompts.
std::vector<std::vector<int>> teacher_continuations(const lm::Model& teacher, const BenchData& data, const BenchOptions& opt);

/// The scores of `model` (name, value), in this order: top1_<group> and top5_<group> (next-token
/// accuracy over the group's held-out tokens, windows of seq_len), recall_<d> for each distance
/// (the top-1 accuracy on the second copy of a passage, tokens 2.., with d tokens of other text
/// between the copies: what a bounded state forgets), and agree_<continuation> (the share of the
/// teacher's greedy continuation tokens that are the model's greedy prediction given the same
/// prefix).  Runs the trainer's float forward (within 1e-4 of the engine's logits).  Throws
/// InputError when a sequence exceeds the model's n_ctx or the pool is too short.
std::vector<std::pair<std::string, double>> distill_benchmarks(const lm::Model& model, const BenchData& data,
                                                                const std::vector<std::vector<int>>& continuations,
                                                                const BenchOptions& opt);

/// Prefill and decode speed of the CPU engine at one context length.
struct SpeedPoint {
  int context = 0;            ///< tokens in the cache at the end: context - decode prefilled, then decode steps
  bool ran = false;           ///< false when the context exceeds the model's n_ctx (a teacher beyond it)
  double prefill_tok_s = 0;   ///< prompt tokens per second of the prefill forward
  double decode_tok_s = 0;    ///< greedy decode steps per second after it
  std::int64_t cache_bytes = 0;  ///< bytes the cache holds after the decode (K/V slots + recurrent state)
};

/// Measures `model` at each context: prefill context - decode tokens of the pool (repeated as
/// needed) in one forward, then `decode` greedy steps of one token, ending at `context` tokens.
/// Timings on the calling threads.  Throws InputError when a context is not above `decode`.
std::vector<SpeedPoint> engine_speed(const lm::Model& model, const std::vector<int>& pool, const std::vector<int>& contexts,
                                     int decode);

}  // namespace icmlkit::nn
