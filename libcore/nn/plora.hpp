// LoRA fine-tuning jobs on one frozen base, trained alone (`lm-train --lora`) or packed (PLoRA,
// `plora-train`): one forward/backward over the concatenated micro-batches of every packed job
// (nn/lora.hpp), each job with its own adapter, AdamW state, schedule, clipping, data order and
// dropout stream.  A job's trajectory does not depend on what it is packed with: K packed steps
// give every job bitwise the adapter it gets alone (test_nn_lora.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "lm/lora.hpp"
#include "lm/model.hpp"
#include "nn/adamw.hpp"
#include "nn/corpus.hpp"
#include "nn/llama_train.hpp"
#include "nn/schedule.hpp"
#include "nn/trainer.hpp"

namespace icmlkit::nn {

/// One LoRA job's settings (its trajectory is a function of these, the base and its data only).
struct LoraJobOptions {
  std::string name = "job";
  lm::LoraConfig lora;
  int batch = 1;               ///< windows of seq_len tokens per micro-batch
  /// Micro-batches per optimizer step (gradient accumulation: batch x accum windows per step; the
  /// step's gradient is the micro-batches' gradients summed in order, each computed from zero).  A
  /// job with accum > 1 trains alone, never packed.
  int accum = 1;
  std::int64_t steps = 100;    ///< optimizer steps (the schedule's length)
  double lr = 1e-3, min_lr = 1e-4;
  std::int64_t warmup = 0;
  double clip = 1.0;           ///< the job's own global gradient-norm limit (0 = off)
  /// Adam settings; PEFT fine-tuning's usual ones (transformers' Trainer: beta2 0.999, no decay).
  AdamWOptions adam{0.9, 0.999, 1e-8, 0.0};
  /// Adapter init (derive_seed(seed, 0)), data order (1), dropout (2: micro-batch 0 of step s draws
  /// from derive_seed(derive_seed(seed, 2), s), micro-batch a > 0 from derive_seed(that, a)).
  std::uint64_t seed = 0;
  /// As JSON (logs, adapter provenance).
  nlohmann::json to_json() const;
};

/// What one optimizer step of one job did.
struct LoraJobStep {
  int job = 0;
  std::int64_t step = 0;     ///< the job's steps done after this one
  std::int64_t tokens = 0;   ///< its training tokens after this one
  double loss = 0;           ///< mean cross-entropy over the step's targets (nats)
  double grad_norm = 0;      ///< its adapter's global gradient norm before clipping
  double lr = 0;
  /// Its loss or gradient norm was not finite: the job was not updated (its adapter stays at the
  /// last finite state), is marked diverged and takes no further steps; the other jobs of the pack
  /// are unaffected (each update depends on its own gradients only).
  bool diverged = false;
};

/// K LoRA jobs on one frozen base (llama blocks; seq_len shared by every job).
class PackedLoraTrainer {
 public:
  /// Copies the base's weights (frozen: no gradient, no optimizer state).  Throws UsageError for a
  /// model with other than llama blocks, InputError when seq_len > n_ctx.
  PackedLoraTrainer(const lm::Model& base, int seq_len);
  /// Adds a job training on the full windows of `train` (kept by pointer: it must outlive the
  /// trainer).  Returns its index.  Its adapter and optimizer state are allocated at its first step
  /// (or first use) and freed by release(), so idle jobs hold no memory.  Throws UsageError for a
  /// bad LoRA config (lm::check_lora_config) and InputError when the stream holds fewer windows
  /// than one batch.
  int add_job(const LoraJobOptions& opt, const std::vector<int>* train);
  /// Frees job `job`'s adapter and optimizer state (after its adapter was saved); it can no longer
  /// step or be evaluated.
  void release(int job);
  /// One optimizer step of each job in `jobs` (distinct, none finished), packed into one pass in the
  /// given order.  A job whose loss or gradient norm is not finite is not updated and becomes
  /// diverged (LoraJobStep::diverged); the others step as they would alone.
  /// A job with accum > 1, or any job once set_comm() gave a communicator, steps alone (`jobs`
  /// holds one index; UsageError otherwise): its micro-batches' gradients are folded in order by a
  /// dist::ChainReducer, so the adapter's bits do not depend on the rank count.
  std::vector<LoraJobStep> step(const std::vector<int>& jobs);
  /// Data parallelism (issue 41): micro-batch a of each step runs on rank a mod N of `comm` (every
  /// rank draws the whole step's windows, so the data order stays the same everywhere); the
  /// adapter gradients and loss sums are summed over the ranks in micro-batch order.  Every rank
  /// then takes the same optimizer step.  `comm` must outlive the trainer's steps; null: this
  /// process alone.
  void set_comm(dist::Comm* comm) { comm_ = comm; }
  /// Seconds this rank spent in the gradient reduction so far (0 for packed steps).
  double reduce_seconds() const noexcept { return reducer_ ? reducer_->seconds() : 0.0; }
  /// Bytes this rank sent along the reduction's chain so far (dist::ChainReducer::bytes_sent).
  std::int64_t reduce_bytes_sent() const noexcept { return reducer_ ? reducer_->bytes_sent() : 0; }
  /// Frees the activation buffers (between groups: the next group sizes them anew).
  void trim() { cache_ = TrainCache<float>(); }
  /// Mean loss of job `job`'s adapter (no dropout) on `stream`, as nn::evaluate.
  EvalResult evaluate(int job, const std::vector<int>& stream, int batch, std::int64_t max_tokens = 0);
  /// The job's adapter for lm::write_peft_adapter (base_sha256 filled).
  lm::LoraAdapter adapter(int job);
  /// Replaces the job's adapter values (a resumed or pre-trained adapter of the same config).
  void set_adapter(int job, const lm::LoraAdapter& adapter);
  std::int64_t steps_done(int job) const { return jobs_.at(std::size_t(job))->steps; }
  const LoraJobOptions& options(int job) const { return jobs_.at(std::size_t(job))->opt; }
  int job_count() const noexcept { return static_cast<int>(jobs_.size()); }
  /// Whether job `job` has done all its steps or diverged.
  bool finished(int job) const { return steps_done(job) >= options(job).steps || diverged(job); }
  /// Whether job `job` diverged (a non-finite loss or gradient).
  bool diverged(int job) const { return jobs_.at(std::size_t(job))->diverged; }
  /// Bytes of the frozen base weights held (float32).
  std::int64_t base_bytes() const noexcept { return base_.store.numel() * std::int64_t(sizeof(float)); }
  /// Bytes of job `job`'s adapter values, gradients and AdamW moments (4 floats per adapter entry).
  std::int64_t job_state_bytes(int job) const;
  /// The job's trainable adapter (tests).
  LoraParams<float>& job_params(int job) { return ready(job).params; }
  /// The base's SHA-256 (lm::weights_sha256), computed once at construction.
  const std::string& base_sha256() const noexcept { return base_sha256_; }
  int seq_len() const noexcept { return S_; }
  const lm::ModelConfig& config() const noexcept { return base_.config; }

 private:
  struct Job {
    LoraJobOptions opt;
    LoraParams<float> params;
    std::unique_ptr<AdamW> optim;
    Windows windows;
    DataOrder order{0, 1};
    WarmupCosine schedule;
    std::int64_t steps = 0, tokens = 0;
    bool allocated = false, released = false, diverged = false;
  };
  /// The job, its adapter and optimizer allocated on first use.  Throws UsageError once released.
  Job& ready(int job);
  /// Job `j` of step() has not finished (UsageError otherwise).
  static void check_can_step(const Job& j);
  /// The step of one job alone with its micro-batches reduced in order (see step()).
  LoraJobStep step_accumulated(int job);
  /// After a step's gradient is in place: the divergence check, clipping and the AdamW update of
  /// job `j` (index `id`), whose step's mean loss is `loss`.
  LoraJobStep update(Job& j, int id, double loss);
  LlamaParams<float> base_;
  std::string base_sha256_;
  int S_;
  std::vector<std::unique_ptr<Job>> jobs_;
  TrainCache<float> cache_;
  std::vector<int> in_, tg_;
  dist::Comm* comm_ = nullptr;
  dist::SelfComm self_comm_;
  std::unique_ptr<dist::ChainReducer> reducer_;
  int reducer_accum_ = 0;
  std::vector<float> reduce_floats_;
};

/// One packing size's measured step time (plora-plan's throughput table row).
struct PackingTiming {
  int jobs = 1, rank = 8, batch = 1;
  double step_seconds = 0;       ///< median packed step time
  double min_seconds = 0, max_seconds = 0;  ///< the fastest and slowest timed step (their spread shows a busy machine)
  double tokens_per_second = 0;  ///< jobs x batch x seq_len / step_seconds
};

/// Times packed steps of k identical jobs (rank, batch, targets of `lora`) for each k in `ks` on
/// random tokens: one warm-up step, then the median of `steps` timed steps.  A profile of this
/// machine for the planner's throughput model.
std::vector<PackingTiming> profile_packing(const lm::Model& base, int seq_len, const lm::LoraConfig& lora, int batch,
                                           const std::vector<int>& ks, int steps);

}  // namespace icmlkit::nn
