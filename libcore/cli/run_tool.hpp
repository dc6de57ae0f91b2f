// The shared command-line frame of every icmlkit tool (DESIGN.md conventions).
//
// `run_tool` builds a CLI11 app with the common flags (-q, -v, --seed, --threads,
// --version), lets the tool add its own, parses, runs the tool body, and maps every
// escaping error to one stderr line "<tool>: error: <what> (<where>)" and an exit code:
// 0 success, 1 bad input or runtime failure, 2 usage error.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>

#include "io/provenance.hpp"

namespace icmlkit::cli {

/// What `--help` says about a tool.
struct ToolInfo {
  std::string name;         ///< program name, "infolaw-fit"
  std::string description;  ///< one paragraph shown under the usage line
  std::string examples;     ///< 2-3 real example command lines, shown at the end of --help
};

/// Flags every tool has, after parsing.
struct Common {
  bool quiet = false;      ///< -q: errors only on stderr
  int verbose = 0;         ///< -v count: more detail on stderr
  std::uint64_t seed = 0;  ///< --seed (default util/rng.hpp default_seed)
  int threads = 0;         ///< --threads, 0 = all cores
};

/// Handed to the tool body: parsed common flags and a provenance record pre-filled with
/// tool, version, command line and seed (the body adds its inputs).
struct Context {
  Common common;
  io::Provenance prov;
};

/// Runs a tool.  `setup` adds the tool's options to the app; `body` does the work after a
/// successful parse and after a check that the directory of -o/--output (when the tool has
/// one and it is not stdout) exists and is writable (io::check_output_dir, exit 1).  Returns
/// the process exit code; never throws.
int run_tool(int argc, char** argv, const ToolInfo& info, const std::function<void(CLI::App&)>& setup,
             const std::function<void(Context&)>& body);

/// Where run_tool's error line ("<tool>: error: <what> (<where>)\n") goes instead of stderr
/// (process-wide; call before run_tool).  A rank > 0 of a data-parallel job keeps it, to print it
/// only if rank 0 has not already reported the same failure and ended the job (issue 41).
void set_error_sink(std::function<void(const std::string&)> sink);
/// Rewrites a CLI11 parse message into the one-line form "<what> (<where>)": a bad flag value
/// "--flag: message" becomes "message (--flag)", with CLI11's own wording made ours
/// ("Value 0.5 not in range 1.000000 to 10.000000" -> "must be a number in 1..10, got 0.5";
/// "x not in {a,b}" -> "must be one of a, b, got 'x'"); "Could not convert: --w = abc" becomes
/// "cannot read 'abc': not a number of the right kind, or out of range (--w)"; any other
/// message (unknown flag, missing argument) gets " (run with --help for usage)".
std::string describe_parse_error(const std::string& what);

/// Flag validators with short messages ("must be > 0", "must be an integer in 0..100000").
/// The pair --header / --no-header on one table input (every table reader takes both, issue 26):
/// --header sets `has_header` true, --no-header false, neither keeps its default (shown in the
/// help); giving both is a usage error.  `what` names the input ("CSV", "Rank CSV").
void add_header_flags(CLI::App& app, bool& has_header, const std::string& what);

CLI::Validator positive();
/// Validator for a probability in (0, 1] (nucleus top-p, fractions that may not be zero).
CLI::Validator unit_interval_open_left();
CLI::Validator non_negative();
CLI::Validator int_range(long long lo, long long hi);

/// Parses "k=v,k2=v2" into pairs (blanks around names and values are ignored); throws
/// UsageError naming `flag` on a malformed item or a name given twice.
std::vector<std::pair<std::string, std::string>> parse_assignments(const std::string& text, const std::string& flag);

}  // namespace icmlkit::cli
