// winrate: the Win-and-Tie rate C_alpha of students against a teacher over benchmarks, and the least
// relative tolerance alpha* at which a student ties or beats the teacher on half of them
// (hybrid-xLSTM distillation paper, arXiv 2603.15590, App. A).
#include <fmt/core.h>

#include <cmath>
#include <optional>

#include "cli/run_tool.hpp"
#include "eval/winrate.hpp"
#include "io/atomic_file.hpp"
#include "io/gnuplot.hpp"
#include "io/json.hpp"
#include "util/error.hpp"

using namespace icmlkit;

namespace {

// A double for JSON, null for +infinity ("never").
nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

// The gnuplot script: one step curve per student (data block i), alpha* marked, the target line.
std::string plot_script(const std::string& dat, const std::vector<eval::StudentWinRate>& students, const std::string& teacher,
                        double alpha_max, double target) {
  std::string s = fmt::format(
      "set title {}\nset xlabel 'alpha (relative tolerance)'\nset ylabel 'C_alpha (win-and-tie rate)'\n"
      "set xrange [0:{}]\nset yrange [0:1.05]\nset key bottom right\nset grid\n",
      io::gnuplot_quote("win-and-tie rate against the teacher: " + teacher), alpha_max > 0 ? alpha_max : 1.0);
  for (std::size_t i = 0; i < students.size(); ++i) {
    const double a = students[i].alpha_star;
    if (std::isfinite(a) && a <= alpha_max)
      s += fmt::format("set arrow from {},0 to {},{} nohead dashtype 3 linecolor {}\n", a, a, target, i + 1);
  }
  s += "plot ";
  for (std::size_t i = 0; i < students.size(); ++i)
    s += fmt::format("{} index {} using 1:2 with steps linewidth 2 linecolor {} title {}, ", dat, i, i + 1,
                     io::gnuplot_quote(students[i].name));
  return s + fmt::format("{} with lines dashtype 2 linecolor rgb 'black' title 'target {}'\n", target, target);
}

}  // namespace

int main(int argc, char** argv) {
  std::string scores_path, output = "-", teacher = "teacher", plot;
  double alpha_max = 0.5, alpha_step = 0.005, target = 0.5;
  cli::ToolInfo info{
      "winrate",
      "The Win-and-Tie rate of distilled students against their teacher (hybrid-xLSTM distillation paper, arXiv\n"
      "2603.15590, App. A).  For benchmark b with student score A_S(b) and teacher score A_T(b), both higher-is-better,\n"
      "the student ties or wins at relative tolerance alpha when A_S(b) >= (1 - alpha) A_T(b); C_alpha is the share of\n"
      "benchmarks where it does, and alpha* = inf{alpha >= 0 : C_alpha >= target} (target 0.5: the student is within\n"
      "alpha* of the teacher on at least half of the benchmarks; lower is better, 0 is lossless).  alpha* is exact, not\n"
      "read off the grid: benchmark b ties from a_b = max(0, 1 - A_S/A_T) on, so alpha* is the ceil(target |B|)-th\n"
      "smallest a_b.  a_b and the grid's alphas are rounded to 12 decimal places, so that decimal scores tie where\n"
      "decimal arithmetic says they do (0.72 against 0.8 at alpha = 0.1).  Teacher scores must be >= 0 (a negative one\n"
      "is refused); a teacher score of 0 is tied at every alpha by a student score >= 0 and never by a negative one\n"
      "(a_b null).\n"
      "SCORES: a CSV/TSV (or JSON array of records, JSON Lines, HDF5 table) with one row per benchmark, the benchmark\n"
      "names in the column 'benchmark' (else the first column) and one column per model named in the header; or a\n"
      "JSON object {\"benchmarks\": [\"mmlu\", ...], \"scores\": {\"teacher\": [...], \"student\": [...]}}, one score\n"
      "per benchmark in that order.  The teacher is the model --teacher names; every other model is a student.\n"
      "Output (JSON): teacher, target, benchmarks, alpha_grid {max, step, points}, and per student (in the file's\n"
      "order) name, alpha_star (null when the target is never reached), C_0, lossless (C_0 >= target), a_b\n"
      "{benchmark: a_b or null} and curve [[alpha, C_alpha], ...] over 0, step, ..., max; meta (provenance).",
      "  winrate scores.csv | jq '.students[] | {name, alpha_star, lossless}'\n"
      "  winrate scores.json --teacher llama-3.2-1b --plot winrate.png -o winrate.json\n"
      "  winrate scores.csv --alpha-max 0.2 --alpha-step 0.001 --target 0.75\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("scores", scores_path, "Scores: CSV/TSV/JSON table, one row per benchmark, or the JSON object form (- = stdin)")
            ->required();
        app.add_option("-o,--output", output, "Output JSON (- = stdout)")->capture_default_str();
        app.add_option("--teacher", teacher, "The teacher's model (column) name; every other model is a student")
            ->capture_default_str();
        app.add_option("--alpha-max", alpha_max, "Largest alpha of the curve")->check(cli::non_negative())->capture_default_str();
        app.add_option("--alpha-step", alpha_step, "Step of the curve's alpha grid")->check(cli::positive())->capture_default_str();
        app.add_option("--target", target, "The share of benchmarks to tie or win: alpha* = inf{alpha : C_alpha >= target}")
            ->check(cli::unit_interval_open_left())
            ->capture_default_str();
        app.add_option("--plot", plot, "A PNG of C_alpha against alpha for every student, with the target line (gnuplot)");
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        std::vector<double> grid;
        try {
          grid = eval::alpha_grid(alpha_max, alpha_step);
        } catch (const UsageError& e) {
          throw UsageError(e.what(), "--alpha-step");
        }
        if (!plot.empty()) {
          io::require_output_extension(plot, "--plot", {".png"}, "the picture is PNG");
          io::check_distinct_outputs({{"-o", output}, {"--plot", plot}}, {scores_path});
          io::require_gnuplot("--plot");
        } else {
          io::check_distinct_outputs({{"-o", output}}, {scores_path});
        }
        const eval::ScoreTable scores = eval::read_scores(scores_path);
        ctx.prov.add_input(scores_path, scores.sha256);
        const std::vector<eval::StudentWinRate> students = eval::win_rates(scores, teacher, grid, target);

        nlohmann::json out;
        out["teacher"] = teacher;
        out["target"] = target;
        out["benchmarks"] = scores.benchmarks;
        out["alpha_grid"] = {{"max", alpha_max}, {"step", alpha_step}, {"points", grid.size()}};
        out["students"] = nlohmann::json::array();
        for (const auto& s : students) {
          nlohmann::json a = nlohmann::json::object(), curve = nlohmann::json::array();
          for (std::size_t b = 0; b < s.tie_alpha.size(); ++b) a[scores.benchmarks[b]] = finite_or_null(s.tie_alpha[b]);
          for (std::size_t i = 0; i < grid.size(); ++i) curve.push_back({grid[i], s.curve[i]});
          out["students"].push_back({{"name", s.name},
                                     {"alpha_star", finite_or_null(s.alpha_star)},
                                     {"C_0", s.c0},
                                     {"lossless", s.lossless},
                                     {"a_b", a},
                                     {"curve", curve}});
        }
        out["meta"] = ctx.prov.to_json();

        std::optional<io::AtomicFile> png;  // committed after the JSON, so that a failure leaves neither
        if (!plot.empty()) {
          png.emplace(plot);
          std::string data;
          for (const auto& s : students) {
            for (std::size_t i = 0; i < grid.size(); ++i) data += fmt::format("{} {}\n", grid[i], s.curve[i]);
            data += "\n\n";
          }
          io::gnuplot_png(
              *png, data, [&](const std::string& dat) { return plot_script(dat, students, teacher, alpha_max, target); }, 900, 600);
        }
        io::write_json(output, out);
        if (png) png->commit();
      });
}
