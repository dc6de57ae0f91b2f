#include "io/gnuplot.hpp"

#include <fmt/core.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "io/atomic_file.hpp"
#include "util/error.hpp"

namespace icmlkit::io {

std::string gnuplot_quote(const std::string& text) {
  std::string o = "'";
  for (char c : text) o += c == '\'' ? std::string("''") : std::string(1, c);
  return o + "'";
}

void require_gnuplot(const std::string& flag, const std::string& gnuplot_exe) {
  if (std::system(fmt::format("command -v {} > /dev/null 2>&1", gnuplot_quote(gnuplot_exe)).c_str()) != 0)
    throw RuntimeError("gnuplot is not installed (apt-get install gnuplot-nox)", flag);
}

void gnuplot_png(const std::string& png, const std::string& data, const std::function<std::string(const std::string&)>& commands,
                 int width, int height, const std::string& gnuplot_exe) {
  io::AtomicFile out(png);
  gnuplot_png(out, data, commands, width, height, gnuplot_exe);
  out.commit();
}

void gnuplot_png(AtomicFile& out, const std::string& data, const std::function<std::string(const std::string&)>& commands,
                 int width, int height, const std::string& gnuplot_exe) {
  const std::string png = out.target().string();
  const auto dat = std::filesystem::path(out.temp_path().string() + ".dat");
  const auto script = std::filesystem::path(out.temp_path().string() + ".gp");
  struct Cleanup {
    std::filesystem::path a, b;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove(a, ec);
      std::filesystem::remove(b, ec);
    }
  } cleanup{dat, script};
  {
    std::ofstream d(dat);
    d << data;
    if (!d) throw RuntimeError("cannot write plot data", dat.string());
    std::ofstream g(script);
    g << fmt::format("set terminal pngcairo size {},{} noenhanced\nset output {}\n", width, height, gnuplot_quote(out.temp_path().string()))
      << commands(gnuplot_quote(dat.string())) << "\n";
    if (!g) throw RuntimeError("cannot write gnuplot script", script.string());
  }
  const std::string cmd = fmt::format("{} {} 2>&1", gnuplot_quote(gnuplot_exe), gnuplot_quote(script.string()));
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) throw RuntimeError("cannot run gnuplot (install gnuplot-nox)", gnuplot_exe);
  std::string msg;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe)) msg += buf;
  const int st = ::pclose(pipe);
  if (st != 0 || !std::filesystem::exists(out.temp_path()) || std::filesystem::file_size(out.temp_path()) == 0) {
    if (WIFEXITED(st) && WEXITSTATUS(st) == 127) throw RuntimeError("gnuplot not found (install gnuplot-nox)", gnuplot_exe);
    const std::string first = msg.substr(0, msg.find('\n'));
    throw RuntimeError(first.empty() ? fmt::format("gnuplot failed (exit status {}) without a message", WIFEXITED(st) ? WEXITSTATUS(st) : st)
                                     : "gnuplot failed: " + first,
                       png);
  }
}

}  // namespace icmlkit::io
