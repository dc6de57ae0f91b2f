#include "eval/winrate.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

namespace icmlkit::eval {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Refuses an empty or repeated benchmark name.
void add_benchmark(ScoreTable& s, std::unordered_set<std::string>& seen, const std::string& name, const std::string& where) {
  if (name.empty()) throw InputError("empty benchmark name", where);
  if (!seen.insert(name).second) throw InputError(fmt::format("benchmark '{}' appears twice", name), where);
  s.benchmarks.push_back(name);
}

std::string lower_extension(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return {};
  std::string e = path.substr(dot);
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e;
}

}  // namespace

double round_alpha(double alpha) noexcept {
  // k / 1e12 with k an integer-valued double is the double nearest the decimal; beyond 4e3 the
  // product passes 2^52 and every double is already on the grid.
  if (!(std::fabs(alpha) < 4e3)) return alpha;
  return std::round(alpha * 1e12) / 1e12;  // 1e12 (1 / kAlphaResolution) is exact in doubles
}

double tie_alpha(double student, double teacher) {
  if (!std::isfinite(student) || !std::isfinite(teacher))
    throw InputError(fmt::format("scores must be finite (student {}, teacher {})", student, teacher));
  if (teacher < 0)
    throw InputError(fmt::format("teacher score {} is negative: the relative tolerance (1 - alpha) A_T needs teacher scores >= 0",
                                 io::format_double(teacher)));
  if (teacher == 0) return student >= 0 ? 0.0 : kInf;
  if (student >= teacher) return 0.0;
  // teacher - student is exact when the two are within a factor 2 (Sterbenz), so the quotient is
  // correctly rounded there; it overflows to +inf only for a student far below zero.
  return round_alpha((teacher - student) / teacher);
}

bool ties_or_wins(double student, double teacher, double alpha) { return tie_alpha(student, teacher) <= round_alpha(alpha); }

std::size_t target_count(std::size_t n, double target) {
  if (n == 0) throw UsageError("the win-and-tie rate needs at least one benchmark");
  if (!(target > 0 && target <= 1)) throw UsageError(fmt::format("the target must be in (0, 1], got {}", target));
  for (std::size_t k = 1; k < n; ++k)
    if (static_cast<double>(k) / static_cast<double>(n) >= target) return k;
  return n;
}

double alpha_star(const std::vector<double>& a, double target) {
  const std::size_t k = target_count(a.size(), target);
  std::vector<double> sorted = a;
  std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k - 1), sorted.end());
  return sorted[k - 1];
}

double win_tie_rate(const std::vector<double>& a, double alpha) {
  if (a.empty()) throw UsageError("the win-and-tie rate needs at least one benchmark");
  const double r = round_alpha(alpha);
  const auto hits = std::count_if(a.begin(), a.end(), [r](double x) { return x <= r; });
  return static_cast<double>(hits) / static_cast<double>(a.size());
}

std::vector<double> alpha_grid(double max, double step) {
  if (!std::isfinite(step) || !(step >= 1e-9)) throw UsageError(fmt::format("the alpha step must be a number >= 1e-9, got {}", step));
  if (!std::isfinite(max) || !(max >= 0)) throw UsageError(fmt::format("the largest alpha must be a number >= 0, got {}", max));
  const double last = std::floor(max / step + 1e-9);
  if (!(last <= 1e6)) throw UsageError(fmt::format("the alpha grid 0..{} in steps of {} has more than 1,000,001 points", max, step));
  std::vector<double> g(static_cast<std::size_t>(last) + 1);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = std::min(round_alpha(static_cast<double>(i) * step), max);
  return g;
}

std::string ScoreTable::where(std::size_t model, std::size_t bench) const {
  if (bench < row_where.size()) return fmt::format("{}, column '{}'", row_where[bench], models.at(model));
  return fmt::format("{}: scores.{}[{}]", source, models.at(model), bench);
}

ScoreTable scores_from_table(const io::Table& t) {
  ScoreTable s;
  s.source = t.source();
  s.sha256 = t.sha256();
  const std::string bench_col = t.has("benchmark") ? std::string("benchmark") : t.names().front();
  std::unordered_set<std::string> seen;
  const std::vector<std::string> names = t.texts(bench_col);
  for (std::size_t r = 0; r < t.rows(); ++r) {
    s.row_where.push_back(t.where(r));
    add_benchmark(s, seen, names[r], fmt::format("{}, column '{}'", s.row_where.back(), bench_col));
  }
  for (const auto& m : t.names()) {
    if (m == bench_col) continue;
    s.models.push_back(m);
    s.scores.push_back(t.numbers(m));  // empty, non-numeric or non-finite cells: an error naming row and column
  }
  if (s.models.empty())
    throw InputError(fmt::format("no score columns: give a column '{}' of benchmark names and one column per model", bench_col), s.source);
  return s;
}

ScoreTable scores_from_json(const nlohmann::ordered_json& j, const std::string& label) {
  if (!j.is_object()) throw InputError("a score file must be an object {\"benchmarks\": [...], \"scores\": {...}}", label);
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "benchmarks" && it.key() != "scores" && it.key() != "meta")
      throw InputError(fmt::format("unknown key \"{}\" (a score file has \"benchmarks\" and \"scores\")", it.key()), label);
  if (!j.contains("benchmarks") || !j["benchmarks"].is_array())
    throw InputError("\"benchmarks\" must be an array of benchmark names", label);
  if (!j.contains("scores") || !j["scores"].is_object())
    throw InputError("\"scores\" must be an object {\"model\": [one score per benchmark], ...}", label);
  ScoreTable s;
  s.source = label;
  const auto& bench = j["benchmarks"];
  if (bench.empty()) throw InputError("no benchmarks", fmt::format("{}: benchmarks", label));
  std::unordered_set<std::string> seen;
  for (std::size_t b = 0; b < bench.size(); ++b) {
    const std::string where = fmt::format("{}: benchmarks[{}]", label, b);
    if (!bench[b].is_string()) throw InputError("a benchmark name must be a string", where);
    add_benchmark(s, seen, bench[b].get<std::string>(), where);
  }
  const auto& scores = j["scores"];
  if (scores.empty()) throw InputError("no models", fmt::format("{}: scores", label));
  for (auto it = scores.begin(); it != scores.end(); ++it) {
    const std::string where = fmt::format("{}: scores.{}", label, it.key());
    if (!it->is_array()) throw InputError("a model's scores must be an array, one per benchmark", where);
    if (it->size() != bench.size())
      throw InputError(fmt::format("model '{}' has {} score(s) for {} benchmarks", it.key(), it->size(), bench.size()), where);
    std::vector<double> v;
    for (std::size_t b = 0; b < it->size(); ++b) {
      const auto& x = (*it)[b];
      const std::string at = fmt::format("{}[{}], benchmark '{}'", where, b, s.benchmarks[b]);
      if (x.is_null()) throw InputError(fmt::format("missing score of '{}'", it.key()), at);
      if (!x.is_number()) throw InputError(fmt::format("not a number: {}", x.dump()), at);
      const double d = x.get<double>();
      if (!std::isfinite(d)) throw InputError(fmt::format("non-finite score {}", d), at);
      v.push_back(d);
    }
    s.models.push_back(it.key());
    s.scores.push_back(std::move(v));
  }
  return s;
}

ScoreTable read_scores(const std::string& path) {
  const bool from_stdin = io::is_stdout(path);
  if (!from_stdin && lower_extension(path) != ".json") {
    io::Table t = io::Table::read(path);
    return scores_from_table(t);
  }
  const std::string text = io::read_file(path);
  const std::string label = from_stdin ? "<stdin>" : path;
  const std::size_t p = text.find_first_not_of(" \t\r\n");
  const bool json = p != std::string::npos && (text[p] == '{' || text[p] == '[');
  const bool lines = from_stdin && json && text[p] == '{' && text.find("\n{") != std::string::npos;  // JSON Lines on stdin
  ScoreTable s;
  if (json && text[p] == '{' && !lines) {
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw InputError("malformed JSON", fmt::format("{}, byte {}", label, e.byte));
    } catch (const nlohmann::json::exception&) {  // a number beyond double's range (1e400)
      throw InputError("a number in the JSON is out of range", label);
    }
    if (j.contains("benchmarks") || j.contains("scores")) s = scores_from_json(j, label);
  }
  if (s.models.empty()) {  // not the object form: a table (records, {"rows": ...}, JSON Lines or, on stdin, CSV)
    io::Table t;
    if (json) {
      t = io::Table::parse_json(text, label, lines);
    } else if (from_stdin) {
      t = io::Table::parse_csv(text, label);
    } else {
      throw InputError("malformed JSON", label);
    }
    s = scores_from_table(t);
  }
  s.sha256 = io::sha256_hex(text);
  return s;
}

std::vector<StudentWinRate> win_rates(const ScoreTable& s, const std::string& teacher, const std::vector<double>& grid,
                                      double target) {
  const auto t_it = std::find(s.models.begin(), s.models.end(), teacher);
  if (t_it == s.models.end()) {
    std::string known;
    for (const auto& m : s.models) known += (known.empty() ? "" : ", ") + m;
    throw InputError(fmt::format("no teacher '{}' among the models ({}); name it with --teacher", teacher, known), s.source);
  }
  if (s.models.size() < 2) throw InputError(fmt::format("no students: '{}' is the only model", teacher), s.source);
  target_count(s.benchmarks.size(), target);  // the target's and the benchmarks' checks, before any work
  const std::vector<double>& ts = s.scores[static_cast<std::size_t>(t_it - s.models.begin())];
  for (std::size_t b = 0; b < ts.size(); ++b)
    if (ts[b] < 0)
      throw InputError(fmt::format("teacher score {} on '{}' is negative: the relative tolerance (1 - alpha) A_T needs teacher scores >= 0",
                                   io::format_double(ts[b]), s.benchmarks[b]),
                       s.where(static_cast<std::size_t>(t_it - s.models.begin()), b));
  std::vector<StudentWinRate> out;
  for (std::size_t m = 0; m < s.models.size(); ++m) {
    if (s.models[m] == teacher) continue;
    StudentWinRate r;
    r.name = s.models[m];
    for (std::size_t b = 0; b < ts.size(); ++b) r.tie_alpha.push_back(tie_alpha(s.scores[m][b], ts[b]));
    r.alpha_star = alpha_star(r.tie_alpha, target);
    r.c0 = win_tie_rate(r.tie_alpha, 0.0);
    r.lossless = r.c0 >= target;
    for (double a : grid) r.curve.push_back(win_tie_rate(r.tie_alpha, a));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace icmlkit::eval
