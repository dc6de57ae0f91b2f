#include "io/json.hpp"

#include <fmt/core.h>

#include <filesystem>

#include "io/atomic_file.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

namespace icmlkit::io {

nlohmann::json read_json(const std::string& path) { return read_json(path, nullptr); }

nlohmann::json read_json(const std::string& path, std::string* sha256) {
  const std::string text = read_file(path);
  if (sha256) *sha256 = sha256_hex(text);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError("malformed JSON", fmt::format("{}, byte {}", is_stdout(path) ? "<stdin>" : path, e.byte));
  }
}

void require_json_path(const std::string& path) {
  if (!is_stdout(path) && std::filesystem::path(path).extension() != ".json")
    throw UsageError("the result is JSON: give an output path ending in .json (or - for stdout)", "-o " + path);
}

void write_json(const std::string& path, const nlohmann::json& j) {
  write_text(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace icmlkit::io
