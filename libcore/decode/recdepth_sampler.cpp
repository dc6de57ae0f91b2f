#include "decode/recdepth_sampler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "lm/forward.hpp"
#include "lm/recdepth.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace icmlkit::decode {

RecdepthMethod parse_recdepth_method(const std::string& name, const std::string& flag) {
  if (name == "ar") return RecdepthMethod::ar;
  if (name == "ar-adaptive") return RecdepthMethod::ar_adaptive;
  if (name == "diffusion-forcing") return RecdepthMethod::diffusion_forcing;
  throw UsageError(fmt::format("unknown method '{}' (ar, ar-adaptive, diffusion-forcing)", name), flag);
}

const char* recdepth_method_name(RecdepthMethod m) noexcept {
  switch (m) {
    case RecdepthMethod::ar: return "ar";
    case RecdepthMethod::ar_adaptive: return "ar-adaptive";
    case RecdepthMethod::diffusion_forcing: return "diffusion-forcing";
  }
  return "?";
}

FreezeRule parse_freeze_rule(const std::string& name, const std::string& flag) {
  if (name == "latent-diff") return FreezeRule::latent_diff;
  if (name == "token-stability") return FreezeRule::token_stability;
  if (name == "fixed") return FreezeRule::fixed;
  throw UsageError(fmt::format("unknown freeze rule '{}' (latent-diff, token-stability, fixed)", name), flag);
}

const char* freeze_rule_name(FreezeRule f) noexcept {
  switch (f) {
    case FreezeRule::latent_diff: return "latent-diff";
    case FreezeRule::token_stability: return "token-stability";
    case FreezeRule::fixed: return "fixed";
  }
  return "?";
}

int RecdepthSampleConfig::effective_recurrence(const lm::ModelConfig& config) const noexcept {
  return recurrence > 0 ? recurrence : config.recdepth.mean_recurrence;
}

void RecdepthSampleConfig::validate() const {
  if (recurrence < 0) throw UsageError(fmt::format("the recurrence must be >= 1, got {}", recurrence), "--recurrence");
  if (max_new_tokens < 0) throw UsageError(fmt::format("must be >= 0, got {}", max_new_tokens), "--max-new-tokens");
  if (!(kl_threshold >= 0)) throw UsageError(fmt::format("the KL threshold must be >= 0, got {}", kl_threshold), "--kl-threshold");
  if (inner_recurrence < 1)
    throw UsageError(fmt::format("the inner recurrence must be >= 1, got {}", inner_recurrence), "--inner-recurrence");
  if (headway < 1) throw UsageError(fmt::format("the headway must be >= 1, got {}", headway), "--headway");
  if (max_wavefront < headway)
    throw UsageError(fmt::format("--max-wavefront {} is smaller than --headway {}: a step's new positions must fit the wavefront",
                                 max_wavefront, headway),
                     "--max-wavefront");
  if (!(ema >= 0 && ema < 1)) throw UsageError(fmt::format("the EMA weight must be in [0, 1), got {}", ema), "--ema");
  if (!(state_noise >= 0 && state_noise <= 1))
    throw UsageError(fmt::format("the state noise beta0 must be in [0, 1], got {}", state_noise), "--state-noise");
  if (!(exit_threshold >= 0)) throw UsageError(fmt::format("the exit threshold must be >= 0, got {}", exit_threshold), "--exit-threshold");
  sampler.validate();
}

void require_recdepth(const lm::ModelConfig& config, const std::string& where) {
  if (config.is_recdepth()) return;
  std::string blocks;
  const auto types = config.all_block_types();
  for (std::size_t i = 0; i < types.size();) {
    std::size_t j = i;
    while (j < types.size() && types[j] == types[i]) ++j;
    blocks += fmt::format("{}{} {}", blocks.empty() ? "" : ", ", j - i, lm::block_type_name(types[i]));
    i = j;
  }
  throw InputError(fmt::format("not a recurrent-depth model: its blocks are {}, not recdepth-prelude / core / coda "
                               "(make one with lm-init or lm-train --arch recurrent-depth)",
                               blocks.empty() ? "none" : blocks),
                   where);
}

double kl_logits(const float* p, const float* q, int vocab) {
  auto log_norm = [vocab](const float* x) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < vocab; ++i) mx = std::max(mx, double(x[i]));
    double s = 0;
    for (int i = 0; i < vocab; ++i) s += std::exp(double(x[i]) - mx);
    return mx + std::log(s);
  };
  const double zq = log_norm(q);
  double kl = 0;
  if (!p) {  // p uniform: sum (1/V) (-log V - log q_i)
    const double lu = -std::log(double(vocab));
    for (int i = 0; i < vocab; ++i) kl += lu - (double(q[i]) - zq);
    kl /= vocab;
  } else {
    const double zp = log_norm(p);
    for (int i = 0; i < vocab; ++i) {
      const double lp = double(p[i]) - zp;
      kl += std::exp(lp) * (lp - (double(q[i]) - zq));
    }
  }
  return std::max(kl, 0.0);
}

double agreement(const std::vector<int>& a, const std::vector<int>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  if (n == 0) return 0.0;
  std::size_t same = 0;
  for (std::size_t i = 0; i < n; ++i) same += a[i] == b[i];
  return double(same) / double(n);
}

int df_freeze_position(const RecdepthSampleConfig& cfg, int recurrence, int first_pos, int step,
                       const std::vector<double>& delta, const std::vector<int>& stable) {
  const int W = static_cast<int>(delta.size());
  const int warm = recurrence / cfg.inner_recurrence;  // the reference's num_steps // inner_recurrence
  switch (cfg.freeze) {
    case FreezeRule::latent_diff:
      for (int i = W - 1; i >= 0; --i)
        if (delta[std::size_t(i)] < cfg.exit_threshold) return first_pos + i;
      return first_pos;
    case FreezeRule::token_stability:
      for (int i = std::min(W, static_cast<int>(stable.size())) - 1; i >= 1; --i)
        if (stable[std::size_t(i)] > warm) return first_pos + i;
      return first_pos;
    case FreezeRule::fixed:
      return step > warm ? first_pos + std::min(cfg.headway, W) : first_pos;
  }
  return first_pos;
}

namespace {

constexpr std::uint64_t kNoiseStream = 0x6e6f697365ULL;        // "noise"
constexpr std::uint64_t kExtraTokenStream = 0x706c616365ULL;  // the random extra tokens of headway > 1

void check_prompt(const lm::Model& model, const std::vector<int>& prompt) {
  const lm::ModelConfig& c = model.config;
  if (prompt.empty()) throw InputError("empty prompt");
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= c.vocab_size)
      throw InputError(fmt::format("token id {} outside the vocabulary [0, {})", prompt[i], c.vocab_size),
                       fmt::format("prompt token {}", i));
  if (static_cast<int>(prompt.size()) >= c.n_ctx)
    throw InputError(fmt::format("prompt has {} tokens, no room to generate in the context of n_ctx = {}", prompt.size(), c.n_ctx));
}

/// The run's shared frame: prefill, stop rules, bookkeeping.
struct Run {
  const lm::Model& model;
  const RecdepthSampleConfig& cfg;
  const FrozenSink& sink;
  int r, L, V, last_pos;
  bool ctx_limited;
  lm::KvCache cache;
  lm::Sampler sampler;
  RecdepthResult res;

  Run(const lm::Model& m, const std::vector<int>& prompt, const RecdepthSampleConfig& c, const FrozenSink& s)
      : model(m), cfg(c), sink(s), r(c.effective_recurrence(m.config)), L(static_cast<int>(prompt.size())),
        V(m.config.vocab_size), last_pos(0), ctx_limited(false), cache(m.config), sampler(c.sampler) {
    const long long want = static_cast<long long>(L) + cfg.max_new_tokens - 1;
    last_pos = static_cast<int>(std::min<long long>(want, m.config.n_ctx - 1));
    ctx_limited = want > m.config.n_ctx - 1;
    res.prompt_tokens = L;
    res.recurrence = r;
  }

  /// Appends frozen tokens (positions pos0..), with the iterations of the rows that predicted
  /// them; returns how many were taken (up to and including an eos token) and sets the stop
  /// reason when the run is over.
  int freeze(const std::vector<int>& toks, const std::vector<int>& iters, int pos0) {
    int taken = 0;
    for (std::size_t i = 0; i < toks.size(); ++i) {
      res.tokens.push_back(toks[i]);
      res.recurrence_per_token.push_back(iters[i]);
      ++taken;
      if (cfg.stop_at_eos && toks[i] == model.config.eos_id) {
        res.stop_reason = "eos";
        break;
      }
      if (pos0 + static_cast<int>(i) >= last_pos) {
        res.stop_reason = ctx_limited ? "n_ctx" : "max_new_tokens";
        break;
      }
    }
    if (sink && taken > 0) sink(std::vector<int>(toks.begin(), toks.begin() + taken));
    return taken;
  }
  bool done() const { return !res.stop_reason.empty(); }

  /// Prefills the prompt at recurrence r, commits it and freezes the first token.
  void prefill(const std::vector<int>& prompt) {
    Stopwatch t;
    lm::ForwardOptions o;
    o.recurrence = r;
    o.state_seed = cfg.state_seed;
    o.all_logits = false;
    o.logits_rows = {L - 1};
    const lm::ForwardResult fr = lm::forward(model, cache, lm::Batch::causal(prompt, 0), o);
    cache.commit_all();
    const int tok = sampler.sample(fr.logits.row(0), V);
    freeze({tok}, {r}, L);
    res.prefill_s = t.seconds();
  }

  void finish_step(RecdepthStep st, int committed, const Stopwatch& sw) {
    st.step = static_cast<int>(res.steps.size());
    st.frozen = static_cast<int>(res.tokens.size());
    st.committed = committed;
    st.wall_s = sw.seconds();
    res.core_iterations += st.core_iterations;
    ++res.forwards;
    res.steps.push_back(st);
  }
};

void run_ar(Run& run) {
  while (!run.done()) {
    Stopwatch sw;
    const int pos = run.L + static_cast<int>(run.res.tokens.size()) - 1;
    lm::Batch b;
    b.add(run.res.tokens.back(), pos);
    lm::ForwardOptions o;
    o.recurrence = run.r;
    o.state_seed = run.cfg.state_seed;
    const lm::ForwardResult fr = lm::forward(run.model, run.cache, b, o);
    run.cache.commit_all();
    const int tok = run.sampler.sample(fr.logits.row(0), run.V);
    const int taken = run.freeze({tok}, {run.r}, pos + 1);
    run.res.coda_rows += 1;
    RecdepthStep st;
    st.first_pos = pos;
    st.wavefront = 1;
    st.core_iterations = run.r;
    st.min_iterations = st.max_iterations = run.r;
    run.finish_step(st, taken, sw);
  }
}

void run_ar_adaptive(Run& run) {
  std::vector<float> prev(static_cast<std::size_t>(run.V));
  while (!run.done()) {
    Stopwatch sw;
    const int pos = run.L + static_cast<int>(run.res.tokens.size()) - 1;
    lm::Batch b;
    b.add(run.res.tokens.back(), pos);
    lm::RecurrentDepthForward f(run.model, run.cache, b, lm::ForwardOptions{});
    f.prelude();
    f.init_state(run.cfg.state_seed);
    lm::Matrix logits;
    int used = 0;
    double kl = 0;
    for (int i = 1; i <= run.r; ++i) {
      f.iterate(1);
      logits = f.coda();
      used = i;
      kl = kl_logits(i == 1 ? nullptr : prev.data(), logits.row(0), run.V);  // KLExitEvaluator: p_0 uniform
      if (kl < run.cfg.kl_threshold) break;
      std::copy_n(logits.row(0), run.V, prev.data());
    }
    run.cache.commit_all();  // the row's K/V: prelude, the last iteration's core, the last coda
    const int tok = run.sampler.sample(logits.row(0), run.V);
    const int taken = run.freeze({tok}, {used}, pos + 1);
    run.res.coda_rows += used;
    RecdepthStep st;
    st.first_pos = pos;
    st.wavefront = 1;
    st.core_iterations = used;
    st.min_iterations = st.max_iterations = used;
    st.kl = kl;
    run.finish_step(st, taken, sw);
  }
}

void run_diffusion(Run& run, const std::vector<int>& prompt) {
  const RecdepthSampleConfig& cfg = run.cfg;
  const lm::ModelConfig& mc = run.model.config;
  const int d = mc.d_model;
  const double std_state = mc.recdepth.state_std;
  const std::uint64_t noise_seed = derive_seed(cfg.state_seed, kNoiseStream);
  Rng extra_tokens(derive_seed(cfg.state_seed, kExtraTokenStream));

  // Tokens by position: the prompt, the frozen tokens, then the wavefront's tentative ones.
  std::vector<int> seq = prompt;
  seq.push_back(run.res.tokens.back());
  std::vector<int> stable(seq.size(), 0);  // token-stability counts by position
  int c = run.L;                           // first wavefront position = the last frozen one
  int F = run.L + 1;                       // frozen positions [0, F)
  // The wavefront, row-major [W, d]: states, mixed embeddings of the last step; per row the
  // iterations had and what the EMA knows of it (0: new, 1: old embedding held, 2: keep e_new).
  std::vector<float> S(static_cast<std::size_t>(d)), E(static_cast<std::size_t>(d));
  std::vector<int> n{0};
  std::vector<char> emb{2};
  lm::draw_state(cfg.state_seed, c, d, std_state, S.data());
  std::vector<float> prev, eps(static_cast<std::size_t>(d));
  std::vector<double> delta;
  std::vector<int> sampled, stable_w;
  int step = 0;

  while (!run.done()) {
    Stopwatch sw;
    const int W = static_cast<int>(n.size());
    const lm::Batch b = lm::Batch::causal(std::vector<int>(seq.begin() + c, seq.begin() + c + W), c);
    lm::RecurrentDepthForward f(run.model, run.cache, b, lm::ForwardOptions{});
    f.prelude();
    if (cfg.ema > 0) {  // e = (1 - ema) e_new + ema e_old (e_old = 0 for a new position)
      std::vector<float>& e = f.embeds();
      const float a = static_cast<float>(1.0 - cfg.ema), bw = static_cast<float>(cfg.ema);
      for (int i = 0; i < W; ++i) {
        float* er = e.data() + std::size_t(i) * d;
        const float* eo = E.data() + std::size_t(i) * d;
        if (emb[std::size_t(i)] == 1)
          for (int k = 0; k < d; ++k) er[k] = a * er[k] + bw * eo[k];
        else if (emb[std::size_t(i)] == 0)
          for (int k = 0; k < d; ++k) er[k] = a * er[k];
        std::copy_n(er, d, E.data() + std::size_t(i) * d);
        emb[std::size_t(i)] = 1;
      }
    }
    prev = S;  // the states at the start of the step (latent-diff's s^prev)
    if (cfg.state_noise > 0) {
      const std::uint64_t seed = derive_seed(noise_seed, static_cast<std::uint64_t>(step));
      for (int i = 0; i < W; ++i) {
        const float beta = static_cast<float>(cfg.state_noise / (1.0 + n[std::size_t(i)]));
        lm::draw_state(seed, c + i, d, std_state, eps.data());
        float* s = S.data() + std::size_t(i) * d;
        for (int k = 0; k < d; ++k) s[k] = (1.0f - beta) * s[k] + beta * eps[std::size_t(k)];
      }
    }
    f.state() = S;
    f.iterate(cfg.inner_recurrence);
    for (int& x : n) x += cfg.inner_recurrence;
    const lm::Matrix logits = f.coda();
    S = f.state();

    // Resample every row's next token; count unchanged tokens (positions c+1..c+W-1).
    sampled.resize(std::size_t(W));
    for (int i = 0; i < W; ++i) sampled[std::size_t(i)] = run.sampler.sample(logits.row(i), run.V);
    if (stable.size() < seq.size() + 1) stable.resize(seq.size() + 1, 0);
    int first_change = W;  // the first row whose input token this resampling changed (W: none)
    for (int i = 1; i < W; ++i) {
      if (sampled[std::size_t(i - 1)] == seq[std::size_t(c + i)]) ++stable[std::size_t(c + i)];
      else if (first_change == W) first_change = i;
    }
    for (int i = 1; i < W; ++i) seq[std::size_t(c + i)] = sampled[std::size_t(i - 1)];
    if (c + W <= run.last_pos) seq.push_back(sampled[std::size_t(W - 1)]);  // position c+W: the first new one

    delta.assign(std::size_t(W), 0.0);
    stable_w.assign(std::size_t(W), 0);
    for (int i = 0; i < W; ++i) {
      const float* s = S.data() + std::size_t(i) * d;
      const float* p = prev.data() + std::size_t(i) * d;
      double diff = 0, norm = 0;
      for (int k = 0; k < d; ++k) {
        diff += (double(s[k]) - p[k]) * (double(s[k]) - p[k]);
        norm += double(s[k]) * s[k];
      }
      delta[std::size_t(i)] = norm > 0 ? std::sqrt(diff / norm) : (diff > 0 ? std::numeric_limits<double>::infinity() : 0.0);
      stable_w[std::size_t(i)] = stable[std::size_t(c + i)];
    }
    // Every rule freezes only tokens whose predicting rows read the tokens being frozen: the token
    // at c+j comes from row j-1, whose input at c+j-1 must not have just been resampled to another
    // (else fixed and token-stability at headway > 1 freeze predictions made from random extra tokens).
    int Q = std::min(df_freeze_position(cfg, run.r, c, step, delta, stable_w), c + first_change);
    // The cap at r: row i is done, so is the token it predicts -- provided the rows up to i saw
    // the tokens that are being frozen (none of positions c+1..c+i was just resampled to another
    // token), else the frozen tokens would not be the ones the predictions were made from.
    for (int i = std::min(W, first_change) - 1; i >= 0; --i)
      if (n[std::size_t(i)] >= run.r) {
        Q = std::max(Q, c + i + 1);
        break;
      }
    Q = std::min(Q, run.last_pos);

    int taken = 0;
    if (Q >= F) {
      std::vector<int> toks(seq.begin() + F, seq.begin() + Q + 1), iters;
      for (int q = F; q <= Q; ++q) iters.push_back(n[std::size_t(q - 1 - c)]);
      taken = run.freeze(toks, iters, F);
      F += taken;
    }
    RecdepthStep st;
    st.first_pos = c;
    st.wavefront = W;
    st.core_iterations = static_cast<long long>(W) * cfg.inner_recurrence;
    st.min_iterations = *std::min_element(n.begin(), n.end());
    st.max_iterations = *std::max_element(n.begin(), n.end());
    run.res.coda_rows += W;
    run.finish_step(st, taken, sw);
    ++step;
    if (run.done()) break;

    // Commit rows c..Q-1 (the reference's clear_last_k_entries keeps Q entries), keep the rest.
    const int drop = Q - c;
    if (drop > 0) {
      std::vector<int> rows(static_cast<std::size_t>(drop));
      for (int i = 0; i < drop; ++i) rows[std::size_t(i)] = i;
      run.cache.commit(rows);
      S.erase(S.begin(), S.begin() + std::ptrdiff_t(drop) * d);
      E.erase(E.begin(), E.begin() + std::ptrdiff_t(drop) * d);
      n.erase(n.begin(), n.begin() + drop);
      emb.erase(emb.begin(), emb.begin() + drop);
    }
    const int first_new = c + W;
    c = Q;
    int w = W - drop, added = 0;
    for (int p = first_new; added < cfg.headway && w < cfg.max_wavefront && p <= run.last_pos; ++p, ++added, ++w) {
      if (p > first_new) seq.push_back(static_cast<int>(extra_tokens.below(static_cast<std::uint64_t>(run.V))));
      S.resize(std::size_t(w + 1) * d);
      E.resize(std::size_t(w + 1) * d, 0.0f);
      lm::draw_state(cfg.state_seed, p, d, std_state, S.data() + std::size_t(w) * d);
      n.push_back(0);
      emb.push_back(0);
    }
    seq.resize(std::size_t(c + w));
  }
}

}  // namespace

RecdepthResult recdepth_generate(const lm::Model& model, const std::vector<int>& prompt, const RecdepthSampleConfig& cfg,
                                 const FrozenSink& sink) {
  require_recdepth(model.config, "model");
  cfg.validate();
  check_prompt(model, prompt);
  Run run(model, prompt, cfg, sink);
  if (cfg.max_new_tokens == 0) {
    run.res.stop_reason = "max_new_tokens";
    return std::move(run.res);
  }
  run.prefill(prompt);
  Stopwatch t;
  switch (cfg.method) {
    case RecdepthMethod::ar: run_ar(run); break;
    case RecdepthMethod::ar_adaptive: run_ar_adaptive(run); break;
    case RecdepthMethod::diffusion_forcing: run_diffusion(run, prompt); break;
  }
  run.res.generate_s = t.seconds();
  return std::move(run.res);
}

ContinuationScore score_continuation(const lm::Model& model, const std::vector<int>& prompt, const std::vector<int>& continuation,
                                     int recurrence, std::uint64_t state_seed) {
  require_recdepth(model.config, "model");
  if (prompt.empty()) throw InputError("empty prompt");
  if (continuation.empty()) throw InputError("nothing to score: the continuation is empty");
  std::vector<int> all = prompt;
  all.insert(all.end(), continuation.begin(), continuation.end());
  if (static_cast<int>(all.size()) > model.config.n_ctx)
    throw InputError(fmt::format("prompt and continuation have {} tokens, more than n_ctx = {}", all.size(), model.config.n_ctx));
  for (int id : all)
    if (id < 0 || id >= model.config.vocab_size)
      throw InputError(fmt::format("token id {} outside the vocabulary [0, {})", id, model.config.vocab_size));
  const int L = static_cast<int>(prompt.size()), N = static_cast<int>(continuation.size());
  lm::ForwardOptions o;
  o.recurrence = recurrence;
  o.state_seed = state_seed;
  o.all_logits = false;
  for (int j = 0; j < N; ++j) o.logits_rows.push_back(L - 1 + j);
  lm::KvCache cache(model.config);
  const lm::ForwardResult fr = lm::forward(model, cache, lm::Batch::causal(all, 0), o);
  double nll = 0;
  for (int j = 0; j < N; ++j) nll -= lm::log_softmax_at(fr.logits.row(j), model.config.vocab_size, continuation[std::size_t(j)]);
  ContinuationScore s;
  s.tokens = N;
  s.mean_nll = nll / N;
  s.perplexity = std::exp(s.mean_nll);
  return s;
}

}  // namespace icmlkit::decode
