// AdamW (Loshchilov & Hutter 2019, decoupled weight decay; the update of torch.optim.AdamW),
// the one Adam implementation of the toolkit: with weight decay 0 it is Adam (Kingma & Ba
// 2015; torch.optim.Adam).  `adamw_update` is the update; `AdamW` runs it over the parameter
// store of the LM trainer (float, checkpointed state) and `ViewAdamW` over parameter views in
// Eigen matrices (double; the CDE models).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/linear.hpp"
#include "nn/params.hpp"

namespace icmlkit::nn {

/// A named state buffer of an optimizer (saved in training checkpoints): floats, or int32 (the
/// sparse-state indices and per-entry step counts) when `ints` is set and `data` is null.
struct StateBuffer {
  std::string name;                          ///< e.g. "m/blk.0.attn_q.weight"
  std::vector<float>* data;                  ///< the optimizer's own storage
  std::vector<std::int32_t>* ints = nullptr;  ///< or its integer storage
  /// Bytes held.
  std::size_t bytes() const noexcept { return data ? data->size() * sizeof(float) : ints->size() * sizeof(std::int32_t); }
};

/// What every optimizer offers: one update from the gradients, and its state for checkpoints.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  /// Short name ("adamw").
  virtual std::string name() const = 0;
  /// Updates every parameter of `store` from its gradient with learning rate `lr`.
  virtual void step(ParamStore<float>& store, double lr) = 0;
  /// Number of steps taken (the bias-correction counter).
  virtual std::int64_t steps() const noexcept = 0;
  virtual void set_steps(std::int64_t t) noexcept = 0;
  /// State buffers, sized for the store given at construction (read and written in place).
  virtual std::vector<StateBuffer> state() = 0;
};

/// An optimizer whose only counter is the step count (every Adam variant here).
class CountedOptimizer : public Optimizer {
 public:
  std::int64_t steps() const noexcept override { return t_; }
  void set_steps(std::int64_t t) noexcept override { t_ = t; }

 protected:
  std::int64_t t_ = 0;  ///< steps taken
};

/// The checkpoint buffers of a two-moment optimizer: "m/<name>" and "v/<name>" per tensor, in order.
std::vector<StateBuffer> moment_buffers(const std::vector<std::string>& names, std::vector<std::vector<float>>& m,
                                        std::vector<std::vector<float>>& v);

/// AdamW hyperparameters (defaults: the LM trainer's; torch.optim.Adam's are beta2 0.999, wd 0).
struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;  ///< decoupled: w ← w·(1 − lr·wd); 0 gives Adam
};

/// One AdamW update of a tensor of `n` elements, at step `t` (counted from 1):
///   m ← β1 m + (1−β1) g;  v ← β2 v + (1−β2) g²;  w ← w(1 − lr·wd)  (only when `decay`);
///   w ← w − (lr / (1−β1^t)) · m / (sqrt(v) / sqrt(1−β2^t) + eps)   (torch.optim.AdamW).
/// T is float or double; the step coefficients are rounded to T once.  Elementwise, so the
/// result does not depend on the thread count (large tensors use OpenMP).
template <class T>
void adamw_update(T* w, const T* g, T* m, T* v, std::size_t n, std::int64_t t, double lr, const AdamWOptions& opt,
                  bool decay);

/// AdamW over the parameter store (float), weight decay only on Param::decay tensors; its
/// moments are checkpoint state.
///
/// Sparse-training hooks (what SMET and the dynamic-sparse baselines need, issue 30): a tensor can
/// hold state for its active entries only (set_active: m, v and a step count per active entry,
/// flat indices kept sorted); its gradient then holds those entries only, aligned (grad[k] is the
/// gradient of entry active[k]), and step() updates only them, leaving the rest as they are.  A
/// subset of entries can be reset to m = v = 0 (reset_entries); each entry's bias correction can
/// follow its own step count instead of the optimizer's (per_entry_steps: SMET's local steps; off =
/// one global Adam step count, as SET); a tensor can take a multiple of the learning rate
/// (set_lr_scale: SMET's lr0 / d); and the first moment can be warmed up over W steps
/// (set_momentum_warmup, SMET's op_decay_steps).
/// The checkpoint state of a sparse tensor is "idx/", "t/" (int32; "t/" with per-entry steps only)
/// and "m/", "v/" (active-sized);
/// to load it, a caller first sets the same active lists (the masks it saves itself).
class AdamW final : public CountedOptimizer {
 public:
  /// State (m, v) zero-initialised with the shapes of `store`.
  AdamW(const ParamStore<float>& store, AdamWOptions opt);
  std::string name() const override { return "adamw"; }
  void step(ParamStore<float>& store, double lr) override;
  std::vector<StateBuffer> state() override;

  /// Holds tensor `param`'s state for the entries `active` only (strictly increasing flat indices
  /// in [0, numel)): an entry active before keeps its m, v and step count, a new one starts at
  /// m = v = 0 and step `new_step` (0: its first update uses t = 1), the others' state is dropped.
  /// Throws UsageError for a bad list.
  void set_active(int param, const std::vector<std::int32_t>& active, std::int32_t new_step = 0);
  /// Back to dense state for `param` (every entry's m and v kept where active, else 0).
  void set_dense(int param);
  /// Zeroes m, v and sets the step count of `entries` (flat indices, each active; UsageError
  /// otherwise) to `step`.
  void reset_entries(int param, const std::vector<std::int32_t>& entries, std::int32_t step = 0);
  /// Whether sparse entries take the bias correction of their own step count (default false: the
  /// optimizer's step count, as dense entries always do).  Only then are the counts stored (an
  /// int32 per active entry, starting from the optimizer's count when switched on).
  void set_per_entry_steps(bool on);
  /// Multiplies tensor `param`'s learning rate by `scale` (> 0; default 1).
  void set_lr_scale(int param, double scale);
  /// SMET's momentum warm-up over `W` steps (0 = off), t the step of an entry's bias correction
  /// (its own with per_entry_steps): the paper's form (code_form false) scales each sparse entry's
  /// update by min(t / W, 1) without touching the stored m; the reference's (Adam_block with
  /// decay_steps = W) multiplies the stored m by min(t / W, 1) after the moment update, so the
  /// factor compounds over the first W steps, and does so on dense tensors too (t the global step).
  void set_momentum_warmup(int W, bool code_form) noexcept {
    warmup_ = W;
    warmup_code_ = code_form;
  }
  /// The active entries of `param` (empty: dense) and their step counts (aligned; empty without
  /// per-entry steps).
  const std::vector<std::int32_t>& active(int param) const { return idx_[param]; }
  const std::vector<std::int32_t>& entry_steps(int param) const { return tloc_[param]; }
  /// Whether `param` holds sparse state.
  bool is_sparse(int param) const { return sparse_[param] != 0; }

 private:
  void sparse_step(Param<float>& p, std::size_t i, double lr);
  void dense_warmup_step(Param<float>& p, std::size_t i, double lr);
  AdamWOptions opt_;
  std::vector<std::string> names_;
  std::vector<std::vector<float>> m_, v_;
  std::vector<char> sparse_;
  std::vector<std::vector<std::int32_t>> idx_, tloc_;
  std::vector<std::size_t> dense_size_;  // numel of each tensor made sparse
  std::vector<double> lr_scale_;
  std::vector<float> inv_bc1_, sqrt_bc2_;  // 1 / (1 - b1^t) and sqrt(1 - b2^t) for t = 0 .. t_
  bool per_entry_steps_ = false;
  int warmup_ = 0;
  bool warmup_code_ = false;
};

/// AdamW over parameter views (double) whose storage lives elsewhere (Eigen matrices of the
/// CDE models); weight decay, when > 0, applies to every view.
class ViewAdamW {
 public:
  /// `params`: the views to update (their storage must outlive the optimizer); moments start at 0.
  ViewAdamW(std::vector<ParamRef> params, double lr, AdamWOptions opt);
  /// One update from the gradients currently stored in the views.
  void step();
  /// Steps taken so far.
  std::int64_t steps() const noexcept { return t_; }
  double lr;  ///< learning rate (may be changed between steps)

 private:
  std::vector<ParamRef> params_;
  AdamWOptions opt_;
  std::int64_t t_ = 0;
  std::vector<std::vector<double>> m_, v_;
};

}  // namespace icmlkit::nn
