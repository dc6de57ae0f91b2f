// Typed errors that carry the process exit code a tool should end with.
//
// Every tool maps an escaping exception to one stderr line
//   <tool>: error: <what> (<where>)
// and the exit code below (see cli/run_tool.hpp).  Library code throws these; it never
// prints, aborts or calls exit().
#pragma once

#include <stdexcept>
#include <string>

namespace icmlkit {

/// Exit codes shared by every tool (DESIGN.md, "Command-line conventions").
enum class ExitCode : int {
  ok = 0,          ///< success
  failure = 1,     ///< bad input, bad data or a runtime failure
  usage = 2,       ///< bad flags or arguments
};

/// Base of all icmlkit errors: a message, an optional location ("file, row 3, column 'x'")
/// and the exit code the tool should return.
class Error : public std::runtime_error {
 public:
  /// `what`: the problem in a few words; `where`: file/row/column/flag, may be empty.
  Error(std::string what, std::string where, ExitCode code);
  /// The location part, possibly empty.
  const std::string& where() const noexcept { return where_; }
  /// The exit code this error maps to.
  ExitCode code() const noexcept { return code_; }
  /// "<what> (<where>)" or "<what>" when there is no location.
  std::string message() const;

 private:
  std::string where_;
  ExitCode code_;
};

/// A malformed or inconsistent input file or value (exit 1).
class InputError : public Error {
 public:
  explicit InputError(std::string what, std::string where = {})
      : Error(std::move(what), std::move(where), ExitCode::failure) {}
};

/// A failure while computing or writing results (exit 1).
class RuntimeError : public Error {
 public:
  explicit RuntimeError(std::string what, std::string where = {})
      : Error(std::move(what), std::move(where), ExitCode::failure) {}
};

/// A bad command line: unknown flag, bad flag value, missing argument (exit 2).
class UsageError : public Error {
 public:
  explicit UsageError(std::string what, std::string where = {})
      : Error(std::move(what), std::move(where), ExitCode::usage) {}
};

/// The error for an input that cannot be opened: "cannot read file: <the system's reason>"
/// (No such file or directory, Permission denied, Is a directory, ...), naming `path`.  The
/// reason is found by asking the system about the path now (stat, then open).
InputError unreadable_file(const std::string& path);

}  // namespace icmlkit
