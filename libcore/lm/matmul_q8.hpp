// Q8_0 / Q4_0 weights times activations quantised to Q8_0 blocks (`--act-quant q8`, issue 37):
// the kernels behind lm::WeightType::q8_0_aq and q4_0_aq (their arithmetic and the weights'
// 16-row interleaved layout are documented there, in lm/matmul.hpp).  Internal to libcore/lm:
// matmul.cpp's run_jobs calls these.
#pragma once

#include <cstdint>
#include <vector>

#include "lm/matmul.hpp"

namespace icmlkit::lm::detail {

/// R activation rows [R, K] quantised to Q8_0 blocks (K a multiple of 32).  Row r: `q` [K] int8
/// values in [-127, 127]; `neg_sums` [K/32]: minus each block's sum of values (the zero-point
/// correction of the unsigned-times-signed dot instruction); `scales` [K/32]: each block's da.
struct Q8Rows {
  std::vector<std::int8_t> q;
  std::vector<std::int32_t> neg_sums;
  std::vector<float> scales;
  int R = 0, K = 0;
};

/// Quantises x [R, K] (row stride ldx) into `out` as matmul.hpp documents for q8_0_aq.  Reuses
/// out's storage.  `isa` picks the compiled variant (the same source, so the same bits).
void quantize_rows_q8(const float* x, int R, int K, int ldx, Isa isa, Q8Rows& out);

/// y[r, o] for rows [0, a.R) and columns [o0, o1) (multiples of 16) of act-q8 weights W (the
/// interleaved layout of pack_act_q8; `aq` q8_0_aq or q4_0_aq) against the quantised rows `a`:
/// AVX512-VNNI where `isa` is avx512/amx and the CPU has it, else the portable loop (same bits).
void block_act_q8(const Q8Rows& a, const std::uint8_t* W, WeightType aq, int o0, int o1, float* y, int ldy, Isa isa);

}  // namespace icmlkit::lm::detail
