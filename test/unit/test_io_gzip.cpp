// io/gzip: reading .gz input.  Truth: data compressed here by zlib's own gzip writer (deflate
// with the gzip wrapper) round-trips exactly; RFC 1952 says a member ends with CRC-32 and
// ISIZE, so every proper prefix of a member is truncated and a changed trailer byte fails the
// check; concatenated members decompress to the concatenated data (as gzip -d does).
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "io/gzip.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

using namespace icmlkit;
namespace fs = std::filesystem;

namespace {

// gzip member of `text` made by zlib's deflate (windowBits 15 + 16 = gzip wrapper).
std::string gzip_member(const std::string& text) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, static_cast<uLong>(text.size())) + 32, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string message_of(const std::string& bytes) {
  try {
    io::gunzip(bytes, "x.csv.gz");
  } catch (const InputError& e) {
    return e.message();
  }
  return "";
}

// A table large enough to span several 64 KiB output buffers.
std::string csv_text() {
  std::string s = "a,b,c\n";
  for (int i = 0; i < 20000; ++i) s += std::to_string(i) + "," + std::to_string(i * 7 % 13) + ",x" + std::to_string(i % 5) + "\n";
  return s;
}

}  // namespace

TEST_CASE("io: gunzip round-trips one member and concatenated members") {
  const std::string text = csv_text();
  const std::string gz = gzip_member(text);
  CHECK(io::gunzip(gz, "x") == text);
  CHECK(io::gunzip(gzip_member("a,b\n") + gzip_member("1,2\n") + gzip_member(""), "x") == "a,b\n1,2\n");
  CHECK(io::gunzip(gz + std::string(512, '\0'), "x") == text);  // zero padding after the end
  CHECK(io::is_gzip_path("digits.csv.gz"));
  CHECK_FALSE(io::is_gzip_path("digits.csv"));
}

TEST_CASE("io: a truncated or damaged gzip stream is an error naming the file") {
  const std::string gz = gzip_member(csv_text());
  // Every proper prefix (cut inside the header, the deflate data or the 8-byte trailer).
  int refused = 0, cuts = 0;
  for (std::size_t n = 0; n < gz.size(); n += (n < 64 || n + 64 > gz.size()) ? 1 : 97) {
    ++cuts;
    const std::string m = message_of(gz.substr(0, n));
    refused += !m.empty() && m.find("(x.csv.gz)") != std::string::npos;
  }
  CHECK(refused == cuts);
  CHECK(message_of(gz.substr(0, gz.size() - 4)).find("truncated gzip file") != std::string::npos);
  CHECK(message_of(gz.substr(0, 200)).find("truncated gzip file") != std::string::npos);
  std::string bad_crc = gz;
  bad_crc[gz.size() - 6] ^= 0x01;  // inside the CRC-32 field
  CHECK(message_of(bad_crc).find("corrupt gzip data") != std::string::npos);
  std::string bad_len = gz;
  bad_len[gz.size() - 2] ^= 0x01;  // inside ISIZE
  CHECK(message_of(bad_len).find("corrupt gzip data") != std::string::npos);
  CHECK(message_of(gz + "junk").find("unexpected bytes after gzip member 1") != std::string::npos);
  CHECK(message_of(gz + gz.substr(0, 30)).find("member 2 ends early") != std::string::npos);
  CHECK(message_of("a,b\n1,2\n").find("not gzip data") != std::string::npos);
  // From a file: the path is named.
  const fs::path dir = fs::temp_directory_path() / ("icmlkit_unit_gzip_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path p = dir / "t.csv.gz";
  {
    std::ofstream f(p, std::ios::binary);
    f << gz.substr(0, gz.size() / 2);
  }
  try {
    io::read_gzip_file(p.string());
    FAIL("no error for a truncated file");
  } catch (const InputError& e) {
    CHECK(e.where() == p.string());
  }
  fs::remove_all(dir);
}

TEST_CASE("io: Table::read takes .csv.gz and .tsv.gz as the text inside") {
  // Truth: the same table read from the plain file; the hash is of the decompressed text.
  const fs::path dir = fs::temp_directory_path() / ("icmlkit_gz_table_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string csv = "a,b\n1,2\n3,4.5\n", tsv = "a\tb\n1\t2\n3\t4.5\n";
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  };
  const io::Table plain = io::Table::read(write("t.csv", csv));
  for (const std::string& path : {write("t.csv.gz", gzip_member(csv)), write("t.tsv.gz", gzip_member(tsv))}) {
    const io::Table t = io::Table::read(path);
    CHECK(t.names() == plain.names());
    CHECK(t.numbers("b") == plain.numbers("b"));
  }
  CHECK(io::Table::read((dir / "t.csv.gz").string()).sha256() == plain.sha256());
  write("bad.csv.gz", gzip_member(csv).substr(0, 10));
  CHECK_THROWS_AS(io::Table::read((dir / "bad.csv.gz").string()), InputError);
  fs::remove_all(dir);
}
