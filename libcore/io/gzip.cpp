#include "io/gzip.hpp"

#include <zlib.h>

#include <fmt/core.h>

#include <algorithm>
#include <limits>

#include "io/table.hpp"
#include "util/error.hpp"

namespace icmlkit::io {
namespace {

bool gzip_magic(std::string_view s) { return s.size() >= 2 && s[0] == '\x1f' && s[1] == '\x8b'; }

// Owns a zlib inflate stream (gzip wrapper only: windowBits 15 + 16).
struct Inflater {
  z_stream zs{};
  explicit Inflater(const std::string& where) {
    if (inflateInit2(&zs, 15 + 16) != Z_OK) throw RuntimeError("cannot start zlib inflate", where);
  }
  ~Inflater() { inflateEnd(&zs); }
  Inflater(const Inflater&) = delete;
  Inflater& operator=(const Inflater&) = delete;
};

}  // namespace

bool is_gzip_path(std::string_view path) noexcept {
  return path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

std::string gunzip(std::string_view bytes, const std::string& where) {
  if (!gzip_magic(bytes)) throw InputError("not gzip data (no gzip header)", where);
  Inflater inf(where);
  z_stream& zs = inf.zs;
  std::string out;
  char buf[1 << 16];
  std::size_t pos = 0;  // bytes of input consumed so far
  int member = 1;
  while (true) {
    // avail_in is 32-bit: feed at most 1 GiB per call.
    const std::size_t chunk = std::min<std::size_t>(bytes.size() - pos, std::size_t(1) << 30);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data() + pos));
    zs.avail_in = static_cast<uInt>(chunk);
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
    pos += chunk - zs.avail_in;
    if (rc == Z_STREAM_END) {  // this member's CRC-32 and ISIZE trailer matched
      const std::string_view rest = bytes.substr(pos);
      if (rest.find_first_not_of('\0') == std::string_view::npos) return out;
      if (!gzip_magic(rest))
        throw InputError(fmt::format("unexpected bytes after gzip member {} (byte {})", member, pos + 1), where);
      inflateReset(&zs);
      ++member;
      continue;
    }
    if (rc == Z_DATA_ERROR)
      throw InputError(fmt::format("corrupt gzip data in member {}: {}", member, zs.msg ? zs.msg : "invalid data"), where);
    if (rc == Z_MEM_ERROR) throw RuntimeError("out of memory while inflating", where);
    if (rc == Z_NEED_DICT || rc == Z_STREAM_ERROR) throw InputError("unsupported gzip data", where);
    // Z_OK or Z_BUF_ERROR: progress, or none possible.  With all input used and output space
    // left over, the member did not reach its end: the file is cut short.
    if (pos == bytes.size() && zs.avail_out != 0)
      throw InputError(fmt::format("truncated gzip file (member {} ends early, after {} compressed bytes)", member, bytes.size()),
                       where);
  }
}

std::string read_gzip_file(const std::string& path) { return gunzip(read_file(path), path); }

std::string read_maybe_gzip(const std::string& path) { return is_gzip_path(path) ? read_gzip_file(path) : read_file(path); }

}  // namespace icmlkit::io
