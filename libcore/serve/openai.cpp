#include "serve/openai.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <set>

namespace icmlkit::serve {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& message, const std::string& param) { throw ApiError{400, message, param}; }

void check_fields(const json& body, const std::set<std::string>& known) {
  if (!body.is_object()) bad("the request body must be a JSON object", "");
  for (auto it = body.begin(); it != body.end(); ++it)
    if (!known.count(it.key())) bad("unknown field '" + it.key() + "'", it.key());
}

double number(const json& body, const char* key, double lo, double hi, bool lo_open = false) {
  const json& v = body.at(key);
  if (!v.is_number()) bad(std::string(key) + " must be a number", key);
  const double x = v.get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(x <= hi))
    bad(fmt::format("{} must be in {}{:g}, {:g}], got {}", key, lo_open ? "(" : "[", lo, hi, v.dump()), key);
  return x;
}

/// A field that must be absent, null or equal to `neutral` (settings we do not implement).
void neutral(const json& body, const char* key, const json& value) {
  if (!body.contains(key) || body.at(key).is_null()) return;
  if (body.at(key) != value) bad(std::string(key) + " is not supported (only " + value.dump() + ")", key);
}

}  // namespace

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.status < 500 ? "invalid_request_error" : "server_error"},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", nullptr}}}};
}

CompletionParams parse_completion(const json& body, bool chat) {
  static const std::set<std::string> common = {"model", "max_tokens", "temperature", "top_p", "stop", "seed", "stream",
                                               "stream_options", "n", "user", "logprobs", "presence_penalty",
                                               "frequency_penalty"};
  std::set<std::string> known = common;
  if (chat) known.insert({"messages", "max_completion_tokens"});
  else known.insert({"prompt", "echo"});
  check_fields(body, known);
  CompletionParams p;
  p.sampler.temperature = 1.0;
  if (chat) {
    if (!body.contains("messages")) bad("messages is required", "messages");
    const json& m = body.at("messages");
    if (!m.is_array() || m.empty()) bad("messages must be a non-empty array", "messages");
    for (const json& msg : m) {
      if (!msg.is_object() || !msg.contains("role") || !msg.contains("content") || !msg.at("role").is_string() ||
          !msg.at("content").is_string())
        bad("each message must be an object with string role and content", "messages");
      for (auto it = msg.begin(); it != msg.end(); ++it)
        if (it.key() != "role" && it.key() != "content" && it.key() != "name")
          bad("unknown message field '" + it.key() + "'", "messages");
      const std::string role = msg.at("role");
      if (role != "system" && role != "user" && role != "assistant")
        bad("message role must be system, user or assistant, got '" + role + "'", "messages");
      p.messages.push_back({role, msg.at("content").get<std::string>()});
    }
  } else {
    if (!body.contains("prompt")) bad("prompt is required", "prompt");
    const json& pr = body.at("prompt");
    if (pr.is_string()) p.prompt = pr.get<std::string>();
    else if (pr.is_array() && pr.size() == 1 && pr[0].is_string()) p.prompt = pr[0].get<std::string>();
    else bad("prompt must be a string (or an array of one string)", "prompt");
    neutral(body, "echo", false);
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (body.contains(key) && !body.at(key).is_null()) {
      const json& v = body.at(key);
      if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > (1 << 24))
        bad(std::string(key) + " must be an integer in [0, 16777216]", key);
      p.max_tokens = static_cast<int>(v.get<long long>());
      p.max_tokens_given = true;
    }
  if (body.contains("temperature") && !body.at("temperature").is_null()) p.sampler.temperature = number(body, "temperature", 0, 2);
  if (body.contains("top_p") && !body.at("top_p").is_null()) p.sampler.top_p = number(body, "top_p", 0, 1, true);
  if (body.contains("seed") && !body.at("seed").is_null()) {
    const json& v = body.at("seed");
    if (!v.is_number_integer()) bad("seed must be an integer", "seed");
    p.sampler.seed = v.is_number_unsigned() ? v.get<std::uint64_t>() : static_cast<std::uint64_t>(v.get<std::int64_t>());
    p.seed_given = true;
  }
  if (body.contains("stop") && !body.at("stop").is_null()) {
    const json& v = body.at("stop");
    if (v.is_string()) p.stop.push_back(v.get<std::string>());
    else if (v.is_array() && v.size() <= 4 && std::all_of(v.begin(), v.end(), [](const json& s) { return s.is_string(); }))
      for (const json& s : v) p.stop.push_back(s.get<std::string>());
    else bad("stop must be a string or an array of at most 4 strings", "stop");
    if (std::any_of(p.stop.begin(), p.stop.end(), [](const std::string& s) { return s.empty(); }))
      bad("stop strings must not be empty", "stop");
  }
  if (body.contains("stream") && !body.at("stream").is_null()) {
    if (!body.at("stream").is_boolean()) bad("stream must be true or false", "stream");
    p.stream = body.at("stream").get<bool>();
  }
  if (body.contains("stream_options") && !body.at("stream_options").is_null()) {
    const json& so = body.at("stream_options");
    if (!so.is_object()) bad("stream_options must be an object", "stream_options");
    for (auto it = so.begin(); it != so.end(); ++it) {
      if (it.key() != "include_usage") bad("unknown stream_options field '" + it.key() + "'", "stream_options");
      if (!it.value().is_boolean()) bad("stream_options.include_usage must be true or false", "stream_options");
      p.include_usage = it.value().get<bool>();
    }
  }
  if (body.contains("model") && !body.at("model").is_string() && !body.at("model").is_null()) bad("model must be a string", "model");
  if (body.contains("user") && !body.at("user").is_string() && !body.at("user").is_null()) bad("user must be a string", "user");
  neutral(body, "n", 1);
  neutral(body, "logprobs", false);
  neutral(body, "presence_penalty", 0);
  neutral(body, "frequency_penalty", 0);
  return p;
}

std::vector<std::string> parse_embedding_input(const json& body, bool& base64) {
  check_fields(body, {"input", "model", "user", "encoding_format", "dimensions"});
  base64 = false;
  if (body.contains("encoding_format") && !body.at("encoding_format").is_null()) {
    const json& f = body.at("encoding_format");
    if (f != "float" && f != "base64") bad("encoding_format must be \"float\" or \"base64\"", "encoding_format");
    base64 = f == "base64";
  }
  if (body.contains("dimensions") && !body.at("dimensions").is_null()) bad("dimensions is not supported", "dimensions");
  if (!body.contains("input")) bad("input is required", "input");
  const json& in = body.at("input");
  std::vector<std::string> out;
  if (in.is_string()) out.push_back(in.get<std::string>());
  else if (in.is_array() && !in.empty() && std::all_of(in.begin(), in.end(), [](const json& s) { return s.is_string(); }))
    for (const json& s : in) out.push_back(s.get<std::string>());
  else bad("input must be a string or a non-empty array of strings", "input");
  return out;
}

std::string chat_prompt(const std::vector<ChatMessage>& messages) {
  std::string s;
  for (const ChatMessage& m : messages) s += "<|" + m.role + "|>\n" + m.content + "\n";
  return s + "<|assistant|>\n";
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopMatcher::push(const std::string& text) {
  if (stopped_) return "";
  held_ += text;
  std::size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // hold back the longest tail that is a proper prefix of some stop string
  std::size_t keep = 0;
  for (const std::string& s : stops_)
    for (std::size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::finish() {
  std::string out;
  out.swap(held_);
  return stopped_ ? "" : out;
}

std::string finish_reason(const std::string& batcher_reason, bool stopped_by_string) {
  if (stopped_by_string || batcher_reason == "eos") return "stop";
  return "length";
}

}  // namespace icmlkit::serve
