// Batch-invariant matrix products for the CPU engine.
//
// y[r, o] = sum_k x[r, k] * W[o, k] is evaluated in one fixed order for every (r, o): eight
// lanes (lane j takes k = j mod 8, fused multiply-add in increasing k, the last partial chunk
// zero-padded), then the fixed sum ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)).  Which rows share a
// pass, how the work is tiled, how many threads run it, and whether the AVX2 or the portable
// path runs never change a single bit of y (tests prove it), so a row's logits do not depend
// on the rest of the batch — the property lossless speculative decoding needs.
//
// Four or more rows on AVX-512 (issue 37): x rows are packed in pairs, each 512-bit register
// holding one 8-lane accumulator of each row of a pair; a register tile of 6 pairs (12 rows) x
// 4 output columns loads each weight chunk once (broadcast to both halves) for all its rows, and
// widens 16-bit weights there (one conversion per weight per 12 rows).  The per-(r, o) order is the one above.
#pragma once

#include <cstddef>
#include <cstdint>

namespace icmlkit::lm {

/// The instruction-set path of the kernel.  All give the same bits (tests prove it) — except
/// bf16-dot products on amx, whose bits are the tile unit's own (WeightType) — and differ only in
/// speed.  avx512: rows packed in pairs into 512-bit registers (each half an
/// 8-lane accumulator, so the arithmetic is the AVX2 path's), for four or more rows.  amx: the
/// avx512 path, and bf16-dot products on the AMX-BF16 tile unit (lm::WeightType::bf16_dot).
enum class Isa { portable, avx2, avx512, amx };

/// Whether this CPU (and OS) runs `isa`: avx2 needs AVX2+FMA+F16C, avx512 also AVX-512 F/VL/DQ/BW,
/// amx also AMX-TILE and AMX-BF16 with the tile state granted by Linux (asked for on first use).
bool isa_available(Isa isa) noexcept;
/// The fastest available path (ICMLKIT_ISA=portable|avx2|avx512|amx in the environment caps it,
/// for measuring; an unavailable or unknown value is ignored).
Isa best_isa() noexcept;
/// "portable", "avx2", "avx512" or "amx".
const char* isa_name(Isa isa) noexcept;

/// How a weight matrix is held: float32, IEEE binary16 bits, bfloat16 bits, or GGUF's Q8_0 /
/// Q4_0 blocks (each row K / 32 blocks of an f16 scale d and 32 values q: Q8_0 34 bytes, int8 q,
/// w = d q; Q4_0 18 bytes, two 4-bit q per byte — low nibbles are values 0-15, high 16-31 — w =
/// d (q - 8); K a multiple of 32).  Every kind is widened to float32 exactly (d q needs at most
/// 19 significant bits), so a product on it is bitwise the float32 product on the widened weights.
/// Quantised rows are widened in registers for one to three rows (AVX2 and up), else a column
/// block at a time into a float32 scratch shared by all rows.
///
/// bf16_dot (issue 37, `--weights bf16-dot`): bfloat16 bits computed in bfloat16 arithmetic — the
/// rows x rounded to bfloat16 (nearest even, denormals to zero), lane j of each 16-value chunk
/// taking the pair (2j, 2j+1) as AVX512-BF16's VDPBF16PS does (odd product first, each sum
/// rounded, denormal results flushed), then the fixed 8-lane sum.  Not the float32 product: a
/// lossy mode, but the same for every row of a batch, so speculative decoding stays lossless in it.
/// On the amx path the products run on the AMX-BF16 tile unit instead (activations rounded the
/// same way, the K chunks of 32 accumulated in order, each chunk rounded as the unit rounds it:
/// bits of that machine's own, still independent of the batch and the threads).
///
/// q8_0_aq / q4_0_aq (issue 37, `--act-quant q8`): Q8_0 / Q4_0 weights times activations
/// quantised to Q8_0 blocks as llama.cpp quantises them for these types — per 32-value block of a
/// row, amax = max |x|, scale da = f16(amax / 127) (nearest even, widened), values a =
/// nearest-even(x (127 / amax)) clamped to [-127, 127] (zero when amax is 0) — with integer dot
/// products: y[r, o] = acc after acc = fma(S_b, dw_b da_b, acc) over the blocks b in order from
/// acc = 0, S_b the exact integer sum of block b's 32 products wq a (wq the weight's integers:
/// Q8_0's q, Q4_0's q - 8) and dw_b da_b rounded to float first.  Lossy (the activations are
/// rounded), but the same for every row of a batch, on every path (AVX512-VNNI, portable) and
/// thread count, so speculative decoding stays lossless in it.  The weights are held interleaved
/// (pack_act_q8): O a multiple of 16, groups of 16 rows, each block of a group 16 f16 scales then
/// the values four per row in turn (Q8_0: 8 x 64 bytes of q + 128; Q4_0: 4 x 64 bytes, the blocks'
/// own bytes, value 4i+t in the low nibble and 16+4i+t in the high), the same bytes per row as the
/// GGUF blocks; a group's blocks are contiguous, so rows from a multiple of 16 on start at
/// 16 x row-bytes steps.
enum class WeightType { f32, f16, bf16, q8_0, q4_0, bf16_dot, q8_0_aq, q4_0_aq };

/// The --weights name of `wt`: "f32", "f16", "bf16", "q8_0", "q4_0" or "bf16-dot"; "q8_0+act-q8"
/// and "q4_0+act-q8" for the act-quant kinds.
const char* weight_type_name(WeightType wt) noexcept;

/// The block format of `wt`: q8_0 for q8_0 and q8_0_aq, q4_0 for q4_0 and q4_0_aq, else `wt`.
WeightType block_format(WeightType wt) noexcept;

/// Whether `wt` multiplies activations quantised to Q8_0 (q8_0_aq, q4_0_aq).
bool is_act_q8(WeightType wt) noexcept;

/// Bytes of one row of K weights of type `wt` (K a multiple of 32 for the quantised types).
std::size_t weight_row_bytes(WeightType wt, int K) noexcept;

/// A row of GGUF blocks of type `wt` (q8_0 or q4_0; blocks at `row`, K weights) widened to float32
/// into `out`.
void dequantize_row(WeightType wt, const std::uint8_t* row, int K, float* out) noexcept;

/// The GGUF rows [O, K] of type `wt` (q8_0 or q4_0; O a multiple of 16) in the interleaved
/// act-q8 layout (WeightType::q8_0_aq / q4_0_aq) into `out` (the same number of bytes).
void pack_act_q8(WeightType wt, const std::uint8_t* rows, int O, int K, std::uint8_t* out) noexcept;

/// Row `lane` (0-15) of the act-q8 group at `group` (K weights) widened to float32 into `out`.
void dequantize_act_q8_row(WeightType aq, const std::uint8_t* group, int lane, int K, float* out) noexcept;

/// y [R, O] (row stride ldy) = x [R, K] (row stride ldx) * W^T, W [O, K] row-major.
/// Parallel over output columns with OpenMP (icmlkit::threads()).
void matmul_xwt(const float* x, int R, int K, int ldx, const float* W, int O, float* y, int ldy);

/// The same with W held as IEEE binary16 bits [O, K].
void matmul_xwt_f16(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y, int ldy);

/// The same with W held as bfloat16 bits [O, K].
void matmul_xwt_bf16(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y, int ldy);

/// One product y [R, O] (row stride ldy) = x W^T of matmul_xwt_jobs, W [O, K] of type `wt`.
struct MatmulJob {
  const void* W;
  WeightType wt;
  int O;
  float* y;
  int ldy;
};

/// Up to 8 products of the same x [R, K] in one parallel region (`threads` 0: the engine's
/// count), each bitwise what matmul_xwt gives alone.  Throws std::invalid_argument for more than 8,
/// or an act-q8 product whose O is not a multiple of 16.
void matmul_xwt_jobs(const float* x, int R, int K, int ldx, const MatmulJob* jobs, int njobs, int threads = 0);

/// The product with W of type `wt` (float* for f32, std::uint16_t* otherwise) on the path `isa`
/// (the portable one when `isa` is unavailable) and `threads` threads (tests and benches).  Throws
/// std::invalid_argument for an act-q8 product whose O is not a multiple of 16.
void matmul_xwt_on(const float* x, int R, int K, int ldx, const void* W, WeightType wt, int O, float* y,
                   int ldy, Isa isa, int threads);

/// matmul_xwt on the fastest path (`fast`) or the portable one, with `threads` threads.
void matmul_xwt_path(const float* x, int R, int K, int ldx, const float* W, int O, float* y,
                     int ldy, bool fast, int threads);
/// matmul_xwt_f16 on the fastest path (`fast`) or the portable one, with `threads` threads.
void matmul_xwt_f16_path(const float* x, int R, int K, int ldx, const std::uint16_t* W, int O, float* y,
                         int ldy, bool fast, int threads);

/// The 8-lane dot product of a and b (length K) with the same arithmetic as one entry of
/// matmul_xwt (used for attention scores).
float dot8(const float* a, const float* b, int K) noexcept;

/// out[j] = dot8(q, keys[j], K) for j < n, bitwise, several keys at a time (attention scores).
void dot8_many(const float* q, const float* const* keys, int n, int K, float* out) noexcept;

/// Whether this CPU runs the AVX2+FMA path.
bool have_avx2() noexcept;

/// Whether bf16-dot products run on AVX512-BF16 (else a scalar emulation with the same bits,
/// many times slower).
bool have_avx512_bf16() noexcept;

/// Where bf16-dot products run on the fastest path (best_isa()): "amx", "avx512-bf16" or
/// "emulated" (each gives bits of its own; the last two agree).
const char* bf16_dot_unit() noexcept;

/// f as a bf16-dot weight or activation: bfloat16 bits, nearest even, a denormal flushed to a
/// zero of its sign.
std::uint16_t bf16_dot_round(float f) noexcept;

}  // namespace icmlkit::lm
