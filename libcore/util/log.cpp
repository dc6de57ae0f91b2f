#include "util/log.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

namespace icmlkit::log {
namespace {
std::atomic<int> g_level{static_cast<int>(Level::normal)};
std::string g_program = "icmlkit";
std::mutex g_mutex;
}  // namespace

void set_level(Level level) noexcept { g_level.store(static_cast<int>(level)); }
Level level() noexcept { return static_cast<Level>(g_level.load()); }
void set_program(std::string_view name) {
  std::lock_guard lock(g_mutex);
  g_program = std::string(name);
}

void write(Level min, std::string_view prefix, std::string_view text) {
  if (level() < min) return;
  std::lock_guard lock(g_mutex);
  std::fprintf(stderr, "%s: %.*s%.*s\n", g_program.c_str(), static_cast<int>(prefix.size()), prefix.data(),
               static_cast<int>(text.size()), text.data());
  std::fflush(stderr);
}

}  // namespace icmlkit::log
