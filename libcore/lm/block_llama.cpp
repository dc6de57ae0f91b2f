// The llama block's forward on the CPU engine (lm/block.hpp), and the block-type table.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <cmath>

#include "lm/block.hpp"
#include "lm/matmul.hpp"
#include "lm/recdepth.hpp"
#include "lm/support.hpp"
#include "util/block_pool.hpp"
#include "util/threads.hpp"

namespace icmlkit::lm {

void rope_queries(const BlockStep& st, float* q) {
  const ModelConfig& c = st.model.config;
  const int R = st.batch.size(), hd = c.head_dim(), nh = c.n_heads, dq = nh * hd, half = hd / 2;
  for (int r = 0; r < R; ++r) {
    const float* rc = st.rope_cos + std::size_t(r) * half;
    const float* rs = st.rope_sin + std::size_t(r) * half;
    for (int h = 0; h < nh; ++h) apply_rope(q + std::size_t(r) * dq + h * hd, hd, c.rope_style, rc, rs);
  }
}

void matmul_weight(const float* x, int R, int K, int ldx, const Matrix& W, int O, float* y, int ldy, int row0,
                   int nthreads) {
  matmul_xwt_on(x, R, K, ldx, W.values_from(row0), W.weight_type(), O, y, ldy, best_isa(),
                nthreads > 0 ? nthreads : threads());
}

void matmul_weights(const float* x, int R, int K, int ldx, std::initializer_list<WeightProduct> products) {
  MatmulJob jobs[8];
  int n = 0;
  for (const WeightProduct& p : products) jobs[n++] = MatmulJob{p.W->values_from(0), p.W->weight_type(), p.O, p.y, p.ldy};
  matmul_xwt_jobs(x, R, K, ldx, jobs, n);
}

void apply_adapters(const BlockStep& st, Projection p, const float* in, int K, float* y, int O, BlockWork& w) {
  if (!st.options.adapters) return;
  const int R = st.batch.size();
  for (const Adapter& a : *st.options.adapters) {
    if (a.block != st.block || a.proj != p) continue;
    const int rank = a.A.rows;
    w.adapter_t.resize(std::size_t(R) * rank);
    w.adapter_y.resize(std::size_t(R) * O);
    matmul_xwt(in, R, K, K, a.A.data.data(), rank, w.adapter_t.data(), rank);
    matmul_xwt(w.adapter_t.data(), R, rank, rank, a.B.data.data(), O, w.adapter_y.data(), O);
    for (std::size_t i = 0; i < w.adapter_y.size(); ++i) y[i] += a.scale * w.adapter_y[i];
  }
}

BlockForward block_forward(BlockType t) noexcept {
  switch (t) {
    case BlockType::llama: return &llama_block_forward;
    case BlockType::moe:
    case BlockType::latent_moe: return &moe_block_forward;
    case BlockType::mlstm_hybrid: return &mlstm_block_forward;
    case BlockType::recdepth_prelude:
    case BlockType::recdepth_core:
    case BlockType::recdepth_coda: return &sandwich_block_forward;
  }
  return nullptr;
}

void project_kv(const BlockStep& st, BlockWork& w, const float* xn) {
  const ModelConfig& c = st.model.config;
  const Layer& L = st.model.layers[st.block];
  const int R = st.batch.size(), d = c.d_model, dkv = c.n_kv_heads * c.head_dim();
  w.k.resize(std::size_t(R) * dkv);
  w.v.resize(w.k.size());
  matmul_weight(xn, R, d, d, L.wk, dkv, w.k.data(), dkv);
  matmul_weight(xn, R, d, d, L.wv, dkv, w.v.data(), dkv);
  apply_adapters(st, Projection::attn_k, xn, d, w.k.data(), dkv, w);
  apply_adapters(st, Projection::attn_v, xn, d, w.v.data(), dkv, w);
}

void rope_store_kv(const BlockStep& st, BlockWork& w) {
  const ModelConfig& c = st.model.config;
  const int R = st.batch.size(), hd = c.head_dim(), nkv = c.n_kv_heads, dkv = nkv * hd, cl = st.cache_layer;
  float *k = w.k.data(), *v = w.v.data();
  const int half = hd / 2;
  for (int r = 0; r < R; ++r) {
    const float* rc = st.rope_cos + std::size_t(r) * half;
    const float* rs = st.rope_sin + std::size_t(r) * half;
    KvCache& cache = *st.caches[st.batch.rows[r].seq];
    for (int h = 0; h < nkv; ++h) {
      float* kr = k + std::size_t(r) * dkv + h * hd;
      apply_rope(kr, hd, c.rope_style, rc, rs);
      std::copy_n(kr, hd, cache.pending_key(cl, h, st.local[r]));
      std::copy_n(v + std::size_t(r) * dkv + h * hd, hd, cache.pending_value(cl, h, st.local[r]));
    }
  }
}

namespace {

/// K = RoPE(Wk xn), V = Wv xn of the batch rows from their attention-normed input xn [R, d]
/// (adapters applied), to the pending area of the step's cache layer; w.k and w.v keep them.
void llama_kv(const BlockStep& st, BlockWork& w, const float* xn) {
  project_kv(st, w, xn);
  rope_store_kv(st, w);
}

}  // namespace

void attention_core(const BlockStep& st, const float* q, float* att, ForwardResult& res, int window, int sinks) {
  const ModelConfig& c = st.model.config;
  const Batch& b = st.batch;
  const ForwardOptions& opt = st.options;
  const int R = b.size(), hd = c.head_dim(), nh = c.n_heads;
  const int group = c.group(), dq = nh * hd, cl = st.cache_layer;
  const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  // One (row, query head) per task: gather the view's slots, then the attended new rows (with a
  // window: those of them the row's position sees).
  std::vector<char> record(R, 0);
  for (int r : opt.attn_rows) record[r] = 1;
  const int nthreads = threads();
  using Clock = std::chrono::steady_clock;
  std::vector<AttentionRecord> recs;
  // With a window, each row's visible in-batch rows once (every head shares them).
  std::vector<std::vector<int>> seen;
  if (window >= 0) {
    seen.resize(std::size_t(R));
    for (int r = 0; r < R; ++r)
      for (int a : st.inbatch[r])
        if (window_sees(b.rows[r].pos, b.rows[a].pos, window, sinks)) seen[std::size_t(r)].push_back(a);
  }
  const std::int64_t attn_work = std::int64_t(R) * nh * hd * (st.caches[0]->size(cl, 0) + R);
  const bool par = nthreads > 1 && R * nh > 1 && attn_work >= (1 << 18);
  std::mutex merge;  // records and attention times of the tasks, gathered in any order
  parallel_blocks(R * nh, par ? nthreads : 1, [&](int task) {
    {
      thread_local std::vector<float> sc;
      thread_local std::vector<std::int32_t> keys;
      thread_local std::vector<const float*> kptr;
      AttentionRecord mine_rec;
      const auto t0 = opt.time_attention ? Clock::now() : Clock::time_point();
      const int r = task / nh, h = task % nh, g = h / group;
      const BatchRow& row = b.rows[r];
      const KvCache& cache = *st.caches[row.seq];
      const View& view = b.views[row.view];
      const int lhi = cache.lh(cl, g);
      // the keys: slot indices of the view (>= 0) and in-batch rows (-(row + 1)), in order
      keys.clear();
      const int nview = view.count(lhi, cache.size(cl, g));
      for (int j = 0; j < nview; ++j) {
        const std::int32_t s = view.slot(lhi, j);
        if (window < 0 || window_sees(row.pos, cache.position(cl, g, s), window, sinks)) keys.push_back(s);
      }
      const int nslots = static_cast<int>(keys.size());
      for (int a : window < 0 ? st.inbatch[r] : seen[std::size_t(r)]) keys.push_back(-(a + 1));
      const int nkeys = static_cast<int>(keys.size());
      sc.resize(nkeys);
      const float* qr = q + std::size_t(r) * dq + h * hd;
      kptr.resize(nkeys);
      for (int j = 0; j < nslots; ++j) kptr[j] = cache.key(cl, g, keys[j]);
      for (int j = nslots; j < nkeys; ++j) kptr[j] = cache.pending_key(cl, g, st.local[-keys[j] - 1]);
      dot8_many(qr, kptr.data(), nkeys, hd, sc.data());
      for (int j = 0; j < nkeys; ++j) sc[j] *= scale;
      AttentionRecord* rec = nullptr;
      const auto t_rec = opt.time_attention ? Clock::now() : Clock::time_point();
      if (record[r]) {
        mine_rec = AttentionRecord{r, cl, h, {}, sc, {}, {}};
        rec = &mine_rec;
      }
      const auto t_rec_end = opt.time_attention ? Clock::now() : Clock::time_point();
      float mx = sc[0];
      for (int j = 1; j < nkeys; ++j) mx = std::max(mx, sc[j]);
      double sum = 0.0;
      for (int j = 0; j < nkeys; ++j) { sc[j] = std::exp(sc[j] - mx); sum += sc[j]; }
      const float inv = static_cast<float>(1.0 / sum);
      float* out = att + std::size_t(r) * dq + h * hd;
      std::fill_n(out, hd, 0.0f);
      for (int j = 0; j < nkeys; ++j) {
        const float p = sc[j] * inv;
        sc[j] = p;
        const float* vv = j < nslots ? cache.value(cl, g, keys[j]) : cache.pending_value(cl, g, st.local[-keys[j] - 1]);
        for (int e = 0; e < hd; ++e) out[e] += p * vv[e];
      }
      // Attention time excludes the copies made for attention records.
      const double busy =
          opt.time_attention ? std::chrono::duration<double>((Clock::now() - t0) - (t_rec_end - t_rec)).count() : 0.0;
      if (rec) {
        rec->probs.assign(sc.begin(), sc.end());
        rec->output.assign(out, out + hd);
        rec->keys = keys;
      }
      if (rec || opt.time_attention) {
        std::lock_guard<std::mutex> lock(merge);
        if (rec) recs.push_back(std::move(mine_rec));
        if (opt.time_attention) res.attn_cpu_s[row.view] += busy;
      }
    }
  });
  std::sort(recs.begin(), recs.end(), [](const AttentionRecord& a, const AttentionRecord& b2) {
    return a.row != b2.row ? a.row < b2.row : a.head < b2.head;
  });
  for (auto& rr : recs) res.attention.push_back(std::move(rr));
}

void attention_input(const BlockStep& st, BlockWork& w, const float* x) {
  const ModelConfig& c = st.model.config;
  const Layer& L = st.model.layers[st.block];
  const int R = st.batch.size(), d = c.d_model, dq = c.n_heads * c.head_dim();
  w.xn.resize(std::size_t(R) * d);
  w.q.resize(std::size_t(R) * dq);
  w.att.resize(w.q.size());
  rms_norm(x, R, d, L.attn_norm.data(), c.rms_eps, w.xn.data());
  const int dkv = c.n_kv_heads * c.head_dim();
  w.k.resize(std::size_t(R) * dkv);
  w.v.resize(w.k.size());
  matmul_weights(w.xn.data(), R, d, d, {{&L.wq, dq, w.q.data(), dq}, {&L.wk, dkv, w.k.data(), dkv}, {&L.wv, dkv, w.v.data(), dkv}});
  apply_adapters(st, Projection::attn_q, w.xn.data(), d, w.q.data(), dq, w);
  apply_adapters(st, Projection::attn_k, w.xn.data(), d, w.k.data(), dkv, w);
  apply_adapters(st, Projection::attn_v, w.xn.data(), d, w.v.data(), dkv, w);
}

void attention_output(const BlockStep& st, BlockWork& w, float* x) {
  const ModelConfig& c = st.model.config;
  const int R = st.batch.size(), d = c.d_model, dq = c.n_heads * c.head_dim();
  w.tmp.resize(std::size_t(R) * d);
  matmul_weight(w.att.data(), R, dq, dq, st.model.layers[st.block].wo, d, w.tmp.data(), d);
  apply_adapters(st, Projection::attn_output, w.att.data(), dq, w.tmp.data(), d, w);
  for (std::size_t i = 0; i < w.tmp.size(); ++i) x[i] += w.tmp[i];
}

void llama_attention_sublayer(const BlockStep& st, BlockWork& w, float* x, ForwardResult& res) {
  attention_input(st, w, x);
  rope_store_kv(st, w);
  rope_queries(st, w.q.data());
  attention_core(st, w.q.data(), w.att.data(), res, -1, 0);
  attention_output(st, w, x);
}

void llama_mlp(const BlockStep& st, BlockWork& w, float* x) {
  const ModelConfig& c = st.model.config;
  const Layer& L = st.model.layers[st.block];
  const int R = st.batch.size(), d = c.d_model, ff = c.d_ff;
  w.xn.resize(std::size_t(R) * d);
  w.tmp.resize(w.xn.size());
  w.gate.resize(std::size_t(R) * ff);
  w.up.resize(w.gate.size());
  float *xn = w.xn.data(), *gate = w.gate.data(), *up = w.up.data();
  rms_norm(x, R, d, L.ffn_norm.data(), c.rms_eps, xn);
  matmul_weights(xn, R, d, d, {{&L.w_gate, ff, gate, ff}, {&L.w_up, ff, up, ff}});
  apply_adapters(st, Projection::ffn_gate, xn, d, gate, ff, w);
  apply_adapters(st, Projection::ffn_up, xn, d, up, ff, w);
  for (std::size_t i = 0; i < w.gate.size(); ++i) {
    const float gv = gate[i];
    gate[i] = gv / (1.0f + std::exp(-gv)) * up[i];
  }
  matmul_weight(gate, R, ff, ff, L.w_down, d, w.tmp.data(), d);
  apply_adapters(st, Projection::ffn_down, gate, ff, w.tmp.data(), d, w);
  for (std::size_t i = 0; i < w.tmp.size(); ++i) x[i] += w.tmp[i];
}


void llama_block_state_copy(const BlockStep& st, BlockWork& w, const float* x) {
  const ModelConfig& c = st.model.config;
  const int R = st.batch.size(), d = c.d_model;
  w.xn.resize(std::size_t(R) * d);
  rms_norm(x, R, d, st.model.layers[st.block].attn_norm.data(), c.rms_eps, w.xn.data());
  llama_kv(st, w, w.xn.data());
}

BlockStateCopy block_state_copy(BlockType t) noexcept {
  switch (t) {
    case BlockType::llama:
    case BlockType::moe:
    case BlockType::latent_moe: return &llama_block_state_copy;  // the same attention: the same K/V
    case BlockType::mlstm_hybrid: return nullptr;  // a recurrent state is not a function of one residual
    case BlockType::recdepth_prelude:
    case BlockType::recdepth_core:
    case BlockType::recdepth_coda: return nullptr;  // q / k biases and post-norms: not llama's K/V
  }
  return nullptr;
}

void llama_block_forward(const BlockStep& st, BlockWork& w, float* x, ForwardResult& res) {
  const ForwardOptions& opt = st.options;
  if (opt.skip_attn.empty() || !opt.skip_attn[st.block]) llama_attention_sublayer(st, w, x, res);
  if (opt.skip_mlp.empty() || !opt.skip_mlp[st.block]) llama_mlp(st, w, x);
}

}  // namespace icmlkit::lm
