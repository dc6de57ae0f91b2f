// Deterministic answer scorers for HybridFlow's benchmarks (the reference scores with an LLM judge
// only, planner/evaluation.py judge_correct; these need no endpoint): GPQA / MMLU option letters,
// AIME integers, LiveBench <solution> lists, and normalised exact match.
#pragma once

#include <optional>
#include <string>

namespace icmlkit::hybridflow {

/// The option letter an answer commits to: the last of "answer is X", "answer: X", "(X)", or a
/// standalone capital A-J (a letter followed by ".", ")", ":" or the end counts; "A" inside words
/// does not).  nullopt when none.
std::optional<char> answer_letter(const std::string& text);

/// The last integer in the text (thousands separators "1,234" read as 1234; a "\boxed{n}" wins over
/// everything else).  nullopt when none.
std::optional<long long> answer_integer(const std::string& text);

/// The comma-separated items of the last <solution>...</solution>, trimmed and lower-cased, joined
/// by ","; nullopt when there is no such tag.
std::optional<std::string> answer_solution(const std::string& text);

/// Scores `answer` against `gold` with scorer `kind` ("letter" | "integer" | "solution" | "exact").
/// Returns nullopt when the gold is empty; false when the answer has no readable value.  Throws
/// UsageError on an unknown kind.
std::optional<bool> score_answer(const std::string& kind, const std::string& gold, const std::string& answer);

/// The judge's verdict as the reference reads it: true iff the reply contains "true" and not
/// "false" (case-insensitive).
bool judge_verdict(const std::string& reply);

/// The judge's prompt for a problem, gold answer and the model's answer (our wording; the reference
/// asks deepseek-chat to output True or False).
std::string judge_prompt(const std::string& problem, const std::string& gold, const std::string& answer);

}  // namespace icmlkit::hybridflow
