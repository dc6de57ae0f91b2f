// The routed FFN of the moe and latent-moe blocks on the CPU engine (model contract v2, issue 31):
// the router (softmax or sigmoid scores, top-K, normalised, scaled), the experts grouped so that
// each expert's rows are one product, the gate-weighted sum (in the latent space for latent-moe,
// then W_up), and the shared expert.  Batch-invariant: a row's output does not depend on which
// other rows share the batch or the experts (every product is lm/matmul.hpp's row-independent
// kernel, and each row sums its experts in its own selection order).
#pragma once

#include <vector>

#include "lm/model.hpp"

namespace icmlkit::lm {

/// Scratch a routed FFN reuses across calls.
struct MoeWork {
  std::vector<float> logits, z, in, gate, up, y, acc, shared, tmp;
  std::vector<int> expert, rows, offset, active;
  std::vector<float> weight;
};

/// Routes R rows: logits [R, N] (W_r x) -> per row the K selected experts expert[r K + k] in
/// selection order (highest score first, the lower index on ties) and their gate weights
/// weight[r K + k].  softmax: p = softmax(logits) (max-subtracted, the sum in double), selected by
/// p; sigmoid: s = 1 / (1 + exp(-logit)), selected by s + bias (bias [N], selection only); the
/// weights are the selected scores, divided by their sum when norm_topk, times routed_scaling.
void moe_route(const MoeConfig& c, const float* logits, const float* bias, int R, int* expert, float* weight);

/// out [R, d] = the block's routed FFN of its normalised input xn [R, d] (no residual):
/// moe: Σ_k g_k E_k(xn) + E_shared(xn); latent-moe: W_up Σ_k g_k E_k(W_down xn) + E_shared(xn),
/// E(u) = down(silu(gate u) ⊙ up u) (swiglu) or down(relu(up u)^2) (relu2).  `t` is the block's
/// type.  When `expert_load` is given, adds each expert's routed-row count to it [N].
void moe_ffn(const ModelConfig& c, const Layer& L, BlockType t, const float* xn, int R, float* out, MoeWork& w,
             std::vector<long long>* expert_load = nullptr);

}  // namespace icmlkit::lm
