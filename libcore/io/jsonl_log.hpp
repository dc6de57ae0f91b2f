// A training program's JSON Lines log (lm-train, xlstm-distill: --log FILE.jsonl, "-" = stdout).
#pragma once

#include <fstream>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace icmlkit::io {

/// One record per line, flushed as written.  The path is checked when the log is made (a .jsonl
/// extension, a writable directory: UsageError / InputError naming --log), the file opened at the
/// first record, so a run that fails while reading its inputs leaves an existing log untouched;
/// appended to when `append` (a resumed run), else truncated.
class JsonlLog {
 public:
  JsonlLog(std::string path, bool append);
  /// Writes one record and flushes it; `before_stdout` runs first when the record goes to stdout
  /// (a progress bar on the same terminal clears).  Throws RuntimeError when it cannot be written.
  void write(const nlohmann::json& j, const std::function<void()>& before_stdout = {});
  /// The path records go to ("-" for stdout).
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  bool append_;
  std::unique_ptr<std::ofstream> file_;
};

}  // namespace icmlkit::io
