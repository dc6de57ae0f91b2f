// Blocked causal attention for the float training path (issue 24): FlashAttention's tiling on
// the CPU, so no [S, S] matrix is ever held (Dao et al. 2022, Alg. 1; Dao 2023, Alg. 2).
//
// Tiles of kFlashBR queries x kFlashBC keys; each task packs its Q, K, V (and dO) rows once
// into the GEMM's panel layout (nn::panels) and runs every tile product on them on one thread;
// the softmax runs on nn::vec.  Tasks are (sequence, head) in the forward and (sequence, KV
// head) in the backward, each computed by one thread in a fixed order, so results do not
// depend on the thread count, and a sequence's results do not depend on the other sequences of
// the batch.  nn/layers.hpp's attention_forward / attention_backward call these on the fast
// kernel set; the shapes and saved statistics are the ones documented there.
#pragma once

#include "nn/layers.hpp"

namespace icmlkit::nn {

/// Query and key tile sizes.
inline constexpr int kFlashBR = 48, kFlashBC = 64;  // multiples of every path's panel sizes

/// out [B·S, n_heads·hd] = causal softmax(q·k^T / sqrt(hd)) · v; mx, inv [B·S, n_heads] are each
/// row's final max of the scaled scores and 1 / Σ exp(score − mx).  q [B·S, n_heads·hd],
/// k, v [B·S, n_kv·hd].
void flash_attention_forward(const float* q, const float* k, const float* v, const AttnShape& s, float* out,
                             float* mx, float* inv);

/// dq, dk, dv (overwritten) from dout and the forward's out, mx, inv (shapes as above), with
/// P recomputed tile by tile as exp(score / sqrt(hd) − mx) · inv and D = rowsum(dout ⊙ out).
void flash_attention_backward(const float* dout, const float* q, const float* k, const float* v,
                              const float* out, const float* mx, const float* inv, const AttnShape& s,
                              float* dq, float* dk, float* dv);

}  // namespace icmlkit::nn
