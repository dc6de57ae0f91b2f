// A scripted OpenAI-compatible server for hybridflow-run's CLI cases: streams a fixed plan to
// planner requests (slowly, to show steps starting before the plan ends), answers executor
// requests with a short echo, returns deterministic embeddings, and injects faults on request:
// HTTP 500, a hang past the client's deadline, a stream closed before [DONE], a plan without steps.
//   hybridflow-fake-openai --plan FILE [--chunk-ms N] [--fault 500|hang|close|malformed]
//                          [--fault-match TEXT] [--fault-times K] [--log FILE]
// Prints {"listening": "http://127.0.0.1:PORT/v1"} on stdout, then serves until SIGTERM.
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

namespace {

httplib::Server* g_server = nullptr;
void on_term(int) {
  if (g_server) g_server->stop();
}

std::string sse(const nlohmann::json& j) { return "data: " + j.dump() + "\n\n"; }

nlohmann::json chunk(const std::string& delta) {
  return {{"object", "chat.completion.chunk"}, {"choices", {{{"index", 0}, {"delta", {{"content", delta}}}, {"finish_reason", nullptr}}}}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string plan_path, fault, fault_match, log_path;
  int chunk_ms = 0, fault_times = 1000000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--plan") plan_path = v;
    else if (k == "--chunk-ms") chunk_ms = std::stoi(v);
    else if (k == "--fault") fault = v;
    else if (k == "--fault-match") fault_match = v;
    else if (k == "--fault-times") fault_times = std::stoi(v);
    else if (k == "--log") log_path = v;
    else {
      std::cerr << "unknown flag " << k << "\n";
      return 2;
    }
  }
  std::string plan;
  if (!plan_path.empty()) {
    std::ifstream in(plan_path);
    plan.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::mutex mu;
  std::atomic<int> faults_left{fault_times};
  auto log = [&](const std::string& line) {
    if (log_path.empty()) return;
    std::lock_guard<std::mutex> lock(mu);
    std::ofstream(log_path, std::ios::app) << line << "\n";
  };

  httplib::Server server;
  g_server = &server;
  signal(SIGTERM, on_term);
  signal(SIGINT, on_term);
  const auto t0 = std::chrono::steady_clock::now();
  auto now_s = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };

  server.Post("/v1/chat/completions", [&](const httplib::Request& req, httplib::Response& res) {
    const auto body = nlohmann::json::parse(req.body);
    const std::string user = body["messages"].back()["content"].get<std::string>();
    const bool planner = user.rfind("**Problem**", 0) == 0;
    const bool hit = !fault.empty() && (fault_match.empty() || user.find(fault_match) != std::string::npos) &&
                     (fault != "malformed" || planner) && faults_left.fetch_sub(1) > 0;
    log(nlohmann::json{{"t", now_s()}, {"kind", planner ? "planner" : "chat"}, {"fault", hit ? fault : ""}, {"user", user.substr(0, 60)}}.dump());
    if (hit && fault == "500") {
      res.status = 500;
      res.set_content(R"({"error": {"message": "injected failure", "type": "server_error"}})", "application/json");
      return;
    }
    if (hit && fault == "hang") {
      std::this_thread::sleep_for(std::chrono::seconds(5));
      res.status = 500;
      return;
    }
    std::string text;
    if (planner) text = hit && fault == "malformed" ? "I cannot make a plan for this." : plan;
    else text = "answer to: " + user.substr(0, 40);
    const bool close_mid = hit && fault == "close";
    res.set_chunked_content_provider("text/event-stream", [=](std::size_t, httplib::DataSink& sink) {
      const std::size_t step = planner ? 16 : 8;
      for (std::size_t at = 0; at < text.size(); at += step) {
        const std::string c = sse(chunk(text.substr(at, step)));
        if (!sink.write(c.data(), c.size())) return false;
        if (close_mid && at >= step) return false;  // drop the connection before [DONE]
        if (chunk_ms > 0 && planner) std::this_thread::sleep_for(std::chrono::milliseconds(chunk_ms));
      }
      nlohmann::json last = {{"object", "chat.completion.chunk"},
                             {"choices", {{{"index", 0}, {"delta", nlohmann::json::object()}, {"finish_reason", "stop"}}}},
                             {"usage", {{"prompt_tokens", static_cast<long>(user.size() / 4)}, {"completion_tokens", static_cast<long>(text.size() / 4)}}}};
      const std::string end = sse(last) + "data: [DONE]\n\n";
      sink.write(end.data(), end.size());
      sink.done();
      return true;
    });
  });
  server.Post("/v1/embeddings", [&](const httplib::Request& req, httplib::Response& res) {
    const auto body = nlohmann::json::parse(req.body);
    nlohmann::json inputs = body["input"].is_array() ? body["input"] : nlohmann::json::array({body["input"]});
    nlohmann::json data = nlohmann::json::array();
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const std::size_t h = std::hash<std::string>{}(inputs[i].get<std::string>());
      std::vector<float> e(4);
      for (int k = 0; k < 4; ++k) e[k] = static_cast<float>(((h >> (8 * k)) & 0xff) / 255.0 - 0.5);
      data.push_back({{"object", "embedding"}, {"index", i}, {"embedding", e}});
    }
    res.set_content(nlohmann::json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  if (port <= 0) return 1;
  std::cout << nlohmann::json{{"listening", "http://127.0.0.1:" + std::to_string(port) + "/v1"}}.dump() << std::endl;
  server.listen_after_bind();
  return 0;
}
