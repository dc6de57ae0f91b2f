#include "nn/plora.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "lm/blocks.hpp"
#include "lm/support.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::nn {
namespace {

/// Attaches a pack of adapters to the base for one training pass; detaches it and clears the
/// per-row loss scales on every way out.
struct PackAttached {
  LlamaParams<float>& base;
  TrainCache<float>& cache;
  PackAttached(LlamaParams<float>& b, TrainCache<float>& c, LoraPack<float>& pack) : base(b), cache(c) { base.lora = &pack; }
  ~PackAttached() {
    base.lora = nullptr;
    cache.row_scale.clear();
  }
  PackAttached(const PackAttached&) = delete;
  PackAttached& operator=(const PackAttached&) = delete;
};

}  // namespace

nlohmann::json LoraJobOptions::to_json() const {
  nlohmann::json j{{"name", name},
          {"rank", lora.rank},
          {"alpha", lora.alpha},
          {"rslora", lora.rslora},
          {"dropout", lora.dropout},
          {"targets", lora.targets},
          {"batch", batch},
          {"steps", steps},
          {"lr", lr},
          {"min_lr", min_lr},
          {"warmup", warmup},
          {"clip", clip},
          {"beta1", adam.beta1},
          {"beta2", adam.beta2},
          {"eps", adam.eps},
          {"weight_decay", adam.weight_decay},
          {"seed", seed}};
  if (accum != 1) j["accum"] = accum;  // absent: 1 (the records written before issue 41)
  return j;
}

PackedLoraTrainer::PackedLoraTrainer(const lm::Model& base, int seq_len)
    : base_(params_from_model<float>(base, true)), base_sha256_(lm::weights_sha256(base)), S_(seq_len) {
  const lm::ModelConfig& c = base.config;
  for (int l = 0; l < c.n_layers; ++l)
    if (c.block_type(l) != lm::BlockType::llama)
      throw UsageError(fmt::format("LoRA training needs llama blocks; block {} is {}", l, lm::block_type_name(c.block_type(l))));
  if (seq_len < 1 || seq_len > c.n_ctx)
    throw InputError(fmt::format("sequence length {} outside [1, n_ctx = {}]", seq_len, c.n_ctx));
}

int PackedLoraTrainer::add_job(const LoraJobOptions& opt, const std::vector<int>* train) {
  lm::check_lora_config(opt.lora, base_.config);
  auto job = std::make_unique<Job>();
  job->opt = opt;
  job->windows = Windows{train, S_};
  if (opt.accum < 1) throw UsageError(fmt::format("job {}: accum {} < 1", opt.name, opt.accum));
  if (job->windows.count() < opt.batch)
    throw InputError(fmt::format("job {}: its training text holds {} windows of {} tokens, fewer than one batch of {}",
                                 opt.name, job->windows.count(), S_, opt.batch));
  job->order = DataOrder(derive_seed(opt.seed, 1), job->windows.count());
  job->schedule = WarmupCosine{opt.lr, opt.min_lr, opt.warmup, opt.steps};
  jobs_.push_back(std::move(job));
  return static_cast<int>(jobs_.size()) - 1;
}

PackedLoraTrainer::Job& PackedLoraTrainer::ready(int id) {
  Job& j = *jobs_.at(std::size_t(id));
  if (j.released) throw UsageError(fmt::format("job {} was released", j.opt.name));
  if (!j.allocated) {
    j.params = lora_init<float>(base_.config, j.opt.lora, derive_seed(j.opt.seed, 0), j.opt.adam.weight_decay > 0);
    j.optim = std::make_unique<AdamW>(j.params.store, j.opt.adam);
    j.allocated = true;
  }
  return j;
}

void PackedLoraTrainer::release(int id) {
  Job& j = *jobs_.at(std::size_t(id));
  j.params = LoraParams<float>();
  j.optim.reset();
  j.allocated = false;
  j.released = true;
}

std::int64_t PackedLoraTrainer::job_state_bytes(int job) const {
  const lm::LoraConfig& lc = jobs_.at(std::size_t(job))->opt.lora;
  return lm::lora_param_count(base_.config, lc.rank, lc.targets) * 4 * std::int64_t(sizeof(float));
}

void PackedLoraTrainer::check_can_step(const Job& j) {
  if (j.steps >= j.opt.steps || j.diverged)
    throw UsageError(fmt::format("job {} has {}", j.opt.name, j.diverged ? "diverged" : fmt::format("done its {} steps", j.opt.steps)));
}

LoraJobStep PackedLoraTrainer::update(Job& j, int id, double loss) {
  LoraJobStep out;
  out.job = id;
  out.loss = loss;
  out.grad_norm = j.params.store.grad_norm();
  out.diverged = !std::isfinite(out.loss) || !std::isfinite(out.grad_norm);
  if (out.diverged) {  // not updated: its adapter stays at the last finite state
    j.diverged = true;
    out.step = j.steps;
    out.tokens = j.tokens;
    return out;
  }
  j.params.store.clip_grad_norm(j.opt.clip);
  out.lr = j.schedule(j.steps);
  j.optim->step(j.params.store, out.lr);
  ++j.steps;
  j.tokens += std::int64_t(j.opt.batch) * j.opt.accum * S_;
  out.step = j.steps;
  out.tokens = j.tokens;
  return out;
}

LoraJobStep PackedLoraTrainer::step_accumulated(int id) {
  Job& j = ready(id);
  check_can_step(j);
  const int A = j.opt.accum, rows = j.opt.batch * S_;
  if (!reducer_ || reducer_accum_ != A) {
    reducer_ = std::make_unique<dist::ChainReducer>(comm_ ? *comm_ : static_cast<dist::Comm&>(self_comm_), A);
    reducer_accum_ = A;
  }
  // Every rank draws the step's A x batch windows (the data order advances alike everywhere) and
  // counts their targets: each micro-batch's loss is scaled by the step's whole target count.
  std::vector<std::vector<int>> in(static_cast<std::size_t>(A)), tg(static_cast<std::size_t>(A));
  std::int64_t targets = 0;
  for (int a = 0; a < A; ++a) {
    for (int b = 0; b < j.opt.batch; ++b) j.windows.get(j.order.next(), in[std::size_t(a)], tg[std::size_t(a)]);
    for (int t : tg[std::size_t(a)]) targets += t >= 0;
  }
  const double scale = targets > 0 ? 1.0 / double(targets) : 0.0;
  std::size_t n_float = 0;
  for (const auto& p : j.params.store.params) n_float += p.grad.size();
  reduce_floats_.resize(n_float);
  double loss_sum = 0;
  const dist::Sums sums{std::span<float>(reduce_floats_), std::span<double>(&loss_sum, 1)};
  const std::uint64_t dropout_seed = derive_seed(derive_seed(j.opt.seed, 2), std::uint64_t(j.steps));
  LoraPack<float> pack;
  const PackAttached attached(base_, cache_, pack);
  for (const int a : reducer_->mine()) {
    j.params.store.zero_grad();
    pack.jobs.assign(1, {&j.params, 0, rows, a == 0 ? dropout_seed : derive_seed(dropout_seed, std::uint64_t(a))});
    cache_.row_scale.assign(std::size_t(rows), scale);
    llama_loss(base_, in[std::size_t(a)], tg[std::size_t(a)], j.opt.batch, S_, 1.0, cache_);
    loss_sum = 0;
    for (int r = 0; r < rows; ++r) loss_sum += cache_.row_loss[std::size_t(r)];
    float* f = reduce_floats_.data();
    for (const auto& p : j.params.store.params) f = std::copy(p.grad.begin(), p.grad.end(), f);
    reducer_->add(a, sums);
  }
  reducer_->finish(sums);
  const float* f = reduce_floats_.data();
  for (auto& p : j.params.store.params) {
    std::copy(f, f + p.grad.size(), p.grad.begin());
    f += p.grad.size();
  }
  return update(j, id, targets > 0 ? loss_sum / double(targets) : 0.0);
}

std::vector<LoraJobStep> PackedLoraTrainer::step(const std::vector<int>& ids) {
  if (ids.empty()) return {};
  bool alone = comm_ != nullptr;
  for (int id : ids) alone = alone || jobs_.at(std::size_t(id))->opt.accum > 1;
  if (alone) {
    if (ids.size() != 1)
      throw UsageError("a job with gradient accumulation or over several ranks steps alone: pack it with no other job");
    return {step_accumulated(ids[0])};
  }
  LoraPack<float> pack;
  in_.clear();
  tg_.clear();
  cache_.row_scale.clear();
  std::vector<std::int64_t> targets(ids.size(), 0);
  for (std::size_t k = 0; k < ids.size(); ++k) {
    Job& j = ready(ids[k]);
    check_can_step(j);
    for (std::size_t q = 0; q < k; ++q)
      if (ids[q] == ids[k]) throw UsageError(fmt::format("job {} packed twice in one step", j.opt.name));
    const int r0 = static_cast<int>(in_.size());
    for (int b = 0; b < j.opt.batch; ++b) j.windows.get(j.order.next(), in_, tg_);
    const int r1 = static_cast<int>(in_.size());
    for (int r = r0; r < r1; ++r) targets[k] += tg_[std::size_t(r)] >= 0;
    const double scale = targets[k] > 0 ? 1.0 / double(targets[k]) : 0.0;
    cache_.row_scale.resize(std::size_t(r1), scale);
    // the dropout stream of this (job, step): independent of the pack
    pack.jobs.push_back({&j.params, r0, r1, derive_seed(derive_seed(j.opt.seed, 2), std::uint64_t(j.steps))});
    j.params.store.zero_grad();
  }
  const int B = static_cast<int>(in_.size()) / S_;
  const PackAttached attached(base_, cache_, pack);
  llama_loss(base_, in_, tg_, B, S_, 1.0, cache_);
  std::vector<LoraJobStep> out(ids.size());
  for (std::size_t k = 0; k < ids.size(); ++k) {  // each job's update depends on its own gradients only
    const auto& pj = pack.jobs[k];
    double sum = 0;
    for (int r = pj.row_begin; r < pj.row_end; ++r) sum += cache_.row_loss[std::size_t(r)];
    out[k] = update(*jobs_[std::size_t(ids[k])], ids[k], targets[k] > 0 ? sum / double(targets[k]) : 0.0);
  }
  return out;
}

EvalResult PackedLoraTrainer::evaluate(int job, const std::vector<int>& stream, int batch, std::int64_t max_tokens) {
  LoraPack<float> pack;
  pack.train = false;
  pack.jobs.push_back({&ready(job).params, 0, -1, 0});
  base_.lora = &pack;
  struct Detach {
    LlamaParams<float>& p;
    ~Detach() { p.lora = nullptr; }
  } detach{base_};
  return nn::evaluate(base_, stream, S_, batch, max_tokens, {}, &cache_);  // the training buffers: no second set
}

lm::LoraAdapter PackedLoraTrainer::adapter(int job) {
  lm::LoraAdapter a = lora_to_adapter(ready(job).params, base_.config);
  a.base_sha256 = base_sha256_;
  return a;
}

void PackedLoraTrainer::set_adapter(int job, const lm::LoraAdapter& adapter) {
  Job& j = ready(job);
  LoraParams<float> p = lora_from_adapter<float>(base_.config, adapter);
  if (p.store.params.size() != j.params.store.params.size())
    throw InputError(fmt::format("job {}: the adapter's targets differ from the job's", j.opt.name));
  for (std::size_t i = 0; i < p.store.params.size(); ++i) {
    if (p.store.params[i].shape != j.params.store.params[i].shape)
      throw InputError(fmt::format("job {}: adapter tensor {} has another shape", j.opt.name, p.store.params[i].name));
    j.params.store.params[i].value = p.store.params[i].value;
  }
}

std::vector<PackingTiming> profile_packing(const lm::Model& base, int seq_len, const lm::LoraConfig& lora, int batch,
                                           const std::vector<int>& ks, int steps) {
  // random tokens: enough windows for every job's timed steps
  Rng rng(derive_seed(default_seed, 33));
  std::vector<int> stream(std::size_t(seq_len) * std::size_t(batch) * std::size_t(steps + 2) + 1);
  for (int& t : stream) t = static_cast<int>(rng.below(std::uint64_t(base.config.vocab_size)));
  std::vector<PackingTiming> out;
  for (int k : ks) {
    PackedLoraTrainer trainer(base, seq_len);
    LoraJobOptions opt;
    opt.lora = lora;
    opt.batch = batch;
    opt.steps = steps + 1;
    std::vector<int> ids;
    for (int i = 0; i < k; ++i) {
      opt.name = fmt::format("p{}", i);
      opt.seed = std::uint64_t(i);
      ids.push_back(trainer.add_job(opt, &stream));
    }
    trainer.step(ids);  // warm-up: buffers sized
    std::vector<double> t;
    for (int s = 0; s < steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      trainer.step(ids);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    PackingTiming p;
    p.jobs = k;
    p.rank = lora.rank;
    p.batch = batch;
    p.step_seconds = t.empty() ? 0.0 : t[t.size() / 2];
    p.min_seconds = t.empty() ? 0.0 : t.front();
    p.max_seconds = t.empty() ? 0.0 : t.back();
    p.tokens_per_second = p.step_seconds > 0 ? double(k) * batch * seq_len / p.step_seconds : 0.0;
    out.push_back(p);
  }
  return out;
}


}  // namespace icmlkit::nn
