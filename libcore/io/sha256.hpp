// SHA-256 digests for provenance (OpenSSL libcrypto EVP interface).
#pragma once

#include <string>
#include <string_view>

namespace icmlkit::io {

/// Lower-case hex SHA-256 of `bytes` (64 characters).
std::string sha256_hex(std::string_view bytes);
/// Lower-case hex SHA-256 of a file's contents, streamed.  Throws InputError when unreadable.
std::string sha256_file(const std::string& path);

}  // namespace icmlkit::io
