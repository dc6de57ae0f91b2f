// The OpenAI-compatible request and response formats lm-serve speaks (issue 38): parsing and
// validating /v1/completions, /v1/chat/completions and /v1/embeddings bodies, the chat
// template, stop strings, and the response / server-sent-event JSON.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lm/sampler.hpp"

namespace icmlkit::serve {

/// A request the server refuses: HTTP status (400, 401, 404, 413, 503, 504), a message, and the
/// offending parameter ("" when none).  Rendered by error_body().
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;
};

/// {"error": {"message", "type", "param", "code"}} as OpenAI's API returns it (type
/// "invalid_request_error" for 4xx, "server_error" otherwise).
nlohmann::json error_body(const ApiError& e);

/// One chat message.
struct ChatMessage {
  std::string role;  ///< "system", "user" or "assistant"
  std::string content;
};

/// A parsed completion or chat-completion request.
struct CompletionParams {
  std::string prompt;                  ///< /v1/completions: the prompt text
  std::vector<ChatMessage> messages;   ///< /v1/chat/completions
  int max_tokens = 16;                 ///< new tokens at most (completions default 16; chat: to n_ctx)
  bool max_tokens_given = false;
  lm::SamplerConfig sampler;           ///< temperature (default 1, as OpenAI), top_p, seed
  bool seed_given = false;
  std::vector<std::string> stop;       ///< up to 4 non-empty stop strings
  bool stream = false;
  bool include_usage = false;          ///< stream_options.include_usage
};

/// Parses a /v1/completions (`chat` false) or /v1/chat/completions body.  Throws ApiError (400)
/// for a body that is not an object, unknown fields, wrong types, values out of range (max_tokens
/// < 0, temperature outside [0, 2], top_p outside (0, 1], n other than 1, more than 4 stop
/// strings), a missing prompt / messages, or a message role other than system/user/assistant.
/// Fields OpenAI clients send that change nothing here (model, user, n = 1, logprobs null or
/// false, echo false, zero presence/frequency penalties) are accepted.
CompletionParams parse_completion(const nlohmann::json& body, bool chat);

/// Parses a /v1/embeddings body: "input" a string or a non-empty array of strings; "model",
/// "user" and "encoding_format" ("float", the default, or "base64": little-endian float32 bytes,
/// which the official Python client asks for) accepted; `base64` receives the choice.  Throws
/// ApiError (400) otherwise.
std::vector<std::string> parse_embedding_input(const nlohmann::json& body, bool& base64);

/// The chat template: each message as "<|role|>\n" + content + "\n", then "<|assistant|>\n" (the
/// text the model continues; no special tokens, so any model's tokenizer reads it).
std::string chat_prompt(const std::vector<ChatMessage>& messages);

/// Stop strings over streamed text: push() returns the text that can be sent (holding back a
/// tail that could still begin a stop string), finish() the rest; after a stop string is
/// seen, stopped() is true and the text ends before it.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  /// Adds generated text; returns what is safe to send now.
  std::string push(const std::string& text);
  /// The held-back text (none after a stop).
  std::string finish();
  bool stopped() const noexcept { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

/// OpenAI's finish_reason for a batcher reason and whether a stop string ended it: "stop"
/// (eos or a stop string) or "length" (max_tokens, n_ctx).
std::string finish_reason(const std::string& batcher_reason, bool stopped_by_string);

}  // namespace icmlkit::serve
