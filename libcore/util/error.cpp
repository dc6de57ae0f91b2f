#include "util/error.hpp"

namespace icmlkit {

Error::Error(std::string what, std::string where, ExitCode code)
    : std::runtime_error(std::move(what)), where_(std::move(where)), code_(code) {}

std::string Error::message() const {
  std::string m = what();
  if (!where_.empty()) m += " (" + where_ + ")";
  return m;
}

}  // namespace icmlkit
