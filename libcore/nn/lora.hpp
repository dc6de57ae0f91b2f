// LoRA in the trainer (Hu et al. 2021; PEFT's LoraLayer): trainable low-rank adapters on a frozen
// base, and PLoRA's packing of many adapters into one pass over the base (issue 33).
//
// A packed pass runs B_total = Σ_j b_j windows: job j owns the contiguous rows [row_begin,
// row_end) of the N = B_total·S rows.  Every base projection runs once over all N rows; job j's
// adapter on that projection runs on its rows only (a segmented product: its own A [r_j, in] and
// B [out, r_j]; ranks, targets, scalings and dropout differ between jobs):
//   y[rows_j] += scaling_j · (dropout_j(x[rows_j]) A_j^T) B_j^T
// and in the backward, with g = scaling_j · dy[rows_j] and u = dropout_j(x) A_j^T kept from the
// forward:  dB_j += g^T u,  gv = g B_j,  dA_j += gv^T dropout_j(x),  dx[rows_j] += dropout_j'(gv A_j).
// Every product is nn::gemm's, whose bits per output row do not depend on the row count, and each
// job's sums run over its own rows only, so a job's adapter gradient is bitwise the one it gets
// trained alone (test_nn_lora.cpp proves it).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "lm/lora.hpp"
#include "nn/params.hpp"

namespace icmlkit::nn {

/// The projections LoRA adapts, as LlamaParams::LayerTensor values wq .. w_down (1 .. 8; index 0 is
/// attn_norm, never adapted).
inline constexpr int kLoraSlots = 9;

/// LlamaParams::LayerTensor value of a LoRA target name (q k v o gate up down), or -1.
int lora_slot(const std::string& target) noexcept;

/// One job's adapter as trainable tensors: per layer and adapted projection "blk.L.<tensor>.lora_a"
/// [r, in] and "blk.L.<tensor>.lora_b" [out, r] (no weight decay unless the job asks for it), in
/// layer order then lm::lora_target_names() order.
template <class T>
struct LoraParams {
  lm::LoraConfig config;
  T scaling = 1;                                ///< config.scaling() rounded to T
  ParamStore<T> store;
  std::vector<std::array<int, kLoraSlots>> a, b;  ///< per layer and slot: store index, or -1
  /// Whether layer l's projection `slot` is adapted.
  bool has(int l, int slot) const noexcept { return a[std::size_t(l)][std::size_t(slot)] >= 0; }
};

/// A fresh adapter for `model`'s config: A kaiming-uniform (a = sqrt 5, so U(-1/sqrt(in), 1/sqrt(in)),
/// PEFT's reset_lora_parameters), B = 0, drawn from Rng(derive_seed(seed, tensor index)).
/// `decay`: whether its tensors take weight decay.  Throws UsageError (lm::check_lora_config).
template <class T>
LoraParams<T> lora_init(const lm::ModelConfig& model, const lm::LoraConfig& config, std::uint64_t seed, bool decay);

/// The adapter from an lm::LoraAdapter (PEFT files), and back (B rows stay in our model's order).
template <class T>
LoraParams<T> lora_from_adapter(const lm::ModelConfig& model, const lm::LoraAdapter& adapter);
template <class T>
lm::LoraAdapter lora_to_adapter(const LoraParams<T>& params, const lm::ModelConfig& model);

/// The adapters of one packed forward/backward and their rows.
template <class T>
struct LoraPack {
  struct Job {
    LoraParams<T>* params = nullptr;
    int row_begin = 0, row_end = 0;    ///< rows [row_begin, row_end) of the packed batch (row_end < 0: to the last row)
    std::uint64_t dropout_key = 0;     ///< the job's dropout stream for this call (its seed, step, micro-batch)
  };
  std::vector<Job> jobs;               ///< in row order, covering the batch's rows without overlap
  bool train = true;                   ///< dropout applies (false: evaluation)
};

/// Keep-or-drop of element (row, col) of job input `x` at layer l's `slot` under `key`: a counter-
/// based draw (SplitMix64 of the five values), so a job's mask depends on its own stream and row
/// only, never on the pack.  True = kept.
bool lora_dropout_keep(std::uint64_t key, int layer, int slot, std::int64_t row, int col, double p) noexcept;

/// The adapters' part of one projection's forward: y [N, O] += each job's scaling · (xd A^T) B^T on
/// its rows, x [N, K].  Keeps u = xd A^T of every job (concatenated, job order) in `u` and, with
/// dropout, the dropped inputs xd in `xd`; `tmp` is scratch.
template <class T>
void lora_forward(const LoraPack<T>& pack, int layer, int slot, const T* x, int N, int K, int O, T* y, std::vector<T>& u,
                  std::vector<T>& xd, std::vector<T>& tmp);

/// Its backward: dx [N, K] += the adapters' input gradient on each job's rows; each job's dA, dB
/// accumulated (+=) from dy [N, O] and the forward's u / xd (x when no dropout).
template <class T>
void lora_backward(const LoraPack<T>& pack, int layer, int slot, const T* dy, const T* x, int N, int K, int O, T* dx,
                   const std::vector<T>& u, const std::vector<T>& xd, std::vector<T>& tmp);


}  // namespace icmlkit::nn
