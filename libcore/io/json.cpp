#include "io/json.hpp"

#include <fmt/core.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
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
  } catch (const nlohmann::json::exception&) {  // e.g. a number beyond double's range (1e400)
    throw InputError("a number in the JSON is out of range", is_stdout(path) ? "<stdin>" : path);
  }
}

void for_each_jsonl(const std::string& path, const std::function<void(const nlohmann::json&, const std::string&)>& row,
                    std::string* sha256) {
  const std::string text = read_file(path);
  if (sha256) *sha256 = sha256_hex(text);
  const std::string name = is_stdout(path) ? "<stdin>" : path;
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string_view line(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string where = fmt::format("{}, line {}", name, line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw InputError("malformed JSON", where);
    }
    if (!j.is_object()) throw InputError("a line must be a JSON object", where);
    row(j, where);
  }
}

void require_json_path(const std::string& path) {
  require_output_extension(path, "-o", {".json"}, "the result is JSON", true);
}

double float_for_json(float f) noexcept {
  if (!std::isfinite(f)) return f;
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

void write_json(const std::string& path, const nlohmann::json& j) {
  write_text(path, j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

}  // namespace icmlkit::io
