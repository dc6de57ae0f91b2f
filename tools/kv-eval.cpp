// kv-eval: how well a model generates from a KV cache evicted after the prefill (OBCache's
// protocol: prefill-only eviction with --num-recent kept), method x budget, on repeated-passage
// recall prompts built from a corpus, with bootstrap intervals and paired OBCache-vs-base
// differences (issue 27).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "cli/run_tool.hpp"
#include "io/json.hpp"
#include "kv/policy.hpp"
#include "kv/prefill_evict.hpp"
#include "lm/forward.hpp"
#include "lm/model_io.hpp"
#include "lm/sampler.hpp"
#include "nn/corpus.hpp"
#include "nn/corpus_flags.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/progress.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

/// Greedy continuation of `n_new` tokens from `cache` (the prompt committed, its last position
/// `pos` - 1), starting with `first` (the prefill's greedy token).  Commits as it goes.
std::vector<int> greedy_from(const lm::Model& m, lm::KvCache& cache, int first, int pos, int n_new) {
  std::vector<int> out{first};
  lm::ForwardOptions o;
  o.greedy_only = true;
  while (static_cast<int>(out.size()) < n_new) {
    lm::Batch b;
    b.add(out.back(), pos++);
    const auto r = lm::forward(m, cache, b, o);
    cache.commit_all();
    out.push_back(r.greedy[0]);
  }
  return out;
}

/// The same with eviction during decoding: each step attends the compressor's keep sets, and its
/// row is committed to the cache and to the compressor, which evicts to stay within the budget.
std::vector<int> greedy_evicting(const lm::Model& m, lm::KvCache& cache, kv::Compressor& comp, int first, int pos, int n_new) {
  std::vector<int> out{first};
  lm::ForwardOptions o;
  o.greedy_only = true;
  if (comp.needs_attention()) o.attn_rows = {0};
  while (static_cast<int>(out.size()) < n_new) {
    lm::Batch b;
    b.add(out.back(), pos++, b.add_view(comp.view()));
    const auto r = lm::forward(m, cache, b, o);
    cache.commit_all();
    comp.commit(r.attention, {cache.size() - 1}, false, &cache);
    out.push_back(r.greedy[0]);
  }
  return out;
}

/// Per-row results of a teacher-forced pass over the true continuation after the prompt.
struct Forced {
  std::vector<int> argmax;  ///< rows 0..G-2: the argmax next token
  std::vector<double> nll;  ///< rows 0..G-2: NLL of the next continuation token
};

void score_row(const lm::Model& m, const lm::Matrix& logits, int row, int next, Forced& f) {
  f.argmax.push_back(lm::greedy_token(logits.row(row), m.config.vocab_size));
  f.nll.push_back(-lm::log_softmax_at(logits.row(row), m.config.vocab_size, next));
}

/// Teacher-forced pass over `cont` [G] from the prompt in `cache` (one batched forward), with
/// `options` (attention records, when asked for).  Commits to `cache`.
Forced teacher_forced(const lm::Model& m, lm::KvCache& cache, const std::vector<int>& cont, int pos,
                      const lm::ForwardOptions& options, lm::ForwardResult* result = nullptr) {
  lm::ForwardResult r = lm::forward(m, cache, lm::Batch::causal(cont, pos), options);
  cache.commit_all();
  Forced f;
  for (std::size_t t = 0; t + 1 < cont.size(); ++t) score_row(m, r.logits, static_cast<int>(t), cont[t + 1], f);
  if (result) *result = std::move(r);
  return f;
}

/// The same one row at a time with eviction during decoding; `views` gets each row's keep sets.
Forced teacher_forced_evicting(const lm::Model& m, lm::KvCache& cache, kv::Compressor& comp, const std::vector<int>& cont, int pos,
                               std::vector<lm::View>& views) {
  Forced f;
  lm::ForwardOptions o;
  if (comp.needs_attention()) o.attn_rows = {0};
  for (std::size_t t = 0; t < cont.size(); ++t) {
    lm::Batch b;
    views.push_back(comp.view());
    b.add(cont[t], pos + static_cast<int>(t), b.add_view(views.back()));
    const auto r = lm::forward(m, cache, b, o);
    cache.commit_all();
    comp.commit(r.attention, {cache.size() - 1}, false, &cache);
    if (t + 1 < cont.size()) score_row(m, r.logits, 0, cont[t + 1], f);
  }
  return f;
}

int common_prefix(const std::vector<int>& a, const std::vector<int>& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return static_cast<int>(i);
}

/// Mean and percentile-bootstrap 95 % interval of `x` (1,000 resamples from `seed`).
nlohmann::json mean_ci(const std::vector<double>& x, std::uint64_t seed) {
  const std::size_t n = x.size();
  double mean = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(std::max<std::size_t>(n, 1));
  Rng rng(seed);
  std::vector<double> means(1000);
  for (auto& mu : means) {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) s += x[rng.below(n)];
    mu = s / static_cast<double>(std::max<std::size_t>(n, 1));
  }
  std::sort(means.begin(), means.end());
  return {{"mean", mean}, {"lo", means[24]}, {"hi", means[974]}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, corpus_path, output = "-", split = "val", gqa = "sum", evict = "prefill", passage_source = "corpus";
  nn::CorpusOptions copt;
  std::vector<std::string> methods{"streaming", "h2o", "h2o+obcVK", "tova", "tova+obcVK", "snapkv", "snapkv+obcVK"};
  std::vector<double> budgets{0.05, 0.1, 0.2};
  int n_prompts = 64, passage = 48, filler = 400, cue = 8, generate = 24, num_recent = 16, kernel = 7;
  cli::ToolInfo info{
      "kv-eval",
      "Generation from an evicted KV cache, method x budget.  --evict prefill (OBCache's protocol): after the\n"
      "prompt each method keeps, per layer and KV head, the --num-recent newest prompt slots (tova: none)\n"
      "and its top-scoring older ones up to the budget, and decoding never evicts.  --evict decode: the\n"
      "methods as fafo-generate's compressors (h2o: accumulated scores of every row, --num-recent kept;\n"
      "tova: per layer, from the newest row; snapkv: the prompt only, window --num-recent; streaming: 4\n"
      "sinks) also evict while decoding, so the cache stays at the budget.  Prompts: [BOS] passage (the\n"
      "first --passage tokens of one document, or random token ids) + filler (--filler tokens of another)\n"
      "+ cue (the passage's first --cue tokens); the model should continue with the passage.  Per method\n"
      "and budget (fractions of the prompt, or slots): recall (tokens of the passage reproduced before\n"
      "the first miss, greedy), agreement with the full cache's greedy output (exact-match prefix and\n"
      "token accuracy), and, teacher-forced on the true continuation, next-token agreement with the full\n"
      "cache, perplexity, and the attention-output error per layer, sqrt(sum ||o' - o||^2 / sum ||o||^2) over\n"
      "the continuation rows and query heads (o: the full cache's attention output; o': the same query over\n"
      "the kept slots and the continuation, the quantity OBCache minimises; every layer sees the full cache's\n"
      "inputs) and\n"
      "peak_slots, the most slots one KV head held; means with percentile-bootstrap 95 % intervals over\n"
      "the prompts, and for each OBCache method the paired difference to its base (h2o+obcVK - h2o, ...).\n"
      "Documents come from the corpus split (--split val: every --val-every-th document, as lm-train\n"
      "holds out).",
      "  kv-eval data/models/kjv7m.h5 data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --val-every 20 --prompts 64\n"
      "  kv-eval model.h5 text.txt --split all --methods h2o,h2o+obcVK --budget 0.05 --prompts 16 | jq '.results[]'\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& a) {
        a.add_option("model,-m,--model", model_path, "Model (.h5, .gguf, or a Hugging Face directory)")->required();
        a.add_option("corpus", corpus_path, "Text the passages and fillers come from (as lm-train reads it)")->required();
        nn::add_corpus_flags(a, copt);
        a.add_option("--split", split, "val, train or all documents")->capture_default_str()->check(CLI::IsMember({"val", "train", "all"}));
        a.add_option("--evict", evict, "prefill: evict once after the prompt (the paper's protocol); decode: also while decoding, at the budget")
            ->capture_default_str()->check(CLI::IsMember({"prefill", "decode"}));
        a.add_option("--passage-source", passage_source, "corpus: a document's first tokens; random: uniform token ids (not BOS/EOS)")
            ->capture_default_str()->check(CLI::IsMember({"corpus", "random"}));
        a.add_option("--prompts", n_prompts, "Recall prompts (seeded; at least 2 for an interval)")->capture_default_str()->check(cli::int_range(2, 100000));
        a.add_option("--passage", passage, "Passage tokens")->capture_default_str()->check(cli::int_range(2, 1 << 20));
        a.add_option("--filler", filler, "Filler tokens between the passage and the cue")->capture_default_str()->check(cli::int_range(0, 1 << 20));
        a.add_option("--cue", cue, "Passage tokens repeated at the end")->capture_default_str()->check(cli::int_range(1, 1 << 20));
        a.add_option("--generate", generate, "Greedy tokens generated (at most passage - cue)")->capture_default_str()->check(cli::int_range(2, 1 << 20));
        a.add_option("--methods", methods, "Comma list of presets (obcache-score's)")->delimiter(',')->capture_default_str()
            ->check(CLI::IsMember(kv::preset_names()));
        a.add_option("--budget", budgets, "Comma list: fractions of the prompt in (0, 1), or slots >= 1")->delimiter(',')->capture_default_str();
        a.add_option("--num-recent", num_recent, "Newest slots always kept, and the scoring window's rows")->capture_default_str()
            ->check(cli::int_range(1, 1 << 20));
        a.add_option("--kernel", kernel, "snapkv: max-pooling width (odd)")->capture_default_str()->check(cli::int_range(1, 1001));
        a.add_option("--gqa-reduce", gqa, "Combine a KV group's query heads' scores by sum or max (OBCache scores; with --evict decode also h2o's)")->capture_default_str()
            ->check(CLI::IsMember({"sum", "max"}));
        a.add_option("-o,--output", output, "Result, *.json (- = stdout)")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        if (cue >= passage) throw UsageError("the cue must be shorter than the passage", "--cue");
        if (generate > passage - cue) throw UsageError(fmt::format("--generate {} exceeds the passage left after the cue ({})", generate, passage - cue), "--generate");
        if (kernel % 2 == 0) throw UsageError("the pooling width must be odd", "--kernel");
        const std::vector<kv::PrefillMethod> ms = kv::parse_prefill_methods(methods);
        const bool decode = evict == "decode";
        const kv::GqaReduce reduce = kv::parse_gqa_reduce(gqa);
        ctx.prov.add_input(model_path, lm::model_sha256(model_path));
        const lm::Model model = lm::load_any(model_path);
        const lm::ModelConfig& c = model.config;
        const lm::Tokenizer tok = lm::model_tokenizer(model, model_path);
        const int n = 1 + passage + filler + cue;  // the prompt, BOS included
        if (n + generate > c.n_ctx)
          throw UsageError(fmt::format("a prompt of {} tokens plus {} generated exceeds n_ctx = {} (shorten --filler or --passage)", n, generate, c.n_ctx),
                           "--filler");
        const std::vector<int> slots = kv::budget_slots(budgets, n, ms, num_recent);
        // Documents long enough to give a passage or a filler.
        const nn::Documents docs = nn::read_corpus(corpus_path, copt);
        ctx.prov.add_input(corpus_path, docs.sha256);
        const std::vector<std::string> pool = nn::split_documents(docs, split);
        std::vector<std::vector<int>> toks;
        for (const auto& d : pool) {
          std::vector<int> t = tok.encode(d, corpus_path);
          if (static_cast<int>(t.size()) >= std::max(passage, filler)) toks.push_back(std::move(t));
        }
        if (toks.size() < 2)
          throw InputError(fmt::format("{} documents of the {} split have at least {} tokens; need 2 ({}shorter --passage or --filler)",
                                       toks.size(), split, std::max(passage, filler), split == "all" ? "" : "try --split all, or "),
                           corpus_path);

        const std::size_t M = ms.size(), B = slots.size();
        const int L = c.n_layers, nkv = c.n_kv_heads, group = c.n_heads / c.n_kv_heads;
        // Per (method, budget): per-prompt values.
        std::vector<std::vector<std::vector<double>>> recall(M, std::vector<std::vector<double>>(B)), match(recall), acc(recall),
            agree(recall), nll(recall), err(recall);
        // Per (method, budget): the output error summed over prompts, per layer.
        std::vector<std::vector<std::vector<double>>> err_layer(M, std::vector<std::vector<double>>(B, std::vector<double>(L, 0.0)));
        std::vector<double> full_recall, full_nll;
        std::vector<double> score_s(M, 0.0);
        // Per (method, budget): the most slots one (layer, KV head) held for a teacher-forced row
        // (its own included), over rows and prompts.
        std::vector<std::vector<int>> peak(M, std::vector<int>(B, 0));
        // Decode-time eviction: each method as a Compressor at each budget (the paper's windows).
        std::vector<std::vector<kv::PolicyConfig>> configs(M);
        for (std::size_t mi = 0; mi < M; ++mi)
          for (int sl : slots) {
            kv::PolicyConfig pc = ms[mi].preset;
            pc.budget = sl;
            pc.recent = num_recent;
            pc.window = num_recent;
            pc.kernel = kernel;
            pc.gqa_reduce = reduce;
            kv::Compressor probe(c, pc);  // validates
            configs[mi].push_back(pc);
          }
        std::set<int> rowset;
        for (std::size_t mi = 0; mi < M; ++mi)
          for (int r : decode ? kv::Compressor(c, configs[mi][0]).prefill_rows(n) : kv::score_rows(ms[mi], n, num_recent)) rowset.insert(r);
        std::vector<int> identity(n);
        std::iota(identity.begin(), identity.end(), 0);
        Rng pick(ctx.common.seed);
        Rng random_passage(derive_seed(ctx.common.seed, 0x9a55));
        Progress bar(static_cast<std::size_t>(n_prompts), "prompts");
        for (int p = 0; p < n_prompts; ++p) {
          const std::size_t a = pick.below(toks.size());
          std::size_t b = pick.below(toks.size() - 1);
          if (b >= a) ++b;
          std::vector<int> pass(toks[a].begin(), toks[a].begin() + passage);
          if (passage_source == "random")
            for (int& t : pass) {
              do t = static_cast<int>(random_passage.below(std::size_t(c.vocab_size)));
              while (t == c.bos_id || t == c.eos_id);
            }
          std::vector<int> prompt{c.bos_id >= 0 ? c.bos_id : toks[a][0]};
          prompt.insert(prompt.end(), pass.begin(), pass.end());
          prompt.insert(prompt.end(), toks[b].begin(), toks[b].begin() + filler);
          prompt.insert(prompt.end(), pass.begin(), pass.begin() + cue);
          const std::vector<int> truth(pass.begin() + cue, pass.begin() + cue + generate);
          lm::KvCache cache(c);
          lm::ForwardOptions fo;
          fo.attn_rows.assign(rowset.begin(), rowset.end());
          fo.all_logits = false;
          fo.logits_rows = {n - 1};
          fo.greedy_only = true;
          const auto fr = lm::forward(model, cache, lm::Batch::causal(prompt, 0), fo);
          cache.commit_all();
          const int first = fr.greedy[0];
          kv::PromptKeeps pk;
          if (!decode) pk = kv::prompt_keep_sets(ms, slots, num_recent, kernel, reduce, false, cache, c.n_heads, fr.attention);
          lm::KvCache full_run = cache;
          const std::vector<int> full_out = greedy_from(model, full_run, first, n, generate);
          // The full cache's teacher-forced pass, with every row's attention for the output error.
          lm::ForwardOptions tfo;
          for (int r = 0; r < generate; ++r) tfo.attn_rows.push_back(r);
          lm::KvCache full_tf_cache = cache;
          lm::ForwardResult full_tf_result;
          const Forced full_tf = teacher_forced(model, full_tf_cache, truth, n, tfo, &full_tf_result);
          std::vector<int> tf_slot(generate);
          std::iota(tf_slot.begin(), tf_slot.end(), n);
          full_recall.push_back(common_prefix(full_out, truth));
          double s_full = 0;
          for (double v : full_tf.nll) s_full += v;
          full_nll.push_back(s_full / static_cast<double>(full_tf.nll.size()));
          for (std::size_t mi = 0; mi < M; ++mi) {
            // Decode mode: the method's compressor after the prompt (its prefill rows only).
            std::vector<lm::AttentionRecord> own;
            if (decode) {
              const std::vector<int> rows = kv::Compressor(c, configs[mi][0]).prefill_rows(n);
              if (rows.size() != rowset.size())
                for (const auto& rec : fr.attention)
                  if (std::binary_search(rows.begin(), rows.end(), rec.row)) own.push_back(rec);
            }
            const auto& prefill_records = decode && !own.empty() ? own : fr.attention;
            if (!decode) score_s[mi] += pk.score_seconds[mi];
            for (std::size_t bi = 0; bi < B; ++bi) {
              std::vector<int> out;
              Forced tf;
              // Each teacher-forced row's kept slots per (layer, KV head), and the first slot
              // beyond the reach of eviction for that row.
              std::vector<const std::vector<std::vector<std::int32_t>>*> row_keep(std::size_t(generate), nullptr);
              std::vector<int> keep_from(std::size_t(generate), n);
              std::vector<lm::View> views;
              if (!decode) {
                lm::KvCache ev = kv::evicted_copy(cache, pk.keep[mi][bi]);
                lm::KvCache ev_gen = ev;
                tf = teacher_forced(model, ev, truth, n, {});
                out = greedy_from(model, ev_gen, first, n, generate);
                for (auto& k : row_keep) k = &pk.keep[mi][bi];
              } else {
                kv::Compressor comp(c, configs[mi][bi]);
                Stopwatch sw;
                comp.commit(prefill_records, identity, true, &cache);
                if (bi == 0) score_s[mi] += sw.seconds();
                kv::Compressor gen_comp = comp;
                lm::KvCache tf_cache = cache, gen_cache = cache;
                tf = teacher_forced_evicting(model, tf_cache, comp, truth, n, views);
                out = greedy_evicting(model, gen_cache, gen_comp, first, n, generate);
                for (int t = 0; t < generate; ++t) {
                  row_keep[t] = views[t].lists();  // null: nothing evicted yet
                  keep_from[t] = n + t;
                }
              }
              for (int t = 0; t < generate; ++t)
                for (int lh = 0; lh < L * nkv; ++lh) {
                  const int kept = row_keep[t] ? static_cast<int>((*row_keep[t])[lh].size()) : keep_from[t];
                  peak[mi][bi] = std::max(peak[mi][bi], kept + (decode ? 1 : t + 1));
                }
              // Attention-output error per layer over the teacher-forced rows and query heads:
              // sqrt(sum ||o' - o||^2 / sum ||o||^2); the prompt's figure is the mean over layers.
              std::vector<kv::OutputError> layer_err(L);
              for (const auto& rec : full_tf_result.attention) {
                const auto* keep = row_keep[rec.row];
                const int g = rec.head / group;
                if (keep)
                  layer_err[rec.layer] += kv::evicted_output_error(rec, tf_slot, full_tf_cache, g, (*keep)[std::size_t(rec.layer) * nkv + g],
                                                                   keep_from[rec.row]);
              }
              double e_all = 0;
              for (int l = 0; l < L; ++l) {
                err_layer[mi][bi][l] += layer_err[l].relative();
                e_all += layer_err[l].relative() / L;
              }
              int same = 0, agreed = 0;
              for (int t = 0; t < generate; ++t) same += out[t] == full_out[t];
              for (std::size_t t = 0; t < tf.argmax.size(); ++t) agreed += tf.argmax[t] == full_tf.argmax[t];
              double s = 0;
              for (double v : tf.nll) s += v;
              recall[mi][bi].push_back(common_prefix(out, truth));
              match[mi][bi].push_back(common_prefix(out, full_out));
              acc[mi][bi].push_back(double(same) / generate);
              agree[mi][bi].push_back(double(agreed) / static_cast<double>(tf.argmax.size()));
              nll[mi][bi].push_back(s / static_cast<double>(tf.nll.size()));
              err[mi][bi].push_back(e_all);
            }
          }
          bar.tick();
        }
        bar.finish();
        const std::uint64_t bs = derive_seed(ctx.common.seed, 0xb007);
        nlohmann::json results = nlohmann::json::array(), paired = nlohmann::json::array();
        auto ppl = [&](const std::vector<double>& v) {
          nlohmann::json j = mean_ci(v, bs);
          return nlohmann::json{{"mean", std::exp(j["mean"].get<double>())}, {"lo", std::exp(j["lo"].get<double>())},
                                {"hi", std::exp(j["hi"].get<double>())}};
        };
        auto by_layer = [&](const std::vector<double>& sums) {
          nlohmann::json j = nlohmann::json::array();
          for (double v : sums) j.push_back(v / n_prompts);
          return j;
        };
        for (std::size_t mi = 0; mi < M; ++mi)
          for (std::size_t bi = 0; bi < B; ++bi)
            results.push_back({{"method", methods[mi]}, {"budget", budgets[bi]}, {"slots", slots[bi]},
                               {"recall_tokens", mean_ci(recall[mi][bi], bs)}, {"full_match_tokens", mean_ci(match[mi][bi], bs)},
                               {"full_token_accuracy", mean_ci(acc[mi][bi], bs)}, {"next_token_agreement", mean_ci(agree[mi][bi], bs)},
                               {"perplexity", ppl(nll[mi][bi])}, {"output_error", mean_ci(err[mi][bi], bs)},
                               {"output_error_by_layer", by_layer(err_layer[mi][bi])}, {"peak_slots", peak[mi][bi]}, {"score_seconds_per_prompt", score_s[mi] / n_prompts}});
        // Paired OBCache - base differences, per prompt, with intervals.
        for (std::size_t mi = 0; mi < M; ++mi) {
          const auto plus = methods[mi].find('+');
          if (plus == std::string::npos) continue;
          const auto base = std::find(methods.begin(), methods.end(), methods[mi].substr(0, plus));
          if (base == methods.end()) continue;
          const std::size_t bj = static_cast<std::size_t>(base - methods.begin());
          for (std::size_t bi = 0; bi < B; ++bi) {
            auto diff = [&](const std::vector<std::vector<std::vector<double>>>& v) {
              std::vector<double> d(v[mi][bi].size());
              for (std::size_t i = 0; i < d.size(); ++i) d[i] = v[mi][bi][i] - v[bj][bi][i];
              nlohmann::json j = mean_ci(d, bs);
              j["excludes_zero"] = j["lo"].get<double>() > 0 || j["hi"].get<double>() < 0;
              return j;
            };
            paired.push_back({{"method", methods[mi]}, {"base", *base}, {"budget", budgets[bi]}, {"recall_tokens", diff(recall)},
                              {"next_token_agreement", diff(agree)}, {"nll", diff(nll)},
                              {"output_error", diff(err)}});
          }
        }
        nlohmann::json out{{"meta", ctx.prov.to_json()},
                           {"prompts", n_prompts},
                           {"prompt_tokens", n},
                           {"settings", {{"passage", passage}, {"filler", filler}, {"cue", cue}, {"generate", generate},
                                         {"num_recent", num_recent}, {"gqa_reduce", gqa}, {"split", split}, {"documents", toks.size()},
                                         {"evict", evict}, {"passage_source", passage_source}, {"methods", methods},
                                         {"budgets", budgets}, {"kernel", kernel}, {"seed", ctx.common.seed}}},
                           {"full_cache", {{"recall_tokens", mean_ci(full_recall, bs)}, {"perplexity", ppl(full_nll)}}},
                           {"results", results},
                           {"paired", paired}};
        io::write_json(output, out);
        log::info("{} prompts of {} tokens, {} methods x {} budgets; full cache: {:.2f} of {} passage tokens recalled on average", n_prompts, n, M, B,
                  out["full_cache"]["recall_tokens"]["mean"].get<double>(), generate);
      });
}
