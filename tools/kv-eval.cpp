// kv-eval: how well a model generates from a KV cache evicted after the prefill (OBCache's
// protocol: prefill-only eviction with --num-recent kept), method x budget, on repeated-passage
// recall prompts built from a corpus, with bootstrap intervals and paired OBCache-vs-base
// differences (issue 27).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "cli/run_tool.hpp"
#include "io/json.hpp"
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

/// Teacher-forced pass over `cont` [G] after the prompt: per row, the argmax and the NLL of the
/// next continuation token (rows 0..G-2).
void teacher_forced(const lm::Model& m, lm::KvCache cache, const std::vector<int>& cont, int pos, std::vector<int>& argmax,
                    std::vector<double>& nll) {
  const auto r = lm::forward(m, cache, lm::Batch::causal(cont, pos));
  argmax.clear();
  nll.clear();
  for (std::size_t t = 0; t + 1 < cont.size(); ++t) {
    argmax.push_back(lm::greedy_token(r.logits.row(static_cast<int>(t)), m.config.vocab_size));
    nll.push_back(-lm::log_softmax_at(r.logits.row(static_cast<int>(t)), m.config.vocab_size, cont[t + 1]));
  }
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
  std::string model_path, corpus_path, output = "-", split = "val", gqa = "sum";
  nn::CorpusOptions copt;
  std::vector<std::string> methods{"streaming", "h2o", "h2o+obcVK", "tova", "tova+obcVK", "snapkv", "snapkv+obcVK"};
  std::vector<double> budgets{0.05, 0.1, 0.2};
  int n_prompts = 64, passage = 48, filler = 400, cue = 8, generate = 24, num_recent = 16, kernel = 7;
  cli::ToolInfo info{
      "kv-eval",
      "Generation from a KV cache evicted after the prefill (OBCache's protocol: each method keeps, per\n"
      "layer and KV head, the --num-recent newest prompt slots (tova: none) and its top-scoring older ones\n"
      "up to the budget; decoding never evicts), on repeated-passage recall prompts: [BOS] passage (the first\n"
      "--passage tokens of one document) + filler (--filler tokens of another) + cue (the passage's first\n"
      "--cue tokens); the model should continue with the passage.  Per method and budget (fractions of\n"
      "the prompt, or slots): recall (tokens of the passage reproduced before the first miss, greedy),\n"
      "agreement with the full cache's greedy output (exact-match prefix and token accuracy), and,\n"
      "teacher-forced on the true continuation, next-token agreement with the full cache and\n"
      "perplexity; means with percentile-bootstrap 95 % intervals over the prompts, and for each\n"
      "OBCache method the paired difference to its base (h2o+obcVK - h2o, ...).  Documents come from\n"
      "the corpus split (--split val: every --val-every-th document, as lm-train holds out).",
      "  kv-eval data/models/kjv7m.h5 data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --val-every 20 --prompts 64\n"
      "  kv-eval model.h5 text.txt --split all --methods h2o,h2o+obcVK --budget 0.05 --prompts 16 | jq '.results[]'\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& a) {
        a.add_option("model,-m,--model", model_path, "Model (.h5, .gguf, or a Hugging Face directory)")->required();
        a.add_option("corpus", corpus_path, "Text the passages and fillers come from (as lm-train reads it)")->required();
        nn::add_corpus_flags(a, copt);
        a.add_option("--split", split, "val, train or all documents")->capture_default_str()->check(CLI::IsMember({"val", "train", "all"}));
        a.add_option("--prompts", n_prompts, "Recall prompts (seeded)")->capture_default_str()->check(cli::int_range(1, 100000));
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
        a.add_option("--gqa-reduce", gqa, "OBCache scores: combine a KV group's query heads by sum or max")->capture_default_str()
            ->check(CLI::IsMember({"sum", "max"}));
        a.add_option("-o,--output", output, "Result, *.json (- = stdout)")->capture_default_str();
      },
      [&](cli::Context& ctx) {
        io::require_json_path(output);
        if (cue >= passage) throw UsageError("the cue must be shorter than the passage", "--cue");
        if (generate > passage - cue) throw UsageError(fmt::format("--generate {} exceeds the passage left after the cue ({})", generate, passage - cue), "--generate");
        if (kernel % 2 == 0) throw UsageError("the pooling width must be odd", "--kernel");
        const std::vector<kv::PrefillMethod> ms = kv::parse_prefill_methods(methods);
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
        std::vector<std::string> pool = split == "train" ? docs.train : split == "val" ? docs.val : docs.train;
        if (split == "all") pool.insert(pool.end(), docs.val.begin(), docs.val.end());
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
        // Per (method, budget): per-prompt values.
        std::vector<std::vector<std::vector<double>>> recall(M, std::vector<std::vector<double>>(B)), match(recall), acc(recall),
            agree(recall), nll(recall);
        std::vector<double> full_recall, full_nll;
        std::vector<double> score_s(M, 0.0);
        std::set<int> rowset;
        for (const auto& m : ms)
          for (int r : kv::score_rows(m, n, num_recent)) rowset.insert(r);
        Rng pick(ctx.common.seed);
        Progress bar(static_cast<std::size_t>(n_prompts), "prompts");
        for (int p = 0; p < n_prompts; ++p) {
          const std::size_t a = pick.below(toks.size());
          std::size_t b = pick.below(toks.size() - 1);
          if (b >= a) ++b;
          std::vector<int> prompt{c.bos_id >= 0 ? c.bos_id : toks[a][0]};
          prompt.insert(prompt.end(), toks[a].begin(), toks[a].begin() + passage);
          prompt.insert(prompt.end(), toks[b].begin(), toks[b].begin() + filler);
          prompt.insert(prompt.end(), toks[a].begin(), toks[a].begin() + cue);
          const std::vector<int> truth(toks[a].begin() + cue, toks[a].begin() + cue + generate);
          lm::KvCache cache(c);
          lm::ForwardOptions fo;
          fo.attn_rows.assign(rowset.begin(), rowset.end());
          fo.all_logits = false;
          fo.logits_rows = {n - 1};
          fo.greedy_only = true;
          const auto fr = lm::forward(model, cache, lm::Batch::causal(prompt, 0), fo);
          cache.commit_all();
          const int first = fr.greedy[0];
          const kv::PromptKeeps pk = kv::prompt_keep_sets(ms, slots, num_recent, kernel, reduce, false, cache, c.n_heads, fr.attention);
          lm::KvCache full_run = cache;
          const std::vector<int> full_out = greedy_from(model, full_run, first, n, generate);
          std::vector<int> full_arg;
          std::vector<double> full_tf;
          teacher_forced(model, cache, truth, n, full_arg, full_tf);
          full_recall.push_back(common_prefix(full_out, truth));
          double s_full = 0;
          for (double v : full_tf) s_full += v;
          full_nll.push_back(s_full / static_cast<double>(full_tf.size()));
          for (std::size_t mi = 0; mi < M; ++mi) {
            score_s[mi] += pk.score_seconds[mi];
            for (std::size_t bi = 0; bi < B; ++bi) {
              lm::KvCache ev = kv::evicted_copy(cache, pk.keep[mi][bi]);
              std::vector<int> arg;
              std::vector<double> tf;
              teacher_forced(model, ev, truth, n, arg, tf);
              const std::vector<int> out = greedy_from(model, ev, first, n, generate);
              int same = 0, agreed = 0;
              for (int t = 0; t < generate; ++t) same += out[t] == full_out[t];
              for (std::size_t t = 0; t < arg.size(); ++t) agreed += arg[t] == full_arg[t];
              double s = 0;
              for (double v : tf) s += v;
              recall[mi][bi].push_back(common_prefix(out, truth));
              match[mi][bi].push_back(common_prefix(out, full_out));
              acc[mi][bi].push_back(double(same) / generate);
              agree[mi][bi].push_back(double(agreed) / static_cast<double>(arg.size()));
              nll[mi][bi].push_back(s / static_cast<double>(tf.size()));
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
        for (std::size_t mi = 0; mi < M; ++mi)
          for (std::size_t bi = 0; bi < B; ++bi)
            results.push_back({{"method", methods[mi]}, {"budget", budgets[bi]}, {"slots", slots[bi]},
                               {"recall_tokens", mean_ci(recall[mi][bi], bs)}, {"full_match_tokens", mean_ci(match[mi][bi], bs)},
                               {"full_token_accuracy", mean_ci(acc[mi][bi], bs)}, {"next_token_agreement", mean_ci(agree[mi][bi], bs)},
                               {"perplexity", ppl(nll[mi][bi])}, {"score_seconds_per_prompt", score_s[mi] / n_prompts}});
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
              return mean_ci(d, bs);
            };
            paired.push_back({{"method", methods[mi]}, {"base", *base}, {"budget", budgets[bi]}, {"recall_tokens", diff(recall)},
                              {"next_token_agreement", diff(agree)}, {"nll", diff(nll)}});
          }
        }
        nlohmann::json out{{"meta", ctx.prov.to_json()},
                           {"prompts", n_prompts},
                           {"prompt_tokens", n},
                           {"settings", {{"passage", passage}, {"filler", filler}, {"cue", cue}, {"generate", generate},
                                         {"num_recent", num_recent}, {"gqa_reduce", gqa}, {"split", split}, {"documents", toks.size()}}},
                           {"full_cache", {{"recall_tokens", mean_ci(full_recall, bs)}, {"perplexity", ppl(full_nll)}}},
                           {"results", results},
                           {"paired", paired}};
        io::write_json(output, out);
        log::info("{} prompts of {} tokens, {} methods x {} budgets; full cache: {:.2f} of {} passage tokens recalled on average", n_prompts, n, M, B,
                  out["full_cache"]["recall_tokens"]["mean"].get<double>(), generate);
      });
}
