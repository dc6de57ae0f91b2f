// Running another program of the toolkit as a child process (lm-sweep runs lm-train and
// lm-eval this way: each cell is a separate process with its own log, threads and exit code).
#pragma once

#include <string>
#include <vector>

namespace icmlkit {

/// The directory holding the running executable (/proc/self/exe's folder), e.g. "build/bin".
/// Throws RuntimeError when it cannot be read (not Linux).
std::string executable_dir();

/// Runs `argv` (argv[0] a path to the program) and waits for it.  Its standard output goes to
/// `stdout_path` and standard error to `stderr_path` (each created or truncated; "" keeps this
/// process's stream).  Returns the exit status, or 128 + N when signal N ended it.  Throws
/// RuntimeError when the program cannot be started (missing, not executable) or an output
/// file cannot be opened.  While it runs, the child's process id is registered so that
/// terminate_children() can stop it.  Thread-safe: several threads may each run a child.
int run_process(const std::vector<std::string>& argv, const std::string& stdout_path = "",
                const std::string& stderr_path = "");

/// Sends SIGTERM to every child run_process() is waiting for.  Async-signal-safe, so a signal
/// handler may call it (lm-sweep does on SIGINT/SIGTERM, so a killed sweep leaves no orphans).
void terminate_children() noexcept;

/// Installs SIGINT and SIGTERM handlers that terminate_children(), wait until each child has
/// exited (10 s at most, then SIGKILL: no child outlives this process), and then call the handler
/// that was there before (io::AtomicFile's cleanup) or end this process with the signal's
/// default action (exit status 128 + N).  Idempotent.
void forward_termination_to_children() noexcept;

}  // namespace icmlkit
