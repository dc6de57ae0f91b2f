// serve/: the continuous-batching decode loop gives every request exactly the tokens of its lone
// run (an independent one-sequence loop written here with lm::forward and lm::Sampler), refuses
// beyond its queue, and ends jobs for the documented reasons; the OpenAI request parser refuses
// malformed bodies with the offending field; stop strings cut text exactly and hold back only
// what could still begin one.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lm/engine.hpp"
#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/model.hpp"
#include "lm/sampler.hpp"
#include "serve/batcher.hpp"
#include "serve/openai.hpp"
#include "util/error.hpp"

using namespace icmlkit;
using nlohmann::json;

namespace {

lm::Model serve_model() {
  lm::ModelConfig c;
  c.vocab_size = 97;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 48;
  c.n_ctx = 64;
  c.eos_id = 5;
  c.bos_id = -1;
  c.add_bos = false;
  return lm::random_model(c, 38, 0.6);
}

/// The lone run: prefill, then one row per step on one cache, the same stopping rules.
std::vector<int> alone(const lm::Model& m, const serve::GenRequest& r, std::string& reason) {
  lm::KvCache cache(m.config);
  lm::Sampler sampler(r.sampler);
  lm::ForwardOptions opt;
  opt.all_logits = false;
  opt.logits_rows = {static_cast<int>(r.prompt.size()) - 1};
  lm::ForwardResult fr = lm::forward(m, cache, lm::Batch::causal(r.prompt, 0), opt);
  cache.commit_all();
  int pos = static_cast<int>(r.prompt.size());
  std::vector<int> out;
  for (;;) {
    const int id = sampler.sample(fr.logits.row(0), m.config.vocab_size);
    if (id == m.config.eos_id && r.stop_at_eos) { reason = "eos"; return out; }
    out.push_back(id);
    if (static_cast<int>(out.size()) >= r.max_tokens) { reason = "max_tokens"; return out; }
    if (pos + 1 >= m.config.n_ctx) { reason = "n_ctx"; return out; }
    lm::Batch b;
    b.add(id, pos);
    lm::ForwardOptions one;
    fr = lm::forward(m, cache, b, one);
    cache.commit_all();
    ++pos;
  }
}

std::vector<int> drain(serve::Job& job) {
  std::vector<int> out;
  for (;;) {
    const int id = job.next(std::chrono::steady_clock::now() + std::chrono::seconds(60));
    REQUIRE(id != -2);
    if (id == -1) return out;
    out.push_back(id);
  }
}

}  // namespace

TEST_CASE("serve: requests decoded together get exactly the tokens of their lone runs") {
  const lm::Model m = serve_model();
  std::vector<serve::GenRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    serve::GenRequest r;
    for (int t = 0; t < 3 + 5 * i; ++t) r.prompt.push_back((7 * t + 11 * i + 1) % 97);
    r.max_tokens = i == 5 ? 200 : 12 + 3 * i;  // the last runs into n_ctx
    r.sampler.temperature = i % 3 == 0 ? 0.0 : 0.9;
    r.sampler.top_p = i == 2 ? 0.8 : 1.0;
    r.sampler.seed = 100 + i;
    r.stop_at_eos = i < 4;  // 4 and 5 run past eos
    reqs.push_back(r);
  }
  serve::Batcher b(m, 3, 10);  // 3 slots: the rest wait and join as others leave
  std::vector<std::shared_ptr<serve::Job>> jobs;
  for (const auto& r : reqs) {
    jobs.push_back(b.submit(r));
    REQUIRE(jobs.back());
  }
  std::vector<std::string> reasons;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    CAPTURE(i);
    std::string want_reason;
    const std::vector<int> want = alone(m, reqs[i], want_reason);
    CHECK(drain(*jobs[i]) == want);
    CHECK(jobs[i]->finish_reason() == want_reason);
    reasons.push_back(want_reason);
  }
  CHECK(std::count(reasons.begin(), reasons.end(), "n_ctx") == 1);
  const auto st = b.stats();
  CHECK(st.max_active == 3);  // the passes really carried several sequences
  CHECK(st.requests == 6);
  CHECK(st.active == 0);
}

TEST_CASE("serve: on an engine (the device mode, one slot) requests run in turn with their lone runs' tokens") {
  const lm::Model m = serve_model();
  lm::CpuEngine engine(m);
  serve::Batcher b(m, engine, 4);
  std::vector<serve::GenRequest> reqs(3);
  for (int i = 0; i < 3; ++i) {
    reqs[i].prompt = {1 + i, 2, 3 + 2 * i};
    reqs[i].max_tokens = 10;
    reqs[i].sampler.temperature = i == 0 ? 0.0 : 0.7;
    reqs[i].sampler.seed = 9 + i;
    reqs[i].stop_at_eos = false;
  }
  std::vector<std::shared_ptr<serve::Job>> jobs;
  for (const auto& r : reqs) jobs.push_back(b.submit(r));
  for (int i = 0; i < 3; ++i) {
    std::string reason;
    CHECK(drain(*jobs[i]) == alone(m, reqs[i], reason));
  }
  CHECK(b.stats().max_active == 1);
  CHECK(engine.size() == 0);  // cleared after each request
}

/// A CPU engine whose forward passes wait until open() is called, telling wait_entered() when the
/// first has begun: a request is then surely running, and the test decides when it may go on.
class GatedEngine final : public lm::EngineWrapper {
 public:
  using EngineWrapper::EngineWrapper;
  lm::ForwardResult forward(const lm::Batch& b, const lm::ForwardOptions& o = {}) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      entered_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    }
    return inner_.forward(b, o);
  }
  void wait_entered() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, open_ = false;
};

TEST_CASE("serve: the batcher refuses beyond its queue, ends jobs as documented, and rejects bad prompts") {
  const lm::Model m = serve_model();
  serve::GenRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 50;
  r.stop_at_eos = false;
  {
    // one slot and a queue of one, the running request held in its first forward pass (before,
    // the test raced the worker: on a loaded machine it could finish 'a' before the third submit)
    lm::CpuEngine cpu(m);
    GatedEngine gated(cpu);
    serve::Batcher g(m, gated, 1);
    auto a = g.submit(r);
    REQUIRE(a);
    gated.wait_entered();
    auto q = g.submit(r);
    REQUIRE(q);
    CHECK_FALSE(g.submit(r));  // one running, one queued: full
    a->cancel();
    gated.open();
    drain(*a);
    CHECK(a->finish_reason() == "cancelled");
    CHECK(drain(*q).size() == 50);
    CHECK(q->finish_reason() == "max_tokens");
  }
  serve::Batcher b(m, 1, 1);
  r.max_tokens = 0;
  auto z = b.submit(r);
  CHECK(drain(*z).empty());
  CHECK(z->finish_reason() == "max_tokens");
  r.prompt = {};
  CHECK_THROWS_AS(b.submit(r), InputError);
  r.prompt = {1, 97};
  CHECK_THROWS_AS(b.submit(r), InputError);
  r.prompt.assign(64, 1);
  CHECK_THROWS_AS(b.submit(r), InputError);
  const std::vector<float> e1 = b.embed({1, 2, 3}), e2 = b.embed({1, 2, 3}), e3 = b.embed({3, 2, 1});
  REQUIRE(e1.size() == 32);
  double n = 0;
  for (float v : e1) n += double(v) * v;
  CHECK(std::fabs(std::sqrt(n) - 1.0) < 1e-6);
  CHECK(e1 == e2);
  CHECK(e1 != e3);
  b.shutdown();
  r.prompt = {1, 2};
  r.max_tokens = 2;
  CHECK_FALSE(b.submit(r));  // after shutdown
}

TEST_CASE("serve: OpenAI request bodies are parsed, and malformed ones refused naming the field") {
  auto p = serve::parse_completion(json::parse(R"({"prompt": "hi", "max_tokens": 5, "temperature": 0, "top_p": 0.5,
      "stop": ["a", "b"], "seed": 3, "stream": true, "stream_options": {"include_usage": true}, "model": "m", "n": 1})"),
                                   false);
  CHECK(p.prompt == "hi");
  CHECK(p.max_tokens == 5);
  CHECK(p.max_tokens_given);
  CHECK(p.sampler.temperature == 0.0);
  CHECK(p.sampler.top_p == 0.5);
  CHECK(p.sampler.seed == 3);
  CHECK(p.seed_given);
  CHECK(p.stop == std::vector<std::string>{"a", "b"});
  CHECK(p.stream);
  CHECK(p.include_usage);
  CHECK(serve::parse_completion(json::parse(R"({"prompt": "x"})"), false).sampler.temperature == 1.0);  // OpenAI's default
  auto c = serve::parse_completion(json::parse(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})"), true);
  CHECK(serve::chat_prompt(c.messages) == "<|system|>\ns\n<|user|>\nu\n<|assistant|>\n");
  struct Bad { const char* body; bool chat; const char* param; };
  for (const Bad& bad : {Bad{R"([1])", false, ""}, Bad{R"({"prompt": "x", "foo": 1})", false, "foo"},
                         Bad{R"({"prompt": 3})", false, "prompt"}, Bad{R"({})", false, "prompt"},
                         Bad{R"({"prompt": "x", "max_tokens": -1})", false, "max_tokens"},
                         Bad{R"({"prompt": "x", "max_tokens": 1.5})", false, "max_tokens"},
                         Bad{R"({"prompt": "x", "temperature": 2.5})", false, "temperature"},
                         Bad{R"({"prompt": "x", "top_p": 0})", false, "top_p"},
                         Bad{R"({"prompt": "x", "n": 2})", false, "n"},
                         Bad{R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", false, "stop"},
                         Bad{R"({"prompt": "x", "stop": [""]})", false, "stop"},
                         Bad{R"({"prompt": "x", "stream": "yes"})", false, "stream"},
                         Bad{R"({"prompt": "x", "messages": []})", false, "messages"},
                         Bad{R"({"messages": []})", true, "messages"},
                         Bad{R"({"messages": [{"role": "robot", "content": "x"}]})", true, "messages"},
                         Bad{R"({"messages": [{"role": "user"}]})", true, "messages"}}) {
    CAPTURE(bad.body);
    try {
      serve::parse_completion(json::parse(bad.body), bad.chat);
      FAIL("accepted");
    } catch (const serve::ApiError& e) {
      CHECK(e.status == 400);
      CHECK(e.param == bad.param);
    }
  }
  bool b64 = true;
  CHECK(serve::parse_embedding_input(json::parse(R"({"input": ["a", "b"]})"), b64).size() == 2);
  CHECK_FALSE(b64);
  CHECK(serve::parse_embedding_input(json::parse(R"({"input": "a", "encoding_format": "base64"})"), b64).size() == 1);
  CHECK(b64);
  CHECK_THROWS_AS(serve::parse_embedding_input(json::parse(R"({"input": [1]})"), b64), serve::ApiError);
  CHECK_THROWS_AS(serve::parse_embedding_input(json::parse(R"({"input": "a", "encoding_format": "int8"})"), b64), serve::ApiError);
  CHECK(serve::error_body({503, "busy", ""})["error"]["type"] == "server_error");
}

TEST_CASE("serve: stop strings end the text before them and hold back only a possible start of one") {
  serve::StopMatcher s({"\n\n", "END"});
  CHECK(s.push("Hello") == "Hello");
  CHECK(s.push(" wor") == " wor");
  CHECK(s.push("ld E") == "ld ");  // "E" may begin "END"
  CHECK(s.push("x") == "Ex");      // it did not
  CHECK(s.push("\n") == "");       // may begin "\n\n"
  CHECK(s.push("\nmore") == "");   // a stop: nothing after it
  CHECK(s.stopped());
  CHECK(s.finish().empty());
  serve::StopMatcher t({"END"});
  CHECK(t.push("abEN") == "ab");
  CHECK(t.finish() == "EN");  // the end of the text releases what was held
  CHECK_FALSE(t.stopped());
  CHECK(serve::finish_reason("eos", false) == "stop");
  CHECK(serve::finish_reason("max_tokens", true) == "stop");
  CHECK(serve::finish_reason("n_ctx", false) == "length");
}
