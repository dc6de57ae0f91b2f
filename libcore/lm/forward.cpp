#include "lm/forward.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "lm/matmul.hpp"
#include "lm/sampler.hpp"
#include "lm/support.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace icmlkit::lm {

Batch Batch::causal(const std::vector<int>& tokens, int start_pos) {
  Batch b;
  b.rows.reserve(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::vector<int> att(i);
    for (std::size_t j = 0; j < i; ++j) att[j] = static_cast<int>(j);
    b.add(tokens[i], start_pos + static_cast<int>(i), 0, std::move(att));
  }
  return b;
}

int Batch::add(int token, int pos, int view, std::vector<int> attend, int seq) {
  rows.push_back(BatchRow{token, pos, view, std::move(attend), seq});
  return size() - 1;
}

int Batch::append(const Batch& other, int seq) {
  const int first = size(), vfirst = static_cast<int>(views.size());
  for (const View& v : other.views) views.push_back(v);
  for (const BatchRow& r : other.rows) {
    std::vector<int> att = r.attend;
    for (int& a : att) a += first;
    add(r.token, r.pos, vfirst + r.view, std::move(att), seq);
  }
  return first;
}

int Batch::add_view(View v) {
  views.push_back(std::move(v));
  return static_cast<int>(views.size()) - 1;
}

void rms_norm(const float* x, int n, int d, const float* w, double eps, float* y) {
  for (int r = 0; r < n; ++r) {
    const float* xr = x + std::size_t(r) * d;
    float* yr = y + std::size_t(r) * d;
    double ss = 0.0;
    for (int i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / d + eps));
    for (int i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

namespace {

/// y [R, W.rows] = x [R, K] W^T for a weight held as float32 or f16 (bitwise the same).
void matmul_w(const float* x, int R, int K, int ldx, const Matrix& W, int O, float* y, int ldy) {
  if (W.is_half()) matmul_xwt_f16(x, R, K, ldx, W.half.data(), O, y, ldy);
  else matmul_xwt(x, R, K, ldx, W.data.data(), O, y, ldy);
}

}  // namespace

const char* projection_name(Projection p) noexcept {
  switch (p) {
    case Projection::attn_q: return "attn_q";
    case Projection::attn_k: return "attn_k";
    case Projection::attn_v: return "attn_v";
    case Projection::attn_output: return "attn_output";
    case Projection::ffn_gate: return "ffn_gate";
    case Projection::ffn_up: return "ffn_up";
    case Projection::ffn_down: return "ffn_down";
  }
  return "?";
}

Projection parse_projection(const std::string& name) {
  for (Projection p : {Projection::attn_q, Projection::attn_k, Projection::attn_v, Projection::attn_output,
                       Projection::ffn_gate, Projection::ffn_up, Projection::ffn_down})
    if (name == projection_name(p)) return p;
  throw InputError("unknown projection '" + name + "' (attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down)");
}

namespace {
/// The [out, in] shape of projection p in a llama block.
std::pair<int, int> projection_shape(const ModelConfig& c, Projection p) {
  const int d = c.d_model, dq = c.n_heads * c.head_dim(), dkv = c.n_kv_heads * c.head_dim();
  switch (p) {
    case Projection::attn_q: return {dq, d};
    case Projection::attn_k:
    case Projection::attn_v: return {dkv, d};
    case Projection::attn_output: return {d, dq};
    case Projection::ffn_gate:
    case Projection::ffn_up: return {c.d_ff, d};
    case Projection::ffn_down: return {d, c.d_ff};
  }
  return {0, 0};
}
}  // namespace

std::vector<int> logits_rows_of(const ForwardOptions& opt, int R) {
  if (!opt.all_logits || !opt.logits_rows.empty()) return opt.logits_rows;
  std::vector<int> rows(R);
  for (int r = 0; r < R; ++r) rows[r] = r;
  return rows;
}

void check_batch(const ModelConfig& c, const std::function<int(int, int)>& head_size, const Batch& b,
                 const ForwardOptions& opt) {
  check_batch(c, 1, [&head_size](int, int l, int h) { return head_size(l, h); }, b, opt);
}

void check_batch(const ModelConfig& c, int n_seqs, const std::function<int(int, int, int)>& head_size,
                 const Batch& b, const ForwardOptions& opt) {
  const int R = b.size();
  if (R == 0) throw InputError("empty forward batch");
  for (const auto* skip : {&opt.skip_attn, &opt.skip_mlp})
    if (!skip->empty() && static_cast<int>(skip->size()) != c.n_layers)
      throw InputError("layer skip list needs n_layers entries");
  const int n_steps = opt.schedule.empty() ? c.n_layers : static_cast<int>(opt.schedule.size());
  if (opt.stop_after < -1 || opt.stop_after > n_steps)
    throw InputError("stop_after " + std::to_string(opt.stop_after) + " outside [-1, " + std::to_string(n_steps) +
                     " blocks run]");
  for (int l : opt.schedule)
    if (l < 0 || l >= c.n_layers) throw InputError("block schedule names block " + std::to_string(l) + " of " + std::to_string(c.n_layers));
  if (opt.adapters)
    for (const Adapter& a : *opt.adapters) {
      const std::string where = fmt::format("adapter on blk.{}.{}", a.block, projection_name(a.proj));
      if (a.block < 0 || a.block >= c.n_layers) throw InputError("block outside the model", where);
      const auto [out, in] = projection_shape(c, a.proj);
      const int r = a.A.rows;
      if (r <= 0 || a.A.cols != in || a.B.rows != out || a.B.cols != r || a.A.is_half() || a.B.is_half() ||
          a.A.data.size() != std::size_t(r) * in || a.B.data.size() != std::size_t(out) * r)
        throw InputError(fmt::format("A must be [rank, {}] and B [{}, rank] in float32 (got A [{}, {}], B [{}, {}])", in, out,
                                     a.A.rows, a.A.cols, a.B.rows, a.B.cols), where);
    }
  if (!opt.schedule.empty() && (!opt.skip_attn.empty() || !opt.skip_mlp.empty()))
    throw InputError("a block schedule and layer skip lists cannot be combined (leave the skipped blocks out of the schedule)");
  for (int r = 0; r < R; ++r) {
    const auto& row = b.rows[r];
    const std::string where = "batch row " + std::to_string(r);
    if (row.token < 0 || row.token >= c.vocab_size)
      throw InputError("token id " + std::to_string(row.token) + " outside the vocabulary [0, " +
                       std::to_string(c.vocab_size) + ")", where);
    if (row.pos < 0 || row.pos >= c.n_ctx)
      throw InputError("position " + std::to_string(row.pos) + " outside [0, n_ctx = " + std::to_string(c.n_ctx) + ")", where);
    if (row.view < 0 || row.view >= static_cast<int>(b.views.size())) throw InputError("bad view index", where);
    if (row.seq < 0 || row.seq >= n_seqs)
      throw InputError("sequence " + std::to_string(row.seq) + " outside the " + std::to_string(n_seqs) +
                       " cache(s) of this forward", where);
    for (int a : row.attend) {
      if (a < 0 || a >= R) throw InputError("attend index " + std::to_string(a) + " outside the batch", where);
      if (b.rows[a].seq != row.seq)
        throw InputError("attend index " + std::to_string(a) + " is a row of another sequence", where);
    }
  }
  for (std::size_t v = 0; v < b.views.size(); ++v) {
    const auto* lists = b.views[v].lists();
    if (!lists) continue;
    const std::string where = "view " + std::to_string(v);
    if (!opt.schedule.empty()) throw InputError("per-head views cannot be combined with a block schedule", where);
    if (lists->size() != std::size_t(c.n_layers) * c.n_kv_heads)
      throw InputError("per-head view needs n_layers * n_kv_heads slot lists", where);
    std::vector<char> used(n_seqs, 0);  // the sequences whose rows use this view
    for (const auto& row : b.rows)
      if (row.view == static_cast<int>(v)) used[row.seq] = 1;
    if (n_seqs == 1) used[0] = 1;
    for (int q = 0; q < n_seqs; ++q) {
      if (!used[q]) continue;
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_kv_heads; ++h) {
          const auto& s = (*lists)[std::size_t(l) * c.n_kv_heads + h];
          const int len = head_size(q, l, h);
          for (std::size_t j = 0; j < s.size(); ++j)
            if (s[j] < 0 || s[j] >= len || (j && s[j] <= s[j - 1]))
              throw InputError("slot list is unsorted or outside the cache", where);
        }
    }
  }
  for (int r : opt.logits_rows)
    if (r < 0 || r >= R) throw InputError("logits row " + std::to_string(r) + " outside the batch");
  for (int r : opt.attn_rows)
    if (r < 0 || r >= R) throw InputError("attention row " + std::to_string(r) + " outside the batch");
}

namespace {
/// One position's RoPE row: cs[i], sn[i] for i < head_dim / 2.
void rope_row(double theta, int hd, int pos, float* cs, float* sn) {
  for (int i = 0; i < hd / 2; ++i) {
    const double freq = std::pow(theta, -2.0 * i / hd);
    const double a = pos * freq;
    cs[i] = static_cast<float>(std::cos(a));
    sn[i] = static_cast<float>(std::sin(a));
  }
}
}  // namespace

void rope_tables(const ModelConfig& c, const Batch& b, std::vector<float>& cs, std::vector<float>& sn) {
  const int half = c.head_dim() / 2;
  cs.resize(std::size_t(b.size()) * half);
  sn.resize(cs.size());
  for (int r = 0; r < b.size(); ++r)
    rope_row(c.rope_theta, c.head_dim(), b.rows[r].pos, cs.data() + std::size_t(r) * half, sn.data() + std::size_t(r) * half);
}

RopeCache::RopeCache(const ModelConfig& c)
    : half_(c.head_dim() / 2), hd_(c.head_dim()), theta_(c.rope_theta), blocks_((std::max(c.n_ctx, 1) + kBlock - 1) / kBlock) {}

void RopeCache::tables(const Batch& b, float* cs, float* sn) {
  for (int r = 0; r < b.size(); ++r) {
    const int pos = b.rows[r].pos;
    std::vector<float>& blk = blocks_.at(static_cast<std::size_t>(pos / kBlock));
    if (blk.empty()) {
      blk.resize(std::size_t(2) * kBlock * half_);
      for (int p = 0; p < kBlock; ++p)
        rope_row(theta_, hd_, (pos / kBlock) * kBlock + p, blk.data() + std::size_t(p) * half_,
                 blk.data() + std::size_t(kBlock + p) * half_);
    }
    const std::size_t at = std::size_t(pos % kBlock) * half_;
    std::copy_n(blk.data() + at, half_, cs + std::size_t(r) * half_);
    std::copy_n(blk.data() + std::size_t(kBlock) * half_ + at, half_, sn + std::size_t(r) * half_);
  }
}

void apply_rope(float* x, int hd, RopeStyle style, const float* cs, const float* sn) {
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const int a = style == RopeStyle::half ? i : 2 * i;
    const int b = style == RopeStyle::half ? i + half : 2 * i + 1;
    const float x1 = x[a], x2 = x[b];
    x[a] = x1 * cs[i] - x2 * sn[i];
    x[b] = x2 * cs[i] + x1 * sn[i];
  }
}

ForwardResult forward(const Model& model, KvCache& cache, const Batch& b, const ForwardOptions& opt) {
  return forward(model, std::vector<KvCache*>{&cache}, b, opt);
}

ForwardResult forward(const Model& model, const std::vector<KvCache*>& caches, const Batch& b,
                      const ForwardOptions& opt) {
  const ModelConfig& c = model.config;
  const int nseq = static_cast<int>(caches.size());
  if (nseq == 0) throw InputError("forward needs at least one KV cache");
  check_batch(c, nseq, [&caches](int q, int l, int h) { return caches[q]->size(l, h); }, b, opt);
  {
    const int steps = opt.schedule.empty() ? c.n_layers : static_cast<int>(opt.schedule.size());
    for (const KvCache* kv : caches)
      if (kv->n_layers() != steps)
        throw InputError("the KV cache has " + std::to_string(kv->n_layers()) + " layers but the forward runs " +
                         std::to_string(steps) + " block steps (a schedule needs a cache of its length)");
  }
  const int R = b.size(), d = c.d_model, hd = c.head_dim(), nh = c.n_heads, nkv = c.n_kv_heads;
  const int group = c.group(), dq = nh * hd, dkv = nkv * hd;
  const float scale = static_cast<float>(1.0 / std::sqrt(double(hd)));
  ForwardResult res;

  std::vector<float> x(std::size_t(R) * d), xn(x.size()), tmp(x.size());
  std::vector<float> q(std::size_t(R) * dq), k(std::size_t(R) * dkv), v(k.size()), att(q.size());
  std::vector<float> gate(std::size_t(R) * c.d_ff), up(gate.size());
  std::vector<float> cs, sn;
  rope_tables(c, b, cs, sn);
  for (int r = 0; r < R; ++r)
    model.token_embd.row_f32(b.rows[r].token, x.data() + std::size_t(r) * d);
  const int n_steps = opt.schedule.empty() ? c.n_layers : static_cast<int>(opt.schedule.size());
  const int n_run = opt.stop_after >= 0 ? opt.stop_after : n_steps;  // steps run
  if (opt.hidden) {
    res.hidden.assign(n_run + 1, Matrix(R, d));
    res.hidden[0].data = x;
  }
  // Each row's index in its own sequence's pending area.
  std::vector<int> local(R), per_seq(nseq, 0);
  for (int r = 0; r < R; ++r) local[r] = per_seq[b.rows[r].seq]++;
  for (int q = 0; q < nseq; ++q)
    if (per_seq[q] > 0) caches[q]->begin_pending(per_seq[q]);
  for (int r = 0; r < R; ++r) caches[b.rows[r].seq]->set_pending_position(local[r], b.rows[r].pos);

  // Sorted in-batch key lists (self included) per row.
  std::vector<std::vector<int>> inbatch(R);
  for (int r = 0; r < R; ++r) {
    auto& s = inbatch[r];
    s = b.rows[r].attend;
    s.push_back(r);
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
  }
  std::vector<char> record(R, 0);
  for (int r : opt.attn_rows) record[r] = 1;
  const int nthreads = threads();

  const int nviews = static_cast<int>(b.views.size());
  if (opt.time_attention) res.attn_cpu_s.assign(nviews, 0.0);
  using Clock = std::chrono::steady_clock;

  // Unmerged adapters: y [R, O] += scale · (x A^T) B^T for every adapter on (block l, p).
  std::vector<float> ad_t, ad_y;
  auto adapt = [&](int l, Projection p, const float* in, int K, float* y, int O) {
    if (!opt.adapters) return;
    for (const Adapter& a : *opt.adapters) {
      if (a.block != l || a.proj != p) continue;
      const int rank = a.A.rows;
      ad_t.resize(std::size_t(R) * rank);
      ad_y.resize(std::size_t(R) * O);
      matmul_xwt(in, R, K, K, a.A.data.data(), rank, ad_t.data(), rank);
      matmul_xwt(ad_t.data(), R, rank, rank, a.B.data.data(), O, ad_y.data(), O);
      for (std::size_t i = 0; i < ad_y.size(); ++i) y[i] += a.scale * ad_y[i];
    }
  };

  // The block list (contract v2): each step runs block l (the schedule's entry, or the step
  // itself) on cache layer cl = the step; each block runs by its type.
  for (int cl = 0; cl < n_run; ++cl) {
    const int l = opt.schedule.empty() ? cl : opt.schedule[cl];
    if (c.block_type(l) != BlockType::llama) require_blocks(Runner::cpu_engine, c);  // the one table says why
    const Layer& L = model.layers[l];
    if (opt.skip_attn.empty() || !opt.skip_attn[l]) {
      rms_norm(x.data(), R, d, L.attn_norm.data(), c.rms_eps, xn.data());
      matmul_w(xn.data(), R, d, d, L.wq, dq, q.data(), dq);
      matmul_w(xn.data(), R, d, d, L.wk, dkv, k.data(), dkv);
      matmul_w(xn.data(), R, d, d, L.wv, dkv, v.data(), dkv);
      adapt(l, Projection::attn_q, xn.data(), d, q.data(), dq);
      adapt(l, Projection::attn_k, xn.data(), d, k.data(), dkv);
      adapt(l, Projection::attn_v, xn.data(), d, v.data(), dkv);
      const int half = hd / 2;
      for (int r = 0; r < R; ++r) {
        const float* rc = cs.data() + std::size_t(r) * half;
        const float* rs = sn.data() + std::size_t(r) * half;
        for (int h = 0; h < nh; ++h) apply_rope(q.data() + std::size_t(r) * dq + h * hd, hd, c.rope_style, rc, rs);
        KvCache& cache = *caches[b.rows[r].seq];
        for (int h = 0; h < nkv; ++h) {
          float* kr = k.data() + std::size_t(r) * dkv + h * hd;
          apply_rope(kr, hd, c.rope_style, rc, rs);
          std::copy_n(kr, hd, cache.pending_key(cl, h, local[r]));
          std::copy_n(v.data() + std::size_t(r) * dkv + h * hd, hd, cache.pending_value(cl, h, local[r]));
        }
      }

      // Attention, one (row, query head) per task: gather the view's slots, then new rows.
      std::vector<AttentionRecord> recs;
      const std::int64_t attn_work = std::int64_t(R) * nh * hd * (caches[0]->size(cl, 0) + R);
#pragma omp parallel num_threads(nthreads) if (nthreads > 1 && R * nh > 1 && attn_work >= (1 << 18))
      {
        std::vector<float> sc;
        std::vector<AttentionRecord> mine;
        std::vector<double> busy(opt.time_attention ? nviews : 0, 0.0);
#pragma omp for schedule(dynamic, 1)
        for (int task = 0; task < R * nh; ++task) {
          const auto t0 = opt.time_attention ? Clock::now() : Clock::time_point();
          const int r = task / nh, h = task % nh, g = h / group;
          const BatchRow& row = b.rows[r];
          const KvCache& cache = *caches[row.seq];
          const View& view = b.views[row.view];
          const int lhi = cache.lh(cl, g);
          const int nslots = view.count(lhi, cache.size(cl, g));
          const auto& nb = inbatch[r];
          const int nkeys = nslots + static_cast<int>(nb.size());
          sc.resize(nkeys);
          const float* qr = q.data() + std::size_t(r) * dq + h * hd;
          for (int j = 0; j < nslots; ++j) sc[j] = dot8(qr, cache.key(cl, g, view.slot(lhi, j)), hd) * scale;
          for (std::size_t j = 0; j < nb.size(); ++j)
            sc[nslots + j] = dot8(qr, cache.pending_key(cl, g, local[nb[j]]), hd) * scale;
          AttentionRecord* rec = nullptr;
          const auto t_rec = opt.time_attention ? Clock::now() : Clock::time_point();
          if (record[r]) {
            mine.push_back(AttentionRecord{r, cl, h, {}, sc, {}, {}});
            rec = &mine.back();
          }
          const auto t_rec_end = opt.time_attention ? Clock::now() : Clock::time_point();
          float mx = sc[0];
          for (int j = 1; j < nkeys; ++j) mx = std::max(mx, sc[j]);
          double sum = 0.0;
          for (int j = 0; j < nkeys; ++j) { sc[j] = std::exp(sc[j] - mx); sum += sc[j]; }
          const float inv = static_cast<float>(1.0 / sum);
          float* out = att.data() + std::size_t(r) * dq + h * hd;
          std::fill_n(out, hd, 0.0f);
          for (int j = 0; j < nkeys; ++j) {
            const float p = sc[j] * inv;
            sc[j] = p;
            const float* vv = j < nslots ? cache.value(cl, g, view.slot(lhi, j)) : cache.pending_value(cl, g, local[nb[j - nslots]]);
            for (int e = 0; e < hd; ++e) out[e] += p * vv[e];
          }
          // Attention time excludes the copies made for attention records.
          if (opt.time_attention)
            busy[row.view] += std::chrono::duration<double>((Clock::now() - t0) - (t_rec_end - t_rec)).count();
          if (rec) {
            rec->probs.assign(sc.begin(), sc.end());
            rec->output.assign(out, out + hd);
            rec->keys.resize(nkeys);
            for (int j = 0; j < nslots; ++j) rec->keys[j] = view.slot(lhi, j);
            for (std::size_t j = 0; j < nb.size(); ++j) rec->keys[nslots + j] = -(nb[j] + 1);
          }
        }
        if (!mine.empty() || opt.time_attention) {
#pragma omp critical
          {
            for (auto& m : mine) recs.push_back(std::move(m));
            for (int v = 0; v < static_cast<int>(busy.size()); ++v) res.attn_cpu_s[v] += busy[v];
          }
        }
      }
      std::sort(recs.begin(), recs.end(), [](const AttentionRecord& a, const AttentionRecord& b2) {
        return a.row != b2.row ? a.row < b2.row : a.head < b2.head;
      });
      for (auto& rr : recs) res.attention.push_back(std::move(rr));

      matmul_w(att.data(), R, dq, dq, L.wo, d, tmp.data(), d);
      adapt(l, Projection::attn_output, att.data(), dq, tmp.data(), d);
      for (std::size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    }
    if (!opt.skip_mlp.empty() && opt.skip_mlp[l]) {
      if (opt.hidden) res.hidden[cl + 1].data = x;
      continue;
    }
    rms_norm(x.data(), R, d, L.ffn_norm.data(), c.rms_eps, xn.data());
    matmul_w(xn.data(), R, d, d, L.w_gate, c.d_ff, gate.data(), c.d_ff);
    matmul_w(xn.data(), R, d, d, L.w_up, c.d_ff, up.data(), c.d_ff);
    adapt(l, Projection::ffn_gate, xn.data(), d, gate.data(), c.d_ff);
    adapt(l, Projection::ffn_up, xn.data(), d, up.data(), c.d_ff);
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const float gv = gate[i];
      gate[i] = gv / (1.0f + std::exp(-gv)) * up[i];
    }
    matmul_w(gate.data(), R, c.d_ff, c.d_ff, L.w_down, d, tmp.data(), d);
    adapt(l, Projection::ffn_down, gate.data(), c.d_ff, tmp.data(), d);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    if (opt.hidden) res.hidden[cl + 1].data = x;
  }

  res.logits_rows = logits_rows_of(opt, R);
  const int nl = static_cast<int>(res.logits_rows.size());
  if (nl > 0) {
    Matrix h(nl, d);
    for (int i = 0; i < nl; ++i) std::copy_n(x.data() + std::size_t(res.logits_rows[i]) * d, d, h.row(i));
    res.logits = apply_head(model, h);
    if (opt.greedy_only) {
      res.greedy.resize(nl);
      for (int i = 0; i < nl; ++i) res.greedy[i] = greedy_token(res.logits.row(i), c.vocab_size);
      if (opt.greedy_prob)
        for (int i = 0; i < nl; ++i) res.greedy_prob.push_back(greedy_probability(res.logits.row(i), c.vocab_size, res.greedy[i]));
    }
  }
  return res;
}

Matrix apply_head(const Model& model, const Matrix& hidden, const std::vector<int>& vocab_ids) {
  const ModelConfig& c = model.config;
  if (hidden.cols != c.d_model) throw InputError("hidden states have " + std::to_string(hidden.cols) + " columns, d_model is " + std::to_string(c.d_model));
  Matrix hn(hidden.rows, c.d_model);
  rms_norm(hidden.data.data(), hidden.rows, c.d_model, model.output_norm.data(), c.rms_eps, hn.data.data());
  const Matrix& W = model.head();
  if (vocab_ids.empty()) {
    Matrix out(hidden.rows, c.vocab_size);
    matmul_w(hn.data.data(), hidden.rows, c.d_model, c.d_model, W, c.vocab_size, out.data.data(), c.vocab_size);
    return out;
  }
  Matrix sub(static_cast<int>(vocab_ids.size()), c.d_model);
  if (W.is_half()) {
    sub.data.clear();
    sub.half.resize(vocab_ids.size() * std::size_t(c.d_model));
  }
  for (std::size_t i = 0; i < vocab_ids.size(); ++i) {
    const int id = vocab_ids[i];
    if (id < 0 || id >= c.vocab_size) throw InputError("vocabulary id " + std::to_string(id) + " out of range");
    if (W.is_half()) std::copy_n(W.half.data() + std::size_t(id) * c.d_model, c.d_model, sub.half.data() + i * c.d_model);
    else std::copy_n(W.row(id), c.d_model, sub.row(static_cast<int>(i)));
  }
  Matrix out(hidden.rows, sub.rows);
  matmul_w(hn.data.data(), hidden.rows, c.d_model, c.d_model, sub, sub.rows, out.data.data(), sub.rows);
  return out;
}

}  // namespace icmlkit::lm
