// Adam-mini (Zhang et al., ICLR 2025, arXiv 2406.16793; the official adam-mini package, version
// 1.1.1, which FOAM's repository also ships): Adam's first moment per entry, but one second
// moment per block of the Hessian-informed partition, so the v state of a matrix shrinks to a
// vector.  A FOAM and POET-X baseline (issue 29).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/params.hpp"

namespace icmlkit::nn {

/// How Adam-mini partitions one tensor into second-moment blocks.
enum class MiniBlocks {
  per_head,    ///< query and key matrices: one block per attention head (head_dim rows x d_model)
  per_row,     ///< embedding, LM head, value, attention output and MLP matrices: one block per row
  per_tensor,  ///< everything else (norm weights): one block
};

/// The block rule for the trainer's tensor `name` (GGUF names), mapped from the package's
/// name classes by role: attn_q/attn_k = q_proj/k_proj; token_embd, output, attn_v, attn_output,
/// ffn_* = embed_tokens, lm_head, v_proj, o_proj, mlp; norms = model.norm / layernorm.
MiniBlocks adam_mini_blocks(const std::string& name, const std::vector<int>& shape);

/// Adam-mini over the LM trainer's parameter store.  Per tensor with blocks of b entries:
/// m = m + (1 - b1)(g - m) per entry; per block vm = b2 vm + (1 - b2) mean(g^2 over the block);
/// w *= 1 - lr wd (matrices only, before the update, as the package: none on norms); w -= lr m /
/// (1 - b1^t) / (sqrt(vm) / sqrt(1 - b2^t) + eps).  `head_rows` is head_dim (rows per query/key
/// head).  State buffers "m/<name>" [numel] and "v/<name>" [blocks].  Throws UsageError when a
/// query/key matrix's rows are not a multiple of head_rows.
class AdamMini final : public CountedOptimizer {
 public:
  AdamMini(const ParamStore<float>& store, AdamWOptions opt, int head_rows);
  std::string name() const override { return "adam-mini"; }
  void step(ParamStore<float>& store, double lr) override;
  std::vector<StateBuffer> state() override;

 private:
  AdamWOptions opt_;
  std::vector<std::string> names_;
  std::vector<std::size_t> block_;  // entries per second-moment block
  std::vector<std::vector<float>> m_, v_;
};

/// One Adam-mini update of a tensor of n entries split into n / block blocks (T float or double).
template <class T>
void adam_mini_update(T* w, const T* g, T* m, T* vm, std::size_t n, std::size_t block, std::int64_t t, double lr,
                      const AdamWOptions& opt, bool decay);

}  // namespace icmlkit::nn
