#include "io/atomic_file.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>

#include "util/error.hpp"

namespace icmlkit::io {
namespace fs = std::filesystem;

namespace {
std::atomic<unsigned> g_counter{0};
}

AtomicFile::AtomicFile(fs::path target) : target_(std::move(target)) {
  fs::path dir = target_.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw RuntimeError("output directory does not exist", dir.string());
  if (fs::is_directory(target_, ec)) throw RuntimeError("output path is a directory", target_.string());
  std::string name = ".";
  name += target_.filename().string();
  name += ".tmp.";
  name += std::to_string(::getpid());
  name += '.';
  name += std::to_string(g_counter.fetch_add(1));
  temp_ = dir / name;
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicFile::commit() {
  std::error_code ec;
  if (!fs::exists(temp_, ec)) throw RuntimeError("nothing was written", target_.string());
  fs::rename(temp_, target_, ec);
  if (ec) throw RuntimeError("cannot write output: " + ec.message(), target_.string());
  committed_ = true;
}

void write_text(const std::string& path, std::string_view bytes) {
  if (is_stdout(path)) {
    std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::cout.flush();
    if (!std::cout) throw RuntimeError("cannot write to standard output");
    return;
  }
  AtomicFile file(path);
  {
    std::ofstream out(file.temp_path(), std::ios::binary);
    if (!out) throw RuntimeError("cannot create output file", path);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) throw RuntimeError("cannot write output file (disk full?)", path);
  }
  file.commit();
}

}  // namespace icmlkit::io
