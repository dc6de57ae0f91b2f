#include "io/jsonl_log.hpp"

#include <iostream>

#include "io/atomic_file.hpp"
#include "util/error.hpp"

namespace icmlkit::io {

JsonlLog::JsonlLog(std::string path, bool append) : path_(std::move(path)), append_(append) {
  require_output_extension(path_, "--log", {".jsonl"}, "the log is JSON Lines", true);
  if (descriptor_path(path_) == 1) path_ = "-";  // std::cout itself, never a second handle on the file
  check_output_dir(path_);
}

void JsonlLog::write(const nlohmann::json& j, const std::function<void()>& before_stdout) {
  if (is_stdout(path_) && before_stdout) before_stdout();
  if (!is_stdout(path_) && !file_) {
    file_ = std::make_unique<std::ofstream>(path_, append_ ? std::ios::app : std::ios::trunc);
    if (!*file_) throw RuntimeError("cannot write log", path_);
  }
  std::ostream& logs = file_ ? *file_ : std::cout;
  logs << j.dump() << '\n' << std::flush;
  if (!logs) throw RuntimeError("cannot write the log (disk full?)", is_stdout(path_) ? "standard output" : path_);
}

}  // namespace icmlkit::io
