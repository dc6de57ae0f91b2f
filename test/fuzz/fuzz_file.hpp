// Harness support: the readers that take a path get the fuzzer's bytes through a file of this
// process in /dev/shm (memory; TMPDIR when /dev/shm is absent), rewritten for every input.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace icmlkit::fuzz {

/// Writes `data` to this process's scratch file ending in `ext` and returns its path.
inline std::string scratch_file(const std::uint8_t* data, std::size_t size, const std::string& ext) {
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  const std::string path = std::string(dir) + "/icmlkit-fuzz-" + std::to_string(getpid()) + ext;
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    if (size > 0) std::fwrite(data, 1, size, f);
    std::fclose(f);
  }
  return path;
}

}  // namespace icmlkit::fuzz
