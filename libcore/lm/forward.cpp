#include "lm/forward.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "lm/block.hpp"
#include "lm/layerwise.hpp"
#include "lm/matmul.hpp"
#include "lm/recdepth.hpp"
#include "lm/sampler.hpp"
#include "lm/support.hpp"
#include "util/error.hpp"

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
  if (model.config.is_recdepth()) {
    if (caches.size() != 1) throw UsageError("a recurrent-depth forward takes one sequence");
    return recdepth_forward(model, *caches[0], b, opt);
  }
  LayerwiseForward pass(model, caches, b, opt);
  pass.run(opt.stop_after >= 0 ? opt.stop_after : pass.steps());
  return pass.finish();
}

Matrix apply_head(const Model& model, const Matrix& hidden, const std::vector<int>& vocab_ids) {
  const ModelConfig& c = model.config;
  if (hidden.cols != c.d_model) throw InputError("hidden states have " + std::to_string(hidden.cols) + " columns, d_model is " + std::to_string(c.d_model));
  Matrix hn(hidden.rows, c.d_model);
  rms_norm(hidden.data.data(), hidden.rows, c.d_model, model.output_norm.data(), c.rms_eps, hn.data.data());
  const Matrix& W = model.head();
  if (vocab_ids.empty()) {
    Matrix out(hidden.rows, c.vocab_size);
    matmul_weight(hn.data.data(), hidden.rows, c.d_model, c.d_model, W, c.vocab_size, out.data.data(), c.vocab_size);
    return out;
  }
  // The rows of the ids, widened to float32 (exact, so the product's bits are the full head's).
  Matrix sub(static_cast<int>(vocab_ids.size()), c.d_model);
  for (std::size_t i = 0; i < vocab_ids.size(); ++i) {
    const int id = vocab_ids[i];
    if (id < 0 || id >= c.vocab_size) throw InputError("vocabulary id " + std::to_string(id) + " out of range");
    W.row_f32(id, sub.row(static_cast<int>(i)));
  }
  Matrix out(hidden.rows, sub.rows);
  matmul_weight(hn.data.data(), hidden.rows, c.d_model, c.d_model, sub, sub.rows, out.data.data(), sub.rows);
  return out;
}

}  // namespace icmlkit::lm
