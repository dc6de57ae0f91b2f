// Atomic output files: write to a temporary file beside the target, rename on success.
//
// A failure (exception, bad data, killed process) leaves no partial file and never
// clobbers an existing good one: the temporary is removed by the destructor unless
// commit() ran, and by a handler when SIGINT, SIGTERM, SIGHUP or SIGPIPE ends the process
// (installed on first use, only for signals still at their default action).  SIGKILL
// cannot be caught: then a ".<name>.tmp.<pid>.<n>" file may remain beside the target.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace icmlkit::io {

/// A pending output file.  Write to `temp_path()` (any library may open it), then commit().
class AtomicFile {
 public:
  /// `target`: the final path.  Throws RuntimeError when its directory does not exist or is not
  /// writable (check_output_dir), or when the target is a directory.
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Temporary path in the target's directory (same file system, so rename is atomic).
  const std::filesystem::path& temp_path() const noexcept { return temp_; }
  /// Final path.
  const std::filesystem::path& target() const noexcept { return target_; }
  /// Renames the temporary over the target.  Throws RuntimeError on failure.
  void commit();

 private:
  std::filesystem::path target_, temp_;
  bool committed_ = false;
  bool stream_ = false;  ///< target is a stream (is_stream_path): commit copies into it
  int slot_ = -1;  ///< entry in the table the signal handler cleans up (-1: none)
};

/// The target an AtomicFile temporary path stands for ("dir/.name.tmp.PID.N" -> "dir/name"), for
/// error messages; any other path unchanged.
std::string target_of_temp(const std::string& path);

/// Whether `path` is a stream to write into rather than a file to replace: an existing
/// character device, FIFO or socket (/dev/null, a named pipe), or /dev/stdout, /dev/stderr,
/// /dev/fd/N, /proc/self/fd/N.  Such outputs skip extension checks (the format is the tool's
/// default) and are written in one piece after the run succeeds.
bool is_stream_path(const std::string& path);

/// The file descriptor a path names directly (/dev/stdout, /dev/fd/1, /proc/self/fd/1 -> 1;
/// /dev/stderr -> 2; /dev/fd/N -> N), or -1.  Such an output is written through that descriptor
/// (after flushing std::cout for 1), never reopened: reopening would truncate the file a shell
/// redirected it to and write from its start.
int descriptor_path(const std::string& path) noexcept;

/// Whether `path` is /dev/null (which several outputs may name at once).
bool is_dev_null(const std::string& path) noexcept;

/// Installs now the SIGINT/SIGTERM/SIGHUP/SIGPIPE handlers that remove pending temporaries
/// before the process dies (the first AtomicFile installs them otherwise, where the default
/// action is in force).  A program that installs handlers of its own that chain to the previous
/// ones (util/subprocess forward_termination_to_children) calls this first.
void install_temporary_cleanup();

/// Checks an output path's extension, in any case, against `extensions` (".json", ...): throws
/// UsageError "<what>: give a path ending in <ext>[ or <ext>...]" naming `flag` and the path.
/// Stdout ("-" or empty) passes when `allow_stdout`; stream paths always pass.
void require_output_extension(const std::string& path, const std::string& flag, const std::vector<std::string>& extensions,
                              const std::string& what, bool allow_stdout = false);

/// Checks, before any work is done, that a file can be created at `path`: the directory that
/// would hold it exists and is writable ("dir/" counts as the entry "dir", so a tool that makes
/// an output directory needs only its parent).  Does nothing for stdout ("-" or empty) and
/// stream paths.  Throws
/// RuntimeError naming the directory (exit 1, like an unreadable input).  run_tool calls it for
/// every tool's -o/--output; AtomicFile calls it again when the file is opened.
void check_output_dir(const std::string& path);

/// Whether `path` is an entry of directory `dir` itself: its parent, resolved as same_file_path
/// resolves (absolute, normalised, symbolic links of the existing part followed), is dir's.
/// False for stdout.
bool path_in_dir(const std::string& path, const std::string& dir);

/// Whether two paths name one file: compared as absolute paths with ".", ".." and the symbolic
/// links of their existing part resolved (the files need not exist).  Stdout ("-", "") never matches.
bool same_file_path(const std::string& a, const std::string& b);

/// An output of a tool: the flag that names it and its path (empty or "-": none, or stdout).
struct NamedOutput {
  std::string flag, path;
};

/// Checks, before any work is done, that no two outputs share a file and that no output is one
/// of the `inputs` (paths compared after resolving ".", ".." and symbolic links, so "a.h5" and
/// "./a.h5" clash).  Stdout and empty paths are skipped.  Throws UsageError naming both flags
/// (exit 2): a later write would silently replace the earlier output, or the input.
void check_distinct_outputs(const std::vector<NamedOutput>& outputs, const std::vector<std::string>& inputs);

/// Writes `bytes` to `path` atomically; `path` "-" or empty writes to stdout.
/// Throws RuntimeError when the file cannot be written.
void write_text(const std::string& path, std::string_view bytes);

/// Whether `path` names standard output ("-" or empty).
inline bool is_stdout(const std::string& path) { return path.empty() || path == "-"; }

}  // namespace icmlkit::io
