// Diagnostics on stderr with a process-wide verbosity (-q / -v).
#pragma once

#include <fmt/core.h>

#include <string_view>

namespace icmlkit::log {

/// Verbosity: quiet prints only errors; normal adds notes and warnings; verbose adds detail.
enum class Level : int { quiet = 0, normal = 1, verbose = 2 };

/// Sets the process-wide level (called once by the CLI layer).
void set_level(Level level) noexcept;
/// Current level.
Level level() noexcept;
/// Name printed before each line ("infolaw-fit"); set by the CLI layer.
void set_program(std::string_view name);

/// Writes "<program>: <text>\n" to stderr when the level is at least `min`.
void write(Level min, std::string_view prefix, std::string_view text);

/// A note for the user (shown unless -q).
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  if (level() >= Level::normal) write(Level::normal, "", fmt::format(f, std::forward<Args>(args)...));
}
/// A warning (shown unless -q).
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  if (level() >= Level::normal) write(Level::normal, "warning: ", fmt::format(f, std::forward<Args>(args)...));
}
/// Extra detail (shown with -v).
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  if (level() >= Level::verbose) write(Level::verbose, "", fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace icmlkit::log
