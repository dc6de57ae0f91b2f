// lm/matmul: the f16-weight kernel (SIMD path with weight prefetching) is bitwise the portable
// path and the f32 kernel on widened weights, for odd shapes (K, O and R tails, several column
// blocks, strided rows), batch sizes 1..16 and 1 or 2 threads; and both equal an independent
// scalar evaluation of the documented order written here.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lm/matmul.hpp"
#include "num/half.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::lm;

namespace {

bool same_bits(const float* a, const float* b, std::size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

/// The order documented in matmul.hpp, written out independently: lane j sums k = j mod 8 with
/// fused multiply-adds in increasing k, the partial last chunk padded with 0 * 0, then the fixed
/// tree ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).
float spec_dot(const float* x, const std::uint16_t* w, int K) {
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int padded = (K + 7) / 8 * 8;
  for (int k = 0; k < padded; ++k) {
    const float a = k < K ? x[k] : 0.0f, b = k < K ? num::f16_to_f32(w[k]) : 0.0f;
    l[k % 8] = std::fma(a, b, l[k % 8]);
  }
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

/// Random finite halves over the whole range: normals of every exponent, subnormals, +-0.
std::uint16_t random_half(Rng& rng) {
  for (;;) {
    const auto h = static_cast<std::uint16_t>(rng.bits() & 0xffff);
    if ((h & 0x7c00) == 0x7c00) continue;  // inf / NaN: not weights
    // Keep magnitudes moderate so that no dot product overflows: exponents above 2^8 halved.
    if (((h >> 10) & 0x1f) > 23) continue;
    return h;
  }
}

}  // namespace

TEST_CASE("lm: f16 matmul fast path is bitwise the portable path, the f32 kernel and the spec, for tails and batches") {
  if (!have_avx2()) MESSAGE("no AVX2/FMA/F16C on this CPU: the fast path falls back to the portable one");
  Rng rng(2024);
  // K: below one chunk, exact chunks, chunk + 1, the 100m model's width + 3 (tail of 3);
  // O: below a 4-column tile, 8-column tiles with a tail, several 64-column blocks with tails
  // (so the prefetch of the tiles ahead runs and stops at the matrix end).
  struct Shape { int K, O; };
  for (const Shape s : {Shape{5, 3}, Shape{8, 13}, Shape{17, 37}, Shape{45, 67}, Shape{771, 203}, Shape{64, 300}}) {
    const int K = s.K, O = s.O, ldx = K + 3, ldy = O + 2;  // strided rows
    std::vector<std::uint16_t> wh(std::size_t(O) * K);
    std::vector<float> wf(wh.size());
    for (std::size_t i = 0; i < wh.size(); ++i) { wh[i] = random_half(rng); wf[i] = num::f16_to_f32(wh[i]); }
    for (const int R : {1, 2, 3, 4, 5, 7, 16}) {
      CAPTURE(K); CAPTURE(O); CAPTURE(R);
      std::vector<float> x(std::size_t(R) * ldx);
      for (auto& v : x) v = static_cast<float>(rng.normal());
      const std::size_t ny = std::size_t(R) * ldy;
      std::vector<float> fast1(ny, -1.0f), fast2(ny, -1.0f), port(ny, -1.0f), wide(ny, -1.0f), dflt(ny, -1.0f);
      matmul_xwt_f16_path(x.data(), R, K, ldx, wh.data(), O, fast1.data(), ldy, true, 1);
      matmul_xwt_f16_path(x.data(), R, K, ldx, wh.data(), O, fast2.data(), ldy, true, 2);
      matmul_xwt_f16_path(x.data(), R, K, ldx, wh.data(), O, port.data(), ldy, false, 1);
      matmul_xwt_f16(x.data(), R, K, ldx, wh.data(), O, dflt.data(), ldy);
      matmul_xwt_path(x.data(), R, K, ldx, wf.data(), O, wide.data(), ldy, true, 2);
      // Whole buffers, padding included: the kernel writes only y[r, 0..O).
      CHECK(same_bits(fast1.data(), port.data(), ny));
      CHECK(same_bits(fast2.data(), port.data(), ny));
      CHECK(same_bits(dflt.data(), port.data(), ny));
      CHECK(same_bits(wide.data(), port.data(), ny));
      bool spec_ok = true, rows_ok = true;
      std::vector<float> alone(O);
      for (int r = 0; r < R; ++r) {
        const float* xr = x.data() + std::size_t(r) * ldx;
        for (int o = 0; o < O; ++o) {
          const float e = spec_dot(xr, wh.data() + std::size_t(o) * K, K);
          spec_ok = spec_ok && std::memcmp(&e, &fast1[std::size_t(r) * ldy + o], sizeof(float)) == 0;
        }
        // Batch invariance: the row alone (one-row tiles, other prefetch pattern) gives the same bits.
        matmul_xwt_f16_path(xr, 1, K, K, wh.data(), O, alone.data(), O, true, 2);
        rows_ok = rows_ok && same_bits(alone.data(), fast1.data() + std::size_t(r) * ldy, O);
      }
      CHECK(spec_ok);
      CHECK(rows_ok);
    }
  }
}

TEST_CASE("lm: every kernel path (portable, AVX2, AVX-512) and weight type (f32, f16, bf16) gives the spec's bits for any batch") {
  // Issue 37: the AVX-512 tile packs rows in pairs (odd batches pad a zero row), tiles 12 rows x 4
  // columns and widens 16-bit weights in registers; none of it may change a bit.  Batches cover
  // full 12-row tiles, every partial tile (1-5 pairs and odd rows) and several column blocks.
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512})
    if (!isa_available(isa)) MESSAGE("this CPU lacks " << isa_name(isa) << ": that path falls back to the portable one");
  Rng rng(37);
  struct Shape { int K, O; };
  for (const Shape s : {Shape{5, 9}, Shape{16, 8}, Shape{45, 67}, Shape{259, 133}}) {
    const int K = s.K, O = s.O, ldx = K + 1, ldy = O + 3;
    std::vector<std::uint16_t> wh(std::size_t(O) * K), wb(wh.size());
    std::vector<float> wfh(wh.size()), wfb(wh.size());
    for (std::size_t i = 0; i < wh.size(); ++i) {
      wh[i] = random_half(rng);
      wfh[i] = num::f16_to_f32(wh[i]);
      wb[i] = num::f32_to_bf16(static_cast<float>(rng.normal()));
      wfb[i] = num::bf16_to_f32(wb[i]);
    }
    for (const int R : {1, 4, 5, 8, 9, 13, 14, 17, 64}) {
      CAPTURE(K); CAPTURE(O); CAPTURE(R);
      std::vector<float> x(std::size_t(R) * ldx);
      for (auto& v : x) v = static_cast<float>(rng.normal());
      // The spec on the widened weights (f16 ones; bf16 through the f32 kernel's spec below).
      const std::size_t ny = std::size_t(R) * ldy;
      std::vector<float> spec(ny, -1.0f);
      for (int r = 0; r < R; ++r)
        for (int o = 0; o < O; ++o) spec[std::size_t(r) * ldy + o] = spec_dot(x.data() + std::size_t(r) * ldx, wh.data() + std::size_t(o) * K, K);
      std::vector<float> ref_b(ny, -1.0f);
      matmul_xwt_on(x.data(), R, K, ldx, wfb.data(), WeightType::f32, O, ref_b.data(), ldy, Isa::portable, 1);
      for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512})
        for (int th : {1, 2}) {
          CAPTURE(isa_name(isa)); CAPTURE(th);
          std::vector<float> yh(ny, -1.0f), yf(ny, -1.0f), yb(ny, -1.0f);
          matmul_xwt_on(x.data(), R, K, ldx, wh.data(), WeightType::f16, O, yh.data(), ldy, isa, th);
          matmul_xwt_on(x.data(), R, K, ldx, wfh.data(), WeightType::f32, O, yf.data(), ldy, isa, th);
          matmul_xwt_on(x.data(), R, K, ldx, wb.data(), WeightType::bf16, O, yb.data(), ldy, isa, th);
          CHECK(same_bits(yh.data(), spec.data(), ny));
          CHECK(same_bits(yf.data(), spec.data(), ny));
          CHECK(same_bits(yb.data(), ref_b.data(), ny));
        }
      std::vector<float> yb(ny, -1.0f);
      matmul_xwt_bf16(x.data(), R, K, ldx, wb.data(), O, yb.data(), ldy);
      CHECK(same_bits(yb.data(), ref_b.data(), ny));
    }
  }
}
