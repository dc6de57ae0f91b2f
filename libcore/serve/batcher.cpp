#include "serve/batcher.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "util/error.hpp"

namespace icmlkit::serve {

// ---- Job --------------------------------------------------------------------------------------

std::string Job::finish_reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return reason_;
}

int Job::next(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_until(lk, deadline, [&] { return !tokens_.empty() || !reason_.empty(); })) return -2;
  if (tokens_.empty()) return -1;
  const int id = tokens_.front();
  tokens_.pop_front();
  return id;
}

void Job::cancel() {
  std::lock_guard<std::mutex> lk(mu_);
  cancel_ = true;
}

bool Job::cancelled() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cancel_;
}

void Job::push(int id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    tokens_.push_back(id);
  }
  cv_.notify_all();
}

void Job::end(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (reason_.empty()) reason_ = reason;
  }
  cv_.notify_all();
}

// ---- Batcher ----------------------------------------------------------------------------------

/// One sequence's place in the decode loop: its cache stays allocated between requests.
struct Batcher::Slot {
  explicit Slot(const lm::ModelConfig& c) : cache(c), sampler(lm::SamplerConfig{}) {}
  lm::KvCache cache;
  lm::Sampler sampler;
  std::shared_ptr<Job> job;  ///< null when free
  GenRequest req;
  int n_past = 0;            ///< committed positions
  int last = -1;             ///< the token to feed next (-1: the prompt is still to prefill)
  int generated = 0;
};

Batcher::Batcher(const lm::Model& model, int slots, int max_queue) : model_(model), max_queue_(std::max(0, max_queue)) {
  for (int i = 0; i < std::max(1, slots); ++i) slots_.push_back(std::make_unique<Slot>(model.config));
  counts_.slots = static_cast<int>(slots_.size());
  worker_ = std::thread([this] { run(); });
}

Batcher::Batcher(const lm::Model& model, lm::Engine& engine, int max_queue)
    : model_(model), engine_(&engine), max_queue_(std::max(0, max_queue)) {
  slots_.push_back(std::make_unique<Slot>(model.config));
  counts_.slots = 1;
  engine.clear();
  worker_ = std::thread([this] { run(); });
}

Batcher::~Batcher() {
  shutdown();
  {
    std::lock_guard<std::mutex> lk(mu_);
    exit_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void Batcher::check_ids(const std::vector<int>& ids) const {
  const auto& c = model_.config;
  if (ids.empty()) throw InputError("the prompt is empty");
  if (static_cast<int>(ids.size()) >= c.n_ctx)
    throw InputError("the prompt has " + std::to_string(ids.size()) + " tokens; the model's context n_ctx = " +
                     std::to_string(c.n_ctx) + " leaves no room to generate");
  for (int id : ids)
    if (id < 0 || id >= c.vocab_size)
      throw InputError("token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
}

std::shared_ptr<Job> Batcher::submit(GenRequest req) {
  check_ids(req.prompt);
  req.sampler.validate();
  auto job = std::make_shared<Job>();
  if (req.max_tokens <= 0) {
    job->end("max_tokens");
    return job;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!accepting_) return nullptr;
    const int free_slots = counts_.slots - active_;
    if (static_cast<int>(queue_.size()) >= max_queue_ + std::max(0, free_slots)) return nullptr;
    queue_.emplace_back(job, std::move(req));
    ++counts_.requests;
  }
  cv_.notify_all();
  return job;
}

std::vector<float> Batcher::embed(const std::vector<int>& ids) {
  check_ids(ids);
  const auto& c = model_.config;
  lm::KvCache cache(c);
  lm::ForwardOptions opt;
  opt.hidden = true;
  opt.all_logits = false;
  opt.logits_rows = {static_cast<int>(ids.size()) - 1};
  lm::ForwardResult fr;
  {
    std::lock_guard<std::mutex> step(step_mu_);
    fr = lm::forward(model_, cache, lm::Batch::causal(ids, 0), opt);
  }
  const lm::Matrix& h = fr.hidden.back();
  std::vector<float> normed(std::size_t(h.rows) * h.cols);
  lm::rms_norm(h.data.data(), h.rows, h.cols, model_.output_norm.data(), c.rms_eps, normed.data());
  std::vector<double> mean(std::size_t(h.cols), 0.0);
  for (int r = 0; r < h.rows; ++r)
    for (int k = 0; k < h.cols; ++k) mean[std::size_t(k)] += normed[std::size_t(r) * h.cols + k];
  double norm = 0.0;
  for (double& v : mean) {
    v /= h.rows;
    norm += v * v;
  }
  norm = std::sqrt(norm);
  std::vector<float> out(mean.size());
  for (std::size_t k = 0; k < mean.size(); ++k) out[k] = static_cast<float>(norm > 0 ? mean[k] / norm : 0.0);
  return out;
}

void Batcher::shutdown() {
  std::unique_lock<std::mutex> lk(mu_);
  accepting_ = false;
  cv_.wait(lk, [&] { return queue_.empty() && active_ == 0; });
}

Batcher::Stats Batcher::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  Stats s = counts_;
  s.active = active_;
  s.queued = static_cast<int>(queue_.size());
  return s;
}

void Batcher::run() {
  const auto& c = model_.config;
  std::vector<lm::KvCache*> caches;
  for (auto& s : slots_) caches.push_back(&s->cache);
  for (;;) {
    {  // admit queued requests into free slots
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return !queue_.empty() || active_ > 0 || exit_; });
      if (queue_.empty() && active_ == 0) return;  // exit_ (the destructor, after shutdown())
      for (auto& s : slots_) {
        if (s->job || queue_.empty()) continue;
        s->job = std::move(queue_.front().first);
        s->req = std::move(queue_.front().second);
        queue_.pop_front();
        if (engine_) engine_->clear();
        else s->cache.clear();
        s->sampler = lm::Sampler(s->req.sampler);
        s->n_past = 0;
        s->last = -1;
        s->generated = 0;
        ++active_;
      }
    }
    auto release = [&](Slot& s, const std::string& reason) {
      s.job->end(reason);
      s.job.reset();
      if (engine_) engine_->clear();
      else s.cache.clear();
      std::lock_guard<std::mutex> lk(mu_);
      --active_;
      cv_.notify_all();
    };
    // One pass: a new sequence's whole prompt, or the last token of each decoding one.
    lm::Batch batch;
    lm::ForwardOptions opt;
    opt.all_logits = false;
    std::vector<Slot*> order;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = *slots_[i];
      if (!s.job) continue;
      if (s.job->cancelled()) {
        release(s, "cancelled");
        continue;
      }
      if (s.last < 0) {
        const int first = batch.append(lm::Batch::causal(s.req.prompt, 0), static_cast<int>(i));
        opt.logits_rows.push_back(first + static_cast<int>(s.req.prompt.size()) - 1);
      } else {
        opt.logits_rows.push_back(batch.add(s.last, s.n_past, 0, {}, static_cast<int>(i)));
      }
      order.push_back(&s);
    }
    if (order.empty()) continue;
    opt.state_rows = opt.logits_rows;  // recurrent blocks: each sequence commits up to its last row
    lm::ForwardResult fr;
    {
      std::lock_guard<std::mutex> step(step_mu_);
      if (engine_) {
        fr = engine_->forward(batch, opt);
        engine_->commit_all();
      } else {
        fr = lm::forward(model_, caches, batch, opt);
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++counts_.passes;
      counts_.rows += batch.size();
      counts_.max_active = std::max(counts_.max_active, static_cast<int>(order.size()));
    }
    for (std::size_t j = 0; j < order.size(); ++j) {
      Slot& s = *order[j];
      if (!engine_) s.cache.commit_all();
      s.n_past += s.last < 0 ? static_cast<int>(s.req.prompt.size()) : 1;
      const int id = s.sampler.sample(fr.logits.row(static_cast<int>(j)), c.vocab_size);
      if (id == c.eos_id && s.req.stop_at_eos) {
        release(s, "eos");
        continue;
      }
      s.job->push(id);
      s.last = id;
      ++s.generated;
      if (s.generated >= s.req.max_tokens) release(s, "max_tokens");
      else if (s.n_past + 1 >= c.n_ctx) release(s, "n_ctx");
    }
  }
}

}  // namespace icmlkit::serve
