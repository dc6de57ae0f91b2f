// Per-element and per-row arithmetic of the language-model engine, written once for both the
// host compiler and nvcc (`__host__ __device__` under nvcc, plain inline under g++).
//
// The CUDA backend (kernels/engine.cu) runs these functions inside its kernels; the CPU unit
// test test/unit/test_lm_device_math.cpp runs their host instances against the CPU engine's
// own functions (num/half.hpp, lm::rms_norm, lm::apply_rope, the attention records and the
// greedy sampler of lm::forward), so the math a GPU executes is proven on machines without
// one.  Nothing here allocates or throws.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstddef>
#include <cstring>

#if defined(__CUDACC__)
#define ICMLKIT_HD __host__ __device__ __forceinline__
#else
#define ICMLKIT_HD inline
#endif

namespace icmlkit::lm::dm {

/// The bits of a float32 and back (memcpy on the host, the intrinsic on the device).
ICMLKIT_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
ICMLKIT_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---- 16-bit floats ----------------------------------------------------------------------
// Same rounding as num/half.hpp: nearest, ties to even; NaN stays a quiet NaN; f16 overflow
// gives infinity, small values become subnormals.  Widenings are exact.

/// float32 -> bfloat16 bits.
ICMLKIT_HD std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}
/// bfloat16 bits -> float32 (exact).
ICMLKIT_HD float bf16_to_f32(std::uint16_t h) { return bits_float(static_cast<std::uint32_t>(h) << 16); }

/// float32 -> IEEE binary16 bits.
ICMLKIT_HD std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  std::uint32_t h;
  if (a > 0x7f800000u) {
    h = 0x7e00u;
  } else if (a >= 0x477ff000u) {
    h = 0x7c00u;
  } else if (a < 0x38800000u) {
    if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - (a >> 23);
    h = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (h & 1u))) ++h;
  } else {
    h = (a >> 13) - (112u << 10);
    const std::uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  }
  return static_cast<std::uint16_t>(sign | h);
}
/// IEEE binary16 bits -> float32 (exact, subnormals included).
ICMLKIT_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return bits_float(sign | 0x7f800000u | (m << 13));
  if (e != 0) return bits_float(sign | ((e + 112u) << 23) | (m << 13));
  if (m == 0) return bits_float(sign);
  std::uint32_t k = 0;  // subnormal: normalise
  while ((m & 0x400u) == 0) { m <<= 1; ++k; }
  return bits_float(sign | ((113u - k) << 23) | ((m & 0x3ffu) << 13));
}

/// Storage type of a device weight matrix.
enum class WType : int { f32 = 0, f16 = 1, bf16 = 2 };

/// Narrows x to the 16-bit type t (f16 or bf16).
ICMLKIT_HD std::uint16_t narrow(float x, WType t) { return t == WType::bf16 ? f32_to_bf16(x) : f32_to_f16(x); }
/// Widens 16-bit bits of type t (exact).
ICMLKIT_HD float widen(std::uint16_t h, WType t) { return t == WType::bf16 ? bf16_to_f32(h) : f16_to_f32(h); }

/// Two-term split of an activation for a 16-bit GEMM: x ~ hi + lo with hi = narrow(x),
/// lo = narrow(x - hi).  W·x = W·hi + W·lo with f32 accumulation keeps about 16 (bf16) or
/// 22 (f16) significant bits of x instead of 8 / 11: |x - hi - lo| <= 2^-16 |x| (bf16),
/// 2^-22 |x| (f16) for normal values.  f16's range ends at 65504 (hi is infinite beyond), so
/// the CUDA engine scales each f16 GEMM input row by f16_row_scale first (GemmLayout::scale).
ICMLKIT_HD void split2(float x, WType t, std::uint16_t& hi, std::uint16_t& lo) {
  hi = narrow(x, t);
  lo = narrow(x - widen(hi, t), t);
}

/// The power of two 2^e that brings a row whose largest |value| is `max_abs` into
/// [2^14, 2^15): inside f16's range with room for rounding, so the split of every value of the
/// row is finite; values within about 2^-18 of the row's largest keep the split's full relative
/// precision, smaller ones err by at most about max_abs * 2^-40 absolutely (f16 subnormals).
/// Multiplying by it (and by 1 / it) is exact.  e is clamped to [-120, 120]; 1 for max_abs 0,
/// NaN or infinite.
ICMLKIT_HD float f16_row_scale(float max_abs) {
  const std::uint32_t u = float_bits(max_abs) & 0x7fffffffu;
  if (u == 0 || u >= 0x7f800000u) return 1.0f;
  int e = 14 - (static_cast<int>(u >> 23) - 127);  // subnormals count as 2^-127: the clamp covers them
  e = e < -120 ? -120 : e > 120 ? 120 : e;
  return bits_float(static_cast<std::uint32_t>(e + 127) << 23);
}

/// Where activation row r, term `part` (0 = hi, 1 = lo; f32 has only term 0) lives in a GEMM
/// input or output buffer of the CUDA engine.  GEMMs run over chunks of P rows; a chunk holds its
/// P hi rows, then its P lo rows, so one cuBLAS call multiplies a chunk's nparts * P columns.
struct GemmLayout {
  int P = 1;       ///< rows per GEMM chunk (64 in batch-invariant mode, else the batch size)
  int nparts = 1;  ///< 1 (f32 weights) or 2 (16-bit weights: hi and lo terms)
  WType t = WType::f32;
  /// Null, or the factor [R] each input row was multiplied by before store() (f16_row_scale of
  /// the row's largest |value|): load() divides it out again (exactly: powers of two).
  const float* scale = nullptr;
  /// Buffer row of (r, part).
  ICMLKIT_HD std::size_t row(int r, int part) const {
    return std::size_t(r / P) * nparts * P + std::size_t(part) * P + r % P;
  }
  /// Buffer rows needed for R activation rows (whole chunks).
  ICMLKIT_HD std::size_t rows(int R) const { return std::size_t((R + P - 1) / P) * P * nparts; }
  /// Writes activation v at (r, k) of a buffer with K columns (split into hi/lo for 16 bits).
  ICMLKIT_HD void store(void* buf, int K, int r, int k, float v) const {
    if (t == WType::f32) {
      static_cast<float*>(buf)[row(r, 0) * K + k] = v;
    } else {
      std::uint16_t hi, lo;
      split2(v, t, hi, lo);
      static_cast<std::uint16_t*>(buf)[row(r, 0) * K + k] = hi;
      static_cast<std::uint16_t*>(buf)[row(r, 1) * K + k] = lo;
    }
  }
  /// Reads GEMM output (r, o) of a product with O columns: the sum of its terms, divided by the
  /// row's scale when there is one.
  ICMLKIT_HD float load(const float* Y, int O, int r, int o) const {
    float v = Y[row(r, 0) * O + o];
    if (nparts == 2) v += Y[row(r, 1) * O + o];
    if (scale != nullptr) v *= 1.0f / scale[r];
    return v;
  }
};

// ---- RMSNorm ----------------------------------------------------------------------------

/// 1 / sqrt(sumsq / d + eps) rounded to float (sumsq = sum of x_i^2 in double).
ICMLKIT_HD float rms_inv(double sumsq, int d, double eps) { return static_cast<float>(1.0 / sqrt(sumsq / d + eps)); }
/// One output of RMSNorm: w * (x * inv).
ICMLKIT_HD float rms_apply(float w, float x, float inv) { return w * (x * inv); }
/// RMSNorm of one row x [d] (sequential double sum of squares, as lm::rms_norm).
ICMLKIT_HD void rms_norm_row(const float* x, int d, const float* w, double eps, float* y) {
  double ss = 0.0;
  for (int i = 0; i < d; ++i) ss += double(x[i]) * x[i];
  const float inv = rms_inv(ss, d, eps);
  for (int i = 0; i < d; ++i) y[i] = rms_apply(w[i], x[i], inv);
}

// ---- RoPE -------------------------------------------------------------------------------

/// cos and sin of pair i of a head at position pos: angle pos * theta^(-2i/hd), in double,
/// rounded to float (the CPU engine's tables).
ICMLKIT_HD void rope_cos_sin(int pos, int i, int hd, double theta, float& c, float& s) {
  const double a = pos * pow(theta, -2.0 * i / hd);
  c = static_cast<float>(cos(a));
  s = static_cast<float>(sin(a));
}
/// The dimensions of pair i: (i, i + hd/2) for rotate-half, (2i, 2i+1) for interleaved.
ICMLKIT_HD void rope_pair(bool interleaved, int i, int hd, int& a, int& b) {
  a = interleaved ? 2 * i : i;
  b = interleaved ? 2 * i + 1 : i + hd / 2;
}
/// Rotates one pair in place: (x1 c - x2 s, x2 c + x1 s).
ICMLKIT_HD void rope_rotate(float& x1, float& x2, float c, float s) {
  const float a = x1, b = x2;
  x1 = a * c - b * s;
  x2 = b * c + a * s;
}
/// RoPE of one head vector x [hd] with the cos/sin tables of its position [hd/2].
ICMLKIT_HD void rope_head(float* x, int hd, bool interleaved, const float* cs, const float* sn) {
  for (int i = 0; i < hd / 2; ++i) {
    int a, b;
    rope_pair(interleaved, i, hd, a, b);
    rope_rotate(x[a], x[b], cs[i], sn[i]);
  }
}

// ---- attention over a gathered view -----------------------------------------------------

/// Key j of a query row's key sequence (view slots ascending, then in-batch rows ascending):
/// a cache slot (>= 0) or in-batch row r encoded as -(r + 1), as AttentionRecord::keys.
/// `slots` is the view's explicit slot list for this (layer, KV head), or null for full /
/// prefix views (slot j is j); `inbatch` the row's sorted in-batch keys (self included).
ICMLKIT_HD std::int32_t key_of(int j, int nslots, const std::int32_t* slots, const std::int32_t* inbatch) {
  if (j < nslots) return slots ? slots[j] : j;
  return -(inbatch[j - nslots] + 1);
}

/// Running state of a softmax over a key set: max score m, normaliser l = sum exp(s - m).
/// Partial states over disjoint key sets combine with merge() (online softmax).
struct OnlineSoftmax {
  float m = -INFINITY;
  float l = 0.0f;
  /// Merges another partial state (over a disjoint key set): returns the factors for this
  /// state's accumulator (c_self) and the other's (c_other).
  ICMLKIT_HD void merge(const OnlineSoftmax& o, float& c_self, float& c_other) {
    const float mn = o.m > m ? o.m : m;
    c_self = m == -INFINITY ? 0.0f : expf(m - mn);
    c_other = o.m == -INFINITY ? 0.0f : expf(o.m - mn);
    l = l * c_self + o.l * c_other;
    m = mn;
  }
};

/// Softmax state of one chunk of scores s[0..n) (n >= 1) in one step, as a warp of the CUDA
/// attention kernel builds it: m = max s, p_i = exp(s_i - m) written to p, l = sum p_i (summed
/// in the order given by the caller; the kernel uses a fixed xor tree).  Returns the state.
ICMLKIT_HD OnlineSoftmax chunk_softmax(const float* s, int n, float* p) {
  OnlineSoftmax st;
  for (int i = 0; i < n; ++i) st.m = s[i] > st.m ? s[i] : st.m;
  st.l = 0.0f;
  for (int i = 0; i < n; ++i) {
    p[i] = expf(s[i] - st.m);
    st.l += p[i];
  }
  return st;
}

/// Keys per warp and per block of the CUDA attention kernel: warp w of split block b takes keys
/// [b * kAttnBlockKeys + w * 32, + 32) of a row's key sequence.
constexpr int kAttnWarpKeys = 32;
constexpr int kAttnBlockKeys = 128;

// ---- MLP and sampling -------------------------------------------------------------------

/// SwiGLU: silu(g) * u = g / (1 + exp(-g)) * u.
ICMLKIT_HD float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

/// Greedy order: whether logit a at id ia beats logit b at id ib (higher, then lower id).
ICMLKIT_HD bool greedy_better(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

/// Greedy token of logits [vocab] the way a device reduction computes it: `lanes` strided
/// partial winners (lane t scans ids t, t + lanes, ...), then merged in lane order.  Equals the
/// plain argmax with lowest-id ties for every lane count (tested).
ICMLKIT_HD int greedy_strided(const float* logits, int vocab, int lanes) {
  int best = -1;
  float bv = 0.0f;
  for (int t = 0; t < lanes && t < vocab; ++t) {
    int li = t;
    float lv = logits[t];
    for (int i = t + lanes; i < vocab; i += lanes)
      if (greedy_better(logits[i], i, lv, li)) { lv = logits[i]; li = i; }
    if (best < 0 || greedy_better(lv, li, bv, best)) { bv = lv; best = li; }
  }
  return best;
}

}  // namespace icmlkit::lm::dm
