#include "lm/kv_cache.hpp"

#include <algorithm>
#include <string>

#include "util/error.hpp"

namespace icmlkit::lm {

View View::prefix(int n) {
  View v;
  v.limit_ = std::max(0, n);
  return v;
}

View View::per_head(std::vector<std::vector<std::int32_t>> slots) {
  View v;
  v.lists_ = std::make_shared<const std::vector<std::vector<std::int32_t>>>(std::move(slots));
  return v;
}

int View::count(int lh, int len) const noexcept {
  if (lists_) return static_cast<int>((*lists_)[lh].size());
  return limit_ < 0 ? len : std::min(limit_, len);
}

KvCache::KvCache(const ModelConfig& c) : KvCache(c, c.n_layers) {
  for (int l = 0; l < c.n_layers; ++l) {
    if (c.block_state_floats(l) > 0) set_state_size(l, c.block_state_floats(l));
    if (c.block_type(l) == BlockType::mlstm_hybrid)  // the linear mixer attends no key: keep none
      set_window(l, c.mlstm.mixer == MlstmMixer::linear ? 0 : c.mlstm.sinks,
                 c.mlstm.mixer == MlstmMixer::linear ? 0 : c.mlstm.window);
  }
}

KvCache::KvCache(const ModelConfig& c, int layers)
    : n_layers_(layers), n_kv_(c.n_kv_heads), hd_(c.head_dim()), n_ctx_(c.n_ctx),
      heads_(std::size_t(std::max(layers, 0)) * c.n_kv_heads), pend_k_(std::max(layers, 0)), pend_v_(std::max(layers, 0)),
      window_(std::max(layers, 0), -1), sinks_(std::max(layers, 0), 0), state_n_(std::max(layers, 0), 0), state_(std::max(layers, 0)), pend_state_(std::max(layers, 0)) {}

void KvCache::set_state_size(int layer, int n) {
  if (layer < 0 || layer >= n_layers_ || n < 0)
    throw InputError("recurrent state of " + std::to_string(n) + " floats for layer " + std::to_string(layer) + " of " +
                     std::to_string(n_layers_));
  state_n_[layer] = n;
  state_[layer].assign(n, 0.0f);
  pend_state_[layer].assign(pend_pos_.size() * std::size_t(n), 0.0f);
}

void KvCache::set_window(int layer, int sinks, int window) {
  if (layer < 0 || layer >= n_layers_ || sinks < 0)
    throw InputError("sliding window for layer " + std::to_string(layer) + " of " + std::to_string(n_layers_));
  window_[layer] = window;
  sinks_[layer] = sinks;
}

bool KvCache::has_state() const noexcept {
  return std::any_of(state_n_.begin(), state_n_.end(), [](int n) { return n > 0; });
}

void KvCache::begin_pending(int rows) {
  for (int l = 0; l < n_layers_; ++l) {
    pend_k_[l].resize(std::size_t(rows) * n_kv_ * hd_);
    pend_v_[l].resize(std::size_t(rows) * n_kv_ * hd_);
    pend_state_[l].resize(std::size_t(rows) * state_n_[l]);
  }
  pend_pos_.assign(rows, 0);
  pend_parent_.assign(rows, -1);
  pend_kept_.assign(rows, 1);
  pending_committed_ = false;
}

void KvCache::commit(const std::vector<int>& rows) {
  for (int r : rows)
    if (r < 0 || r >= pending_rows())
      throw InputError("commit of row " + std::to_string(r) + " outside the last batch");
  const bool state = has_state();
  if (state && !rows.empty()) {
    if (pending_committed_)
      throw InputError("the recurrent state already took rows of this batch; run a forward before committing more");
    if (!pend_kept_[rows.back()])
      throw InputError("commit ending at row " + std::to_string(rows.back()) +
                       ": its recurrent state was not kept (the forward's state_rows did not name it)");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const int want = i == 0 ? -1 : rows[i - 1];
      if (pend_parent_[rows[i]] != want)
        throw InputError("commit of row " + std::to_string(rows[i]) +
                         ": a recurrent state needs a chain of rows, each continuing the one before (its parent is " +
                         std::to_string(pend_parent_[rows[i]]) + ")");
    }
  }
  for (int l = 0; l < n_layers_; ++l)
    for (int h = 0; h < n_kv_ && window_[l] < 0; ++h) {
      Head& hd = heads_[lh(l, h)];
      if (hd.pos.size() + rows.size() > std::size_t(n_ctx_))
        throw InputError("KV cache full: n_ctx = " + std::to_string(n_ctx_) + " positions");
    }
  for (int l = 0; l < n_layers_; ++l)
    for (int h = 0; h < n_kv_; ++h) {
      Head& hd = heads_[lh(l, h)];
      for (int r : rows) {
        const float* k = pending_key(l, h, r);
        const float* v = pending_value(l, h, r);
        hd.k.insert(hd.k.end(), k, k + hd_);
        hd.v.insert(hd.v.end(), v, v + hd_);
        hd.pos.push_back(pend_pos_[r]);
      }
      if (window_[l] >= 0 && !hd.pos.empty()) {  // drop what no later query of the window can see
        const std::int32_t newest = *std::max_element(hd.pos.begin(), hd.pos.end());
        std::size_t keep = 0;
        for (std::size_t j = 0; j < hd.pos.size(); ++j) {
          const std::int32_t p = hd.pos[j];
          if (p >= sinks_[l] && std::int64_t(p) <= std::int64_t(newest) - window_[l]) continue;
          if (keep != j) {
            std::copy_n(hd.k.begin() + j * hd_, hd_, hd.k.begin() + keep * hd_);
            std::copy_n(hd.v.begin() + j * hd_, hd_, hd.v.begin() + keep * hd_);
            hd.pos[keep] = p;
          }
          ++keep;
        }
        hd.pos.resize(keep);
        hd.k.resize(keep * hd_);
        hd.v.resize(keep * hd_);
        if (hd.k.capacity() > 4 * hd.k.size() + std::size_t(64) * hd_) {  // after a long prefill: give it back
          hd.k.shrink_to_fit();
          hd.v.shrink_to_fit();
          hd.pos.shrink_to_fit();
        }
      }
    }
  if (state && !rows.empty()) {
    for (int l = 0; l < n_layers_; ++l)
      if (state_n_[l] > 0) std::copy_n(pending_state(l, rows.back()), state_n_[l], state_[l].begin());
    pending_committed_ = true;
  }
}

void KvCache::commit_all() {
  std::vector<int> rows(pending_rows());
  for (int i = 0; i < pending_rows(); ++i) rows[i] = i;
  commit(rows);
}

void KvCache::truncate(int n) {
  n = std::max(0, n);
  if (has_state())
    for (const Head& hd : heads_)
      if (hd.pos.size() > std::size_t(n))
        throw InputError("cannot roll back a recurrent state to " + std::to_string(n) +
                         " slots (commit only the accepted rows instead)");
  for (Head& hd : heads_) {
    if (hd.pos.size() <= std::size_t(n)) continue;
    hd.pos.resize(n);
    hd.k.resize(std::size_t(n) * hd_);
    hd.v.resize(std::size_t(n) * hd_);
  }
}

void KvCache::retain(const std::vector<std::vector<std::int32_t>>& keep) {
  if (keep.size() != heads_.size())
    throw InputError("retain needs one slot list per (layer, KV head): got " + std::to_string(keep.size()) +
                     ", expected " + std::to_string(heads_.size()));
  for (std::size_t i = 0; i < heads_.size(); ++i) {
    const auto& s = keep[i];
    for (std::size_t j = 0; j < s.size(); ++j)
      if (s[j] < 0 || std::size_t(s[j]) >= heads_[i].pos.size() || (j && s[j] <= s[j - 1]))
        throw InputError("retain: slot list " + std::to_string(i) + " is unsorted or out of range");
  }
  for (std::size_t i = 0; i < heads_.size(); ++i) {
    Head& hd = heads_[i];
    const auto& s = keep[i];
    for (std::size_t j = 0; j < s.size(); ++j) {   // in-place gather: s[j] >= j
      std::copy_n(hd.k.begin() + std::size_t(s[j]) * hd_, hd_, hd.k.begin() + j * hd_);
      std::copy_n(hd.v.begin() + std::size_t(s[j]) * hd_, hd_, hd.v.begin() + j * hd_);
      hd.pos[j] = hd.pos[s[j]];
    }
    hd.pos.resize(s.size());
    hd.k.resize(s.size() * hd_);
    hd.v.resize(s.size() * hd_);
  }
}

void KvCache::clear() {
  for (Head& hd : heads_) { hd.k.clear(); hd.v.clear(); hd.pos.clear(); }
  pend_pos_.clear();
  pend_parent_.clear();
  pend_kept_.clear();
  for (int l = 0; l < n_layers_; ++l) {
    std::fill(state_[l].begin(), state_[l].end(), 0.0f);
    pend_state_[l].clear();
  }
}

}  // namespace icmlkit::lm
