// The moe and latent-moe blocks' forward on the CPU engine (lm/block.hpp, lm/moe.hpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "lm/block.hpp"
#include "lm/matmul.hpp"
#include "lm/moe.hpp"
#include <fmt/format.h>

#include "util/error.hpp"
#include "util/threads.hpp"

namespace icmlkit::lm {

namespace {

/// y [R, O] = x [R, K] · W[row0 .. row0 + O)^T: a row block of a stacked matrix (one expert).
void matmul_rows(const float* x, int R, int K, int ldx, const Matrix& W, int row0, int O, float* y, int ldy, int threads = 0) {
  matmul_weight(x, R, K, ldx, W, O, y, ldy, row0, threads);
}

/// h [R, m] = act(gate u, up u) for the rows u [R, w] of one expert's (or the shared expert's)
/// matrices starting at row `row0` of gate/up; the result overwrites `gate` (swiglu) or `up`.
const float* expert_hidden(const MoeConfig& c, const Matrix& G, const Matrix& U, int row0, const float* u, int R, int w, int m,
                           std::vector<float>& gate, std::vector<float>& up, int threads = 0) {
  up.resize(std::size_t(R) * m);
  matmul_rows(u, R, w, w, U, row0, m, up.data(), m, threads);
  if (c.act == ExpertAct::relu2) {
    for (float& v : up) v = v > 0.0f ? v * v : 0.0f;
    return up.data();
  }
  gate.resize(up.size());
  matmul_rows(u, R, w, w, G, row0, m, gate.data(), m, threads);
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
  return gate.data();
}

}  // namespace

void moe_route(const MoeConfig& c, const float* logits, const float* bias, int R, int* expert, float* weight) {
  std::vector<float> scores(std::size_t(R) * c.n_experts), selsum(static_cast<std::size_t>(R));
  route_rows<float>(c, logits, bias, R, expert, weight, scores.data(), selsum.data());
}

void moe_ffn(const ModelConfig& c, const Layer& L, BlockType t, const float* xn, int R, float* out, MoeWork& w,
             std::vector<long long>* expert_load) {
  const MoeConfig& e = c.moe;
  const int d = c.d_model, N = e.n_experts, K = e.top_k, m = e.d_expert;
  const bool latent = t == BlockType::latent_moe;
  const int width = latent ? e.d_latent : d;
  // router
  w.logits.resize(std::size_t(R) * N);
  matmul_rows(xn, R, d, d, L.router, 0, N, w.logits.data(), N);
  w.expert.resize(std::size_t(R) * K);
  w.weight.resize(w.expert.size());
  moe_route(e, w.logits.data(), L.router_bias.empty() ? nullptr : L.router_bias.data(), R, w.expert.data(), w.weight.data());
  // the experts' input: xn, or its latent projection W_down xn
  const float* u = xn;
  if (latent) {
    w.z.resize(std::size_t(R) * width);
    matmul_rows(xn, R, d, d, L.latent_down, 0, width, w.z.data(), width);
    u = w.z.data();
  }
  // each expert runs once on the rows routed to it (entries i = r K + k bucketed by expert, i
  // ascending); y[i w ..] is row r's k-th expert output.  The experts run in parallel, each product
  // on one thread (the kernel's bits do not depend on the split).
  w.y.resize(std::size_t(R) * K * width);
  bucket_by_expert(w.expert.data(), R * K, N, w.offset, w.rows);
  w.active.clear();
  for (int ex = 0; ex < N; ++ex) {
    const int n = w.offset[std::size_t(ex) + 1] - w.offset[std::size_t(ex)];
    if (expert_load) (*expert_load)[std::size_t(ex)] += n;
    if (n > 0) w.active.push_back(ex);
  }
  const int na = static_cast<int>(w.active.size()), nthreads = std::min(threads(), na);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  {
    std::vector<float> in, gate, up, tmp;
#pragma omp for schedule(dynamic, 1)
    for (int a = 0; a < na; ++a) {
      const int ex = w.active[std::size_t(a)], first = w.offset[std::size_t(ex)];
      const int n = w.offset[std::size_t(ex) + 1] - first;
      const int* rows = w.rows.data() + first;
      in.resize(std::size_t(n) * width);
      for (int j = 0; j < n; ++j) std::copy_n(u + std::size_t(rows[j] / K) * width, width, in.data() + std::size_t(j) * width);
      const float* h = expert_hidden(e, L.gate_exps, L.up_exps, ex * m, in.data(), n, width, m, gate, up, 1);
      tmp.resize(std::size_t(n) * width);
      matmul_rows(h, n, m, m, L.down_exps, ex * width, width, tmp.data(), width, 1);
      for (int j = 0; j < n; ++j) std::copy_n(tmp.data() + std::size_t(j) * width, width, w.y.data() + std::size_t(rows[j]) * width);
    }
  }
  // the gate-weighted sum, each row in its own selection order
  w.acc.assign(std::size_t(R) * width, 0.0f);
  for (int r = 0; r < R; ++r) {
    float* a = w.acc.data() + std::size_t(r) * width;
    for (int k = 0; k < K; ++k) {
      const float g = w.weight[std::size_t(r) * K + k];
      const float* y = w.y.data() + (std::size_t(r) * K + k) * width;
      for (int i = 0; i < width; ++i) a[i] += g * y[i];
    }
  }
  if (latent) matmul_rows(w.acc.data(), R, width, width, L.latent_up, 0, d, out, d);
  else std::copy(w.acc.begin(), w.acc.end(), out);
  if (e.d_shared > 0) {  // the shared expert on the full-width input
    const int ms = e.d_shared;
    const float* h = expert_hidden(e, L.gate_shexp, L.up_shexp, 0, xn, R, d, ms, w.gate, w.up);
    w.shared.resize(std::size_t(R) * d);
    matmul_rows(h, R, ms, ms, L.down_shexp, 0, d, w.shared.data(), d);
    for (std::size_t i = 0; i < w.shared.size(); ++i) out[i] += w.shared[i];
  }
}

void moe_block_forward(const BlockStep& st, BlockWork& w, float* x, ForwardResult& res) {
  const ForwardOptions& opt = st.options;
  if (opt.adapters)
    for (const Adapter& a : *opt.adapters)
      if (a.block == st.block &&
          (a.proj == Projection::ffn_gate || a.proj == Projection::ffn_up || a.proj == Projection::ffn_down))
        throw UsageError(fmt::format("block {} is a {} block: it has no {} projection for an adapter", st.block,
                                     block_type_name(st.model.config.block_type(st.block)), projection_name(a.proj)));
  if (opt.skip_attn.empty() || !opt.skip_attn[st.block]) llama_attention_sublayer(st, w, x, res);
  if (!opt.skip_mlp.empty() && opt.skip_mlp[st.block]) return;
  const ModelConfig& c = st.model.config;
  const int R = st.batch.size(), d = c.d_model;
  const Layer& L = st.model.layers[st.block];
  w.xn.resize(std::size_t(R) * d);
  w.tmp.resize(w.xn.size());
  rms_norm(x, R, d, L.ffn_norm.data(), c.rms_eps, w.xn.data());
  thread_local MoeWork mw;
  moe_ffn(c, L, c.block_type(st.block), w.xn.data(), R, w.tmp.data(), mw);
  for (std::size_t i = 0; i < w.tmp.size(); ++i) x[i] += w.tmp[i];
}

}  // namespace icmlkit::lm
