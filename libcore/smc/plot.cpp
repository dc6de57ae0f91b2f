#include "smc/plot.hpp"

#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gnuplot.hpp"
#include "util/error.hpp"

namespace icmlkit::smc {

PlotSeries read_trajectory(const std::string& path, std::string& ylabel) {
  std::ifstream in(path);
  if (!in) throw InputError("cannot open trajectory", path);
  PlotSeries s;
  s.label = std::filesystem::path(path).stem().string();
  std::vector<double> est, th;
  bool est_ok = true, th_scalar = true;
  std::string line;
  long lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception&) {
      throw InputError("not a JSON object", fmt::format("{}:{}", path, lineno));
    }
    if (!j.is_object()) throw InputError("not a JSON object", fmt::format("{}:{}", path, lineno));
    if (j.contains("meta")) {
      if (j.contains("method") && j["method"].is_string()) s.label = j["method"].get<std::string>();
      continue;
    }
    if (j.contains("theta_norm") && !j.contains("theta")) j["theta"] = std::vector<double>{j["theta_norm"].get<double>()};
    if (!j.contains("step") || !j["step"].is_number() || !j.contains("theta"))
      throw InputError("trajectory row needs step and theta", fmt::format("{}:{}", path, lineno));
    s.step.push_back(j["step"].get<double>());
    const auto& t = j["theta"];
    if (t.is_number()) {
      th.push_back(t.get<double>());
    } else if (t.is_array()) {
      th_scalar = false;
      double n2 = 0;
      for (const auto& v : t) {
        if (!v.is_number()) throw InputError("theta must hold numbers", fmt::format("{}:{}", path, lineno));
        n2 += v.get<double>() * v.get<double>();
      }
      th.push_back(std::sqrt(n2));
    } else {
      throw InputError("theta must be a number or an array", fmt::format("{}:{}", path, lineno));
    }
    if (j.contains("estimate") && j["estimate"].is_number() && std::isfinite(j["estimate"].get<double>()))
      est.push_back(j["estimate"].get<double>());
    else
      est_ok = false;
  }
  if (s.step.empty()) throw InputError("trajectory has no rows", path);
  if (est_ok) {
    s.value = std::move(est);
    ylabel = "estimate (weighted mean reward)";
  } else {
    s.value = std::move(th);
    ylabel = th_scalar ? "theta" : "|theta|";
  }
  return s;
}

void plot_series(const std::vector<PlotSeries>& series, const std::string& ylabel, const std::string& title,
                 const std::string& png, const std::string& gnuplot_exe) {
  // One gnuplot data block per series, separated by two blank lines (index i).
  std::string data;
  for (const auto& s : series) {
    for (std::size_t i = 0; i < s.step.size(); ++i) data += fmt::format("{} {:.17g}\n", s.step[i], s.value[i]);
    data += "\n\n";
  }
  io::gnuplot_png(
      png, data,
      [&](const std::string& dat) {
        std::string g = "set title " + io::gnuplot_quote(title) + "\nset xlabel 'step'\nset ylabel " + io::gnuplot_quote(ylabel) +
                        "\nset key outside right\nset grid\nplot ";
        for (std::size_t i = 0; i < series.size(); ++i)
          g += fmt::format("{}{} index {} using 1:2 with lines lw 2 title {}", i ? ", " : "", dat, i, io::gnuplot_quote(series[i].label));
        return g;
      },
      900, 600, gnuplot_exe);
}

}  // namespace icmlkit::smc
