// bench-decode-host: the decoder's own host time per decode step (building the candidate trie,
// the Jacobi window's rows and views, the n-gram pool, acceptance, the KV compressor), which a
// GPU does not hide: on a GPU a small model's forward takes ~0.1-0.3 ms, so tens of
// microseconds of host work per step are a visible share of FAFO's step and not of AR's.
//
// Each method first decodes on the CPU engine, which records every forward's greedy tokens.  The
// same generation then replays on an engine that returns the recorded tokens and computes
// nothing: decoding is deterministic given the forwards' results, so the replay builds exactly
// the batches of the real run, and its wall time is the decoder's host work (plus a vector copy
// per forward).  AR, the peer, is measured in the same run.  The replay checks that it produced
// the recorded tokens, else the program fails.
// Usage: bench-decode-host MODEL [--tokens N (256)] [--reps K (20)]   Prints one JSON object:
//   per method: generated_tokens, stop_reason, decode_steps, mean_rows_per_step,
//   mean_accepted_per_step, host_us_per_step and host_us_per_token (medians over the K replays).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "decode/decoder.hpp"
#include "lm/engine.hpp"
#include "lm/model_io.hpp"
#include "lm/prompt.hpp"
#include "lm/tokenizer.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;

namespace {

/// An engine recording each forward's greedy tokens.
class RecordingEngine final : public lm::EngineWrapper {
 public:
  using EngineWrapper::EngineWrapper;
  lm::ForwardResult forward(const lm::Batch& b, const lm::ForwardOptions& o = {}) override {
    if (!o.greedy_only) throw RuntimeError("bench-decode-host replays greedy decoding only");
    lm::ForwardResult r = inner_.forward(b, o);
    tape.push_back(r.greedy);
    return r;
  }
  std::vector<std::vector<int>> tape;
};

/// Returns the recorded greedy tokens, forward by forward; keeps only the cache length.
class ReplayEngine final : public lm::Engine {
 public:
  ReplayEngine(const lm::ModelConfig& c, const std::vector<std::vector<int>>& tape) : c_(c), tape_(tape) {}
  const lm::ModelConfig& config() const noexcept override { return c_; }
  std::string device() const override { return "replay"; }
  lm::ForwardResult forward(const lm::Batch& b, const lm::ForwardOptions& o = {}) override {
    if (next_ >= tape_.size()) throw RuntimeError("replay ran past the recording");
    lm::ForwardResult r;
    r.logits_rows = lm::logits_rows_of(o, b.size());
    r.greedy = tape_[next_++];
    if (r.greedy.size() != r.logits_rows.size()) throw RuntimeError("replay left the recorded batches");
    pending_ = b.size();
    return r;
  }
  void commit(const std::vector<int>& rows) override { len_ += static_cast<int>(rows.size()); }
  void commit_all() override { len_ += pending_; }
  void truncate(int n) override { len_ = std::min(len_, n); }
  void clear() override {
    len_ = 0;
    next_ = 0;
  }
  int size() const override { return len_; }

 private:
  const lm::ModelConfig& c_;
  const std::vector<std::vector<int>>& tape_;
  std::size_t next_ = 0;
  int len_ = 0, pending_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t k = v.size() / 2;
  return v.size() % 2 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "The decoder's own host time per decode step (AR, prompt lookup, lookahead, FAFO with gpu-check's\n"
      "flags): each method decodes once on the CPU engine, then replays on an engine that returns the\n"
      "recorded tokens and computes nothing.  Prints one JSON object (see bench/README.md).",
      "bench-decode-host");
  std::string path;
  int tokens = 256, reps = 20;
  app.add_option("model", path, "Model with a tokenizer (.h5, .gguf or a Hugging Face directory)")->required();
  app.add_option("--tokens", tokens, "New tokens per generation")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  app.add_option("--reps", reps, "Timed replays per method")->capture_default_str()->check(CLI::Range(1, 100000));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::cerr << "bench-decode-host: error: " << e.what() << " (run with --help for usage)\n";
    return 2;
  }
  try {
    const lm::Model model = lm::load_any(path);
    if (model.tokenizer_model.empty()) throw InputError("the model has no tokenizer", path);
    const lm::Tokenizer tok(model.tokenizer_model, path);
    const std::vector<int> prompt = lm::encode_prompt(
        &tok, model.config,
        "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
        "darkness was upon the face of the deep.",
        "prompt", path);

    // gpu_check.sh's FAFO flags: --window 5 --ngram 4 --guesses 5 --kv-policy streaming --kv-budget 64.
    decode::DecodeConfig base;
    base.max_new_tokens = tokens;
    base.stop_at_eos = false;
    base.window = 5;
    base.ngram = 4;
    base.guesses = 5;
    base.kv.policy = kv::Policy::streaming;
    base.kv.budget = 64;
    base.time_attention = false;
    base.sampler.seed = default_seed;  // the tools' --seed default (the Jacobi window's start)

    nlohmann::json out = {{"model", path}, {"prompt_tokens", prompt.size()}, {"max_new_tokens", tokens}, {"reps", reps},
                          {"flags", "--window 5 --ngram 4 --guesses 5 --kv-policy streaming --kv-budget 64"}};
    std::vector<int> ar_tokens;
    for (decode::Method m : {decode::Method::ar, decode::Method::prompt_lookup, decode::Method::lookahead, decode::Method::fafo}) {
      decode::DecodeConfig cfg = base;
      cfg.method = m;
      lm::CpuEngine cpu(model);
      RecordingEngine rec(cpu);
      const decode::DecodeResult real = decode::generate(rec, prompt, cfg);
      if (m == decode::Method::ar) ar_tokens = real.tokens;
      else if (real.tokens != ar_tokens) throw RuntimeError(std::string(decode::method_name(m)) + " differs from AR");
      ReplayEngine replay(model.config, rec.tape);
      std::vector<double> per_step, per_token;
      int rows = 0, accepted = 0;
      for (const auto& s : real.steps) {
        rows += s.rows;
        accepted += s.accepted;
      }
      for (int k = 0; k < reps + 1; ++k) {  // the first replay warms caches and is not counted
        const decode::DecodeResult r = decode::generate(replay, prompt, cfg);
        if (r.tokens != real.tokens) throw RuntimeError("the replay decoded other tokens");
        if (k == 0) continue;
        per_step.push_back(1e6 * r.decode_s / r.steps.size());
        per_token.push_back(1e6 * r.decode_s / r.tokens.size());
      }
      const double n = static_cast<double>(real.steps.size());
      out["methods"][decode::method_name(m)] = {{"generated_tokens", real.tokens.size()},
                                                 {"stop_reason", real.context_full ? "n_ctx" : "max_new_tokens"},
                                                 {"decode_steps", real.steps.size()},
                                                 {"mean_rows_per_step", rows / n},
                                                 {"mean_accepted_per_step", accepted / n},
                                                 {"host_us_per_step", median(per_step)},
                                                 {"host_us_per_token", median(per_token)}};
    }
    std::cout << out.dump(2) << "\n";
    return 0;
  } catch (const Error& e) {
    std::cerr << "bench-decode-host: error: " << e.message() << "\n";
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::cerr << "bench-decode-host: error: " << e.what() << "\n";
    return 1;
  }
}
