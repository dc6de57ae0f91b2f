#include "decode/early_exit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "lm/layerwise.hpp"
#include "lm/sampler.hpp"
#include "util/error.hpp"

namespace icmlkit::decode {

ExitMethod parse_exit_method(const std::string& name, const std::string& flag) {
  for (ExitMethod m : {ExitMethod::full, ExitMethod::wave, ExitMethod::calm, ExitMethod::dvp, ExitMethod::skipdecode, ExitMethod::layerskip})
    if (name == exit_method_name(m)) return m;
  throw UsageError("unknown method '" + name + "' (full, wave, calm, dvp, skipdecode, layerskip)", flag);
}

const char* exit_method_name(ExitMethod m) noexcept {
  switch (m) {
    case ExitMethod::full: return "full";
    case ExitMethod::wave: return "wave";
    case ExitMethod::calm: return "calm";
    case ExitMethod::dvp: return "dvp";
    case ExitMethod::skipdecode: return "skipdecode";
    case ExitMethod::layerskip: return "layerskip";
  }
  return "?";
}

void ExitConfig::validate(const lm::ModelConfig& c) const {
  const int L = c.n_layers;
  auto depth = [&](int v, const char* flag, int hi) {
    if (v < 1 || v > hi) throw UsageError(fmt::format("depth {} outside [1, {}] (the model has {} blocks)", v, hi, L), flag);
  };
  switch (method) {
    case ExitMethod::wave:
      depth(window_start, "--window-start", L - 1);
      depth(window_end, "--window-end", L - 1);
      if (window_end < window_start)
        throw UsageError(fmt::format("the window ends at {} before it starts at {}", window_end, window_start), "--window-end");
      break;
    case ExitMethod::calm: depth(min_layer, "--min-layer", L - 1); break;
    case ExitMethod::dvp: depth(dvp_layer, "--dvp-layer", L - 1); break;
    case ExitMethod::layerskip: depth(exit_layer, "--exit-layer", L); break;
    case ExitMethod::skipdecode:
      depth(skip_min, "--skip-min", L);
      depth(skip_max, "--skip-max", L);
      if (skip_min > skip_max) throw UsageError(fmt::format("--skip-min {} above --skip-max {}", skip_min, skip_max), "--skip-min");
      if (skip_warmup < 0 || skip_warmup > skip_min)
        throw UsageError(fmt::format("the warm-up ({} blocks) must be in [0, --skip-min = {}]", skip_warmup, skip_min), "--skip-warmup");
      break;
    case ExitMethod::full: break;
  }
  if ((method == ExitMethod::wave || method == ExitMethod::dvp) && (proxy_k < 2 || proxy_k > c.vocab_size))
    throw UsageError(fmt::format("proxy vocabulary {} outside [2, {}] (the vocabulary)", proxy_k, c.vocab_size), "--proxy-k");
  if (!(threshold >= 0)) throw UsageError("the threshold must be >= 0 (above 1: never exit)", "--threshold");
  if (max_new < 1) throw UsageError("at least 1 token", "-n");
  if (decay_tau < 0) throw UsageError("the decay rate must be >= 0", "--decay-tau");
}

StepCost StepCost::of(const lm::ModelConfig& c, double context) {
  const double d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  StepCost s;
  s.block = 2 * (d * dq * 2 + d * dkv * 2 + 3 * d * c.d_ff) + 4 * dq * context;
  s.head_row = 2 * d;
  s.head = s.head_row * c.vocab_size;
  s.state_copy = 2 * d * dkv * 2;
  return s;
}

double top2_gap(const float* z, int n, int* argmax) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (z[i] > z[best]) best = i;
  int second = best == 0 ? 1 : 0;
  for (int i = 0; i < n; ++i)
    if (i != best && z[i] > z[second]) second = i;
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(double(z[i]) - z[best]);
  if (argmax) *argmax = best;
  if (n < 2) return 1.0;
  return (1.0 - std::exp(double(z[second]) - z[best])) / sum;
}

int skipdecode_blocks(const ExitConfig& cfg, int t) {
  if (cfg.max_new <= 1) return cfg.skip_max;
  const double f = std::min(1.0, std::max(0.0, double(t) / (cfg.max_new - 1)));
  return static_cast<int>(std::lround(cfg.skip_max + f * (cfg.skip_min - cfg.skip_max)));
}

namespace {

/// The top-k ids of logits z [V] (descending logit, lower id first on ties).
std::vector<int> top_ids(const float* z, int V, int k) {
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [z](int a, int b) { return z[a] != z[b] ? z[a] > z[b] : a < b; });
  ids.resize(k);
  return ids;
}

}  // namespace

double ExitLogits::nll(int token) const {
  int at = token;
  if (!ids.empty()) {
    const auto it = std::find(ids.begin(), ids.end(), token);
    if (it == ids.end()) return std::numeric_limits<double>::infinity();
    at = static_cast<int>(it - ids.begin());
  }
  if (at < 0 || at >= static_cast<int>(logits.size())) return std::numeric_limits<double>::infinity();
  return -lm::log_softmax_at(logits.data(), static_cast<int>(logits.size()), at);
}

int shared_depth(const ExitConfig& cfg, int L) noexcept {
  int m = 0;
  switch (cfg.method) {
    case ExitMethod::full: m = L; break;
    case ExitMethod::wave: m = cfg.window_start; break;
    case ExitMethod::calm: m = cfg.min_layer; break;
    case ExitMethod::dvp: m = cfg.dvp_layer; break;
    case ExitMethod::layerskip: m = cfg.exit_layer; break;
    case ExitMethod::skipdecode: m = 0; break;
  }
  return std::clamp(m, 0, L - 1);  // the verifier always runs the last block
}

ExitStep exit_decode_step(const lm::Model& model, lm::KvCache& cache, int input, int pos, int t, const ExitConfig& cfg,
                          const StepCost& cost, ExitLogits* emitted, std::vector<float>* shared) {
  const lm::ModelConfig& c = model.config;
  const int L = c.n_layers, V = c.vocab_size;
  lm::Batch b;
  b.add(input, pos);
  lm::ForwardOptions no_logits;
  no_logits.all_logits = false;
  lm::LayerwiseForward pass(model, cache, b, no_logits);
  ExitStep s;
  const int m = shared_depth(cfg, L);
  if (shared && m > 0) {  // the shared blocks first (every method below starts with them), residual kept
    pass.run(m);
    *shared = pass.residual();
  }
  // Runs blocks up to depth `to` (those of the shared prefix already ran).
  auto run_to = [&](int to) { pass.run(to - pass.done()); };
  auto full_head = [&]() {
    s.head_flops += cost.head;
    return pass.head({0});
  };
  auto keep_full = [&](const lm::Matrix& z) {
    if (!emitted) return;
    emitted->ids.clear();
    emitted->logits.assign(z.row(0), z.row(0) + V);
  };
  // Runs to the last block and emits the full head's argmax.
  auto finish_full = [&]() {
    s.flops += cost.block * (L - pass.done());
    run_to(L);
    const lm::Matrix z = full_head();
    keep_full(z);
    s.token = lm::greedy_token(z.row(0), V);
    s.depth = L;
  };
  // Exits at the current depth with `token`: the rest of the blocks by state copying.
  auto exit_here = [&](int token) {
    s.token = token;
    s.depth = pass.done();
    s.exited = s.depth < L;
    s.flops += cost.state_copy * (L - pass.done());
    pass.copy_state();
  };
  // Confidence exits over a proxy vocabulary chosen at the current depth, up to depth `last`.
  auto proxy_exits = [&](int last) {
    const lm::Matrix z = full_head();
    const std::vector<int> ids = top_ids(z.row(0), V, cfg.proxy_k);
    std::vector<float> zk(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) zk[i] = z.row(0)[ids[i]];
    for (;;) {
      int best = 0;
      s.confidence = top2_gap(zk.data(), static_cast<int>(zk.size()), &best);
      ++s.checks;
      if (s.confidence >= cfg.threshold) {
        if (emitted) {
          emitted->ids = ids;
          emitted->logits = zk;
        }
        return exit_here(ids[best]);
      }
      if (pass.done() >= last) return finish_full();
      s.flops += cost.block;
      pass.run(1);
      const lm::Matrix zp = pass.head({0}, ids);  // bitwise the full head's logits on those rows
      s.head_flops += cost.head_row * cfg.proxy_k;
      std::copy_n(zp.row(0), zk.size(), zk.begin());
    }
  };
  switch (cfg.method) {
    case ExitMethod::full:
      s.flops += cost.block * pass.done();  // the shared blocks, when they ran first
      finish_full();
      break;
    case ExitMethod::layerskip: {
      s.flops += cost.block * cfg.exit_layer;
      run_to(cfg.exit_layer);
      const lm::Matrix z = full_head();
      keep_full(z);
      exit_here(lm::greedy_token(z.row(0), V));
      break;
    }
    case ExitMethod::wave:
      s.flops += cost.block * cfg.window_start;
      run_to(cfg.window_start);
      proxy_exits(cfg.window_end);
      break;
    case ExitMethod::dvp:
      s.flops += cost.block * cfg.dvp_layer;
      run_to(cfg.dvp_layer);
      proxy_exits(L - 1);
      break;
    case ExitMethod::calm: {
      const double lambda =
          cfg.decay_tau > 0 ? std::clamp(0.9 * cfg.threshold + 0.1 * std::exp(-cfg.decay_tau * t / cfg.max_new), 0.0, 1.0) : cfg.threshold;
      s.flops += cost.block * cfg.min_layer;
      run_to(cfg.min_layer);
      for (;;) {
        if (pass.done() >= L) {
          const lm::Matrix z = full_head();
          keep_full(z);
          s.token = lm::greedy_token(z.row(0), V);
          s.depth = L;
          break;
        }
        const lm::Matrix z = full_head();
        int best = 0;
        s.confidence = top2_gap(z.row(0), V, &best);
        ++s.checks;
        if (s.confidence >= lambda) {
          keep_full(z);
          exit_here(best);
          break;
        }
        s.flops += cost.block;
        pass.run(1);
      }
      break;
    }
    case ExitMethod::skipdecode: {
      const int n = skipdecode_blocks(cfg, t), warm = std::min(cfg.skip_warmup, n);
      s.flops += cost.block * n;
      pass.run(warm);
      pass.skip(L - n, false);
      pass.run(n - warm);
      const lm::Matrix z = full_head();
      keep_full(z);
      s.token = lm::greedy_token(z.row(0), V);
      s.depth = n;
      s.exited = n < L;
      break;
    }
  }
  s.flops += s.head_flops;
  cache.commit_all();
  return s;
}

std::vector<int> lossless_generate(const lm::Model& model, lm::KvCache& cache, int first, int pos, int n, int draft,
                                   const ExitConfig& cfg, const StepCost& cost, LosslessStats& st, bool reuse) {
  if (draft < 1) throw UsageError("at least 1 draft token per verification", "--draft");
  const lm::ModelConfig& c = model.config;
  const int L = c.n_layers, nkv = c.n_kv_heads, hd = c.head_dim();
  // Reuse needs the shared blocks to be a strict prefix and a cache without recurrent state.
  const int m = reuse && !cache.has_state() ? shared_depth(cfg, L) : 0;
  st.reused_depth = m;
  std::vector<int> out{first};
  lm::ForwardOptions vo;
  vo.greedy_only = true;  // every row's greedy token
  std::vector<float> residuals, row, kv;
  while (static_cast<int>(out.size()) < n) {
    const int base = cache.size();  // slots before the input token
    const int cur = out.back(), p0 = pos + static_cast<int>(out.size()) - 1;
    const int room = n - static_cast<int>(out.size());  // tokens still to emit
    const int d = std::min(draft, room - 1);  // the last token needs no draft: the verifier gives it
    std::vector<int> drafts;
    residuals.clear();
    int in = cur;
    for (int i = 0; i < d; ++i) {
      const ExitStep s = exit_decode_step(model, cache, in, p0 + i, static_cast<int>(out.size()) + i, cfg, cost, nullptr,
                                          m > 0 ? &row : nullptr);
      if (m > 0) residuals.insert(residuals.end(), row.begin(), row.end());
      st.draft_steps.push_back(s);
      drafts.push_back(s.token);
      in = s.token;
    }
    st.drafted += d;
    // Verify: row i is the input then the drafts; its greedy token is what follows it.
    std::vector<int> rows{cur};
    rows.insert(rows.end(), drafts.begin(), drafts.end());
    const lm::Batch vb = lm::Batch::causal(rows, p0);
    lm::ForwardResult vr;
    if (m > 0 && d > 0) {
      {  // the last draft's shared blocks (it was emitted, never run as an input)
        lm::Batch lb;
        lb.add(drafts.back(), p0 + d);
        lm::ForwardOptions no_logits;
        no_logits.all_logits = false;
        lm::LayerwiseForward last(model, cache, lb, no_logits);
        last.run(m);
        residuals.insert(residuals.end(), last.residual().begin(), last.residual().end());
        last.skip(L - m, false);
        cache.commit_all();
      }
      // The verified rows' K/V of the shared blocks, slots base .. base + d of each head.
      kv.resize(std::size_t(m) * nkv * (d + 1) * hd * 2);
      float* w = kv.data();
      for (int l = 0; l < m; ++l)
        for (int h = 0; h < nkv; ++h)
          for (int r = 0; r <= d; ++r, w += 2 * hd) {
            std::copy_n(cache.key(l, h, base + r), hd, w);
            std::copy_n(cache.value(l, h, base + r), hd, w + hd);
          }
      cache.truncate(base);
      lm::LayerwiseForward pass(model, cache, vb, vo);
      const float* k = kv.data();
      for (int l = 0; l < m; ++l)
        for (int h = 0; h < nkv; ++h)
          for (int r = 0; r <= d; ++r, k += 2 * hd) {
            std::copy_n(k, hd, cache.pending_key(l, h, r));
            std::copy_n(k + hd, hd, cache.pending_value(l, h, r));
          }
      pass.resume(m, residuals);
      pass.run(L - m);
      vr = pass.finish();
      st.verify_flops += cost.block * m + double(d + 1) * (cost.block * (L - m) + cost.head);
    } else {
      cache.truncate(base);
      vr = lm::forward(model, cache, vb, vo);
      st.verify_flops += double(d + 1) * (cost.block * L + cost.head);
    }
    int a = 0;
    while (a < d && drafts[a] == vr.greedy[a]) ++a;
    for (int i = 0; i < d; ++i) st.draft_accepted.push_back(i < a);
    std::vector<int> keep(std::size_t(a) + 1);  // the input and the accepted drafts
    std::iota(keep.begin(), keep.end(), 0);
    cache.commit(keep);
    for (int i = 0; i < a; ++i) out.push_back(drafts[i]);
    out.push_back(vr.greedy[a]);  // the verifier's token after the last accepted one
    st.accepted += a;
    ++st.rounds;
  }
  out.resize(std::size_t(n));
  return out;
}

}  // namespace icmlkit::decode
