// The block interface of the CPU engine (model contract v2, lm/README.md "Block types").
//
// lm::forward embeds the batch rows, walks the block list (or ForwardOptions::schedule) one step
// at a time, and applies the head; each step hands the residual stream to the forward of the
// step's block type, looked up here.  A block type's forward reads the step (which block, which
// cache layer, the batch and its masks), updates the residual stream of every row in place and
// writes what later rows need to its cache layer's pending area: K/V for attention blocks, the
// recurrent state after each row for blocks with state (KvCache::pending_state).  A new block
// type adds one forward here, its tensors in lm/blocks.hpp and its row in lm/support.hpp; the
// trainer's counterpart is nn/llama_train.hpp's per-block forward/backward.
#pragma once

#include <initializer_list>
#include <vector>

#include "lm/forward.hpp"

namespace icmlkit::lm {

/// What one block step of a forward pass reads (all borrowed from forward()).
struct BlockStep {
  const Model& model;
  const Batch& batch;
  const std::vector<KvCache*>& caches;  ///< one per sequence (BatchRow::seq)
  const ForwardOptions& options;
  int block = 0;        ///< the model block run (index into model.layers)
  int cache_layer = 0;  ///< the cache layer this step reads and writes (= the step index)
  /// Each row's index in its own sequence's pending area [R].
  const std::vector<int>& local;
  /// Per row, the sorted in-batch rows it attends, itself included [R][*].
  const std::vector<std::vector<int>>& inbatch;
  /// Per row, its recurrent parent: the in-batch row whose state it continues (the last row
  /// it attends other than itself; −1 = the sequence's committed state) [R].
  const std::vector<int>& parent;
  const float* rope_cos = nullptr;  ///< RoPE tables [R, head_dim/2]
  const float* rope_sin = nullptr;
};

/// Scratch buffers a block forward may reuse across steps (sized on first use).
struct BlockWork {
  std::vector<float> xn, tmp, q, k, v, att, gate, up, adapter_t, adapter_y;
  std::vector<float> q0, k0, fq, fk, gates, mix;  ///< mlstm-hybrid: q, k before RoPE, features, gates, the mLSTM branch
};

/// A block type's forward: updates x [R, d_model] (the residual stream, row-major) in place,
/// writes the rows' K/V or state to cache layer step.cache_layer's pending area, and appends
/// attention records and per-view attention times to `result` when options ask.  Bitwise: a
/// row's outputs do not depend on the other rows or the thread count.
using BlockForward = void (*)(const BlockStep& step, BlockWork& work, float* x, ForwardResult& result);

/// The forward of block type t.
BlockForward block_forward(BlockType t) noexcept;

/// A block type's state copy (CALM's state propagation, Schuster et al. 2022, sec. 3.2): writes to
/// cache layer step.cache_layer's pending area what the block's forward would write there if its
/// input residual were x [R, d_model], without running the block (x is not changed).  For the
/// llama block: K = RoPE(Wk n1(x)), V = Wv n1(x) with the block's own attention norm, bitwise
/// the K/V its forward computes from the same x.
using BlockStateCopy = void (*)(const BlockStep& step, BlockWork& work, const float* x);

/// The state copy of block type t (null where the type has none).
BlockStateCopy block_state_copy(BlockType t) noexcept;

/// The llama block's state copy.
void llama_block_state_copy(const BlockStep& step, BlockWork& work, const float* x);

/// The llama block (attention with RoPE and GQA over the view's cache slots and the attended
/// new rows, then SwiGLU; both pre-normed; skip lists and adapters applied).
void llama_block_forward(const BlockStep& step, BlockWork& work, float* x, ForwardResult& result);

/// The llama attention sublayer (also the moe blocks'): x += Wo · Attn(RoPE(Wq n1(x)),
/// RoPE(Wk n1(x)), Wv n1(x)); the rows' K (after RoPE) and V go to the pending area of the step's
/// cache layer; attention records and times as options ask.
void llama_attention_sublayer(const BlockStep& step, BlockWork& work, float* x, ForwardResult& result);

/// The mlstm-hybrid block (arXiv 2603.15590 eq. 11; lm/README.md): n1, llama's q, k, v; per
/// query head h the mLSTM branch on Hedgehog features of q, k before RoPE (recurrent per row, or
/// chunkwise over a causal chain whose intermediate states step.options.state_rows does not ask
/// for) and softmax attention over the window and sinks (RoPE), mixed by o_h = σ(W_o [q; k; v] +
/// b_o); x += Wo · mix; then llama's MLP.  Writes K/V (the cache keeps the window) and the
/// state after each kept row.  Throws InputError when a row continues a later row's state.
void mlstm_block_forward(const BlockStep& step, BlockWork& work, float* x, ForwardResult& result);

/// The MLP sublayer of llama (and mlstm-hybrid) blocks: x += Wdown · (silu(Wgate n2(x)) ⊙ Wup n2(x)).
void llama_mlp(const BlockStep& step, BlockWork& work, float* x);

/// The attention input of the step's rows: work.xn = n1(x) [R, d], work.q = Wq xn [R, n_heads·hd]
/// and work.k, work.v (project_kv), all before RoPE, adapters applied; work.att sized [R, n_heads·hd].
void attention_input(const BlockStep& step, BlockWork& work, const float* x);

/// x [R, d] += Wo · work.att (adapters applied).
void attention_output(const BlockStep& step, BlockWork& work, float* x);

/// K = Wk xn, V = Wv xn for the batch rows (adapters applied) into work.k, work.v [R, n_kv·hd],
/// before RoPE.
void project_kv(const BlockStep& step, BlockWork& work, const float* xn);

/// Rotates work.k (RoPE) in place and writes work.k, work.v to the step's pending K/V.
void rope_store_kv(const BlockStep& step, BlockWork& work);

/// Rotates the queries q [R, n_heads·hd] in place (RoPE at each row's position).
void rope_queries(const BlockStep& step, float* q);

/// Whether a query at position i sees the key at position j in sliding-window attention with
/// sinks (window_attends of nn/mlstm.hpp: j <= i and (i - j < window or j < sinks)).
inline bool window_sees(std::int64_t i, std::int64_t j, int window, int sinks) noexcept {
  return j <= i && (i - j < window || j < sinks);
}

/// The attention of every (row, query head) of the step over the view's cache slots and its
/// attended new rows, keys visited in that order: att [R, n_heads·hd] from the rotated queries q;
/// with window >= 0 only the keys window_sees from the row's position.  lm::forward's
/// arithmetic (dot8 scores, max, exp, double sum), so with a window covering every key the
/// result is bitwise the llama block's.  Attention records and times as the options ask.
void attention_core(const BlockStep& step, const float* q, float* att, ForwardResult& result, int window, int sinks);

/// The moe and latent-moe blocks: llama's attention, then the routed FFN of lm/moe.hpp on the
/// ffn-normed residual (skip lists honoured).  Throws UsageError for an adapter on one of the
/// block's ffn projections (it has none).
void moe_block_forward(const BlockStep& step, BlockWork& work, float* x, ForwardResult& result);

/// y [R, O] = x [R, K] W[row0 .. row0 + O)^T (row strides ldx, ldy) for a weight held as
/// float32, f16 or bf16, bitwise the same every way (lm/matmul.hpp's batch-invariant kernel), on
/// `threads` threads (0: the engine's count; 1 inside a loop that is itself parallel).
void matmul_weight(const float* x, int R, int K, int ldx, const Matrix& W, int O, float* y, int ldy, int row0 = 0,
                   int threads = 0);

/// One product of matmul_weights: y [R, O] (row stride ldy) = x W^T.
struct WeightProduct {
  const Matrix* W;
  int O;
  float* y;
  int ldy;
};

/// Up to 8 products of the same x [R, K] in one parallel region, each bitwise matmul_weight's
/// (q, k and v; gate and up).
void matmul_weights(const float* x, int R, int K, int ldx, std::initializer_list<WeightProduct> products);

/// y [R, O] += scale · (in A^T) B^T for every adapter of step.options on (step.block, p):
/// in [R, K] is the projection's input, y its output (LoRA, Hu et al. 2022, eq. 3).
void apply_adapters(const BlockStep& step, Projection p, const float* in, int K, float* y, int O, BlockWork& work);

}  // namespace icmlkit::lm
