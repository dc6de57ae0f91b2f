#include "smc/plot.hpp"

#include <fmt/core.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/atomic_file.hpp"
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
  io::AtomicFile out(png);
  const auto dir = out.temp_path().parent_path();
  const auto data = std::filesystem::path(out.temp_path().string() + ".dat");
  const auto script = std::filesystem::path(out.temp_path().string() + ".gp");
  struct Cleanup {
    std::filesystem::path a, b;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove(a, ec);
      std::filesystem::remove(b, ec);
    }
  } cleanup{data, script};
  {
    // One gnuplot data block per series, separated by two blank lines (index i).
    std::ofstream d(data);
    for (const auto& s : series) {
      for (std::size_t i = 0; i < s.step.size(); ++i) d << fmt::format("{} {:.17g}\n", s.step[i], s.value[i]);
      d << "\n\n";
    }
    if (!d) throw RuntimeError("cannot write plot data", data.string());
  }
  auto quote = [](const std::string& t) {
    std::string o = "'";
    for (char c : t) o += c == '\'' ? std::string("''") : std::string(1, c);
    return o + "'";
  };
  {
    std::ofstream g(script);
    g << "set terminal pngcairo size 900,600 noenhanced\n";
    g << "set output " << quote(out.temp_path().string()) << "\n";
    g << "set title " << quote(title) << "\nset xlabel 'step'\nset ylabel " << quote(ylabel) << "\n";
    g << "set key outside right\nset grid\n";
    g << "plot ";
    for (std::size_t i = 0; i < series.size(); ++i)
      g << (i ? ", " : "") << quote(data.string()) << " index " << i << " using 1:2 with lines lw 2 title "
        << quote(series[i].label);
    g << "\n";
    if (!g) throw RuntimeError("cannot write gnuplot script", script.string());
  }
  const std::string cmd = fmt::format("{} {} 2>&1", gnuplot_exe, quote(script.string()));
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw RuntimeError("cannot run gnuplot (install gnuplot-nox)", gnuplot_exe);
  std::string msg;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe)) msg += buf;
  const int st = ::pclose(pipe);
  if (st != 0 || !std::filesystem::exists(out.temp_path()) || std::filesystem::file_size(out.temp_path()) == 0) {
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) throw RuntimeError("gnuplot not found (install gnuplot-nox)", gnuplot_exe);
    const auto nl = msg.find('\n');
    throw RuntimeError(fmt::format("gnuplot failed: {}", msg.substr(0, nl)), png);
  }
  (void)dir;
  out.commit();
}

}  // namespace icmlkit::smc
