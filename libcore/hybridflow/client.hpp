// A small OpenAI-compatible HTTP client (chat completions with streaming, embeddings) for
// HybridFlow's planner, executors and router (arXiv 2512.22137; reference planner/execution.py and
// router.py call the same two endpoints through the `openai` Python client).
//
// Any server that speaks the OpenAI wire format works: lm-serve, llama.cpp's server, vLLM, a hosted
// API.  http:// and https:// base URLs ("http://127.0.0.1:8080/v1"); the key, when set, is sent as
// "Authorization: Bearer <key>".  Every call has a deadline; a call never hangs past it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "util/error.hpp"

namespace icmlkit::hybridflow {

/// The endpoint cannot be reached at all (connection refused, unknown host): retrying the same
/// call will not help, and a run should stop rather than record every later call as failed.
class Unreachable : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

/// The server refused the request itself (HTTP 4xx other than 408 and 429: a prompt longer than
/// the model's context, a bad key): the same request will be refused again, so it is not retried.
class Refused : public RuntimeError {
 public:
  using RuntimeError::RuntimeError;
};

/// One OpenAI-compatible endpoint.
struct Endpoint {
  std::string base_url;   ///< scheme://host[:port][/prefix], e.g. "http://127.0.0.1:8080/v1"
  std::string model;      ///< the "model" field sent (servers that serve one model ignore it)
  std::string api_key;    ///< sent as a Bearer token when non-empty
  double timeout_s = 120; ///< the whole call's deadline (connect + every read), seconds
};

/// Parses "scheme://host[:port][/prefix]" (http or https).  Throws UsageError naming `flag`.
void check_base_url(const std::string& url, const std::string& flag);

/// Sampling settings of one chat call (the reference's executor: T 0.5, top-p 0.9, 500 tokens).
struct ChatSettings {
  double temperature = 0.5;
  double top_p = 0.9;
  int max_tokens = 500;
  std::uint64_t seed = 0;  ///< sent as "seed" (lm-serve and vLLM honour it)
  std::vector<std::string> stop;  ///< sent as "stop" when non-empty
};

/// What one chat call returned.
struct ChatResult {
  std::string text;               ///< the assistant message (stream deltas joined)
  double latency_s = 0;           ///< request sent to last byte
  double ttft_s = 0;              ///< request sent to the first content delta (= latency_s without one)
  long prompt_tokens = -1;        ///< from the server's usage, -1 when it sent none
  long completion_tokens = -1;    ///< likewise
  std::string finish_reason;      ///< "stop", "length", ... ("" when the server sent none)
};

/// Called with each content delta of a streamed chat as it arrives (the planner's incremental
/// parser).  Return false to stop reading (the call then ends with the text so far).
using DeltaHandler = std::function<bool(const std::string& delta)>;

/// POST {base}/chat/completions with messages [system (when non-empty), user], stream = true,
/// "stream_options": {"include_usage": true}, parsing the server-sent events up to "data: [DONE]".
/// Throws Unreachable when no connection can be made, Refused on HTTP 4xx other than 408/429, and
/// RuntimeError on a timeout, another HTTP status (with the server's error message), or a stream
/// that ends before [DONE] ("closed mid-stream").
ChatResult chat(const Endpoint& ep, const std::string& system, const std::string& user, const ChatSettings& settings,
                const DeltaHandler& on_delta = {});

/// POST {base}/embeddings with {"model", "input": [texts...]}; one vector per text, in order.
/// Throws RuntimeError (as chat) or when the reply is malformed or the vectors differ in length.
std::vector<std::vector<float>> embed(const Endpoint& ep, const std::vector<std::string>& texts);

}  // namespace icmlkit::hybridflow
