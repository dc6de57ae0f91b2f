#include "cli/array_task.hpp"

#include <fmt/format.h>

#include <exception>

#include "util/error.hpp"

namespace icmlkit::cli {

std::pair<int, int> parse_array_task(const std::string& text) {
  const auto slash = text.find('/');
  int i = -1, n = -1;
  try {
    std::size_t a = 0, b = 0;
    if (slash != std::string::npos) {
      i = std::stoi(text.substr(0, slash), &a);
      n = std::stoi(text.substr(slash + 1), &b);
      if (a != slash || b != text.size() - slash - 1) i = -1;
    }
  } catch (const std::exception&) {
    i = -1;
  }
  if (i < 0 || n < 1 || i >= n)
    throw UsageError(fmt::format("expected i/N with 0 <= i < N (a 0-based task index), got '{}'", text), "--array-task");
  return {i, n};
}

}  // namespace icmlkit::cli
