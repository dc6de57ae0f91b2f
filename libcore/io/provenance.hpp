// Provenance of an output: which tool made it, how, from which inputs (DESIGN.md).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace icmlkit::io {

/// One input file and its content hash.
struct InputRecord {
  std::string path;    ///< as given on the command line ("-" for stdin)
  std::string sha256;  ///< hex digest of the bytes read
};

/// Everything an output records about how it was made.  Serialised as the `meta` object
/// of JSON outputs and as root attributes of HDF5 outputs.
struct Provenance {
  std::string tool;               ///< program name, e.g. "infolaw-fit"
  std::string version;            ///< icmlkit version
  std::string command;            ///< full command line, shell-quoted
  std::uint64_t seed = 0;         ///< --seed in effect
  std::vector<InputRecord> inputs;
  nlohmann::json extra = nlohmann::json::object();  ///< tool-specific notes

  /// Records an input file with its SHA-256 (stdin: digest of the bytes given).
  void add_input(const std::string& path, const std::string& sha256);
  /// The `meta` JSON object.
  nlohmann::json to_json() const;
};

/// Quotes argv into one shell-safe command line.
std::string shell_join(int argc, const char* const* argv);

}  // namespace icmlkit::io
