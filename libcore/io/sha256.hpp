// SHA-256 digests for provenance (OpenSSL libcrypto EVP interface).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace icmlkit::io {

/// Lower-case hex SHA-256 of `bytes` (64 characters).
std::string sha256_hex(std::string_view bytes);
/// Lower-case hex SHA-256 of a file's contents, streamed.  Throws InputError when unreadable.
std::string sha256_file(const std::string& path);

/// An incremental SHA-256: update() with the bytes in order, then hex() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  /// Adds `n` bytes at `data`.
  void update(const void* data, std::size_t n);
  /// The lower-case hex digest of everything added (the hasher is spent).
  std::string hex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace icmlkit::io
