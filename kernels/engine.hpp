// The CUDA engine: the model contract's forward pass (lm/README.md) on one NVIDIA GPU.
//
// Weights are uploaded once and stay on the device in the precision the model is stored in
// (bf16 / f16 when every weight is exactly representable, else f32); the KV cache
// [n_layers, n_kv_heads, n_ctx, head_dim] and the pending rows of the last batch live there
// too.  Matrix products are cuBLAS GEMMs (cublasGemmEx, f32 accumulation, CUBLAS_COMPUTE_32F,
// no TF32).  With 16-bit weights each activation x enters the GEMM as two 16-bit terms,
// hi = narrow(x) and lo = narrow(x - hi) (lm/device_math.hpp dm::split2), so the product keeps
// ~16 (bf16) or ~22 (f16) significant bits of x and the weights are still read once.  f16 has
// a range of only 65504, so with f16 weights each GEMM input row is first scaled by a power of
// two into [2^14, 2^15) (dm::f16_row_scale, written by the kernel that produces the row) and the
// output row divided by it again (GemmLayout::scale): exact, and finite for any finite row.  RMSNorm,
// RoPE, attention over gathered views with intra-batch masks (online softmax), SwiGLU, the
// residual adds and K/V commit are own kernels built on lm/device_math.hpp.  Each residual
// add is done by the next RMSNorm's kernel, and a greedy forward takes the argmax of the LM
// head's output without forming logits: a decode step is 10 launches per layer (graph_nodes).
//
// Agreement with the CPU engine: not bitwise (different summation orders; a bf16 split of
// the activations).  Stated tolerance, checked by test/unit/gpu/test_engine_cuda.cpp on a GPU
// and, in every build, on the CPU through the CUDA emulator (test/cuda_emu):
// logits within 2e-3 * (1 + max |logit|) of the CPU's for f32 and f16 models, 2e-2 for bf16;
// greedy tokens equal wherever the CPU's top-2 logit margin exceeds that tolerance.
//
// Batch invariance on the GPU (batch_invariant = true, the default): every GEMM runs in
// chunks of exactly invariant_rows() rows (padded; kInvariantRows = 32 by default), so cuBLAS sees one shape per matrix
// whatever the batch size, and picks the same algorithm each time; norms, RoPE, attention
// (blocks of 128 keys, 4 warps x 32 keys, merged in a fixed order) and SwiGLU are per row.  A row's K/V
// and logits are then bitwise independent of the other rows in the batch, provided the
// selected GEMM computes each output column independently of the column's position in the
// tile — true of cuBLAS's non-split-K kernels, and tested on the device (a row alone vs the
// same row at positions 0..k-1 of a batch).  batch_invariant = false runs one GEMM of the
// batch's own size (faster for small batches on some GPUs; results may then change in the
// last bits with the batch size).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lm/device_math.hpp"
#include "lm/engine.hpp"

namespace icmlkit::kernels {

/// Rows per GEMM chunk in batch-invariant mode, by default (CudaEngine::set_invariant_rows,
/// ICMLKIT_CUDA_INVARIANT_ROWS).  A chunk of P rows is 2P GEMM columns with 16-bit weights even
/// at batch 1: per decode step 4P flops per weight against 2 bytes read, so the tensor-core time
/// is about 2P B / F of the memory time (B bandwidth, F bf16 flop/s): on an H200 (~4.3 TB/s
/// measured copy, ~700 Tflop/s in practice) 0.39 at P = 32 but 0.79 at P = 64, too close to 1
/// for a bandwidth-bound decode.  32 rows also hold a FAFO verification batch (window 5, 4-grams,
/// 5 guesses: at most 30 rows) in one chunk.  Not yet measured: bench-gpu-engine times 16, 32
/// and 64 side by side.
constexpr int kInvariantRows = 32;

/// Device weight precision choice: automatic (from how the model is stored) or forced.
enum class WeightPrecision { automatic, f32, f16, bf16 };

/// The CUDA implementation of lm::Engine.
class CudaEngine final : public lm::Engine {
 public:
  /// Uploads `model` (copied; the host model may be freed).  `weights`: automatic = bf16 / f16
  /// when the model is stored so (or held as f16) and exactly representable, else f32; forcing
  /// f16 / bf16 rounds to nearest even.  Throws InputError "--device cuda: no usable CUDA GPU or
  /// driver found (...)" without a GPU, RuntimeError on a CUDA / cuBLAS failure (out of memory
  /// included), InputError for head_dim > 256.
  CudaEngine(const lm::Model& model, bool batch_invariant = true, WeightPrecision weights = WeightPrecision::automatic);
  /// A model of `config` with N(0, std^2) weights in `weights` precision (not automatic) generated
  /// directly on the device from `seed` (norm weights 1): no host copy, for benchmarks of
  /// models larger than host files should be.  Not the same values as lm::random_model.
  CudaEngine(const lm::ModelConfig& config, std::uint64_t seed, WeightPrecision weights, double std,
             bool batch_invariant = true);
  ~CudaEngine() override;
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  const lm::ModelConfig& config() const noexcept override;
  std::string device() const override;
  /// lm::forward semantics.  Supported options: logits_rows / all_logits, hidden, skip_attn,
  /// skip_mlp, greedy_only (the argmax on the device: `logits` stays empty, `greedy` holds one
  /// id per logits row, lowest id on ties by dm::greedy_better).  attn_rows (attention records) throws UsageError; time_attention is ignored
  /// (attn_cpu_s stays empty).  InputError for the batches lm::forward refuses.
  lm::ForwardResult forward(const lm::Batch& batch, const lm::ForwardOptions& options = {}) override;
  /// forward() with options.greedy_only set: only the greedy token of each logits row comes
  /// back, no [rows, vocab] copy reaches the host.  Same errors as forward().
  std::vector<int> forward_greedy(const lm::Batch& batch, const lm::ForwardOptions& options = {});
  /// lm::Engine::commit: one kernel launch.  Up to 64 rows travel in the launch's parameters
  /// (no host-to-device copy); longer lists are copied to the device first; commit_all needs
  /// no list.  InputError for a row outside the last batch or a full cache.
  void commit(const std::vector<int>& rows) override;
  void commit_all() override;
  void truncate(int n) override;
  void clear() override;
  int size() const override;

  /// Whether GEMMs run in fixed-size chunks of invariant_rows() rows (see the file comment).
  bool batch_invariant() const noexcept;
  void set_batch_invariant(bool on) noexcept;
  /// Rows per GEMM chunk in batch-invariant mode: kInvariantRows unless the environment sets
  /// ICMLKIT_CUDA_INVARIANT_ROWS (read by the constructors) or this setter changes it.  Each
  /// GEMM then multiplies ceil(R / rows) chunks of `rows` rows (x2 columns with 16-bit
  /// weights): fewer rows waste less arithmetic at batch 1, more run a large verification batch
  /// in one GEMM.  Rows are bitwise batch-invariant for one chunk size, not across sizes.
  /// Drops captured graphs.  Throws UsageError outside [1, 1024] (the constructors: for a bad
  /// ICMLKIT_CUDA_INVARIANT_ROWS).
  void set_invariant_rows(int rows);
  int invariant_rows() const noexcept;
  /// Precision of the device weight matrices.
  lm::dm::WType weight_type() const noexcept;
  /// Bytes of weight matrices one forward pass reads (all matrices and the LM head; the
  /// embedding counts only when it is also the head).
  std::int64_t bytes_per_forward() const noexcept;
  /// Waits for the device.
  void synchronize() const;
  /// CUDA graphs: a forward shape seen three times (AR decoding's one row) is captured once and
  /// replayed with a single launch; results are those of the eager launches.  A graphable batch
  /// of at most 64 rows is padded (1..4 rows as they are, then 8, 16, 24, ...; padding rows
  /// change no real row in the batch-invariant mode; in the plain mode they change the GEMM
  /// shape, so bits may differ from a run with graphs off) and its metadata laid out at fixed
  /// offsets, so FAFO's verification batches of varying size and masks share a few graphs.  At most 64 graphs are kept.  On by
  /// default; off with ICMLKIT_CUDA_GRAPHS=0, after a failed capture (one warning line), or here.
  void set_graphs(bool on) noexcept;
  bool graphs() const noexcept;
  /// Nodes of the most recently captured CUDA graph (0 before any capture): the launches of one
  /// forward, cuBLAS's own included.  With ForwardOptions::greedy_only, a decode step has
  /// 1 + 10 n_layers + 3 of our kernels (embedding; per layer two norms, RoPE, attention and its
  /// merge, SwiGLU, four GEMMs of at most invariant_rows() rows; output norm, LM head, argmax), f16 weights
  /// one more per layer (the scaled attention output).
  int graph_nodes() const noexcept;
  /// Counts since construction: forward calls, those replayed from a CUDA graph, graphs
  /// captured, and times every cached graph was dropped (a buffer moved, or settings changed).
  struct Stats {
    long long forwards = 0, graph_replays = 0, graph_captures = 0, graph_drops = 0;
    /// Host nanoseconds inside forward() before its work is enqueued or replayed: the batch
    /// checks, metadata and RoPE tables, staging and the graph lookup (graph captures excluded).
    /// On a GPU this is time the device may sit idle between decode steps.
    long long host_prep_ns = 0;
  };
  Stats stats() const noexcept;
  /// stats() as named counters (lm::Engine::counters).
  std::vector<std::pair<std::string, long long>> counters() const override;
  /// {"weights": "f32" | "f16" | "bf16", "batch_invariant": bool, "invariant_rows": int,
  /// "cuda_graphs": bool}.
  nlohmann::json settings() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

/// The CUDA engine as an lm::Engine (lm::open_engine's CUDA branch).
std::unique_ptr<lm::Engine> make_cuda_engine(const lm::Model& model, bool batch_invariant, const std::string& weights = "auto");

/// Device-to-device copy bandwidth in bytes/s: the best of `reps` cudaMemcpy of `bytes` (read +
/// write counted, 2 * bytes per copy).  Throws RuntimeError on a CUDA failure.
double measure_copy_bandwidth(std::size_t bytes, int reps);

}  // namespace icmlkit::kernels
