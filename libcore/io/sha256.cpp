#include "io/sha256.hpp"

#include <openssl/evp.h>

#include <array>
#include <fstream>
#include <memory>

#include "util/error.hpp"

namespace icmlkit::io {
namespace {

struct CtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_MD_CTX, CtxDeleter>;

Ctx new_ctx() {
  Ctx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw RuntimeError("SHA-256 init failed");
  return ctx;
}

std::string finish(EVP_MD_CTX* ctx) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md.data(), &len) != 1) throw RuntimeError("SHA-256 failed");
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(hex[md[i] >> 4]);
    out.push_back(hex[md[i] & 15]);
  }
  return out;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  Ctx ctx = new_ctx();
  EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size());
  return finish(ctx.get());
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw unreadable_file(path);
  Ctx ctx = new_ctx();
  std::array<char, 1 << 16> buf{};
  while (in) {
    in.read(buf.data(), buf.size());
    const auto n = in.gcount();
    if (n > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(n));
  }
  if (in.bad()) throw InputError("error while reading file", path);
  return finish(ctx.get());
}

struct Sha256::Impl {
  Ctx ctx = new_ctx();
};
Sha256::Sha256() : impl_(std::make_unique<Impl>()) {}
Sha256::~Sha256() = default;
void Sha256::update(const void* data, std::size_t n) { EVP_DigestUpdate(impl_->ctx.get(), data, n); }
std::string Sha256::hex() { return finish(impl_->ctx.get()); }

}  // namespace icmlkit::io
