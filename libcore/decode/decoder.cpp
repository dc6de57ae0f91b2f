#include "decode/decoder.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <utility>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>

#include "decode/adaptive.hpp"
#include "decode/ngram.hpp"
#include "lm/forward.hpp"
#include "lm/sampler.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace icmlkit::decode {

Method parse_method(const std::string& name) {
  if (name == "ar") return Method::ar;
  if (name == "prompt-lookup") return Method::prompt_lookup;
  if (name == "lookahead") return Method::lookahead;
  if (name == "self-spec") return Method::self_spec;
  if (name == "fafo") return Method::fafo;
  throw UsageError("unknown method '" + name + "' (ar, prompt-lookup, lookahead, self-spec, fafo)", "--method");
}

const char* method_name(Method m) noexcept {
  switch (m) {
    case Method::ar: return "ar";
    case Method::prompt_lookup: return "prompt-lookup";
    case Method::lookahead: return "lookahead";
    case Method::self_spec: return "self-spec";
    case Method::fafo: return "fafo";
  }
  return "?";
}

int SkipSet::count() const {
  int n = 0;
  for (char c : attn) n += c != 0;
  for (char c : mlp) n += c != 0;
  return n;
}

std::string SkipSet::to_json(const std::string& meta_json) const {
  nlohmann::json j;
  j["attn"] = nlohmann::json::array();
  j["mlp"] = nlohmann::json::array();
  for (std::size_t l = 0; l < attn.size(); ++l)
    if (attn[l]) j["attn"].push_back(l);
  for (std::size_t l = 0; l < mlp.size(); ++l)
    if (mlp[l]) j["mlp"].push_back(l);
  j["n_layers"] = attn.size();
  j["meta"] = nlohmann::json::parse(meta_json);
  return j.dump(2) + "\n";
}

SkipSet SkipSet::from_json(const std::string& text, int n_layers, const std::string& where) {
  SkipSet s;
  s.attn.assign(n_layers, 0);
  s.mlp.assign(n_layers, 0);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception&) {
    throw InputError("skip-set file is not JSON", where);
  }
  if (!j.is_object() || !j.contains("attn") || !j.contains("mlp") || !j["attn"].is_array() || !j["mlp"].is_array())
    throw InputError("skip-set file needs arrays \"attn\" and \"mlp\"", where);
  if (j.contains("n_layers") && j["n_layers"] != n_layers)
    throw InputError("skip set is for " + j["n_layers"].dump() + " layers, the model has " + std::to_string(n_layers), where);
  for (const char* key : {"attn", "mlp"})
    for (const auto& v : j[key]) {
      if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() >= n_layers)
        throw InputError(std::string("skip-set \"") + key + "\" holds " + v.dump() + ", not a layer in [0, " +
                         std::to_string(n_layers) + ")", where);
      (key[0] == 'a' ? s.attn : s.mlp)[v.get<int>()] = 1;
    }
  return s;
}

void DecodeConfig::validate(const lm::ModelConfig& mc) const {
  if (max_new_tokens < 1) throw UsageError("max new tokens must be >= 1", "--max-new-tokens");
  sampler.validate();
  if (method == Method::lookahead || method == Method::fafo) {
    if (window < 1 || window > 256) throw UsageError("window W must be in [1, 256]", "--window");
    if (ngram < 2 || ngram > 32) throw UsageError("n-gram size N must be in [2, 32]", "--ngram");
    if (guesses < 0 || guesses > 256) throw UsageError("guess set size G must be in [0, 256]", "--guesses");
  }
  if (method == Method::prompt_lookup) {
    if (pld_min_ngram < 1 || pld_max_ngram < pld_min_ngram) throw UsageError("need 1 <= min n-gram <= max n-gram", "--pld-min-ngram / --pld-max-ngram");
    if (pld_draft < 1) throw UsageError("draft length must be >= 1", "--draft");
  }
  if (method == Method::self_spec) {
    if (draft_max < 1) throw UsageError("draft length must be >= 1", "--draft");
    if (!(draft_stop >= 0.0 && draft_stop <= 1.0)) throw UsageError("draft stop threshold must be in [0, 1]", "--draft-stop");
    if (static_cast<int>(skip.attn.size()) != mc.n_layers || static_cast<int>(skip.mlp.size()) != mc.n_layers)
      throw UsageError("self-spec needs a skip set for the model's " + std::to_string(mc.n_layers) + " layers", "--skip-set");
  }
  if (method == Method::fafo) kv::Compressor(mc, kv);  // validates the policy settings
}

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

/// One sequence being decoded.
class Decoder {
 public:
  Decoder(lm::Engine& engine, const DecodeConfig& cfg, TokenSink on_token)
      : engine_(engine), mc_(engine.config()), cfg_(cfg), on_token_(std::move(on_token)), sampler_(cfg.sampler),
        pool_(std::max(1, cfg.guesses)) {
    if (cfg_.method == Method::fafo) comp_ = std::make_unique<kv::Compressor>(mc_, cfg_.kv);
  }

  DecodeResult run(const std::vector<int>& prompt) {
    if (prompt.empty()) throw InputError("empty prompt");
    if (static_cast<int>(prompt.size()) >= mc_.n_ctx)
      throw InputError("prompt of " + std::to_string(prompt.size()) + " tokens leaves no room in the context of " +
                       std::to_string(mc_.n_ctx));
    for (int t : prompt)
      if (t < 0 || t >= mc_.vocab_size) throw InputError("prompt token id " + std::to_string(t) + " outside the vocabulary");
    ctx_ = prompt;
    engine_.clear();
    // Every generated token keeps a position inside the context (as lm-generate does).
    max_new_ = std::min(cfg_.max_new_tokens, mc_.n_ctx - static_cast<int>(prompt.size()));
    prefill(prompt);
    prompt_ = prompt;
    const auto t0 = Clock::now();
    if (cfg_.method == Method::fafo && cfg_.adaptive && !done_) start_schedule();
    while (!done_) {
      if (n_past_ >= mc_.n_ctx) {
        res_.context_full = true;
        break;
      }
      step();
    }
    res_.decode_s = since(t0);
    if (sched_) {
      const nlohmann::json pass_cost = res_.schedule;
      res_.schedule = sched_->to_json();
      res_.schedule.update(pass_cost);
    }
    return std::move(res_);
  }

 private:
  /// Adaptive FAFO: the pass costs (from the cache, else measured on this context and cached)
  /// and the schedule over the default arms.  Inside the timed decode: calibration is its cost.
  void start_schedule() {
    const auto t0 = Clock::now();
    const std::string key = pass_cost_key(engine_);
    PassCost cost;
    std::string source = "cache";
    if (!load_pass_cost(cfg_.pass_cost_cache, key, cost)) {
      source = "measured";
      cost = measure_pass_cost(engine_, n_past_, cur_, 12);
      std::string why;
      if (!cfg_.pass_cost_cache.empty() && !save_pass_cost(cfg_.pass_cost_cache, key, key.substr(key.find(' ') + 1), cost, &why))
        log::warn("could not write the pass-cost cache {}: {}", cfg_.pass_cost_cache, why);
    }
    sched_ = std::make_unique<AdaptiveSchedule>(cfg_.window, cfg_.ngram, cfg_.guesses, cfg_.pld_draft, cost);
    res_.schedule = {{"pass_cost_source", source}, {"pass_cost_key", key.substr(0, key.find(' '))},
                     {"calibration_s", since(t0)}};
  }

  /// The lookahead window of W columns and n-gram size N (made on first use, its initial guesses
  /// drawn from the prompt with a seed of its own).
  LookaheadWindow& window(int W, int N) {
    auto& w = windows_[{W, N}];
    if (!w) {
      // The configured window keeps the seed it always had (fixed-schedule runs are unchanged).
      const bool configured = W == cfg_.window && N == cfg_.ngram;
      Rng rng(derive_seed(cfg_.sampler.seed,
                          0x6c6f6f6b + (configured ? 0 : 1000003ull * static_cast<unsigned>(W) + static_cast<unsigned>(N))));
      w = std::make_unique<LookaheadWindow>(W, N, prompt_, rng);
    }
    return *w;
  }
  /// Appends a generated token; returns false once generation is over.
  bool emit(int token) {
    if (done_) return false;
    res_.tokens.push_back(token);
    ctx_.push_back(token);
    if (on_token_) on_token_(token);
    if (cfg_.stop_at_eos && token == mc_.eos_id) {
      res_.eos = true;
      done_ = true;
    }
    if (static_cast<int>(res_.tokens.size()) >= max_new_) {
      done_ = true;
      res_.context_full = max_new_ < cfg_.max_new_tokens;
    }
    return !done_;
  }

  void prefill(const std::vector<int>& prompt) {
    const auto t0 = Clock::now();
    const int n = static_cast<int>(prompt.size());
    lm::Batch b = lm::Batch::causal(prompt, 0);
    lm::ForwardOptions opt;
    opt.all_logits = false;
    opt.logits_rows = {n - 1};
    opt.state_rows = opt.logits_rows;  // recurrent blocks: the prompt commits whole (chunkwise prefill)
    opt.greedy_only = greedy();
    if (comp_ && comp_->needs_attention()) opt.attn_rows = comp_->prefill_rows(n);
    lm::ForwardResult fr = engine_.forward(b, opt);
    engine_.commit_all();
    if (comp_) {
      std::vector<int> slots(n);
      for (int i = 0; i < n; ++i) slots[i] = i;
      comp_->commit(fr.attention, slots, true, engine_.host_cache());
    }
    n_past_ = n;
    res_.prefill_s = since(t0);
    emit(greedy() ? fr.greedy[0] : sampler_.sample(fr.logits.row(0), mc_.vocab_size));
    cur_ = res_.tokens.back();
  }

  /// Greedy decoding (temperature 0): forwards need only each logits row's greedy token.
  bool greedy() const { return cfg_.sampler.temperature == 0.0; }

  /// Deepest candidate depth worth verifying: positions stay in the context and no more tokens
  /// are drafted than remain to generate.
  int max_depth() const {
    const int remaining = max_new_ - static_cast<int>(res_.tokens.size());
    return std::max(0, std::min(mc_.n_ctx - 1 - n_past_, remaining - 1));
  }

  std::vector<int> self_spec_draft(StepRecord& rec) {
    std::vector<int> draft;
    const int depth = std::min(cfg_.draft_max, max_depth());
    lm::ForwardOptions opt;
    opt.all_logits = false;
    opt.logits_rows = {0};
    opt.skip_attn = cfg_.skip.attn;
    opt.skip_mlp = cfg_.skip.mlp;
    opt.time_attention = cfg_.time_attention;
    opt.greedy_only = true;  // a draft token is the skip model's argmax, kept while its probability is high
    opt.greedy_prob = true;
    int tok = cur_;
    for (int k = 0; k < depth; ++k) {
      lm::Batch b;
      b.add(tok, n_past_ + k);
      const auto te = Clock::now();
      lm::ForwardResult fr = engine_.forward(b, opt);
      engine_.commit({0});  // the draft's own K/V, rolled back below
      rec.engine_s += since(te);
      ++res_.forward_passes;
      ++rec.draft_rows;
      if (!fr.attn_cpu_s.empty()) {
        rec.draft_attn_cpu_s += fr.attn_cpu_s[0];
        res_.attention_timed = true;
      }
      const int x = fr.greedy[0];
      draft.push_back(x);
      tok = x;
      if (fr.greedy_prob[0] < cfg_.draft_stop) break;
    }
    const auto te = Clock::now();
    engine_.truncate(n_past_);
    rec.engine_s += since(te);
    return draft;
  }

  /// The child of trie node `node` accepted from logits row `li` of fr, or -1 with `token` set
  /// to the token to emit instead.  Sampling: child x is accepted with probability p'(x),
  /// else dropped and p' renormalised (speculative sampling over a tree); the token is then
  /// drawn from the residual.  Greedy: p' is a point mass at the row's greedy token, so the
  /// child with that token is accepted, else that token is emitted (no uniform is consumed).
  int accept_child(const CandidateTrie& trie, int node, const lm::ForwardResult& fr, int li, int& token) {
    if (greedy()) {
      token = fr.greedy[li];
      for (int c : trie.nodes[node].children)
        if (trie.nodes[c].token == token) return c;
      return -1;
    }
    sampler_.distribution(fr.logits.row(li), mc_.vocab_size, dist_);
    for (int c : trie.nodes[node].children) {
      const int x = trie.nodes[c].token;
      const double px = dist_.prob(x);
      if (px >= 1.0 - 1e-12 || (px > 0.0 && sampler_.uniform() < px)) return c;
      double total = 0.0;  // residual: drop x and renormalise
      for (std::size_t k = 0; k < dist_.ids.size(); ++k) {
        if (dist_.ids[k] == x) dist_.p[k] = 0.0;
        total += dist_.p[k];
      }
      for (double& p : dist_.p) p /= total;
    }
    token = sampler_.draw(dist_);
    return -1;
  }

  void step() {
    const auto t0 = Clock::now();
    StepRecord rec;
    rec.step = static_cast<int>(res_.steps.size());
    rec.n_past = n_past_;

    // Adaptive FAFO: this step's shape, given the prompt match on offer (always computed: the
    // schedule compares it with what is generated, drafted or not).
    const Arm* arm = nullptr;
    std::vector<int> match;
    AdaptiveSchedule::Choice choice;
    const std::size_t emitted_before = res_.tokens.size();
    if (sched_) {
      match = prompt_lookup(ctx_, cfg_.pld_max_ngram, cfg_.pld_min_ngram, cfg_.pld_draft);
      choice = sched_->choose(static_cast<int>(match.size()));
      rec.arm = choice.arm;
      rec.prompt_draft = std::min<int>(choice.draft, static_cast<int>(match.size()));
      arm = &sched_->arm(choice.arm);
    }

    // Candidate continuations of cur_ (bit 1: a prompt match, bit 2: the n-gram pool).
    constexpr unsigned kFromPrompt = 1, kFromPool = 2;
    CandidateTrie trie;
    const int depth = max_depth();
    switch (cfg_.method) {
      case Method::ar: break;
      case Method::prompt_lookup: {
        auto d = prompt_lookup(ctx_, cfg_.pld_max_ngram, cfg_.pld_min_ngram, cfg_.pld_draft);
        if (!d.empty()) ++rec.candidates;
        trie.add(d, depth);
        break;
      }
      case Method::self_spec: {
        auto d = self_spec_draft(rec);
        if (!d.empty()) ++rec.candidates;
        trie.add(d, depth);
        break;
      }
      case Method::lookahead:
      case Method::fafo: {
        if (rec.prompt_draft > 0) {
          ++rec.candidates;
          trie.add(std::vector<int>(match.begin(), match.begin() + rec.prompt_draft), depth, kFromPrompt);
        }
        auto grams = pool_.lookup(cur_);
        const int g = std::min<int>(arm ? arm->guesses : cfg_.guesses, static_cast<int>(grams.size()));
        for (int i = 0; i < g; ++i) trie.add(std::vector<int>(grams[i].begin() + 1, grams[i].end()), depth, kFromPool);
        rec.candidates += g;
        break;
      }
    }

    // Rows: 0 = input, 1..T-1 = trie nodes, then the window's rows.
    lm::Batch b;
    b.add(cur_, n_past_);
    for (int i = 1; i < trie.size(); ++i) {
      const auto& nd = trie.nodes[i];
      std::vector<int> anc;
      for (int p = nd.parent; p >= 0; p = trie.nodes[p].parent) anc.push_back(p);
      b.add(nd.token, n_past_ + nd.depth, 0, std::move(anc));
    }
    rec.verify_rows = trie.size() - 1;
    lm::ForwardOptions opt;
    opt.all_logits = false;
    opt.time_attention = cfg_.time_attention;
    opt.greedy_only = greedy();
    for (int i = 0; i < trie.size(); ++i) opt.logits_rows.push_back(i);
    if (comp_ && comp_->config().policy != kv::Policy::streaming && comp_->config().policy != kv::Policy::snapkv)
      opt.attn_rows = opt.logits_rows;

    std::vector<int> last_level_rows;
    int draft_view = -1;
    LookaheadWindow* win = nullptr;
    if (cfg_.method == Method::lookahead || cfg_.method == Method::fafo) {
      const int W = arm ? arm->window : cfg_.window, N = arm ? arm->ngram : cfg_.ngram;
      if (W > 0 && n_past_ + (N - 2) + (W - 1) < mc_.n_ctx) win = &window(W, N);
    }
    const bool use_window = win != nullptr;
    if (use_window) {
      win->set_input(cur_);
      draft_view = b.add_view(comp_ ? comp_->view() : lm::View::full());
      const int W = win->window(), NL = win->levels();
      std::vector<std::vector<int>> row_of(NL, std::vector<int>(W, -1));
      row_of[0][0] = 0;
      for (int l = 0; l < NL; ++l)
        for (int i = (l == 0 ? 1 : 0); i < W; ++i) {
          std::vector<int> att;
          for (int j = 0; j <= (l == 0 ? i - 1 : i); ++j) att.push_back(row_of[0][j]);
          for (int m = 1; m < l; ++m) att.push_back(row_of[m][i]);
          row_of[l][i] = b.add(win->token(l, i), n_past_ + l + i, draft_view, std::move(att));
        }
      rec.draft_rows = W * NL - 1;
      last_level_rows = row_of[NL - 1];
      for (int r : last_level_rows)
        if (r != 0) opt.logits_rows.push_back(r);
    }
    rec.rows = b.size();

    auto te = Clock::now();
    lm::ForwardResult fr = engine_.forward(b, opt);
    rec.engine_s += since(te);
    ++res_.forward_passes;
    if (!fr.attn_cpu_s.empty()) {
      res_.attention_timed = true;
      rec.verify_attn_cpu_s = fr.attn_cpu_s[0];
      if (draft_view >= 0) rec.draft_attn_cpu_s += fr.attn_cpu_s[draft_view];
    }
    std::vector<int> logit_index(b.size(), -1);
    for (std::size_t i = 0; i < fr.logits_rows.size(); ++i) logit_index[fr.logits_rows[i]] = static_cast<int>(i);

    // Acceptance along the trie: from the root, one accepted child per level (accept_child);
    // where none is accepted, the replacement token it gives is emitted and the step ends.
    std::vector<int> commit_rows{0};
    int node = 0;
    while (true) {
      int token = -1;
      const int next_node = accept_child(trie, node, fr, logit_index[node], token);
      if (next_node < 0) {
        emit(token);
        break;
      }
      commit_rows.push_back(next_node);
      node = next_node;
      const unsigned src = trie.nodes[node].sources;
      if (src == (kFromPrompt | kFromPool)) ++rec.from_both;
      else if (src == kFromPrompt) ++rec.from_prompt;
      else if (src == kFromPool) ++rec.from_lookahead;
      if (!emit(trie.nodes[node].token)) break;
    }
    rec.accepted = static_cast<int>(commit_rows.size());
    cur_ = res_.tokens.back();  // the bonus token: the next step's input

    te = Clock::now();
    engine_.commit(commit_rows);
    rec.engine_s += since(te);
    if (comp_) {
      std::vector<int> slot(b.size(), -1);
      for (std::size_t i = 0; i < commit_rows.size(); ++i) slot[commit_rows[i]] = n_past_ + static_cast<int>(i);
      comp_->commit(fr.attention, slot, false, engine_.host_cache());
    }
    n_past_ += static_cast<int>(commit_rows.size());

    if (use_window) {
      std::vector<int> out(last_level_rows.size());
      for (std::size_t i = 0; i < out.size(); ++i) {
        const int li = logit_index[last_level_rows[i]];
        out[i] = greedy() ? fr.greedy[li] : lm::greedy_token(fr.logits.row(li), mc_.vocab_size);
      }
      win->advance(out, pool_);
    }
    rec.wall_s = since(t0);
    if (sched_)
      sched_->observe(choice, match, std::vector<int>(res_.tokens.begin() + static_cast<std::ptrdiff_t>(emitted_before), res_.tokens.end()),
                      rec.rows, rec.wall_s);
    res_.steps.push_back(rec);
  }

  lm::Engine& engine_;
  const lm::ModelConfig& mc_;
  const DecodeConfig& cfg_;
  TokenSink on_token_;
  lm::Sampler sampler_;
  lm::TokenDist dist_;  // accept_child's scratch distribution
  NgramPool pool_;
  std::map<std::pair<int, int>, std::unique_ptr<LookaheadWindow>> windows_;  // by (W, N)
  std::unique_ptr<AdaptiveSchedule> sched_;
  std::vector<int> prompt_;
  std::unique_ptr<kv::Compressor> comp_;
  std::vector<int> ctx_;
  DecodeResult res_;
  int cur_ = 0, n_past_ = 0, max_new_ = 0;
  bool done_ = false;
};

}  // namespace

DecodeResult generate(const lm::Model& model, const std::vector<int>& prompt, const DecodeConfig& config,
                      const TokenSink& on_token) {
  lm::CpuEngine engine(model);
  return generate(engine, prompt, config, on_token);
}

DecodeResult generate(lm::Engine& engine, const std::vector<int>& prompt, const DecodeConfig& config,
                      const TokenSink& on_token) {
  config.validate(engine.config());
  Decoder d(engine, config, on_token);
  return d.run(prompt);
}

SkipSet search_skip_set(const lm::Model& model, const std::vector<std::vector<int>>& prompts, int new_tokens,
                        const DecodeConfig& base, int max_skips, std::vector<double>* trace) {
  const int L = model.config.n_layers;
  DecodeConfig cfg = base;
  cfg.method = Method::self_spec;
  cfg.sampler.temperature = 0.0;
  cfg.max_new_tokens = new_tokens;
  cfg.time_attention = false;
  cfg.skip.attn.assign(L, 0);
  cfg.skip.mlp.assign(L, 0);
  auto speed = [&](const SkipSet& s) {
    cfg.skip = s;
    double tokens = 0.0, cost = 0.0;
    const double frac = 1.0 - double(s.count()) / (2.0 * L);
    for (const auto& p : prompts) {
      DecodeResult r = generate(model, p, cfg);
      int drafts = 0, accepted = 0;
      for (const auto& st : r.steps) {
        drafts += st.draft_rows;
        accepted += st.accepted;
      }
      tokens += accepted;
      cost += double(r.steps.size()) + drafts * frac;
    }
    return cost > 0.0 ? tokens / cost : 0.0;
  };
  SkipSet best = cfg.skip;
  double best_speed = speed(best);
  if (trace) trace->assign(1, best_speed);
  for (int round = 0; round < max_skips; ++round) {
    SkipSet round_best;
    double round_speed = best_speed;
    for (int kind = 0; kind < 2; ++kind)
      for (int l = 0; l < L; ++l) {
        SkipSet s = best;
        auto& v = kind == 0 ? s.attn : s.mlp;
        if (v[l]) continue;
        v[l] = 1;
        const double sp = speed(s);
        if (sp > round_speed) {
          round_speed = sp;
          round_best = s;
        }
      }
    if (round_best.attn.empty()) break;
    best = round_best;
    best_speed = round_speed;
    if (trace) trace->push_back(best_speed);
    log::info("skip-set search: {} sublayers skipped, modelled speed {:.3f}", best.count(), best_speed);
  }
  return best;
}

}  // namespace icmlkit::decode
