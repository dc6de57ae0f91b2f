// gzip (RFC 1952) reading with zlib: every member inflated, each member's CRC-32 and length
// trailer checked, so a truncated or damaged .gz file is an error rather than a shorter input.
#pragma once

#include <string>
#include <string_view>

namespace icmlkit::io {

/// True when `path` ends in ".gz".
bool is_gzip_path(std::string_view path) noexcept;

/// Inflates gzip data held in memory: one member or several concatenated (as `gzip -d` and
/// `zcat` read them); zero bytes after the last member are padding and ignored.  Throws
/// InputError naming `where` when the data is not gzip, ends before a member's end (truncated),
/// fails its CRC-32 or length check, or is followed by other bytes.
std::string gunzip(std::string_view bytes, const std::string& where);

/// Reads and inflates the gzip file `path` (see gunzip); InputError naming `path` when it is
/// unreadable, truncated or corrupt.
std::string read_gzip_file(const std::string& path);

/// The content of `path`: inflated (read_gzip_file) when the name ends in ".gz", the bytes as
/// they are otherwise (read_file; "-" = stdin).  Throws InputError as those do.
std::string read_maybe_gzip(const std::string& path);

}  // namespace icmlkit::io
