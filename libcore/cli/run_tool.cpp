#include "cli/run_tool.hpp"

#include <cerrno>
#include <cstdlib>

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <set>
#include <iterator>
#include <new>
#include <regex>
#include <sstream>
#include <vector>

#include "io/atomic_file.hpp"
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

// CLI11's own wording of a bad flag value, in ours ("must be ..., got ...").  Truth for the
// patterns: the messages CLI11 2.1 produces (test_cli.cpp takes them from real parses).
std::string plain_value_message(const std::string& msg) {
  static const std::regex range(R"(^Value (.*) not in range (\S+) to (\S+)$)");       // CLI::Range
  static const std::regex member(R"(^(.*) not in \{(.*)\}$)");                         // CLI::IsMember
  static const std::regex repeated(R"(^At Most 1 required but received (\d+)$)");     // flag given twice
  static const std::regex no_value(R"(^\d+ required .* missing$)");                    // flag without its value
  std::smatch m;
  if (std::regex_match(msg, m, range))
    return fmt::format("must be a number in {}..{}, got {}", std::strtod(m[2].str().c_str(), nullptr),
                       std::strtod(m[3].str().c_str(), nullptr), m[1].str());
  if (std::regex_match(msg, m, member)) {
    std::string choices = m[2];
    for (std::size_t p = 0; (p = choices.find(',', p)) != std::string::npos; p += 2) choices.replace(p, 1, ", ");
    return fmt::format("must be one of {}, got '{}'", choices, m[1].str());
  }
  if (std::regex_match(msg, m, repeated)) return fmt::format("given {} times; give it once", m[1].str());
  if (std::regex_match(msg, m, no_value)) return "needs a value";
  return msg;
}

}  // namespace

std::string describe_parse_error(const std::string& what) {
  // CLI11 2.1 reports a failed conversion as "Could not convert: --flag = value".
  const std::string convert = "Could not convert: ";
  if (const auto eq = what.find(" = "); what.rfind(convert, 0) == 0 && eq != std::string::npos)
    return fmt::format("cannot read '{}': not a number of the right kind, or out of range ({})", what.substr(eq + 3),
                       what.substr(convert.size(), eq - convert.size()));
  // "The following argument(s) was/were not expected: w_k ... w_1": CLI11 2.1 lists the words
  // last to first; name them in command-line order.
  if (const auto at = what.find(" not expected: "); what.rfind("The following argument", 0) == 0 && at != std::string::npos) {
    std::istringstream list(what.substr(at + 15));
    const std::vector<std::string> words{std::istream_iterator<std::string>(list), std::istream_iterator<std::string>()};
    std::string ordered;
    for (auto it = words.rbegin(); it != words.rend(); ++it) ordered += (ordered.empty() ? "" : " ") + *it;
    return fmt::format("unexpected argument{}: {} (run with --help for usage)", words.size() == 1 ? "" : "s", ordered);
  }
  // A bad value of one flag: "--flag: message" (our validators, CLI11's Range and IsMember).
  const auto colon = what.find(": ");
  if (what.size() > 1 && what[0] == '-' && colon != std::string::npos && what.find(' ') > colon)
    return plain_value_message(what.substr(colon + 2)) + " (" + what.substr(0, colon) + ")";
  return what + " (run with --help for usage)";
}

namespace {

/// Edit distance (insertions, deletions, substitutions) between two short strings.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// " (did you mean --prompt?)" for the first unknown --flag of the command line that is close
/// to one of the app's option names; "" when none is.
std::string suggest_options(const CLI::App& app, int argc, char** argv) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& l : opt->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : opt->get_snames()) names.push_back("-" + s);
  }
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word.size() < 3 || word[0] != '-' || word == "--") continue;  // no guesses for one-letter flags
    word = word.substr(0, word.find('='));
    if (std::find(names.begin(), names.end(), word) != names.end()) continue;
    std::string best;
    std::size_t best_d = std::max<std::size_t>(2, word.size() / 4) + 1;
    for (const std::string& n : names) {
      const std::size_t d = edit_distance(word, n);
      if (d < best_d) { best_d = d; best = n; }
    }
    if (!best.empty()) return fmt::format(" (did you mean {} for {}?)", best, word);
  }
  return "";
}

std::function<void(const std::string&)> g_error_sink;  // set_error_sink

int fail(const std::string& tool, const std::string& msg, int code) {
  std::fflush(stdout);
  const std::string line = fmt::format("{}: error: {}\n", tool, one_line(msg));
  if (g_error_sink) g_error_sink(line);
  else std::fputs(line.c_str(), stderr);
  return code;
}

std::string strip(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

}  // namespace

void add_header_flags(CLI::App& app, bool& has_header, const std::string& what) {
  CLI::Option* yes = app.add_flag_callback("--header", [&has_header] { has_header = true; },
                                           what + " has a header row" + (has_header ? " (default)" : ""));
  CLI::Option* no = app.add_flag_callback("--no-header", [&has_header] { has_header = false; },
                                          what + " has no header row" + (has_header ? "" : " (default)"));
  yes->excludes(no);
}

CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(v, x) || !std::isfinite(x)) return "'" + v + "' is not a number";
        return x > 0 ? "" : "must be > 0, got " + v;
      },
      "NUMBER > 0");
}

CLI::Validator unit_interval_open_left() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(v, x) || !std::isfinite(x)) return "'" + v + "' is not a number";
        return x > 0 && x <= 1 ? "" : "must be a number in (0, 1], got " + v;
      },
      "NUMBER in (0, 1]");
}

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(v, x) || !std::isfinite(x)) return "'" + v + "' is not a number";
        return x >= 0 ? "" : "must be >= 0, got " + v;
      },
      "NUMBER >= 0");
}

CLI::Validator int_range(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        long long x = 0;
        if (!CLI::detail::lexical_cast(v, x)) return "'" + v + "' is not an integer";
        if (x < lo || x > hi) return fmt::format("must be an integer in {}..{}, got {}", lo, hi, v);
        return "";
      },
      fmt::format("INT in {}..{}", lo, hi));
}

std::vector<std::pair<std::string, std::string>> parse_assignments(const std::string& text, const std::string& flag) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const std::size_t eq = item.find('=');
    const std::string name = eq == std::string::npos ? "" : strip(item.substr(0, eq));
    const std::string value = eq == std::string::npos ? "" : strip(item.substr(eq + 1));
    if (name.empty() || value.empty()) throw UsageError(fmt::format("expected NAME=VALUE, got '{}'", item), flag);
    for (const auto& [k, v] : out)
      if (k == name) throw UsageError(fmt::format("'{}' is given twice", name), flag);
    out.emplace_back(name, value);
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
    // One example per paragraph, so help2man keeps each on its own line in the man page.
    std::string examples;
    for (std::size_t pos = 0; pos < info.examples.size();) {
      const std::size_t end = std::min(info.examples.find('\n', pos), info.examples.size());
      if (end > pos) examples += info.examples.substr(pos, end - pos) + "\n\n";
      pos = end + 1;
    }
    app.footer("Examples:\n" + examples +
               "Exit status: 0 success, 1 bad input or failure, 2 usage error.  Outputs record how they were made "
               "(tool, version, command line, seed, SHA-256 of inputs) in their meta.");
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
        ->capture_default_str()
        ->check(CLI::Validator(
            [](std::string& v) -> std::string {
              // CLI11 would saturate "-1" or "1e30" to 2^64 - 1: distinct seeds must stay distinct.
              if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
                return "must be a whole number in 0..18446744073709551615, got " + v;
              errno = 0;
              (void)std::strtoull(v.c_str(), nullptr, 10);
              if (errno == ERANGE) return "out of range 0..18446744073709551615, got " + v;
              return {};
            },
            "SEED"));
    app.add_option("-t,--threads", ctx.common.threads, "Worker threads (0 = all cores)")
        ->capture_default_str()
        ->check(int_range(0, 1024));
    setup(app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {  // derives from CLI::Success: catch it first
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::Success&) {
      return 0;
    } catch (const CLI::ExtrasError& e) {
      return fail(info.name, describe_parse_error(e.what()) + suggest_options(app, argc, argv), 2);
    } catch (const CLI::ParseError& e) {
      return fail(info.name, describe_parse_error(e.what()), 2);
    }
    log::set_level(ctx.common.quiet ? log::Level::quiet
                                    : (ctx.common.verbose > 0 ? log::Level::verbose : log::Level::normal));
    set_threads(ctx.common.threads);
    ctx.prov.tool = info.name;
    ctx.prov.version = std::string(build_summary()["version"]);
    ctx.prov.command = io::shell_join(argc, argv);
    ctx.prov.seed = ctx.common.seed;
    // An output that cannot be written fails now, not after the work (DESIGN.md: exit 1).
    if (const CLI::Option* out = app.get_option_no_throw("--output")) {
      const std::string o = out->as<std::string>();
      io::check_output_dir(o);
      // -o naming an existing file that another argument gives (an input, as a rule) would replace
      // it; /dev/null may take several outputs.
      for (const CLI::Option* opt : app.get_options()) {
        if (opt == out || io::is_dev_null(o)) continue;
        for (const std::string& v : opt->results()) {
          std::error_code ec;
          if (!v.empty() && v != "-" && std::filesystem::exists(v, ec) && io::same_file_path(v, o))
            throw UsageError(fmt::format("-o names the file given to {}; write the output elsewhere", opt->get_name()), o);
          // a directory output (a Hugging Face model) replaces the files it writes there: none may be an input
          static const std::set<std::string> kWritten = {"model.safetensors", "config.json", "generation_config.json",
                                                         "tokenizer_config.json", "tokenizer.model", "adapter_config.json",
                                                         "adapter_model.safetensors"};
          if (!v.empty() && v != "-" && std::filesystem::is_directory(o, ec) && std::filesystem::is_regular_file(v, ec) &&
              io::path_in_dir(v, o) && kWritten.count(std::filesystem::path(v).filename().string()))
            throw UsageError(fmt::format("-o is the directory that holds {} (given to {}); write the output elsewhere", v,
                                         opt->get_name()),
                             o);
          // a directory input (a Hugging Face model, a PEFT adapter): -o must not be one of the files read from it
          static const std::set<std::string> kRead = {"model.safetensors", "model.safetensors.index.json", "config.json",
                                                      "tokenizer.model", "adapter_config.json", "adapter_model.safetensors"};
          if (!v.empty() && v != "-" && std::filesystem::is_directory(v, ec) && io::path_in_dir(o, v) &&
              kRead.count(std::filesystem::path(o).filename().string()))
            throw UsageError(fmt::format("-o would overwrite {} in the directory given to {}; write the output elsewhere",
                                         std::filesystem::path(o).filename().string(), opt->get_name()),
                             o);
        }
      }
    }
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

void set_error_sink(std::function<void(const std::string&)> sink) { g_error_sink = std::move(sink); }

}  // namespace icmlkit::cli
