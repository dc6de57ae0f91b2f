// eval/winrate: the Win-and-Tie rate C_alpha and alpha* (arXiv 2603.15590, App. A).
// Expected values come from hand computation, from exact integer arithmetic on a brute-force
// grid (integer scores, alpha = p / 1000: the test q A_S >= (q - p) A_T is exact), and from the
// definition evaluated literally in doubles on a fine grid.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "eval/winrate.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

using namespace icmlkit;
namespace fs = std::filesystem;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// teacher [0.5, 0.8, 0.6, 1.0]; s1 [0.45, 0.8, 0.3, 0.7] -> a_b by hand: 0.05/0.5 = 0.1, tie = 0,
// 0.3/0.6 = 0.5, 0.3/1 = 0.3; s2 [0.6, 0.4, 0.66, 0.9] -> win 0, 0.4/0.8 = 0.5, win 0, 0.1/1 = 0.1.
const char* kHandCsv = "benchmark,teacher,s1,s2\narc,0.5,0.45,0.6\nhella,0.8,0.8,0.4\nmmlu,0.6,0.3,0.66\npiqa,1.0,0.7,0.9\n";

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("icmlkit_unit_winrate_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

}  // namespace

TEST_CASE("eval/winrate: a_b, alpha*, C_alpha of a hand-computed four-benchmark case") {
  const std::vector<double> teacher{0.5, 0.8, 0.6, 1.0}, s1{0.45, 0.8, 0.3, 0.7};
  std::vector<double> a;
  for (std::size_t b = 0; b < 4; ++b) a.push_back(eval::tie_alpha(s1[b], teacher[b]));
  // Rounded to 1e-12, each is the double nearest the decimal: equality is exact.
  CHECK(a == std::vector<double>{0.1, 0.0, 0.5, 0.3});
  // Sorted 0, 0.1, 0.3, 0.5: the 2nd (ceil(0.5 * 4)), 3rd (0.75) and 4th (1.0) smallest.
  CHECK(eval::alpha_star(a, 0.5) == 0.1);
  CHECK(eval::alpha_star(a, 0.75) == 0.3);
  CHECK(eval::alpha_star(a, 1.0) == 0.5);
  CHECK(eval::alpha_star(a, 0.25) == 0.0);
  CHECK(eval::win_tie_rate(a, 0.0) == 0.25);
  CHECK(eval::win_tie_rate(a, 0.0999) == 0.25);
  CHECK(eval::win_tie_rate(a, 0.1) == 0.5);
  CHECK(eval::win_tie_rate(a, 0.3) == 0.75);
  CHECK(eval::win_tie_rate(a, 0.7) == 1.0);

  const eval::ScoreTable s = eval::scores_from_table(io::Table::parse_csv(kHandCsv, "hand.csv"));
  const auto grid = eval::alpha_grid(0.5, 0.1);
  const auto r = eval::win_rates(s, "teacher", grid, 0.5);
  REQUIRE(r.size() == 2);
  CHECK(r[0].name == "s1");
  CHECK(r[0].alpha_star == 0.1);
  CHECK(r[0].c0 == 0.25);
  CHECK_FALSE(r[0].lossless);
  CHECK(r[0].curve == std::vector<double>{0.25, 0.5, 0.5, 0.75, 0.75, 1.0});
  CHECK(r[1].name == "s2");
  CHECK(r[1].tie_alpha == std::vector<double>{0.0, 0.5, 0.0, 0.1});
  CHECK(r[1].alpha_star == 0.0);
  CHECK(r[1].c0 == 0.5);  // exactly half the benchmarks: C_0 >= 0.5, lossless
  CHECK(r[1].lossless);
  CHECK(r[1].curve == std::vector<double>{0.5, 0.75, 0.75, 0.75, 0.75, 1.0});
}

TEST_CASE("eval/winrate: ties exactly at the threshold count") {
  // 0.72 = (1 - 0.1) 0.8 in decimals; in doubles 0.9 * 0.8 = 0.7200000000000001 > 0.72, and
  // (0.8 - 0.72) / 0.8 = 0.10000000000000009: the rounding to 1e-12 makes it tie at 0.1.
  CHECK(eval::tie_alpha(0.72, 0.8) == 0.1);
  CHECK(eval::ties_or_wins(0.72, 0.8, 0.1));
  CHECK_FALSE(eval::ties_or_wins(0.72, 0.8, 0.1 - 1e-9));
  CHECK(eval::tie_alpha(0.7, 1.0) == 0.3);
  CHECK(eval::ties_or_wins(0.7, 1.0, 0.3));
  // Equal scores tie at alpha 0 (>=, not >); a score a hair below does not.
  for (double x : {0.0, 1e-300, 0.3, 0.61, 1.0, 87.5}) {
    CHECK(eval::tie_alpha(x, x) == 0.0);
    CHECK(eval::ties_or_wins(x, x, 0.0));
  }
  CHECK(eval::tie_alpha(0.5 - 1e-9, 0.5) == doctest::Approx(2e-9).epsilon(1e-3));
  CHECK_FALSE(eval::ties_or_wins(0.5 - 1e-9, 0.5, 0.0));
  CHECK(eval::tie_alpha(0.5 - 1e-14, 0.5) == 0.0);  // below the resolution: a tie (documented)
  // Exactly the target share: k / n >= target is the least such count.
  CHECK(eval::target_count(4, 0.5) == 2);
  CHECK(eval::target_count(3, 0.5) == 2);
  CHECK(eval::target_count(1, 0.5) == 1);
  CHECK(eval::target_count(10, 0.3) == 3);  // 3 / 10 == 0.3 in doubles
  CHECK(eval::target_count(10, 0.31) == 4);
  CHECK(eval::target_count(7, 1.0) == 7);
  CHECK_THROWS_AS(eval::target_count(0, 0.5), UsageError);
  CHECK_THROWS_AS(eval::target_count(4, 0.0), UsageError);
  CHECK_THROWS_AS(eval::target_count(4, 1.5), UsageError);
}

TEST_CASE("eval/winrate: teacher score zero, negative scores, non-finite scores") {
  CHECK(eval::tie_alpha(0.1, 0.0) == 0.0);
  CHECK(eval::tie_alpha(0.0, 0.0) == 0.0);
  CHECK(eval::tie_alpha(-0.1, 0.0) == kInf);  // (1 - alpha) 0 = 0 > -0.1 at every alpha
  CHECK_FALSE(eval::ties_or_wins(-0.1, 0.0, 1e6));
  CHECK(eval::tie_alpha(-0.5, 1.0) == 1.5);  // a negative student needs alpha > 1
  CHECK(eval::tie_alpha(-1e300, 1e-300) == kInf);  // beyond the range of double
  CHECK_THROWS_AS(eval::tie_alpha(0.5, -0.1), InputError);
  CHECK_THROWS_AS(eval::tie_alpha(std::nan(""), 0.5), InputError);
  CHECK_THROWS_AS(eval::tie_alpha(0.5, kInf), InputError);
  // alpha* is +inf when the target needs a benchmark that never ties.
  CHECK(eval::alpha_star({0.0, kInf}, 0.5) == 0.0);
  CHECK(eval::alpha_star({0.0, kInf}, 1.0) == kInf);
}

TEST_CASE("eval/winrate: alpha* and C_alpha against exact integer arithmetic on a brute-force grid") {
  // Integer scores and alpha = p / 1000 make the definition exact in integers:
  // 1_alpha(b) = [1000 A_S >= (1000 - p) A_T].  Many a_b fall exactly on the grid (A_T = 1000, 500,
  // 250, ...), so ties at the threshold are exercised throughout.
  std::mt19937_64 rng(35);
  std::uniform_int_distribution<int> n_dist(1, 15), t_dist(0, 1000), s_dist(-200, 1200), pick(0, 4);
  const std::vector<int> round_teachers{1000, 500, 250, 200, 100, 40, 8};
  const std::vector<double> targets{0.5, 0.25, 0.75, 1.0, 0.3};
  constexpr int q = 1000, p_max = 2500;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = n_dist(rng);
    const double target = targets[static_cast<std::size_t>(trial) % targets.size()];
    std::vector<long long> ts, ss;
    std::vector<double> a;
    for (int b = 0; b < n; ++b) {
      long long t = pick(rng) == 0 ? round_teachers[static_cast<std::size_t>(t_dist(rng)) % round_teachers.size()] : t_dist(rng);
      long long s = s_dist(rng);
      if (pick(rng) == 0) s = t;  // exact ties at alpha 0
      ts.push_back(t);
      ss.push_back(s);
      a.push_back(eval::tie_alpha(static_cast<double>(s), static_cast<double>(t)));
    }
    int first = -1;  // the least grid p with C >= target
    for (int p = 0; p <= p_max; ++p) {
      std::size_t hits = 0;
      for (int b = 0; b < n; ++b) hits += q * ss[b] >= (q - p) * ts[b];
      const double exact_c = static_cast<double>(hits) / n;
      REQUIRE(eval::win_tie_rate(a, static_cast<double>(p) / q) == exact_c);
      if (first < 0 && exact_c >= target) first = p;
    }
    const double star = eval::alpha_star(a, target);
    if (first < 0) {
      CHECK(star > static_cast<double>(p_max) / q);
    } else {
      // alpha* lies in ((first - 1) / q, first / q]; equal to first / q when it sits on the grid.
      CHECK(star <= static_cast<double>(first) / q);
      if (first > 0) CHECK(star > static_cast<double>(first - 1) / q);
    }
  }
}

TEST_CASE("eval/winrate: alpha* against the definition evaluated literally in doubles on a fine grid") {
  std::mt19937_64 rng(2603);
  std::uniform_real_distribution<double> teacher(0.2, 0.9), student(0.0, 1.0);
  std::uniform_int_distribution<int> n_dist(1, 20);
  constexpr double step = 1e-4;
  for (int trial = 0; trial < 100; ++trial) {
    const int n = n_dist(rng);
    std::vector<double> ts, ss, a;
    for (int b = 0; b < n; ++b) {
      ts.push_back(teacher(rng));
      ss.push_back(student(rng));
      a.push_back(eval::tie_alpha(ss.back(), ts.back()));
    }
    const double star = eval::alpha_star(a, 0.5);
    double first = -1;
    for (int i = 0; i <= 10000 && first < 0; ++i) {
      const double alpha = i * step;
      int hits = 0;
      for (int b = 0; b < n; ++b) hits += ss[b] >= (1 - alpha) * ts[b];
      if (2 * hits >= n) first = alpha;
    }
    REQUIRE(first >= 0);  // students >= 0 and teachers < 1: every benchmark ties by alpha = 1
    // Within a grid step; 1e-12 for the rounding of a_b and the doubles' own.
    CHECK(star <= first + 1e-12);
    CHECK(star > first - step - 1e-12);
  }
}

TEST_CASE("eval/winrate: the alpha grid") {
  const auto g = eval::alpha_grid(0.5, 0.005);
  REQUIRE(g.size() == 101);
  CHECK(g[0] == 0.0);
  CHECK(g[3] == 0.015);  // not 3 * 0.005 = 0.015000000000000001
  CHECK(g[100] == 0.5);
  CHECK(eval::alpha_grid(0.1, 0.03) == std::vector<double>{0.0, 0.03, 0.06, 0.09});
  CHECK(eval::alpha_grid(0.0, 0.1) == std::vector<double>{0.0});
  CHECK(eval::alpha_grid(1.0, 1.0) == std::vector<double>{0.0, 1.0});
  CHECK_THROWS_AS(eval::alpha_grid(0.5, 0.0), UsageError);
  CHECK_THROWS_AS(eval::alpha_grid(0.5, -0.1), UsageError);
  CHECK_THROWS_AS(eval::alpha_grid(0.5, 1e-12), UsageError);
  CHECK_THROWS_AS(eval::alpha_grid(-0.1, 0.1), UsageError);
  CHECK_THROWS_AS(eval::alpha_grid(std::nan(""), 0.1), UsageError);
  CHECK_THROWS_AS(eval::alpha_grid(10.0, 1e-8), UsageError);  // 1e9 points
}

TEST_CASE("eval/winrate: score tables, the JSON object form and their errors") {
  // The benchmark column need not come first when it is named "benchmark".
  const auto t = io::Table::parse_csv("teacher,benchmark,s\n0.5,arc,0.25\n0.8,mmlu,0.8\n", "t.csv");
  const eval::ScoreTable s = eval::scores_from_table(t);
  CHECK(s.benchmarks == std::vector<std::string>{"arc", "mmlu"});
  CHECK(s.models == std::vector<std::string>{"teacher", "s"});
  CHECK(s.scores[1] == std::vector<double>{0.25, 0.8});
  CHECK(s.where(0, 1) == "t.csv, row 2, line 3, column 'teacher'");
  // Else the first column names the benchmarks.
  CHECK(eval::scores_from_table(io::Table::parse_csv("task,teacher,s\na,1,1\n", "x")).benchmarks == std::vector<std::string>{"a"});
  CHECK_THROWS_WITH_AS(eval::scores_from_table(io::Table::parse_csv("benchmark,teacher\na,1\na,2\n", "d.csv")),
                       "benchmark 'a' appears twice", InputError);
  CHECK_THROWS_WITH_AS(eval::scores_from_table(io::Table::parse_csv("benchmark,teacher,s\na,1,x\n", "n.csv")),
                       "not a number: 'x' in column 's'", InputError);
  CHECK_THROWS_AS(eval::scores_from_table(io::Table::parse_csv("benchmark\na\n", "m.csv")), InputError);

  const auto grid = eval::alpha_grid(0.5, 0.1);
  CHECK_THROWS_WITH_AS(eval::win_rates(s, "prof", grid, 0.5), "no teacher 'prof' among the models (teacher, s); name it with --teacher",
                       InputError);
  try {
    eval::win_rates(eval::scores_from_table(io::Table::parse_csv("benchmark,teacher,s\na,1,1\nb,-2,1\n", "neg.csv")), "teacher",
                    grid, 0.5);
    FAIL("a negative teacher score must be refused");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("teacher score -2 on 'b' is negative") == 0);
    CHECK(e.where() == "neg.csv, row 2, line 3, column 'teacher'");
  }
  const auto only = eval::scores_from_table(io::Table::parse_csv("benchmark,teacher\na,1\n", "o.csv"));
  CHECK_THROWS_WITH_AS(eval::win_rates(only, "teacher", grid, 0.5), "no students: 'teacher' is the only model", InputError);

  using oj = nlohmann::ordered_json;
  const oj j = oj::parse(R"({"benchmarks": ["a", "b"], "scores": {"t": [1, 0.5], "z": [0.9, 0.5], "m": [1.1, 0.25]}, "meta": {}})");
  const eval::ScoreTable js = eval::scores_from_json(j, "s.json");
  CHECK(js.models == std::vector<std::string>{"t", "z", "m"});  // the order written, not sorted
  const auto r = eval::win_rates(js, "t", grid, 0.5);
  CHECK(r[0].tie_alpha == std::vector<double>{0.1, 0.0});
  CHECK(r[1].tie_alpha == std::vector<double>{0.0, 0.5});
  CHECK(js.where(1, 1) == "s.json: scores.z[1]");
  auto bad = [](const char* text) { return eval::scores_from_json(oj::parse(text), "b.json"); };
  CHECK_THROWS_WITH_AS(bad(R"({"benchmarks": ["a", "b"], "scores": {"t": [1]}})"), "model 't' has 1 score(s) for 2 benchmarks", InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"benchmarks": ["a"], "scores": {"t": [null]}})"), "missing score of 't'", InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"benchmarks": ["a"], "scores": {"t": ["0.5"]}})"), "not a number: \"0.5\"", InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"benchmarks": [], "scores": {"t": []}})"), "no benchmarks", InputError);
  CHECK_THROWS_WITH_AS(bad(R"({"benchmarks": ["a"], "scores": {}})"), "no models", InputError);
  CHECK_THROWS_AS(bad(R"({"benchmarks": ["a"], "score": {"t": [1]}})"), InputError);
  CHECK_THROWS_AS(bad(R"({"benchmarks": [1], "scores": {"t": [1]}})"), InputError);
  CHECK_THROWS_AS(bad(R"([1, 2])"), InputError);
}

TEST_CASE("eval/winrate: read_scores dispatches on the file") {
  const fs::path csv = scratch("scores.csv"), obj = scratch("scores.json"), rec = scratch("records.json");
  write(csv, kHandCsv);
  write(obj, R"({"benchmarks": ["arc", "hella", "mmlu", "piqa"],
 "scores": {"teacher": [0.5, 0.8, 0.6, 1.0], "s1": [0.45, 0.8, 0.3, 0.7], "s2": [0.6, 0.4, 0.66, 0.9]}})");
  write(rec, R"([{"benchmark": "arc", "teacher": 0.5, "s1": 0.45}, {"benchmark": "hella", "teacher": 0.8, "s1": 0.8}])");
  const auto a = eval::read_scores(csv.string()), b = eval::read_scores(obj.string()), c = eval::read_scores(rec.string());
  CHECK(a.benchmarks == b.benchmarks);
  CHECK(a.models == b.models);
  CHECK(a.scores == b.scores);
  CHECK(a.sha256.size() == 64);
  CHECK(a.sha256 != b.sha256);
  CHECK(c.benchmarks == std::vector<std::string>{"arc", "hella"});
  CHECK(c.scores[1] == std::vector<double>{0.45, 0.8});
  write(obj, R"({"benchmarks": ["a"], "scores": {"t": [1e400]}})");
  CHECK_THROWS_WITH_AS(eval::read_scores(obj.string()), "a number in the JSON is out of range", InputError);
  write(obj, R"({"benchmarks": ["a")");
  CHECK_THROWS_WITH_AS(eval::read_scores(obj.string()), "malformed JSON", InputError);
  CHECK_THROWS_AS(eval::read_scores(scratch("absent.csv").string()), InputError);
  fs::remove_all(csv.parent_path());
}
