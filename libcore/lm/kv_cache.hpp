// KV cache with per-(layer, KV head) slots, and views (the cache positions a row may attend).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "lm/config.hpp"

namespace icmlkit::lm {

/// The cache slots a query row may attend, per layer and KV head.  A view never materialises
/// a mask over the cache: attention gathers exactly these slots, in increasing order.
///   - full():        every slot of every head (autoregressive decoding, verification rows);
///   - prefix(n):     slots [0, n) of every head (e.g. the cache as it was before a step);
///   - per_head(s):   s[layer * n_kv_heads + head] = sorted slot indices (compressed views:
///                    StreamingLLM sinks + window, H2O / SnapKV / OBCache keep sets).
/// Copies are cheap (shared, immutable index lists).
class View {
 public:
  /// All slots.
  static View full() { return View(); }
  /// Slots [0, n) of every head.
  static View prefix(int n);
  /// Explicit sorted slot lists, one per (layer, KV head).  Validated against the cache when
  /// used (InputError when unsorted, duplicated or out of range).
  static View per_head(std::vector<std::vector<std::int32_t>> slots);

  /// Number of slots this view selects for (layer*n_kv + head) out of `len` cached ones.
  int count(int lh, int len) const noexcept;
  /// The i-th selected slot for (layer*n_kv + head).
  std::int32_t slot(int lh, int i) const noexcept {
    return lists_ ? (*lists_)[lh][i] : i;
  }
  /// Whether this view selects explicit per-head lists.
  bool is_per_head() const noexcept { return static_cast<bool>(lists_); }
  /// Explicit lists (null for full/prefix views).
  const std::vector<std::vector<std::int32_t>>* lists() const noexcept { return lists_.get(); }

 private:
  int limit_ = -1;
  std::shared_ptr<const std::vector<std::vector<std::int32_t>>> lists_;
};

/// Key/value cache of one sequence.  Storage per (layer, KV head): slots of K and V vectors
/// [head_dim] (K after RoPE) and the position id of each slot.  Heads may hold different slot
/// sets after per-head eviction.  A forward pass writes the new rows' K/V to a pending area;
/// commit() appends chosen pending rows, so rejected draft rows never enter the cache.
///
/// A layer may also hold a recurrent state (model contract v2: blocks whose memory is not a KV
/// cache, such as mLSTM's matrix memory): a float vector per sequence, zero at the start.  A
/// forward writes the state after each new row to the pending area, each row continuing its
/// recurrent parent's state (the last in-batch row it attends; none = the committed state), and
/// commit() takes the state after the last committed row, so the committed rows must form a
/// chain from the committed state (a prefix of a causal batch, or a root-to-node tree path).
class KvCache {
 public:
  /// An empty cache for `config` (capacity grows on demand up to n_ctx slots per head).
  /// Layers of blocks with recurrent state get it (ModelConfig::block_state_floats).
  explicit KvCache(const ModelConfig& config);
  /// A cache of `layers` layers (a forward with a block schedule of that length); recurrent
  /// states, if the schedule's blocks need them, are sized with set_state_size.
  KvCache(const ModelConfig& config, int layers);

  int n_layers() const noexcept { return n_layers_; }
  int n_kv_heads() const noexcept { return n_kv_; }
  int head_dim() const noexcept { return hd_; }
  /// Slots held by (layer, head).
  int size(int layer, int head) const noexcept { return static_cast<int>(heads_[lh(layer, head)].pos.size()); }
  /// Slots of head 0 of layer 0 (all heads agree until per-head eviction).
  int size() const noexcept { return size(0, 0); }
  /// K / V vector [head_dim] of a slot.
  const float* key(int layer, int head, int slot) const noexcept { return heads_[lh(layer, head)].k.data() + std::size_t(slot) * hd_; }
  const float* value(int layer, int head, int slot) const noexcept { return heads_[lh(layer, head)].v.data() + std::size_t(slot) * hd_; }
  /// Position id of a slot.
  std::int32_t position(int layer, int head, int slot) const noexcept { return heads_[lh(layer, head)].pos[slot]; }

  /// Appends pending rows `rows` (indices into the last forward batch), in the given order, to
  /// every (layer, head).  Throws InputError on a bad index or when n_ctx slots would be exceeded.
  /// With recurrent state: the state becomes the pending state of rows.back(), and commit()
  /// throws InputError when the rows are not a chain of recurrent parents starting at the
  /// committed state, or when this pending area was already committed (the state moved on).
  void commit(const std::vector<int>& rows);
  /// Appends every pending row in batch order.
  void commit_all();
  /// Keeps the first n slots of every head (rollback).  n larger than a head's size is a no-op
  /// for that head.  Throws InputError when it would drop slots of a cache with recurrent state
  /// (a state cannot be rolled back: commit only the accepted rows instead).
  void truncate(int n);
  /// Keeps, per (layer, head), exactly the sorted slots keep[layer*n_kv+head] (eviction by
  /// index set; gather).  Throws InputError when a list is unsorted or out of range.
  void retain(const std::vector<std::vector<std::int32_t>>& keep);
  /// Drops all slots and pending rows; recurrent states return to zero.
  void clear();
  /// Slot lists and gathers (retain) leave recurrent states alone: a state is not per slot.

  // ---- recurrent state (blocks whose memory is not a KV cache) ---------------------------
  /// Gives `layer` a recurrent state of n floats (zeros; n = 0 removes it).  Throws InputError
  /// for a layer outside the cache or n < 0.
  void set_state_size(int layer, int n);
  /// Floats of `layer`'s state (0 = none).
  int state_size(int layer) const noexcept { return state_n_[layer]; }
  /// Whether any layer holds a recurrent state.
  bool has_state() const noexcept;
  /// The committed state of `layer` [state_size(layer)].
  const float* state(int layer) const noexcept { return state_[layer].data(); }
  /// Bounds `layer`'s slots to a sliding window with sinks (mlstm-hybrid blocks, whose attention
  /// sees no further): after each commit a head keeps the slots at positions < sinks or > p -
  /// window, p the largest position it holds, so it never holds more than sinks + window slots and
  /// is exempt from the n_ctx limit.  window < 0 removes the bound.  KvCache(config) sets it for
  /// mlstm-hybrid layers.
  void set_window(int layer, int sinks, int window);
  /// The window of `layer` (-1: none) and its sinks.
  int window(int layer) const noexcept { return window_[layer]; }
  int sinks(int layer) const noexcept { return sinks_[layer]; }
  /// The state after pending row `row` of `layer` [state_size(layer)], written by forward().
  float* pending_state(int layer, int row) noexcept { return pend_state_[layer].data() + std::size_t(row) * state_n_[layer]; }
  const float* pending_state(int layer, int row) const noexcept { return pend_state_[layer].data() + std::size_t(row) * state_n_[layer]; }

  // ---- used by forward() ---------------------------------------------------------------
  /// Prepares the pending area for `rows` new rows.
  void begin_pending(int rows);
  /// Pending K / V of a new row [head_dim] for (layer, head).
  float* pending_key(int layer, int head, int row) noexcept { return pend_k_[layer].data() + (std::size_t(row) * n_kv_ + head) * hd_; }
  float* pending_value(int layer, int head, int row) noexcept { return pend_v_[layer].data() + (std::size_t(row) * n_kv_ + head) * hd_; }
  const float* pending_key(int layer, int head, int row) const noexcept { return pend_k_[layer].data() + (std::size_t(row) * n_kv_ + head) * hd_; }
  const float* pending_value(int layer, int head, int row) const noexcept { return pend_v_[layer].data() + (std::size_t(row) * n_kv_ + head) * hd_; }
  /// Records the position id of pending row `row`.
  void set_pending_position(int row, std::int32_t pos) { pend_pos_[row] = pos; }
  /// Records pending row `row`'s recurrent parent (a pending row index, −1 = the committed state).
  void set_pending_parent(int row, int parent) { pend_parent_[row] = parent; }
  /// Marks whether pending row `row`'s state was kept (every row is, after begin_pending): a
  /// block that computes only some rows' states (ForwardOptions::state_rows) unmarks the others.
  void set_pending_state_kept(int row, bool kept) { pend_kept_[row] = kept ? 1 : 0; }
  /// The recurrent parent recorded for pending row `row`.
  int pending_parent(int row) const noexcept { return pend_parent_[row]; }
  /// Rows in the pending area.
  int pending_rows() const noexcept { return static_cast<int>(pend_pos_.size()); }
  /// Layer*n_kv + head.
  int lh(int layer, int head) const noexcept { return layer * n_kv_ + head; }

 private:
  struct Head {
    std::vector<float> k, v;
    std::vector<std::int32_t> pos;
  };
  int n_layers_, n_kv_, hd_, n_ctx_;
  std::vector<Head> heads_;
  std::vector<std::vector<float>> pend_k_, pend_v_;  // per layer [rows, n_kv, hd]
  std::vector<std::int32_t> pend_pos_;
  std::vector<int> pend_parent_;
  std::vector<char> pend_kept_;                            // per pending row: its state was kept
  std::vector<int> window_, sinks_;                        // per layer: sliding window (-1 = none) and sinks
  std::vector<int> state_n_;                               // per layer: floats of state
  std::vector<std::vector<float>> state_, pend_state_;     // per layer: [n], [rows, n]
  bool pending_committed_ = false;                         // with state: this pending area was committed
};

}  // namespace icmlkit::lm
