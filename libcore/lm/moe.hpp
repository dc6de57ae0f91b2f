// The routed FFN of the moe and latent-moe blocks on the CPU engine (model contract v2, issue 31):
// the router (softmax or sigmoid scores, top-K, normalised, scaled), the experts grouped so that
// each expert's rows are one product, the gate-weighted sum (in the latent space for latent-moe,
// then W_up), and the shared expert.  Batch-invariant: a row's output does not depend on which
// other rows share the batch or the experts (every product is lm/matmul.hpp's row-independent
// kernel, and each row sums its experts in its own selection order).
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
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

/// Buckets the n routed entries (entry i = row K + k, expert[i] its expert) by expert: rows holds
/// the entries expert by expert, in increasing i within each, and expert e's are
/// rows[offset[e] .. offset[e + 1]) (offset [N + 1]).  The engine and the trainer both group so.
inline void bucket_by_expert(const int* expert, int n, int N, std::vector<int>& offset, std::vector<int>& rows) {
  offset.assign(static_cast<std::size_t>(N) + 1, 0);
  for (int i = 0; i < n; ++i) ++offset[std::size_t(expert[i]) + 1];
  for (int e = 0; e < N; ++e) offset[std::size_t(e) + 1] += offset[std::size_t(e)];
  rows.resize(static_cast<std::size_t>(n));
  std::vector<int> fill(offset.begin(), offset.end() - 1);
  for (int i = 0; i < n; ++i) rows[std::size_t(fill[std::size_t(expert[i])]++)] = i;
}

/// moe_route's arithmetic in T (float: bitwise moe_route; double: the trainer's reference), also
/// returning every expert's score scores [R, N] (softmax p or sigmoid s) and each row's sum of
/// its selected scores selsum [R] (the trainer's backward needs both).
template <class T>
void route_rows(const MoeConfig& c, const T* logits, const T* bias, int R, int* expert, T* weight, T* scores, T* selsum) {
  const int N = c.n_experts, K = c.top_k;
  std::vector<T> key(static_cast<std::size_t>(N));
  std::vector<int> order(static_cast<std::size_t>(N));
  for (int r = 0; r < R; ++r) {
    const T* l = logits + std::size_t(r) * N;
    T* score = scores + std::size_t(r) * N;
    if (c.router == RouterKind::softmax) {
      const T mx = *std::max_element(l, l + N);
      double sum = 0.0;
      for (int j = 0; j < N; ++j) {
        score[j] = std::exp(l[j] - mx);
        sum += score[j];
      }
      const T inv = static_cast<T>(1.0 / sum);
      for (int j = 0; j < N; ++j) key[std::size_t(j)] = score[j] *= inv;
    } else {
      for (int j = 0; j < N; ++j) {
        score[j] = T(1) / (T(1) + std::exp(-l[j]));
        key[std::size_t(j)] = score[j] + (bias ? bias[j] : T(0));
      }
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int a, int b) { return key[std::size_t(a)] != key[std::size_t(b)] ? key[std::size_t(a)] > key[std::size_t(b)] : a < b; });
    T sum = T(0);
    for (int k = 0; k < K; ++k) sum += score[order[std::size_t(k)]];
    selsum[r] = sum;
    const T norm = c.norm_topk ? static_cast<T>(c.routed_scaling / double(sum)) : static_cast<T>(c.routed_scaling);
    for (int k = 0; k < K; ++k) {
      expert[std::size_t(r) * K + k] = order[std::size_t(k)];
      weight[std::size_t(r) * K + k] = score[order[std::size_t(k)]] * norm;
    }
  }
}

/// out [R, d] = the block's routed FFN of its normalised input xn [R, d] (no residual):
/// moe: Σ_k g_k E_k(xn) + E_shared(xn); latent-moe: W_up Σ_k g_k E_k(W_down xn) + E_shared(xn),
/// E(u) = down(silu(gate u) ⊙ up u) (swiglu) or down(relu(up u)^2) (relu2).  `t` is the block's
/// type.  When `expert_load` is given, adds each expert's routed-row count to it [N].
void moe_ffn(const ModelConfig& c, const Layer& L, BlockType t, const float* xn, int R, float* out, MoeWork& w,
             std::vector<long long>* expert_load = nullptr);

}  // namespace icmlkit::lm
