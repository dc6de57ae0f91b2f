#include "lm/matmul_q8.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "num/half.hpp"

namespace icmlkit::lm::detail {

namespace {

/// Bytes of one block of a 16-row group: 16 f16 scales, then the values (Q8_0 512, Q4_0 256).
inline std::size_t group_block_bytes(bool q4) noexcept { return q4 ? 32 + 256 : 32 + 512; }

/// Value e (0-31) of row `lane` in a packed group block, as the weight's integer (Q8_0 q, Q4_0 q - 8).
inline int packed_value(const std::uint8_t* gb, bool q4, int lane, int e) noexcept {
  if (!q4) return int(gb[32 + 64 * (e / 4) + 4 * lane + e % 4]) - 128;
  const int m = (e % 16) / 4;
  const std::uint8_t byte = gb[32 + 64 * m + 4 * lane + e % 4];
  return (e < 16 ? byte & 0x0f : byte >> 4) - 8;
}

inline float packed_scale(const std::uint8_t* gb, int lane) noexcept {
  std::uint16_t h;
  std::memcpy(&h, gb + 2 * lane, 2);
  return num::f16_to_f32(h);
}

/// One output on the portable path: the documented arithmetic.
float dot_portable(const Q8Rows& a, int r, const std::uint8_t* group, bool q4, int lane) {
  const int K = a.K;
  const std::size_t gbb = group_block_bytes(q4);
  const std::int8_t* qa = a.q.data() + std::size_t(r) * K;
  const float* da = a.scales.data() + std::size_t(r) * (K / 32);
  float acc = 0.0f;
  for (int b = 0; b < K / 32; ++b) {
    const std::uint8_t* gb = group + std::size_t(b) * gbb;
    int s = 0;
    for (int e = 0; e < 32; ++e) s += packed_value(gb, q4, lane, e) * qa[32 * b + e];
    acc = std::fma(static_cast<float>(s), packed_scale(gb, lane) * da[b], acc);
  }
  return acc;
}

/// The quantisation of one row (matmul.hpp); compiled twice below, the same source.
inline void quantize_row(const float* x, int K, std::int8_t* q, std::int32_t* ns, float* da) {
  for (int b = 0; b < K / 32; ++b) {
    const float* xb = x + 32 * b;
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      // nearest even (the default rounding mode); out of range or NaN clamped, never UB
      float v = std::nearbyint(xb[i] * id);
      v = v >= 127.0f ? 127.0f : v <= -127.0f ? -127.0f : v == v ? v : 0.0f;
      q[32 * b + i] = static_cast<std::int8_t>(v);
      sum += q[32 * b + i];
    }
    ns[b] = -sum;
    da[b] = num::f16_to_f32(num::f32_to_f16(amax / 127.0f));
  }
}

void quantize_row_portable(const float* x, int K, std::int8_t* q, std::int32_t* ns, float* da) {
  quantize_row(x, K, q, ns, da);
}

__attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma,f16c,sse4.1"))) void quantize_row_avx512(
    const float* x, int K, std::int8_t* q, std::int32_t* ns, float* da) {
  quantize_row(x, K, q, ns, da);
}

// ---- AVX512-VNNI: 16 rows of W per register (lane c = row c of the group) --------------------

// GCC 12's AVX-512 headers start some intrinsics from an "undefined" register, which
// -W(maybe-)uninitialized reports at every use (also where templates are instantiated).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define ICMLKIT_AQ_512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512vnni,avx2,fma,f16c")))

/// s[r][g] += the group's unsigned values u[g] times row r's four values at qa[r] + k (each lane).
template <int RT, int G>
ICMLKIT_AQ_512 inline void aq_step(const std::int8_t* const* qa, int k, const __m512i* u, __m512i (&s)[RT][G]) {
  for (int r = 0; r < RT; ++r) {
    std::int32_t four;
    std::memcpy(&four, qa[r] + k, 4);
    const __m512i av = _mm512_set1_epi32(four);
    for (int g = 0; g < G; ++g) s[r][g] = _mm512_dpbusd_epi32(s[r][g], u[g], av);
  }
}

/// RT rows x G groups of 16 columns.  Per block: each (row, group) sums its 32 products exactly
/// with eight VPDPBUSD (the group's unsigned values times four of the row's values broadcast,
/// onto the zero-point correction), in two chains; then one fused multiply-add by dw * da.
template <int RT, int G>
ICMLKIT_AQ_512 void tile_aq512(const Q8Rows& a, int r0, const std::uint8_t* W, std::size_t gstride, bool q4, int g0,
                               float* y, int ldy) {
  const int K = a.K, nb = K / 32;
  const std::size_t gbb = group_block_bytes(q4);
  const int shift = q4 ? 3 : 7;
  const std::int8_t* qa[RT];
  const std::int32_t* ns[RT];
  const float* da[RT];
  for (int r = 0; r < RT; ++r) {
    qa[r] = a.q.data() + std::size_t(r0 + r) * K;
    ns[r] = a.neg_sums.data() + std::size_t(r0 + r) * (K / 32);
    da[r] = a.scales.data() + std::size_t(r0 + r) * (K / 32);
  }
  __m512 acc[RT][G];
  for (int r = 0; r < RT; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int b = 0; b < nb; ++b) {
    const std::uint8_t* gb[G];
    for (int g = 0; g < G; ++g) gb[g] = W + std::size_t(g0 + g) * gstride + std::size_t(b) * gbb;
    __m512i s0[RT][G], s1[RT][G];
    for (int r = 0; r < RT; ++r) {
      const __m512i corr = _mm512_set1_epi32(ns[r][b] << shift);
      for (int g = 0; g < G; ++g) s0[r][g] = corr, s1[r][g] = _mm512_setzero_si512();
    }
    if (q4) {
      for (int m = 0; m < 4; ++m) {  // packed byte: value 4m+t low, 16+4m+t high
        __m512i lo[G], hi[G];
        for (int g = 0; g < G; ++g) {
          const __m512i p = _mm512_loadu_si512(gb[g] + 32 + 64 * m);
          lo[g] = _mm512_and_si512(p, low4);
          hi[g] = _mm512_and_si512(_mm512_srli_epi16(p, 4), low4);
        }
        aq_step<RT, G>(qa, 32 * b + 4 * m, lo, s0);
        aq_step<RT, G>(qa, 32 * b + 4 * (m + 4), hi, s1);
      }
    } else {
      for (int i = 0; i < 8; ++i) {
        __m512i u[G];
        for (int g = 0; g < G; ++g) u[g] = _mm512_loadu_si512(gb[g] + 32 + 64 * i);
        if (i & 1) aq_step<RT, G>(qa, 32 * b + 4 * i, u, s1);
        else aq_step<RT, G>(qa, 32 * b + 4 * i, u, s0);
      }
    }
    __m512 dw[G];
    for (int g = 0; g < G; ++g) dw[g] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb[g])));
    for (int r = 0; r < RT; ++r) {
      const __m512 d = _mm512_set1_ps(da[r][b]);
      for (int g = 0; g < G; ++g)
        acc[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[r][g], s1[r][g])), _mm512_mul_ps(dw[g], d),
                                    acc[r][g]);
    }
  }
  for (int r = 0; r < RT; ++r)
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(y + std::size_t(r0 + r) * ldy + 16 * (g0 + g), acc[r][g]);
}

/// Groups [g0, g1) for RT rows: G groups at a time (4 for one row, whose chains are few), then one.
template <int RT>
ICMLKIT_AQ_512 void rows_aq512(const Q8Rows& a, int r0, const std::uint8_t* W, std::size_t gstride, bool q4, int g0,
                               int g1, float* y, int ldy) {
  constexpr int G = RT == 1 ? 4 : 2;
  int g = g0;
  for (; g + G <= g1; g += G) tile_aq512<RT, G>(a, r0, W, gstride, q4, g, y, ldy);
  for (; g < g1; ++g) tile_aq512<RT, 1>(a, r0, W, gstride, q4, g, y, ldy);
}

#pragma GCC diagnostic pop

bool have_vnni512() noexcept {
  static const bool yes = isa_available(Isa::avx512) && __builtin_cpu_supports("avx512vnni");
  return yes;
}

}  // namespace

void quantize_rows_q8(const float* x, int R, int K, int ldx, Isa isa, Q8Rows& out) {
  out.R = R;
  out.K = K;
  out.q.resize(std::size_t(R) * K);
  out.neg_sums.resize(std::size_t(R) * (K / 32));
  out.scales.resize(std::size_t(R) * (K / 32));
  const bool v512 = isa == Isa::avx512 || isa == Isa::amx;
  for (int r = 0; r < R; ++r) {
    std::int8_t* q = out.q.data() + std::size_t(r) * K;
    std::int32_t* ns = out.neg_sums.data() + std::size_t(r) * (K / 32);
    float* da = out.scales.data() + std::size_t(r) * (K / 32);
    if (v512) quantize_row_avx512(x + std::size_t(r) * ldx, K, q, ns, da);
    else quantize_row_portable(x + std::size_t(r) * ldx, K, q, ns, da);
  }
}

void block_act_q8(const Q8Rows& a, const std::uint8_t* W, WeightType aq, int o0, int o1, float* y, int ldy, Isa isa) {
  const bool q4 = block_format(aq) == WeightType::q4_0;
  const std::size_t gstride = 16 * weight_row_bytes(aq, a.K);
  const int g0 = o0 / 16, g1 = o1 / 16;
  if ((isa == Isa::avx512 || isa == Isa::amx) && have_vnni512()) {
    int r = 0;
    for (; r + 4 <= a.R; r += 4) rows_aq512<4>(a, r, W, gstride, q4, g0, g1, y, ldy);
    for (; r + 2 <= a.R; r += 2) rows_aq512<2>(a, r, W, gstride, q4, g0, g1, y, ldy);
    for (; r < a.R; ++r) rows_aq512<1>(a, r, W, gstride, q4, g0, g1, y, ldy);
    return;
  }
  for (int r = 0; r < a.R; ++r)
    for (int o = o0; o < o1; ++o)
      y[std::size_t(r) * ldy + o] = dot_portable(a, r, W + std::size_t(o / 16) * gstride, q4, o % 16);
}

}  // namespace icmlkit::lm::detail

namespace icmlkit::lm {

void pack_act_q8(WeightType wt, const std::uint8_t* rows, int O, int K, std::uint8_t* out) noexcept {
  const bool q4 = wt == WeightType::q4_0;
  const std::size_t rb = weight_row_bytes(wt, K), bs = q4 ? 18 : 34, gbb = detail::group_block_bytes(q4);
  for (int g = 0; g < O / 16; ++g)
    for (int b = 0; b < K / 32; ++b) {
      std::uint8_t* gb = out + std::size_t(g) * 16 * rb + std::size_t(b) * gbb;
      for (int c = 0; c < 16; ++c) {
        const std::uint8_t* blk = rows + std::size_t(16 * g + c) * rb + std::size_t(b) * bs;
        std::memcpy(gb + 2 * c, blk, 2);
        for (int i = 0; i < (q4 ? 4 : 8); ++i)
          for (int t = 0; t < 4; ++t)  // Q8_0: q + 128; Q4_0: the byte as it is (values 4i+t and 16+4i+t)
            gb[32 + 64 * i + 4 * c + t] = q4 ? blk[2 + 4 * i + t] : std::uint8_t(blk[2 + 4 * i + t] ^ 0x80u);
      }
    }
}

void dequantize_act_q8_row(WeightType aq, const std::uint8_t* group, int lane, int K, float* out) noexcept {
  const bool q4 = block_format(aq) == WeightType::q4_0;
  const std::size_t gbb = detail::group_block_bytes(q4);
  for (int b = 0; b < K / 32; ++b) {
    const std::uint8_t* gb = group + std::size_t(b) * gbb;
    const float d = detail::packed_scale(gb, lane);
    for (int e = 0; e < 32; ++e) out[32 * b + e] = d * static_cast<float>(detail::packed_value(gb, q4, lane, e));
  }
}

}  // namespace icmlkit::lm
