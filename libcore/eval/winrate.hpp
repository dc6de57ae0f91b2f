// The Win-and-Tie rate of a student against its teacher over a set of benchmarks, and the least
// relative tolerance alpha* at which the student ties or beats the teacher on a target share of
// them (hybrid-xLSTM distillation paper, arXiv 2603.15590, App. A).
//
// For benchmark b with student score A_S(b) and teacher score A_T(b) (higher is better):
//   1_alpha(b) = 1 if A_S(b) >= (1 - alpha) A_T(b) else 0,
//   C_alpha    = mean over the benchmarks of 1_alpha(b),
//   alpha*     = inf{alpha >= 0 : C_alpha >= target}   (the paper's target is 0.5; 0 = lossless).
// alpha* is computed exactly, not from a grid: with a_b = max(0, 1 - A_S/A_T) the least alpha >= 0
// at which benchmark b ties or wins (tie_alpha), C_alpha = #{b : a_b <= alpha} / |B|, so alpha* is
// the k-th smallest a_b with k the least count for which k / |B| >= target (ceil(0.5 |B|) for the
// paper's 0.5).  The curve is counted from the same a_b, so alpha* and C_alpha never disagree.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace icmlkit::io {
class Table;
}

namespace icmlkit::eval {

/// The resolution of alpha: 1e-12.  tie_alpha and every alpha compared with it are rounded to this
/// many decimal places, so that scores written in decimals tie where decimal arithmetic says they
/// do: 0.72 against 0.8 ties at alpha = 0.1, which the double-precision test 0.72 >= 0.9 * 0.8 misses
/// (0.9 * 0.8 is 0.7200000000000001 in doubles).  Far below any benchmark's precision; the price
/// is that a student short of the teacher by less than 5e-13 of the teacher's score ties at alpha 0.
inline constexpr double kAlphaResolution = 1e-12;

/// `alpha` rounded to kAlphaResolution: the double nearest round(alpha 1e12) / 1e12 (values of
/// magnitude 4e3 and more, and infinities, unchanged).
double round_alpha(double alpha) noexcept;

/// a_b: the least alpha >= 0 at which a student scoring `student` ties or beats a teacher scoring
/// `teacher` (higher-is-better scores), i.e. student >= (1 - alpha) teacher: max(0, (teacher -
/// student) / teacher), rounded to kAlphaResolution.  teacher == 0: 0 when student >= 0, else
/// +infinity (the student never ties: (1 - alpha) 0 = 0); +infinity also when the quotient
/// exceeds the range of double.  Throws InputError when a score is not finite or the teacher's is
/// negative (the relative tolerance (1 - alpha) A_T needs teacher scores >= 0: for a negative one a
/// larger tolerance would raise the bar, and alpha* would lose its meaning).
double tie_alpha(double student, double teacher);

/// The indicator 1_alpha(b): whether the student ties or wins at relative tolerance `alpha` >= 0,
/// tie_alpha(student, teacher) <= round_alpha(alpha).  Throws as tie_alpha does.
bool ties_or_wins(double student, double teacher, double alpha);

/// The least count k in 1..n with k / n >= target (as doubles, the comparison C_alpha >= target
/// makes): the number of benchmarks that must tie or win.  ceil(0.5 n) for target 0.5.
/// Throws UsageError when n == 0 or target is not in (0, 1].
std::size_t target_count(std::size_t n, double target);

/// alpha* = inf{alpha >= 0 : C_alpha >= target} from the benchmarks' tie alphas `a` (tie_alpha,
/// length |B| >= 1): the target_count(|B|, target)-th smallest of them.  +infinity when that one is
/// (the target is never reached).  Throws UsageError as target_count does.
double alpha_star(const std::vector<double>& a, double target);

/// C_alpha from the tie alphas `a` (tie_alpha): the share of benchmarks with a_b <= round_alpha(alpha),
/// in [0, 1]; the mean of ties_or_wins over the benchmarks.  Throws UsageError when `a` is empty.
double win_tie_rate(const std::vector<double>& a, double alpha);

/// The alpha grid of a curve: round_alpha(i * step) for i = 0, 1, ... while i * step <= max (within
/// 1e-9 of a step), clamped to max (so steps of 0.005 give 0.015, not 0.015000000000000001).
/// Throws UsageError when step < 1e-9 (far finer than alpha's resolution allows), max < 0, either
/// is not finite, or the grid would have more than 1,000,001 points.
std::vector<double> alpha_grid(double max, double step);

/// Scores of several models on the same benchmarks, as read from a file.
struct ScoreTable {
  std::vector<std::string> benchmarks;       ///< benchmark names, [n_benchmarks], unique, non-empty
  std::vector<std::string> models;           ///< model names in the file's order, [n_models]
  std::vector<std::vector<double>> scores;   ///< [n_models][n_benchmarks], finite
  std::vector<std::string> row_where;        ///< per benchmark, its row in a table ("file, row 2, line 3"); empty for JSON
  std::string source;                        ///< the file ("<stdin>" for -)
  std::string sha256;                        ///< SHA-256 of the bytes read (empty when built in memory)

  /// Where model `model`'s score on benchmark `bench` (indices) stands, for errors:
  /// "file, row 2, line 3, column 'teacher'" or "file: scores.teacher[1]".
  std::string where(std::size_t model, std::size_t bench) const;
};

/// Scores from a table with one row per benchmark: the benchmark names in the column "benchmark"
/// when there is one, else in the first column; every other column is a model (its header is the
/// model's name) and must hold a finite number in every row.  Throws InputError naming the row and
/// column of an empty, non-numeric or non-finite cell, an empty or repeated benchmark name, or a
/// table without model columns.
ScoreTable scores_from_table(const io::Table& t);

/// Scores from the JSON object {"benchmarks": ["mmlu", ...], "scores": {"model": [s_1, ...], ...}}:
/// one score per benchmark for each model, in the benchmarks' order; models in the order written.
/// A key "meta" is ignored (provenance of a tool that wrote the file); any other key is refused.
/// Throws InputError naming `label` and the key/index for a missing or malformed part, a
/// non-numeric or null score, a model with more or fewer scores than benchmarks, no benchmarks,
/// an empty or repeated benchmark name, or no models.
ScoreTable scores_from_json(const nlohmann::ordered_json& j, const std::string& label);

/// Reads a score file ("-" = stdin).  A .json file (or stdin) whose top level is an object with
/// "benchmarks" or "scores" is read by scores_from_json; anything else by io::Table::read
/// (CSV/TSV with a header row, a JSON array of records, JSON Lines, HDF5) and scores_from_table.
/// Throws InputError as those do, and when the file is unreadable or malformed.
ScoreTable read_scores(const std::string& path);

/// The result for one student.
struct StudentWinRate {
  std::string name;                          ///< the student's model name
  std::vector<double> tie_alpha;             ///< a_b per benchmark, [n_benchmarks] (+inf: never)
  double alpha_star = 0;                     ///< alpha* (+inf: the target is never reached)
  double c0 = 0;                             ///< C_0, the win-and-tie rate at alpha = 0
  bool lossless = false;                     ///< C_0 >= target (equivalently alpha* == 0)
  std::vector<double> curve;                 ///< C_alpha at each alpha of the grid, [n_grid]
};

/// Every model of `s` other than `teacher` against `teacher`: tie alphas, alpha*, C_0, lossless and
/// C_alpha on `grid` (alpha_grid).  Throws InputError naming the file when `teacher` is not a model
/// or is the only one, and naming the row and column of a negative teacher score; UsageError when
/// target is not in (0, 1].
std::vector<StudentWinRate> win_rates(const ScoreTable& s, const std::string& teacher, const std::vector<double>& grid,
                                      double target);

}  // namespace icmlkit::eval
