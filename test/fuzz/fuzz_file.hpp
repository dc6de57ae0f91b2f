// Harness support: the readers that take a path get the fuzzer's bytes through a file of this
// process in ICMLKIT_FUZZ_SCRATCH when set (fuzz-replay's ctest cases set their own temporary
// directory, removed even when a finding kills the process), else /dev/shm (memory; TMPDIR when
// /dev/shm is absent), rewritten for every input and removed when the process exits normally.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

namespace icmlkit::fuzz {

/// The scratch files of this process, removed at its normal exit.
struct ScratchFiles {
  std::set<std::string> paths;
  ~ScratchFiles() {
    for (const auto& p : paths) unlink(p.c_str());
  }
};

/// Writes `data` to this process's scratch file ending in `ext` and returns its path.
inline std::string scratch_file(const std::uint8_t* data, std::size_t size, const std::string& ext) {
  static ScratchFiles made;
  const char* dir = std::getenv("ICMLKIT_FUZZ_SCRATCH");
  if (dir == nullptr || *dir == '\0')
    dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  const std::string path = std::string(dir) + "/icmlkit-fuzz-" + std::to_string(getpid()) + ext;
  made.paths.insert(path);
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    if (size > 0) std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  return path;
}

}  // namespace icmlkit::fuzz
