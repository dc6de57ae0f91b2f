// Build options as text and JSON, for --version and provenance.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace icmlkit {

/// Multi-line human-readable build description (version, CUDA on/off, compiler, libraries).
std::string build_description();
/// The same as a JSON object {"version", "cuda", "build_type", ...}.
nlohmann::json build_summary();

}  // namespace icmlkit
