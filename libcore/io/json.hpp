// JSON files in and out (nlohmann::json), with errors that name the file.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>

namespace icmlkit::io {

/// Parses a JSON file ("-" = stdin).  Throws InputError naming the file (and the parser's
/// byte offset) when it is unreadable or malformed.
nlohmann::json read_json(const std::string& path);
/// The same, also giving the SHA-256 of the bytes read (for provenance; works for stdin).
nlohmann::json read_json(const std::string& path, std::string* sha256);
/// Reads a JSON Lines file ("-" = stdin) and calls `row(object, where)` for every non-blank line,
/// `where` = "file, line N" (1-based) for the caller's own errors; `sha256`, when given, gets the
/// hash of the bytes read.  Throws InputError naming the file and line for an unreadable file,
/// malformed JSON or a line that is not a JSON object.
void for_each_jsonl(const std::string& path, const std::function<void(const nlohmann::json&, const std::string&)>& row,
                    std::string* sha256 = nullptr);
/// Throws UsageError naming -o unless `path` is stdout ("-"), a stream (/dev/null) or ends in
/// .json (for tools whose result is a JSON document).
void require_json_path(const std::string& path);
/// A float as the double of its shortest round-trip decimal, for JSON output: 1.2f gives 1.2
/// (printed "1.2"), not 1.2000000476837158, the exact value of the float.  Non-finite values
/// pass through.
double float_for_json(float f) noexcept;

/// Writes `j` pretty-printed (2-space indent) plus a newline, atomically; "-" = stdout.
void write_json(const std::string& path, const nlohmann::json& j);

}  // namespace icmlkit::io
