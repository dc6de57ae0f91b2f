#include "cli/run_tool.hpp"

#include <fmt/core.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <new>

#include "util/build_info_access.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

namespace icmlkit::cli {
namespace {

std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

int fail(const std::string& tool, const std::string& msg, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "%s: error: %s\n", tool.c_str(), one_line(msg).c_str());
  return code;
}

/// Help formatter that prints the examples block verbatim at the end.
}  // namespace

std::vector<std::pair<std::string, std::string>> parse_assignments(const std::string& text, const std::string& flag) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
      throw UsageError(fmt::format("expected NAME=VALUE, got '{}'", item), flag);
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    pos = end + 1;
  }
  return out;
}

int run_tool(int argc, char** argv, const ToolInfo& info, const std::function<void(CLI::App&)>& setup,
             const std::function<void(Context&)>& body) {
  log::set_program(info.name);
  Context ctx;
  ctx.common.seed = default_seed;
  try {
    CLI::App app(info.description, info.name);
    app.get_formatter()->column_width(34);
    app.footer("Examples:\n" + info.examples + "\nExit status: 0 success, 1 bad input or failure, 2 usage error.\n"
               "Report: icmlkit " + std::string(build_summary()["version"]) + ".");
    app.set_help_flag("-h,--help", "Print this help and exit");
    app.add_flag_callback(
        "--version",
        [&] {
          std::cout << info.name << " (icmlkit) " << std::string(build_summary()["version"]) << "\n"
                    << build_description();
          throw CLI::Success();
        },
        "Print version and build options (CUDA on/off) and exit");
    app.add_flag("-q,--quiet", ctx.common.quiet, "Print nothing but errors on stderr");
    app.add_flag("-v,--verbose", ctx.common.verbose, "Print more detail on stderr");
    app.add_option("--seed", ctx.common.seed, "Random seed; the same seed gives the same output bit for bit")
        ->capture_default_str();
    app.add_option("--threads", ctx.common.threads, "Worker threads (0 = all cores)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    setup(app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {  // derives from CLI::Success: catch it first
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::Success&) {
      return 0;
    } catch (const CLI::ParseError& e) {
      return fail(info.name, std::string(e.what()) + " (run with --help for usage)", 2);
    }
    log::set_level(ctx.common.quiet ? log::Level::quiet
                                    : (ctx.common.verbose > 0 ? log::Level::verbose : log::Level::normal));
    set_threads(ctx.common.threads);
    ctx.prov.tool = info.name;
    ctx.prov.version = std::string(build_summary()["version"]);
    ctx.prov.command = io::shell_join(argc, argv);
    ctx.prov.seed = ctx.common.seed;
    body(ctx);
    std::cout.flush();
    if (!std::cout) return fail(info.name, "cannot write to standard output", 1);
    return 0;
  } catch (const Error& e) {
    return fail(info.name, e.message(), static_cast<int>(e.code()));
  } catch (const CLI::Error& e) {
    return fail(info.name, e.what(), 2);
  } catch (const std::bad_alloc&) {
    return fail(info.name, "out of memory", 1);
  } catch (const std::exception& e) {
    return fail(info.name, e.what(), 1);
  } catch (...) {
    return fail(info.name, "unknown failure", 1);
  }
}

}  // namespace icmlkit::cli
