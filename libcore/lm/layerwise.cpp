#include "lm/layerwise.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "lm/blocks.hpp"
#include "lm/sampler.hpp"
#include "lm/support.hpp"
#include "util/error.hpp"

namespace icmlkit::lm {

LayerwiseForward::LayerwiseForward(const Model& model, KvCache& cache, const Batch& batch, const ForwardOptions& options)
    : LayerwiseForward(model, std::vector<KvCache*>{&cache}, batch, options) {}

LayerwiseForward::LayerwiseForward(const Model& model, const std::vector<KvCache*>& caches, const Batch& b,
                                   const ForwardOptions& opt)
    : model_(model), caches_(caches), batch_(b), opt_(opt) {
  const ModelConfig& c = model.config;
  const int nseq = static_cast<int>(caches.size());
  if (nseq == 0) throw InputError("forward needs at least one KV cache");
  check_batch(c, nseq, [&caches](int q, int l, int h) { return caches[q]->size(l, h); }, b, opt);
  n_steps_ = opt.schedule.empty() ? c.n_layers : static_cast<int>(opt.schedule.size());
  if (c.is_recdepth()) {  // prelude + C x (iterations kept) + coda cache layers (lm/recdepth.hpp)
    const int C = c.recdepth_core(), fixed = c.n_layers - C;
    for (const KvCache* kv : caches)
      if (kv->n_layers() < c.n_layers || (kv->n_layers() - fixed) % C != 0 ||
          (opt.core_kv == CoreKv::latest && kv->n_layers() != c.n_layers))
        throw InputError(fmt::format("the KV cache has {} layers; a recurrent-depth forward with {} core KV needs {}", kv->n_layers(),
                                     opt.core_kv == CoreKv::latest ? "latest" : "full",
                                     opt.core_kv == CoreKv::latest ? std::to_string(c.n_layers)
                                                                   : fmt::format("{} + {} x iterations", fixed, C)));
    n_steps_ = caches[0]->n_layers();
  }
  for (const KvCache* kv : caches)
    if (kv->n_layers() != n_steps_)
      throw InputError("the KV cache has " + std::to_string(kv->n_layers()) + " layers but the forward runs " +
                       std::to_string(n_steps_) + " block steps (a schedule needs a cache of its length)");
  const int R = b.size(), d = c.d_model;
  x_.resize(std::size_t(R) * d);
  rope_tables(c, b, cs_, sn_);
  for (int r = 0; r < R; ++r) model.token_embd.row_f32(b.rows[r].token, x_.data() + std::size_t(r) * d);
  if (opt.hidden) {
    res_.hidden.reserve(std::size_t(n_steps_) + 1);
    res_.hidden.emplace_back(R, d);
    res_.hidden[0].data = x_;
  }
  // Each row's index in its own sequence's pending area.
  local_.resize(R);
  std::vector<int> per_seq(nseq, 0);
  for (int r = 0; r < R; ++r) local_[r] = per_seq[b.rows[r].seq]++;
  for (int q = 0; q < nseq; ++q)
    if (per_seq[q] > 0) caches[q]->begin_pending(per_seq[q]);
  // Sorted in-batch key lists (self included) and recurrent parents per row.
  inbatch_.resize(R);
  parent_.assign(R, -1);
  for (int r = 0; r < R; ++r) {
    auto& s = inbatch_[r];
    s = b.rows[r].attend;
    s.push_back(r);
    std::sort(s.begin(), s.end());
    s.erase(std::unique(s.begin(), s.end()), s.end());
    for (int a : s)
      if (a != r) parent_[r] = std::max(parent_[r], a);
    KvCache& cache = *caches[b.rows[r].seq];
    cache.set_pending_position(local_[r], b.rows[r].pos);
    cache.set_pending_parent(local_[r], parent_[r] < 0 ? -1 : local_[parent_[r]]);
  }
  if (opt.time_attention) res_.attn_cpu_s.assign(b.views.size(), 0.0);
}

BlockStep LayerwiseForward::step(int cl) const {
  const int l = opt_.schedule.empty() ? cl : opt_.schedule[cl];
  return BlockStep{model_, batch_, caches_, opt_, l, cl, local_, inbatch_, parent_, cs_.data(), sn_.data()};
}

void LayerwiseForward::run(int n) {
  if (n < 0 || done_ + n > n_steps_)
    throw InputError("cannot run " + std::to_string(n) + " more block steps after " + std::to_string(done_) + " of " + std::to_string(n_steps_));
  const ModelConfig& c = model_.config;
  if (c.is_recdepth()) throw UsageError("a recurrent-depth model runs through lm::forward or RecurrentDepthForward, not block steps");
  for (int i = 0; i < n; ++i, ++done_) {
    // The block list (contract v2): step cl runs block l (the schedule's entry, or the step
    // itself) on cache layer cl, by the block's type (lm/block.hpp).
    const BlockStep st = step(done_);
    const BlockType type = c.block_type(st.block);
    const BlockForward fwd = block_forward(type);
    if (!fwd || !supports(Runner::cpu_engine, block_feature(type))) require_blocks(Runner::cpu_engine, c);
    fwd(st, work_, x_.data(), res_);
    if (opt_.hidden) {
      res_.hidden.emplace_back(batch_.size(), c.d_model);
      res_.hidden.back().data = x_;
    }
  }
}

void LayerwiseForward::run_block(int block, int cache_layer) {
  const ModelConfig& c = model_.config;
  if (block < 0 || block >= c.n_layers || cache_layer < 0 || cache_layer >= n_steps_)
    throw InputError(fmt::format("run_block: block {} / cache layer {} outside the model ({} blocks) or cache ({} layers)", block,
                                 cache_layer, c.n_layers, n_steps_));
  const BlockStep st{model_, batch_, caches_, opt_, block, cache_layer, local_, inbatch_, parent_, cs_.data(), sn_.data()};
  const BlockType type = c.block_type(block);
  const BlockForward fwd = block_forward(type);
  if (!fwd || !supports(Runner::cpu_engine, block_feature(type))) require_blocks(Runner::cpu_engine, c);
  fwd(st, work_, x_.data(), res_);
}

void LayerwiseForward::resume(int n, const std::vector<float>& residual) {
  if (done_ != 0 || n < 0 || n > n_steps_)
    throw InputError("resume: " + std::to_string(n) + " steps cannot be taken as done after " + std::to_string(done_) + " of " +
                     std::to_string(n_steps_));
  if (residual.size() != x_.size()) throw InputError("resume: the residual has the wrong size for the batch");
  if (opt_.hidden) throw InputError("resume: hidden states of the steps taken as done are not available");
  for (const KvCache* kv : caches_)
    if (kv->has_state()) throw InputError("resume: recurrent block states cannot be taken as done");
  x_ = residual;
  done_ = n;
}

void LayerwiseForward::skip(int n, bool copy_kv) {
  if (n < 0 || done_ + n > n_steps_)
    throw InputError("cannot skip " + std::to_string(n) + " more block steps after " + std::to_string(done_) + " of " + std::to_string(n_steps_));
  for (int i = 0; i < n; ++i, ++done_) {
    const BlockStep st = step(done_);
    if (!copy_kv) {
      const ModelConfig& c = model_.config;
      for (int r = 0; r < batch_.size(); ++r) {
        KvCache& cache = *caches_[batch_.rows[r].seq];
        for (int h = 0; h < c.n_kv_heads; ++h) {
          std::fill_n(cache.pending_key(done_, h, local_[r]), c.head_dim(), 0.0f);
          std::fill_n(cache.pending_value(done_, h, local_[r]), c.head_dim(), 0.0f);
        }
      }
      continue;
    }
    const BlockStateCopy copy = block_state_copy(model_.config.block_type(st.block));
    if (!copy) throw InputError("block type " + std::string(block_type_name(model_.config.block_type(st.block))) + " has no state copy");
    copy(st, work_, x_.data());
  }
}

void LayerwiseForward::copy_state() { skip(n_steps_ - done_); }

Matrix LayerwiseForward::head(const std::vector<int>& rows, const std::vector<int>& vocab_ids) const {
  const int d = model_.config.d_model;
  Matrix h(static_cast<int>(rows.size()), d);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= batch_.size()) throw InputError("head row " + std::to_string(rows[i]) + " outside the batch");
    std::copy_n(x_.data() + std::size_t(rows[i]) * d, d, h.row(static_cast<int>(i)));
  }
  return apply_head(model_, h, vocab_ids);
}

ForwardResult LayerwiseForward::finish() {
  const ModelConfig& c = model_.config;
  res_.logits_rows = logits_rows_of(opt_, batch_.size());
  const int nl = static_cast<int>(res_.logits_rows.size());
  if (nl > 0) {
    res_.logits = head(res_.logits_rows);
    if (opt_.greedy_only) {
      res_.greedy.resize(nl);
      for (int i = 0; i < nl; ++i) res_.greedy[i] = greedy_token(res_.logits.row(i), c.vocab_size);
      if (opt_.greedy_prob)
        for (int i = 0; i < nl; ++i) res_.greedy_prob.push_back(greedy_probability(res_.logits.row(i), c.vocab_size, res_.greedy[i]));
    }
  }
  return std::move(res_);
}

}  // namespace icmlkit::lm
