// A read-only memory-mapped file (large model files are parsed in place, never copied whole).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace icmlkit::io {

/// Maps a whole file read-only.  Throws InputError when it cannot be opened or mapped.
/// An empty file maps to size() == 0 and data() == nullptr.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::uint8_t* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace icmlkit::io
