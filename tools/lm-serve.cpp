// lm-serve: an OpenAI-compatible HTTP server for any model the toolkit reads (issue 38), with
// continuous batching on the CPU engine (serve/batcher.hpp) and server-sent-event streaming.
#include <fmt/core.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "lm/engine.hpp"
#include "lm/model_io.hpp"
#include "lm/prompt.hpp"
#include "lm/text_stream.hpp"
#include "lm/tokenizer.hpp"
#include "serve/batcher.hpp"
#include "serve/openai.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/threads.hpp"

using namespace icmlkit;
using nlohmann::json;

namespace {

/// What one served model needs in every handler.
struct Served {
  const lm::Model* model = nullptr;
  const lm::Tokenizer* tok = nullptr;
  serve::Batcher* batcher = nullptr;
  std::string name, model_path, api_key;
  double timeout_s = 600;
  std::uint64_t seed = 0;
  std::atomic<std::uint64_t> counter{0};
  std::time_t started = 0;
  /// Generation and embedding requests being answered (a stream until its last event is sent),
  /// and whether a signal asked to stop: new ones then get 503 while these finish.
  std::atomic<int> inflight{0};
  std::atomic<bool> draining{false};
};

/// Counts a request in flight for the graceful shutdown; a stream hands its count to the
/// response's releaser (release()), otherwise the count ends with the handler.
class Inflight {
 public:
  explicit Inflight(Served& s) : s_(s) {
    ++s_.inflight;
    if (s_.draining) {
      --s_.inflight;
      throw serve::ApiError{503, "the server is shutting down", ""};
    }
  }
  ~Inflight() {
    if (held_) --s_.inflight;
  }
  /// The count, for a releaser to end (call it exactly once).
  std::function<void()> release() {
    held_ = false;
    Served* s = &s_;
    return [s] { --s->inflight; };
  }

 private:
  Served& s_;
  bool held_ = true;
};

json parse_body(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // syntax, invalid UTF-8, a number out of range
    throw serve::ApiError{400, std::string("malformed JSON: ") + e.what(), ""};
  }
}

void check_key(const Served& s, const httplib::Request& req) {
  if (s.api_key.empty()) return;
  const std::string auth = req.get_header_value("Authorization");
  const bool bearer = auth.size() > 7 && (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0);
  if (!bearer || auth.substr(7) != s.api_key)
    throw serve::ApiError{401, "a valid API key is needed (Authorization: Bearer KEY)", ""};
}

/// JSON text; bytes that are not UTF-8 (quoted from a bad request) become U+FFFD.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_error(httplib::Response& res, const serve::ApiError& e) {
  res.status = e.status;
  res.set_content(dump(serve::error_body(e)), "application/json");
}

/// Runs `fn`, turning ApiError and the toolkit's input errors into JSON error responses.
template <class F>
void guarded(httplib::Response& res, F&& fn) {
  try {
    fn();
  } catch (const serve::ApiError& e) {
    send_error(res, e);
  } catch (const InputError& e) {
    send_error(res, {400, e.what(), ""});
  } catch (const UsageError& e) {
    send_error(res, {400, e.what(), ""});
  } catch (const std::exception& e) {
    send_error(res, {500, std::string("internal error: ") + e.what(), ""});
  }
}

/// The prompt of a completion request as token ids, checked against the context.
std::vector<int> prompt_ids(const Served& s, const std::string& text, const char* param) {
  if (text.empty()) throw serve::ApiError{400, std::string(param) + " is empty", param};
  std::vector<int> ids = lm::encode_prompt(s.tok, s.model->config, text, param, s.model_path);
  if (static_cast<int>(ids.size()) >= s.model->config.n_ctx)
    throw serve::ApiError{400, fmt::format("the prompt has {} tokens; the model's context is {} tokens", ids.size(),
                                           s.model->config.n_ctx), param};
  return ids;
}

/// The state of one streamed (or collected) completion.
struct Completion {
  std::shared_ptr<serve::Job> job;
  std::unique_ptr<lm::TextStream> text;
  std::unique_ptr<serve::StopMatcher> stop;
  std::chrono::steady_clock::time_point deadline;
  int prompt_tokens = 0, completion_tokens = 0;
  bool ended = false;
  /// The next piece of text: false when the job has ended (then `piece` holds the last text).
  /// Throws ApiError 504 at the deadline.
  bool next(std::string& piece, double timeout_s) {
    piece.clear();
    if (ended) return false;
    const int id = job->next(deadline);
    if (id == -2) {
      job->cancel();
      throw serve::ApiError{504, fmt::format("the request took longer than --timeout {} s", timeout_s), ""};
    }
    if (id == -1) {
      ended = true;
      piece = stop->push(text->finish()) + stop->finish();
      return false;
    }
    ++completion_tokens;
    piece = stop->push(text->push(id));
    if (stop->stopped()) {
      job->cancel();
      ended = true;
      return false;
    }
    return true;
  }
  std::string finish_reason() const { return serve::finish_reason(job->finish_reason(), stop->stopped()); }
  json usage() const {
    return {{"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
  }
};

void handle_completion(Served& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  check_key(s, req);
  Inflight counted(s);
  const serve::CompletionParams p = serve::parse_completion(parse_body(req.body), chat);
  const std::vector<int> ids =
      chat ? prompt_ids(s, serve::chat_prompt(p.messages), "messages") : prompt_ids(s, p.prompt, "prompt");
  const auto& c = s.model->config;
  const int room = c.n_ctx - static_cast<int>(ids.size());
  serve::GenRequest g;
  g.prompt = ids;
  g.max_tokens = p.max_tokens_given ? std::min(p.max_tokens, room) : chat ? room : std::min(16, room);
  g.sampler = p.sampler;
  const std::uint64_t n = ++s.counter;
  if (!p.seed_given) g.sampler.seed = s.seed + n;  // no seed asked: the server's --seed plus the request's number
  auto st = std::make_shared<Completion>();
  st->job = s.batcher->submit(g);
  if (!st->job)
    throw serve::ApiError{503, "the server is busy: every slot is decoding and the queue is full; retry later", ""};
  st->text = std::make_unique<lm::TextStream>(*s.tok);
  // A completion continues the prompt: the stream starts after its last token, so a first piece
  // that begins a word keeps its space (" of", as OpenAI's API returns it); a chat message starts fresh.
  if (!chat) st->text->push(ids.back());
  st->stop = std::make_unique<serve::StopMatcher>(p.stop);
  st->deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                        std::chrono::duration<double>(s.timeout_s));
  st->prompt_tokens = static_cast<int>(ids.size());
  const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", n);
  const std::int64_t created = static_cast<std::int64_t>(std::time(nullptr));
  const json head = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"}, {"created", created}, {"model", s.name}};
  if (!p.stream) {
    std::string out, piece;
    while (st->next(piece, s.timeout_s)) out += piece;
    out += piece;
    json r = head;
    json choice = {{"index", 0}, {"finish_reason", st->finish_reason()}};
    if (chat) choice["message"] = {{"role", "assistant"}, {"content", out}};
    else choice["text"] = out, choice["logprobs"] = nullptr;
    r["choices"] = json::array({choice});
    r["usage"] = st->usage();
    res.set_content(dump(r), "application/json");
    return;
  }
  // Server-sent events: one chunk per piece of text, a final chunk with finish_reason and usage,
  // then "data: [DONE]".  A client that leaves cancels its sequence.
  json chunk_head = head;
  chunk_head["object"] = chat ? "chat.completion.chunk" : "text_completion";
  const double timeout_s = s.timeout_s;
  const bool include_usage = p.include_usage;
  auto first = std::make_shared<bool>(true);
  res.set_header("Cache-Control", "no-cache");
  auto release = std::make_shared<std::function<void()>>(counted.release());
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, chunk_head, chat, timeout_s, include_usage, first](std::size_t, httplib::DataSink& sink) {
        auto event = [&](const json& j) {
          const std::string line = "data: " + dump(j) + "\n\n";
          return sink.write(line.data(), line.size());
        };
        auto chunk = [&](const std::string& text, const json& reason) {
          json j = chunk_head;
          json choice = {{"index", 0}, {"finish_reason", reason}};
          if (chat) {
            json delta = json::object();
            if (*first) delta["role"] = "assistant";
            if (!text.empty() || !reason.is_null()) delta["content"] = text;
            if (!reason.is_null() && text.empty()) delta.erase("content");
            choice["delta"] = delta;
          } else {
            choice["text"] = text;
            choice["logprobs"] = nullptr;
          }
          *first = false;
          j["choices"] = json::array({choice});
          return j;
        };
        std::string piece;
        bool more = true;
        try {
          more = st->next(piece, timeout_s);
        } catch (const serve::ApiError& e) {  // the deadline: an error event, then the end
          event(serve::error_body(e));
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        }
        if (!piece.empty() || (*first && more))
          if (!event(chunk(piece, nullptr))) {
            st->job->cancel();
            return false;
          }
        if (more) return true;
        json last = chunk("", st->finish_reason());
        last["usage"] = st->usage();
        if (!event(last)) return false;
        if (include_usage) {
          json u = chunk_head;
          u["choices"] = json::array();
          u["usage"] = st->usage();
          if (!event(u)) return false;
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      },
      [st, release](bool success) {
        if (!success) st->job->cancel();
        (*release)();
      });
}

void handle_embeddings(Served& s, const httplib::Request& req, httplib::Response& res) {
  check_key(s, req);
  Inflight counted(s);
  bool base64 = false;
  const std::vector<std::string> inputs = serve::parse_embedding_input(parse_body(req.body), base64);
  json data = json::array();
  int tokens = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::vector<int> ids = prompt_ids(s, inputs[i], "input");
    tokens += static_cast<int>(ids.size());
    const std::vector<float> v = s.batcher->embed(ids);
    json emb = v;
    if (base64) {  // little-endian float32 bytes (x86), base64 as OpenAI's API sends them
      std::string b64(4 * ((v.size() * 4 + 2) / 3) + 1, '\0');
      const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()),
                                    reinterpret_cast<const unsigned char*>(v.data()), static_cast<int>(v.size() * 4));
      b64.resize(static_cast<std::size_t>(n));
      emb = b64;
    }
    data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", emb}});
  }
  res.set_content(json{{"object", "list"}, {"data", data}, {"model", s.name},
                       {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}}.dump(),
                  "application/json");
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);
  std::string model_path, host = "127.0.0.1", api_key, access_log, model_name, weights = "auto", act_quant = "none", device = "cpu";
  int port = 8080, slots = 4, max_queue = 16;
  double timeout_s = 600;
  std::size_t max_body = 1 << 20;
  cli::ToolInfo info{
      "lm-serve",
      "Serve a model (.h5, .gguf or a Hugging Face folder) over the OpenAI HTTP API on the CPU engine (or,\n"
      "--device cuda, the GPU engine, one request at a time):\n"
      "POST /v1/completions, /v1/chat/completions (\"stream\": true sends server-sent events ending in\n"
      "data: [DONE]), /v1/embeddings (mean of the final normalised hidden states, L2-normalised), GET\n"
      "/v1/models and /health.  Requests in flight are decoded together (continuous batching: one\n"
      "forward pass per step over every active sequence, --slots at once, each on its own KV cache),\n"
      "and each gets exactly the tokens it would get alone; beyond the slots, --max-queue requests wait\n"
      "and more are refused with 503.  Errors are JSON ({\"error\": {...}}) with 400, 401, 404, 413, 503\n"
      "or 504.  SIGTERM or SIGINT stops accepting connections and lets the requests in flight finish.\n"
      "Once listening it prints one JSON line {\"listening\": URL, ...} to stdout (--port 0 picks a free\n"
      "port).  The chat template: each message as <|role|>, newline, content, newline, then\n"
      "<|assistant|> and a newline.",
      "  lm-serve data/models/kjv7m.h5 --port 8080\n"
      "  lm-serve model-q8_0.gguf --act-quant q8 --slots 8 --api-key secret --access-log access.jsonl\n"
      "  curl -s localhost:8080/v1/completions -H 'Content-Type: application/json' -d '{\"prompt\": \"In the beginning\", \"max_tokens\": 16, \"temperature\": 0}'\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("model,-m,--model", model_path, "Model with a tokenizer (.h5, .gguf, or a Hugging Face directory)")->required();
        app.add_option("--host", host, "Address to listen on")->capture_default_str();
        app.add_option("--port", port, "TCP port (0: any free port)")->capture_default_str()->check(CLI::Range(0, 65535));
        app.add_option("--slots", slots, "Sequences decoded together at most")->capture_default_str()->check(CLI::Range(1, 256));
        app.add_option("--max-queue", max_queue, "Requests waiting for a slot at most (more get 503)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
        app.add_option("--timeout", timeout_s, "Seconds a request may take, queueing included (then 504)")->capture_default_str()->check(CLI::Range(0.001, 1e7));
        app.add_option("--max-body", max_body, "Largest request body in bytes (more get 413)")->capture_default_str()->check(CLI::Range(std::size_t(64), std::size_t(1) << 30));
        app.add_option("--api-key", api_key, "Require Authorization: Bearer KEY on /v1/ requests");
        app.add_option("--access-log", access_log, "Append one JSON line per request to this file");
        app.add_option("--model-name", model_name, "The model id in /v1/models and responses (default the file name)");
        lm::add_device_flag(app, device);
        lm::add_weights_flag(app, weights);
        lm::add_act_quant_flag(app, act_quant);
      },
      [&](cli::Context& ctx) {
        // Signals go to one waiting thread (blocked here, before any thread starts).
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGINT);
        pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
        std::ofstream log_file;
        if (!access_log.empty()) {
          io::check_output_dir(access_log);  // before any work, as every tool checks -o
          log_file.open(access_log, std::ios::app);
          if (!log_file) throw InputError("cannot open the access log for appending", access_log);
        }
        lm::Model model = lm::load_any(model_path);
        if (model.tokenizer_model.empty())
          throw InputError("the model has no tokenizer (" + lm::tokenizer_location(model_path) + " missing)", model_path);
        // The CPU batches its slots in one pass; a device engine holds one sequence, so requests
        // there run one at a time (one slot).  open_engine_for also holds the CPU weights as asked.
        const lm::Device dev = lm::parse_device(device);
        std::unique_ptr<lm::Engine> engine = lm::open_engine_for(model, dev, weights, model_path, act_quant);
        if (dev != lm::Device::cpu && slots > 1) {
          log::info("--device {}: one slot (the device engine holds one sequence); requests run in turn", device);
          slots = 1;
        }
        const lm::Tokenizer tok = lm::model_tokenizer(model, model_path);
        std::unique_ptr<serve::Batcher> batcher_ptr =
            dev == lm::Device::cpu ? std::make_unique<serve::Batcher>(model, slots, max_queue)
                                   : std::make_unique<serve::Batcher>(model, *engine, max_queue);
        serve::Batcher& batcher = *batcher_ptr;
        Served s;
        s.model = &model;
        s.tok = &tok;
        s.batcher = &batcher;
        s.name = model_name.empty() ? std::filesystem::path(model_path).filename().string() : model_name;
        s.model_path = model_path;
        s.api_key = api_key;
        s.timeout_s = timeout_s;
        s.seed = ctx.common.seed;
        s.started = std::time(nullptr);

        httplib::Server svr;
        // one HTTP worker per slot and queued request (and a few for /health): a connection beyond
        // them waits in the library's queue instead of getting our 503
        const int http_threads = slots + max_queue + 4;
        svr.new_task_queue = [http_threads] { return new httplib::ThreadPool(static_cast<std::size_t>(http_threads)); };
        svr.set_payload_max_length(max_body);
        // SO_REUSEADDR only: httplib's default SO_REUSEPORT would let a second server share a busy port
        svr.set_socket_options([](int sock) {
          int yes = 1;
          setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
        });
        svr.Get("/health", [&](const httplib::Request&, httplib::Response& res) {
          const auto st = batcher.stats();
          res.set_content(json{{"status", "ok"}, {"slots", st.slots}, {"active", st.active}, {"queued", st.queued},
                               {"requests", st.requests}, {"passes", st.passes}, {"rows", st.rows}, {"max_active", st.max_active}}.dump(),
                          "application/json");
        });
        svr.Get("/v1/models", [&](const httplib::Request& req, httplib::Response& res) {
          guarded(res, [&] {
            check_key(s, req);
            res.set_content(json{{"object", "list"},
                                 {"data", json::array({{{"id", s.name}, {"object", "model"}, {"created", s.started}, {"owned_by", "icmlkit"}}})}}.dump(),
                            "application/json");
          });
        });
        svr.Post("/v1/completions", [&](const httplib::Request& req, httplib::Response& res) {
          guarded(res, [&] { handle_completion(s, req, res, false); });
        });
        svr.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
          guarded(res, [&] { handle_completion(s, req, res, true); });
        });
        svr.Post("/v1/embeddings", [&](const httplib::Request& req, httplib::Response& res) {
          guarded(res, [&] { handle_embeddings(s, req, res); });
        });
        svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
          if (!res.body.empty()) return;  // a handler's own JSON error
          std::string what = res.status == 404   ? "no such endpoint: " + req.method + " " + req.path
                             : res.status == 413 ? "the request body is too large (--max-body; a body sent as form data, "
                                                   "curl -d's default, is limited to 8192 bytes: send Content-Type: application/json)"
                                                 : "HTTP " + std::to_string(res.status);
          res.set_content(serve::error_body({res.status, what, ""}).dump(), "application/json");
        });
        std::mutex log_mu;
        svr.set_logger([&](const httplib::Request& req, const httplib::Response& res) {
          if (!log_file.is_open()) return;
          std::lock_guard<std::mutex> lk(log_mu);
          log_file << json{{"time", utc_now()}, {"remote", req.remote_addr}, {"method", req.method}, {"path", req.path},
                           {"status", res.status}, {"request_bytes", req.body.size()}}.dump()
                   << "\n" << std::flush;
        });
        const int requested_port = port;
        if (port == 0) port = svr.bind_to_any_port(host);
        else if (!svr.bind_to_port(host, port)) port = -1;
        if (port < 0)
          throw InputError(fmt::format("cannot listen on {} port {} (in use, or not an address of this machine)", host, requested_port),
                           "--port");
        std::thread signals([&] {
          int sig = 0;
          sigwait(&sigs, &sig);
          log::info("signal {}: finishing the requests in flight, then stopping", sig);
          // new requests get 503 while those in flight (streams to their last event) finish;
          // stopping the HTTP server earlier would cut the streams
          s.draining = true;
          while (s.inflight > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
          svr.stop();
        });
        signals.detach();
        std::cout << json{{"listening", fmt::format("http://{}:{}", host, port)}, {"model", s.name}, {"slots", slots},
                          {"device", engine->device()}, {"engine_settings", engine->settings()}}.dump()
                  << std::endl;
        svr.listen_after_bind();
        batcher.shutdown();
      });
}
