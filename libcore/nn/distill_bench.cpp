#include "nn/distill_bench.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "lm/forward.hpp"
#include "lm/kv_cache.hpp"
#include "lm/sampler.hpp"
#include "nn/llama_train.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace icmlkit::nn {

namespace {

/// Logits [S, vocab] of one sequence through the trainer's float forward.
std::vector<float> sequence_logits(LlamaParams<float>& P, TrainCache<float>& cache, const std::vector<int>& seq) {
  const int S = static_cast<int>(seq.size());
  if (S > P.config.n_ctx)
    throw InputError(fmt::format("a benchmark sequence of {} tokens exceeds the model's n_ctx = {}", S, P.config.n_ctx));
  std::vector<int> none(seq.size(), -1);
  std::vector<float> logits;
  llama_loss(P, seq, none, 1, S, 0.0, cache, &logits);
  return logits;
}

/// Whether `target` is among the k largest logits of a row (ties counted against it: a logit
/// equal to the target's with a lower id ranks first, as greedy decoding's lowest-id rule).
bool in_top_k(const float* row, int V, int target, int k) {
  const float t = row[target];
  int above = 0;
  for (int v = 0; v < V && above < k; ++v) above += row[v] > t || (row[v] == t && v < target);
  return above < k;
}

/// A segment of `len` pool tokens starting at a seeded offset.
std::vector<int> cut(const std::vector<int>& pool, int len, Rng& rng) {
  if (pool.size() < std::size_t(len) + 1) throw InputError(fmt::format("the held-out pool ({} tokens) is shorter than {}", pool.size(), len));
  const std::size_t at = rng.below(pool.size() - std::size_t(len));
  return std::vector<int>(pool.begin() + std::int64_t(at), pool.begin() + std::int64_t(at) + len);
}

}  // namespace

std::vector<std::vector<int>> teacher_continuations(const lm::Model& teacher, const BenchData& data, const BenchOptions& opt) {
  Rng rng(opt.seed ^ 0xa9eeULL);
  std::vector<std::vector<int>> out;
  for (int p = 0; p < opt.prompts; ++p) {
    std::vector<int> seq = cut(data.pool, opt.prompt_len, rng);
    if (teacher.config.add_bos && teacher.config.bos_id >= 0) seq.insert(seq.begin(), teacher.config.bos_id);
    lm::KvCache kv(teacher.config);
    lm::ForwardOptions fo;
    fo.logits_rows = {static_cast<int>(seq.size()) - 1};
    fo.all_logits = false;
    fo.state_rows = fo.logits_rows;
    auto r = lm::forward(teacher, kv, lm::Batch::causal(seq, 0), fo);
    kv.commit_all();
    for (int t = 0; t < opt.continuation; ++t) {
      const int next = lm::greedy_token(r.logits.row(0), teacher.config.vocab_size);
      seq.push_back(next);
      if (t + 1 == opt.continuation) break;
      lm::Batch b;
      b.add(next, static_cast<int>(seq.size()) - 1, b.add_view(lm::View::full()), {});
      r = lm::forward(teacher, kv, b);
      kv.commit_all();
    }
    out.push_back(std::move(seq));
  }
  return out;
}

std::vector<std::pair<std::string, double>> distill_benchmarks(const lm::Model& model, const BenchData& data,
                                                                const std::vector<std::vector<int>>& continuations,
                                                                const BenchOptions& opt) {
  auto P = params_from_model<float>(model, true);
  TrainCache<float> cache;
  const int V = model.config.vocab_size;
  std::vector<std::pair<std::string, double>> out;
  for (std::size_t g = 0; g < data.groups.size(); ++g) {
    const std::vector<int>& s = data.group_tokens[g];
    std::int64_t n = 0, top1 = 0, top5 = 0;
    for (std::size_t at = 0; at + 1 < s.size() && n < opt.group_tokens; at += std::size_t(opt.seq_len)) {
      const std::size_t len = std::min<std::size_t>(std::size_t(opt.seq_len), s.size() - 1 - at);
      const std::vector<int> seq(s.begin() + std::int64_t(at), s.begin() + std::int64_t(at + len));
      const std::vector<float> logits = sequence_logits(P, cache, seq);
      for (std::size_t i = 0; i < len && n < opt.group_tokens; ++i, ++n) {
        const float* row = logits.data() + i * std::size_t(V);
        const int target = s[at + i + 1];
        top1 += in_top_k(row, V, target, 1);
        top5 += in_top_k(row, V, target, 5);
      }
    }
    const double denom = double(std::max<std::int64_t>(n, 1));
    out.emplace_back("top1_" + data.groups[g], double(top1) / denom);
    out.emplace_back("top5_" + data.groups[g], double(top5) / denom);
  }
  Rng rng(opt.seed);
  const int bos = model.config.add_bos ? model.config.bos_id : -1;
  for (int d : opt.distances) {
    std::int64_t hit = 0, n = 0;
    for (int p = 0; p < opt.passages; ++p) {
      const std::vector<int> passage = cut(data.pool, opt.passage, rng), filler = cut(data.pool, d, rng);
      // [bos] passage filler passage
      std::vector<int> seq(bos >= 0 ? 1 : 0, bos);
      for (const std::vector<int>* part : {&passage, &filler, &passage})
        for (int t : *part) seq.push_back(t);
      const std::size_t second = seq.size() - passage.size();
      const std::vector<float> logits = sequence_logits(P, cache, seq);
      for (std::size_t i = second; i + 1 < seq.size(); ++i, ++n)  // predicting passage tokens 2.. of the copy
        hit += lm::greedy_token(logits.data() + i * std::size_t(V), V) == seq[i + 1];
    }
    out.emplace_back(fmt::format("recall_{}", d), double(hit) / double(std::max<std::int64_t>(n, 1)));
  }
  std::int64_t agree = 0, n = 0;
  for (const auto& seq : continuations) {
    const std::vector<float> logits = sequence_logits(P, cache, seq);
    for (std::size_t i = seq.size() - std::size_t(opt.continuation) - 1; i + 1 < seq.size(); ++i, ++n)
      agree += lm::greedy_token(logits.data() + i * std::size_t(V), V) == seq[i + 1];
  }
  out.emplace_back(fmt::format("agree_{}", opt.continuation), double(agree) / double(std::max<std::int64_t>(n, 1)));
  return out;
}

std::vector<SpeedPoint> engine_speed(const lm::Model& model, const std::vector<int>& pool, const std::vector<int>& contexts,
                                     int decode) {
  if (pool.empty()) throw InputError("no tokens to measure speed with");
  std::vector<SpeedPoint> out;
  const lm::ModelConfig& c = model.config;
  for (int ctx : contexts) {
    SpeedPoint sp;
    sp.context = ctx;
    if (ctx <= decode) throw InputError(fmt::format("speed context {} is not above the {} decode steps", ctx, decode));
    if (ctx > c.n_ctx) {
      out.push_back(sp);
      continue;
    }
    const int n = ctx - decode;
    std::vector<int> prompt(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) prompt[std::size_t(i)] = pool[std::size_t(i) % pool.size()];
    lm::KvCache kv(c);
    lm::ForwardOptions fo;
    fo.logits_rows = {n - 1};
    fo.all_logits = false;
    fo.state_rows = fo.logits_rows;
    Stopwatch tp;
    auto r = lm::forward(model, kv, lm::Batch::causal(prompt, 0), fo);
    kv.commit_all();
    sp.prefill_tok_s = n / std::max(tp.seconds(), 1e-9);
    Stopwatch td;
    for (int t = 0; t < decode; ++t) {
      const int next = lm::greedy_token(r.logits.row(0), c.vocab_size);
      lm::Batch b;
      b.add(next, n + t, b.add_view(lm::View::full()), {});
      r = lm::forward(model, kv, b);
      kv.commit_all();
    }
    sp.decode_tok_s = decode / std::max(td.seconds(), 1e-9);
    std::int64_t bytes = 0;
    for (int l = 0; l < kv.n_layers(); ++l) {
      for (int h = 0; h < kv.n_kv_heads(); ++h) bytes += std::int64_t(kv.size(l, h)) * kv.head_dim() * 2 * 4 + kv.size(l, h) * 4;
      bytes += std::int64_t(kv.state_size(l)) * 4;
    }
    sp.cache_bytes = bytes;
    sp.ran = true;
    out.push_back(sp);
  }
  return out;
}

}  // namespace icmlkit::nn
