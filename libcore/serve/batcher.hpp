// Continuous batching for a served model (lm-serve, issue 38): requests join and leave a running
// decode loop; each step is one forward pass over the rows of every active sequence (a new
// request's whole prompt, or one token per decoding sequence), each sequence on its own KV cache
// (model contract v2).  A row's logits never depend on the rest of its pass, and each request
// samples with its own seeded sampler, so every request gets exactly the tokens it would get
// alone (lm-generate with the same prompt, sampler and seed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lm/engine.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"

namespace icmlkit::serve {

/// One generation request: prompt token ids (non-empty, fewer than n_ctx, each in the
/// vocabulary), at most `max_tokens` new tokens (also stopping at the context's end), sampling.
struct GenRequest {
  std::vector<int> prompt;
  int max_tokens = 16;
  lm::SamplerConfig sampler;
  bool stop_at_eos = true;  ///< end at the model's eos token (which is not reported)
};

/// A submitted request's progress: its tokens in order, then the end with a reason.  Shared by
/// the batcher (producer) and one consumer (the HTTP handler).
class Job {
 public:
  /// Why generation ended: "eos", "max_tokens", "n_ctx", "cancelled" ("" while running).
  std::string finish_reason() const;
  /// The next token id; -1 when the job has ended (finish_reason() says why) and every token has
  /// been taken; -2 when `deadline` passes first.
  int next(std::chrono::steady_clock::time_point deadline);
  /// Asks the batcher to drop the sequence at its next step (a stop string matched, the client
  /// left, a timeout); the job then ends with "cancelled" unless it ended before.
  void cancel();
  /// Whether cancel() was called.
  bool cancelled() const;

 private:
  friend class Batcher;
  void push(int id);
  void end(const std::string& reason);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> tokens_;
  std::string reason_;
  bool cancel_ = false;
};

/// The decode loop over `slots` concurrent sequences with a queue of at most `max_queue` waiting
/// requests.  One worker thread runs the model (CPU engine); the model must outlive the batcher.
class Batcher {
 public:
  /// Starts the worker.  slots >= 1, max_queue >= 0.
  Batcher(const lm::Model& model, int slots, int max_queue);
  /// The same on `engine` (a device engine, one sequence's cache: --device cuda), one slot:
  /// requests run one after another; `model` is its host copy (config, embeddings).  Both must
  /// outlive the batcher.
  Batcher(const lm::Model& model, lm::Engine& engine, int max_queue);
  /// shutdown(), then joins the worker.
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  /// Queues `req`; null when every slot is busy and the queue is full, or after shutdown().
  /// max_tokens 0 gives a job already ended ("max_tokens").  Throws InputError for an empty
  /// prompt, an id outside the vocabulary or a prompt of n_ctx tokens or more.
  std::shared_ptr<Job> submit(GenRequest req);

  /// Mean over the positions of the final hidden state (after the output RMSNorm) of a causal
  /// pass over `ids`, L2-normalised: [d_model].  Runs between decode steps (exclusive with them).
  /// Throws InputError as submit() does for `ids`.
  std::vector<float> embed(const std::vector<int>& ids);

  /// Refuses new requests and waits until every queued and running request has ended.
  void shutdown();

  /// Counts for /health and the load test.
  struct Stats {
    int slots = 0, active = 0, queued = 0;
    std::int64_t passes = 0, rows = 0, requests = 0;
    int max_active = 0;  ///< the most sequences one pass has carried
  };
  Stats stats() const;

 private:
  struct Slot;
  void run();
  void check_ids(const std::vector<int>& ids) const;

  const lm::Model& model_;
  lm::Engine* engine_ = nullptr;     ///< set: every pass runs on it (one slot)
  const int max_queue_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;            ///< queue_, accepting_, exit_, active_, counts_
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Job>, GenRequest>> queue_;
  bool accepting_ = true;            ///< false after shutdown()
  bool exit_ = false;                ///< the worker returns once nothing is queued or running
  int active_ = 0;
  Stats counts_;
  std::mutex step_mu_;               ///< held while a forward pass runs (decode step or embed)
  std::thread worker_;
};

}  // namespace icmlkit::serve
