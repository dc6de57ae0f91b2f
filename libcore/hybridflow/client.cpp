#include "hybridflow/client.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <regex>

#include "util/error.hpp"

namespace icmlkit::hybridflow {

namespace {

using Clock = std::chrono::steady_clock;

struct Url {
  std::string origin;  ///< scheme://host:port
  std::string prefix;  ///< "/v1" or ""
};

bool split_url(const std::string& url, Url& out) {
  static const std::regex re(R"(^(https?://[^/?#\s]+)(/[^?#\s]*)?$)");
  std::smatch m;
  if (!std::regex_match(url, m, re)) return false;
  out.origin = m[1].str();
  out.prefix = m[2].str();
  while (!out.prefix.empty() && out.prefix.back() == '/') out.prefix.pop_back();
  return true;
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A client for `ep` with every timeout set from the call's deadline.
std::unique_ptr<httplib::Client> make_client(const Endpoint& ep, Url& url) {
  if (!split_url(ep.base_url, url)) throw RuntimeError("not an http(s) base URL: '" + ep.base_url + "'");
  auto c = std::make_unique<httplib::Client>(url.origin);
  const auto t = std::chrono::duration<double>(ep.timeout_s);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t);
  c->set_connection_timeout(us);
  c->set_read_timeout(us);
  c->set_write_timeout(us);
  c->set_keep_alive(false);
  if (!ep.api_key.empty()) c->set_bearer_token_auth(ep.api_key);
  return c;
}

// "server said 500: <message>" from a non-200 reply (OpenAI error bodies carry error.message).
std::string status_error(const std::string& what, int status, const std::string& body) {
  std::string msg;
  try {
    const auto j = nlohmann::json::parse(body);
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("message") && j["error"]["message"].is_string())
      msg = j["error"]["message"].get<std::string>();
  } catch (const std::exception&) {
  }
  if (msg.empty()) msg = body.substr(0, 200);
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  return what + ": HTTP " + std::to_string(status) + (msg.empty() ? "" : ": " + msg);
}

// Throws the error for a failed transport: Unreachable when no connection could be made.
[[noreturn]] void throw_transport_error(const std::string& what, httplib::Error e, bool deadline) {
  if (deadline) throw RuntimeError(what + ": timed out");
  switch (e) {
    case httplib::Error::Connection: throw Unreachable(what + ": cannot connect (refused, or the host is unreachable)");
    case httplib::Error::BindIPAddress: throw Unreachable(what + ": cannot bind the local address");
    case httplib::Error::ConnectionTimeout: throw RuntimeError(what + ": connection timed out");
    case httplib::Error::Read: throw RuntimeError(what + ": connection closed or read timed out");
    case httplib::Error::Write: throw RuntimeError(what + ": connection closed while sending the request");
    case httplib::Error::SSLConnection: throw Unreachable(what + ": TLS connection failed");
    case httplib::Error::SSLServerVerification: throw Unreachable(what + ": the server's TLS certificate did not verify");
    default: throw RuntimeError(what + ": transport error " + std::to_string(static_cast<int>(e)));
  }
}

// Throws the error for an HTTP status other than 200: Refused for 4xx other than 408 and 429.
[[noreturn]] void throw_status_error(const std::string& what, int status, const std::string& body) {
  if (status >= 400 && status < 500 && status != 408 && status != 429) throw Refused(status_error(what, status, body));
  throw RuntimeError(status_error(what, status, body));
}

}  // namespace

void check_base_url(const std::string& url, const std::string& flag) {
  Url u;
  if (!split_url(url, u)) throw UsageError("must be an http:// or https:// base URL such as http://127.0.0.1:8080/v1, got '" + url + "'", flag);
}

ChatResult chat(const Endpoint& ep, const std::string& system, const std::string& user, const ChatSettings& settings,
                const DeltaHandler& on_delta) {
  Url url;
  auto client = make_client(ep, url);
  nlohmann::json messages = nlohmann::json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  messages.push_back({{"role", "user"}, {"content", user}});
  nlohmann::json body = {{"model", ep.model.empty() ? std::string("default") : ep.model},
                         {"messages", messages},
                         {"temperature", settings.temperature},
                         {"top_p", settings.top_p},
                         {"max_tokens", settings.max_tokens},
                         {"seed", settings.seed},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (!settings.stop.empty()) body["stop"] = settings.stop;

  const std::string what = "chat completion at " + ep.base_url;
  ChatResult r;
  std::string buffer;  // bytes not yet split into events
  bool done = false, stopped = false, deadline = false, got_first = false;
  std::string event_error;
  const auto t0 = Clock::now();

  // One SSE event's data line: a JSON chunk, or [DONE].
  auto handle_data = [&](const std::string& data) -> bool {
    if (data == "[DONE]") {
      done = true;
      return true;
    }
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(data);
    } catch (const std::exception&) {
      event_error = what + ": malformed stream event";
      return false;
    }
    if (j.contains("error")) {
      event_error = status_error(what, 500, data);
      return false;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      const auto& u = j["usage"];
      if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number()) r.prompt_tokens = u["prompt_tokens"].get<long>();
      if (u.contains("completion_tokens") && u["completion_tokens"].is_number())
        r.completion_tokens = u["completion_tokens"].get<long>();
    }
    if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
      const auto& c = j["choices"][0];
      if (c.contains("finish_reason") && c["finish_reason"].is_string()) r.finish_reason = c["finish_reason"].get<std::string>();
      if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") && c["delta"]["content"].is_string()) {
        const std::string d = c["delta"]["content"].get<std::string>();
        if (!d.empty()) {
          if (!got_first) {
            got_first = true;
            r.ttft_s = seconds_since(t0);
          }
          r.text += d;
          if (on_delta && !on_delta(d)) {
            stopped = true;
            return false;
          }
        }
      }
    }
    return true;
  };

  httplib::Request req;
  req.method = "POST";
  req.path = url.prefix + "/chat/completions";
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  int status = 0;
  std::string error_body;
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    if (seconds_since(t0) > ep.timeout_s) {
      deadline = true;
      return false;
    }
    if (status != 200) {
      error_body.append(data, n);
      return error_body.size() < (1u << 16);
    }
    buffer.append(data, n);
    for (;;) {
      std::size_t end = buffer.find("\n\n");
      std::size_t sep = 2;
      const std::size_t crlf = buffer.find("\r\n\r\n");
      if (crlf != std::string::npos && (end == std::string::npos || crlf < end)) end = crlf, sep = 4;
      if (end == std::string::npos) break;
      const std::string event = buffer.substr(0, end);
      buffer.erase(0, end + sep);
      std::size_t pos = 0;
      while (pos <= event.size()) {
        std::size_t nl = event.find('\n', pos);
        if (nl == std::string::npos) nl = event.size();
        std::string line = event.substr(pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        pos = nl + 1;
        if (line.rfind("data:", 0) == 0) {
          std::string data = line.substr(5);
          if (!data.empty() && data[0] == ' ') data.erase(0, 1);
          if (!handle_data(data)) return false;
        }
      }
      if (done) return true;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = client->send(req, res, err);
  r.latency_s = seconds_since(t0);
  if (!got_first) r.ttft_s = r.latency_s;
  if (stopped) return r;
  if (!event_error.empty()) throw RuntimeError(event_error);
  if (status != 0 && status != 200) throw_status_error(what, status, error_body.empty() ? res.body : error_body);
  if (deadline || r.latency_s > ep.timeout_s) throw RuntimeError(what + ": timed out after " + std::to_string(int(ep.timeout_s)) + " s");
  if (!ok && !done) throw_transport_error(what, err, false);
  if (!done) {
    // A server that answers with one JSON object instead of a stream (stream ignored).
    if (res.get_header_value("Content-Type").find("application/json") != std::string::npos) {
      try {
        const auto j = nlohmann::json::parse(res.body);
        r.text = j.at("choices").at(0).at("message").at("content").get<std::string>();
        if (j.contains("usage")) {
          r.prompt_tokens = j["usage"].value("prompt_tokens", -1L);
          r.completion_tokens = j["usage"].value("completion_tokens", -1L);
        }
        r.finish_reason = j["choices"][0].value("finish_reason", std::string());
        r.ttft_s = r.latency_s;
        return r;
      } catch (const std::exception&) {
        throw RuntimeError(what + ": malformed reply");
      }
    }
    throw RuntimeError(what + ": stream closed before [DONE] (closed mid-stream)");
  }
  return r;
}

std::vector<std::vector<float>> embed(const Endpoint& ep, const std::vector<std::string>& texts) {
  if (texts.empty()) return {};
  Url url;
  auto client = make_client(ep, url);
  const std::string what = "embeddings at " + ep.base_url;
  nlohmann::json body = {{"model", ep.model.empty() ? std::string("default") : ep.model}, {"input", texts}};
  const auto t0 = Clock::now();
  auto res = client->Post(url.prefix + "/embeddings", body.dump(), "application/json");
  if (!res) throw_transport_error(what, res.error(), seconds_since(t0) > ep.timeout_s);
  if (res->status != 200) throw_status_error(what, res->status, res->body);
  std::vector<std::vector<float>> out(texts.size());
  try {
    const auto j = nlohmann::json::parse(res->body);
    const auto& data = j.at("data");
    if (!data.is_array() || data.size() != texts.size())
      throw RuntimeError(what + ": " + std::to_string(texts.size()) + " inputs but " +
                         std::to_string(data.is_array() ? data.size() : 0) + " embeddings in the reply");
    for (std::size_t i = 0; i < data.size(); ++i) {
      const std::size_t index = data[i].contains("index") ? data[i]["index"].get<std::size_t>() : i;
      if (index >= texts.size() || !out[index].empty()) throw RuntimeError(what + ": bad or repeated index in the reply");
      const auto& e = data[i].at("embedding");
      if (!e.is_array()) throw RuntimeError(what + ": embedding is not a float array (send encoding_format float)");
      out[index] = e.get<std::vector<float>>();
      if (out[index].empty() || out[index].size() != out[0].size())
        if (index != 0 || out[index].empty()) throw RuntimeError(what + ": embeddings of different lengths in the reply");
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw RuntimeError(what + ": malformed reply");
  }
  for (const auto& v : out)
    if (v.size() != out[0].size()) throw RuntimeError(what + ": embeddings of different lengths in the reply");
  return out;
}

}  // namespace icmlkit::hybridflow
