// The mlstm-hybrid block's forward on the CPU engine (lm/block.hpp; arXiv 2603.15590 eq. 11).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "lm/block.hpp"
#include "nn/mlstm.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace icmlkit::lm {

namespace {

/// A matrix's values as float32 (widened into `buf` when held as f16).
const float* float_values(const Matrix& M, std::vector<float>& buf) {
  if (M.weight_type() == WeightType::f32) return M.data.data();
  buf.resize(std::size_t(M.rows) * M.cols);
  for (int r = 0; r < M.rows; ++r) M.row_f32(r, buf.data() + std::size_t(r) * M.cols);
  return buf.data();
}

/// The gates of every row and query head: gates [R, 3 nh] = (i~, f~, o) per row.
void mixer_gates(const BlockStep& st, BlockWork& w, const float* xn) {
  const ModelConfig& c = st.model.config;
  const Layer& L = st.model.layers[st.block];
  const int R = st.batch.size(), d = c.d_model, nh = c.n_heads, hd = c.head_dim();
  const int dq = nh * hd, dkv = c.n_kv_heads * hd, dc = dq + 2 * dkv, ld = 3 * nh;
  w.gates.resize(std::size_t(R) * ld);
  float* g = w.gates.data();
  if (c.mlstm.mixer == MlstmMixer::linear) {  // i = f = 1 (i~ = 0, log f = 0) and o = 1
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < nh; ++h) {
        g[std::size_t(r) * ld + h] = 0.0f;
        g[std::size_t(r) * ld + nh + h] = std::numeric_limits<float>::infinity();
        g[std::size_t(r) * ld + 2 * nh + h] = 1.0f;
      }
    return;
  }
  matmul_weight(xn, R, d, d, L.mlstm_igate, nh, g, ld);
  matmul_weight(xn, R, d, d, L.mlstm_fgate, nh, g + nh, ld);
  // the output gate reads concat[q, k, v] (before RoPE)
  std::vector<float>& cat = w.tmp;
  cat.resize(std::size_t(R) * dc);
  for (int r = 0; r < R; ++r) {
    float* cr = cat.data() + std::size_t(r) * dc;
    std::copy_n(w.q0.data() + std::size_t(r) * dq, dq, cr);
    std::copy_n(w.k0.data() + std::size_t(r) * dkv, dkv, cr + dq);
    std::copy_n(w.v.data() + std::size_t(r) * dkv, dkv, cr + dq + dkv);
  }
  matmul_weight(cat.data(), R, dc, dc, L.mlstm_ogate, nh, g + 2 * nh, ld);
  for (int r = 0; r < R; ++r) {
    float* gr = g + std::size_t(r) * ld;
    for (int h = 0; h < nh; ++h) {
      gr[h] += L.mlstm_igate_b[std::size_t(h)];
      gr[nh + h] += L.mlstm_fgate_b[std::size_t(h)];
      gr[2 * nh + h] = 1.0f / (1.0f + std::exp(-(gr[2 * nh + h] + L.mlstm_ogate_b[std::size_t(h)])));
    }
  }
}

/// The mLSTM branch of every row: w.mix [R, dq] from the features w.fq [R, dq], w.fk [R, dkv], the
/// values w.v and the gates, per sequence from its committed state; the state after each kept
/// row to the pending area.
void mlstm_branch(const BlockStep& st, BlockWork& w) {
  const ModelConfig& c = st.model.config;
  const Batch& b = st.batch;
  const int R = b.size(), nh = c.n_heads, hd = c.head_dim(), group = c.group();
  const int dq = nh * hd, dkv = c.n_kv_heads * hd, ldg = 3 * nh, cl = st.cache_layer;
  const int per = nn::mlstm_state_floats(hd, hd);
  w.mix.assign(std::size_t(R) * dq, 0.0f);
  std::vector<std::vector<int>> rows(st.caches.size());
  for (int r = 0; r < R; ++r) rows[std::size_t(b.rows[r].seq)].push_back(r);
  const int nthreads = threads();
  for (std::size_t s = 0; s < rows.size(); ++s) {
    const std::vector<int>& rs = rows[s];
    if (rs.empty()) continue;
    KvCache& cache = *st.caches[s];
    if (cache.state_size(cl) != nh * per)
      throw InputError("cache layer " + std::to_string(cl) + " holds " + std::to_string(cache.state_size(cl)) +
                       " state floats; the mlstm-hybrid block needs " + std::to_string(nh * per));
    bool chain = st.parent[std::size_t(rs[0])] == -1;
    for (std::size_t i = 1; i < rs.size() && chain; ++i) chain = st.parent[std::size_t(rs[i])] == rs[i - 1];
    bool last_only = !st.options.state_rows.empty();
    for (int k : st.options.state_rows)
      if (k >= 0 && k < R && b.rows[k].seq == int(s) && k != rs.back()) last_only = false;
    if (chain && last_only) {
      // chunkwise over the chain, from the committed state; only the last row's state is kept
      const int n = static_cast<int>(rs.size());
      const bool contiguous = rs.back() - rs.front() == n - 1;
      std::vector<float> gq, gk, gv, gg, go;
      const float *pq = w.fq.data() + std::size_t(rs[0]) * dq, *pk = w.fk.data() + std::size_t(rs[0]) * dkv;
      const float *pv = w.v.data() + std::size_t(rs[0]) * dkv, *pg = w.gates.data() + std::size_t(rs[0]) * ldg;
      float* po = w.mix.data() + std::size_t(rs[0]) * dq;
      if (!contiguous) {
        auto gather = [&](const float* src, int width, std::vector<float>& dst) {
          dst.resize(std::size_t(n) * width);
          for (int i = 0; i < n; ++i) std::copy_n(src + std::size_t(rs[i]) * width, width, dst.data() + std::size_t(i) * width);
          return dst.data();
        };
        pq = gather(w.fq.data(), dq, gq);
        pk = gather(w.fk.data(), dkv, gk);
        pv = gather(w.v.data(), dkv, gv);
        pg = gather(w.gates.data(), ldg, gg);
        go.assign(std::size_t(n) * dq, 0.0f);
        po = go.data();
      }
      float* out_state = cache.pending_state(cl, st.local[std::size_t(rs.back())]);
      std::copy_n(cache.state(cl), std::size_t(nh) * per, out_state);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (nthreads > 1 && std::int64_t(n) * nh * hd * hd >= (1 << 18))
      for (int h = 0; h < nh; ++h) {
        const int g = h / group;
        nn::MlstmHead<float> x;
        x.S = n; x.dk = hd; x.dv = hd;
        x.q = {pq + h * hd, dq};
        x.k = {pk + g * hd, dkv};
        x.v = {pv + g * hd, dkv};
        x.ig = {pg + h, ldg};
        x.fg = {pg + nh + h, ldg};
        nn::mlstm_chunkwise(x, po + h * hd, dq, out_state + std::size_t(h) * per, 64);
      }
      if (!contiguous)
        for (int i = 0; i < n; ++i) std::copy_n(go.data() + std::size_t(i) * dq, dq, w.mix.data() + std::size_t(rs[i]) * dq);
      for (int i = 0; i + 1 < n; ++i) cache.set_pending_state_kept(st.local[std::size_t(rs[i])], false);
      continue;
    }
    // recurrent: each row continues its parent's state (a tree of rows, or every state kept)
    for (int r : rs) {
      const int p = st.parent[std::size_t(r)];
      if (p >= r)
        throw InputError("batch row " + std::to_string(r) + " continues the recurrent state of a later row (" + std::to_string(p) +
                         "): order the rows so that each comes after the rows it attends");
      const float* src = p < 0 ? cache.state(cl) : cache.pending_state(cl, st.local[std::size_t(p)]);
      float* dst = cache.pending_state(cl, st.local[std::size_t(r)]);
      std::copy_n(src, std::size_t(nh) * per, dst);
      const float* gr = w.gates.data() + std::size_t(r) * ldg;
      for (int h = 0; h < nh; ++h) {
        const int g = h / group;
        nn::mlstm_step(dst + std::size_t(h) * per, hd, hd, w.fq.data() + std::size_t(r) * dq + h * hd,
                       w.fk.data() + std::size_t(r) * dkv + g * hd, w.v.data() + std::size_t(r) * dkv + g * hd, gr[h], gr[nh + h],
                       w.mix.data() + std::size_t(r) * dq + h * hd);
      }
    }
  }
}

/// The token mixer: x += Wo · (o ⊙ mLSTM + (1 - o) ⊙ windowed attention), per query head.
void mlstm_mixer(const BlockStep& st, BlockWork& w, float* x, ForwardResult& res) {
  const ModelConfig& c = st.model.config;
  const Layer& L = st.model.layers[st.block];
  const int R = st.batch.size(), hd = c.head_dim(), nh = c.n_heads, nkv = c.n_kv_heads;
  const int dq = nh * hd, dkv = nkv * hd;
  const MlstmMixer mixer = c.mlstm.mixer;
  attention_input(st, w, x);
  float *q = w.q.data(), *att = w.att.data();
  if (mixer != MlstmMixer::swa) {
    w.q0.assign(w.q.begin(), w.q.end());
    w.k0.assign(w.k.begin(), w.k.end());
    mixer_gates(st, w, w.xn.data());
    std::vector<float> buf;
    w.fq.resize(std::size_t(R) * dq);
    w.fk.resize(std::size_t(R) * dkv);
    const float* Fq = float_values(L.mlstm_fq, buf);
    for (int h = 0; h < nh; ++h)
      nn::feature_map_forward(w.q0.data() + h * hd, dq, R, hd, Fq + std::size_t(h) * hd * hd, w.fq.data() + h * hd, dq);
    const float* Fk = float_values(L.mlstm_fk, buf);
    for (int g = 0; g < nkv; ++g)
      nn::feature_map_forward(w.k0.data() + g * hd, dkv, R, hd, Fk + std::size_t(g) * hd * hd, w.fk.data() + g * hd, dkv);
    mlstm_branch(st, w);
  }
  rope_store_kv(st, w);
  if (mixer != MlstmMixer::linear) {
    rope_queries(st, q);
    attention_core(st, q, att, res, c.mlstm.window, c.mlstm.sinks);
  }
  if (mixer == MlstmMixer::linear) {
    std::copy(w.mix.begin(), w.mix.end(), w.att.begin());
  } else if (mixer == MlstmMixer::hybrid) {
    for (int r = 0; r < R; ++r)
      for (int h = 0; h < nh; ++h) {
        const float o = w.gates[std::size_t(r) * 3 * nh + 2 * nh + h];
        float* a = att + std::size_t(r) * dq + h * hd;
        const float* m = w.mix.data() + std::size_t(r) * dq + h * hd;
        for (int e = 0; e < hd; ++e) a[e] = o * m[e] + (1.0f - o) * a[e];
      }
  }
  attention_output(st, w, x);
}

}  // namespace

void mlstm_block_forward(const BlockStep& st, BlockWork& w, float* x, ForwardResult& res) {
  const ForwardOptions& opt = st.options;
  if (opt.skip_attn.empty() || !opt.skip_attn[st.block]) mlstm_mixer(st, w, x, res);
  if (opt.skip_mlp.empty() || !opt.skip_mlp[st.block]) llama_mlp(st, w, x);
}

}  // namespace icmlkit::lm
