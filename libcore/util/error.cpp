#include "util/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace icmlkit {

Error::Error(std::string what, std::string where, ExitCode code)
    : std::runtime_error(std::move(what)), where_(std::move(where)), code_(code) {}

std::string Error::message() const {
  std::string m = what();
  if (!where_.empty()) m += " (" + where_ + ")";
  return m;
}

InputError unreadable_file(const std::string& path) {
  std::string reason;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    reason = std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    reason = std::strerror(EISDIR);
  } else {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) reason = std::strerror(errno);
    else {
      ::close(fd);
      reason = S_ISREG(st.st_mode) ? "read failed" : "not a regular file";
    }
  }
  return InputError("cannot read file: " + reason, path);
}

}  // namespace icmlkit
