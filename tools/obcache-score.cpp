// obcache-score: OBCache's output-aware KV saliency and the heuristic scores it generalises
// (H2O, TOVA, SnapKV, StreamingLLM) on one prompt: per-layer, per-KV-head, per-token scores and
// the slots each method keeps at each budget, prefill-only eviction as in the paper's protocol.
#include <fmt/core.h>

#include <algorithm>
#include <set>

#include "ann/h5matrix.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/h5array.hpp"
#include "io/hdf5.hpp"
#include "io/json.hpp"
#include "kv/obc_score.hpp"
#include "kv/prefill_evict.hpp"
#include "lm/forward.hpp"
#include "lm/model_io.hpp"
#include "lm/prompt.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/timer.hpp"

using namespace icmlkit;

namespace {

double jaccard(const std::vector<std::int32_t>& a, const std::vector<std::int32_t>& b) {
  std::vector<std::int32_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  const double uni = static_cast<double>(a.size() + b.size() - both.size());
  return uni > 0 ? static_cast<double>(both.size()) / uni : 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, prompt, prompt_file, prompt_ids, output, gqa = "sum";
  std::vector<std::string> methods{"streaming", "h2o", "h2o+obcV", "h2o+obcK", "h2o+obcVK",
                                   "tova",      "tova+obcVK", "snapkv", "snapkv+obcVK"};
  std::vector<double> budgets{0.05, 0.1, 0.2};
  int prompt_tokens = 0, num_recent = 16, kernel = 7;
  bool reference_norm = false;
  cli::ToolInfo info{
      "obcache-score",
      "Score every cached token of a prompt by OBCache's output-aware saliency (Gu et al., OBCache: the\n"
      "change removing the token makes to the attention outputs of a window of query rows: value\n"
      "+obcV, key +obcK, joint +obcVK; p = 2 with the value norm) and by the heuristics it generalises\n"
      "(accumulated attention: h2o, snapkv with max pooling, tova from the last row; streaming keeps 4\n"
      "sinks and the newest slots), and keep each budget's slots per (layer, KV head) with prefill-only\n"
      "eviction: the --num-recent newest slots plus the top-scoring older ones (the paper's protocol;\n"
      "tova keeps no recent slots).  The window is the last --num-recent prompt rows (tova: the last).\n"
      "Query heads of a KV group combine by --gqa-reduce.  The key and cross terms use ||v||^2; the\n"
      "reference code reuses S_V's sum |v|^p there, which differs at p = 1 (--reference-value-norm).\n"
      "Writes /<method>/layer_<l>/scores [n_kv_heads, n] (float32) and /<method>/layer_<l>/keep/<slots>\n"
      "[n_kv_heads, slots] (int32) to -o (snapkv's keep sets rank its scores max-pooled over --kernel\n"
      "older slots; the stored scores are unpooled), and a JSON summary (budgets, score seconds per method, mean\n"
      "Jaccard overlap of each pair of methods' kept sets) to stdout.",
      "  obcache-score data/models/kjv7m.h5 --prompt-file gen1.txt --prompt-tokens 400 --budget 0.05,0.1 -o scores.h5\n"
      "  obcache-score model.h5 --prompt-file chapter.txt --methods h2o,h2o+obcVK --budget 24 | jq .overlap_jaccard\n"};
  CLI::App* app = nullptr;
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& a) {
        app = &a;
        a.add_option("model,-m,--model", model_path, "Model (.h5, .gguf, or a Hugging Face directory)")->required();
        lm::add_prompt_flags(a, prompt, prompt_file, prompt_ids, prompt_tokens);
        a.add_option("--methods", methods, "Comma list of presets: streaming, h2o|tova|snapkv[+obcV|+obcK|+obcVK[_no_cross][_p1]]")
            ->delimiter(',')->capture_default_str()->check(CLI::IsMember(kv::preset_names()));
        a.add_option("--budget", budgets, "Comma list: fractions of the prompt in (0, 1), or slots >= 1")
            ->delimiter(',')->capture_default_str();
        a.add_option("--num-recent", num_recent, "Newest slots always kept, and the scoring window's rows")
            ->capture_default_str()->check(cli::int_range(1, 1 << 20));
        a.add_option("--kernel", kernel, "snapkv: max-pooling width (odd)")->capture_default_str()->check(cli::int_range(1, 1001));
        a.add_option("--gqa-reduce", gqa, "Combine a KV group's query heads by sum or max")->capture_default_str()
            ->check(CLI::IsMember({"sum", "max"}));
        a.add_flag("--reference-value-norm", reference_norm, "The reference code's sum |v|^p in the key and cross terms");
        a.add_option("-o,--output", output, "Scores and keep sets (.h5); without it, the JSON summary only");
      },
      [&](cli::Context& ctx) {
        if (!output.empty()) io::require_output_extension(output, "-o", {".h5", ".hdf5"}, "the scores are HDF5");
        if (kernel % 2 == 0) throw UsageError("the pooling width must be odd", "--kernel");
        lm::check_prompt_sources(*app, prompt_file, prompt_ids);
        const std::vector<kv::PrefillMethod> ms = kv::parse_prefill_methods(methods);
        const kv::GqaReduce reduce = kv::parse_gqa_reduce(gqa);
        ctx.prov.add_input(model_path, lm::model_sha256(model_path));
        const lm::Model model = lm::load_any(model_path);
        const lm::ModelConfig& c = model.config;
        std::unique_ptr<lm::Tokenizer> tok;
        if (!model.tokenizer_model.empty()) tok = std::make_unique<lm::Tokenizer>(lm::model_tokenizer(model, model_path));
        const std::vector<int> ids = lm::resolve_prompt(*app, prompt, prompt_file, prompt_ids, tok.get(), c, model_path, ctx.prov, prompt_tokens);
        const int n = static_cast<int>(ids.size());
        if (n < 2) throw InputError(fmt::format("the prompt has {} token (BOS only, or empty): nothing to score", n), model_path);
        if (n > c.n_ctx) throw InputError(fmt::format("prompt has {} tokens, more than n_ctx = {}: keep its first tokens with --prompt-tokens N", n, c.n_ctx), model_path);
        const std::vector<int> slots = kv::budget_slots(budgets, n, ms, num_recent);

        // One prefill with the attention of every row any method's window reads.
        std::set<int> rows;
        for (const auto& m : ms)
          for (int r : kv::score_rows(m, n, num_recent)) rows.insert(r);
        lm::KvCache cache(c);
        lm::ForwardOptions fo;
        fo.attn_rows.assign(rows.begin(), rows.end());
        fo.all_logits = false;
        Stopwatch sw;
        const lm::ForwardResult fr = lm::forward(model, cache, lm::Batch::causal(ids, 0), fo);
        const double prefill_s = sw.seconds();
        cache.commit_all();
        const kv::PromptKeeps pk =
            kv::prompt_keep_sets(ms, slots, num_recent, kernel, reduce, reference_norm, cache, c.n_heads, fr.attention);
        const auto& keeps = pk.keep;
        const int nkv = c.n_kv_heads;
        nlohmann::json score_s = nlohmann::json::object();
        for (std::size_t mi = 0; mi < ms.size(); ++mi) score_s[ms[mi].name] = pk.score_seconds[mi];
        if (!output.empty()) {
          io::AtomicFile out_file(output);
          io::h5::Handle h5 = io::h5::create_file(out_file.temp_path().string());
          io::h5::write_provenance(h5, ctx.prov);
          io::h5::write_attr_int(h5, "prompt_tokens", n);
          io::h5::write_attr_int(h5, "num_recent", num_recent);
          io::h5::write_attr(h5, "gqa_reduce", gqa);
          for (std::size_t mi = 0; mi < ms.size(); ++mi)
            for (int l = 0; l < c.n_layers; ++l) {
              std::vector<float> flat;
              for (int h = 0; h < nkv; ++h)
                for (double v : pk.scores[mi][std::size_t(l) * nkv + h]) flat.push_back(static_cast<float>(v));
              const std::string base = fmt::format("{}/layer_{}", ms[mi].name, l);
              io::h5::write_floats(h5, base + "/scores", flat.data(), {std::uint64_t(nkv), std::uint64_t(n)});
              for (std::size_t bi = 0; bi < slots.size(); ++bi) {
                std::vector<std::int32_t> k;
                const std::size_t width = keeps[mi][bi][std::size_t(l) * nkv].size();
                for (int h = 0; h < nkv; ++h) {
                  const auto& kk = keeps[mi][bi][std::size_t(l) * nkv + h];
                  k.insert(k.end(), kk.begin(), kk.end());
                }
                ann::h5_write_ints(h5, fmt::format("{}/keep/{}", base, slots[bi]), k, ann::Shape2{std::size_t(nkv), width});
              }
            }
          io::h5::close_file(h5, output);
          out_file.commit();
        }
        nlohmann::json overlap = nlohmann::json::object();
        for (std::size_t bi = 0; bi < slots.size(); ++bi) {
          nlohmann::json pairs = nlohmann::json::object();
          for (std::size_t a = 0; a < ms.size(); ++a)
            for (std::size_t b = a + 1; b < ms.size(); ++b) {
              double sum = 0;
              for (std::size_t lh = 0; lh < keeps[a][bi].size(); ++lh) sum += jaccard(keeps[a][bi][lh], keeps[b][bi][lh]);
              pairs[ms[a].name + " | " + ms[b].name] = sum / static_cast<double>(keeps[a][bi].size());
            }
          overlap[std::to_string(slots[bi])] = pairs;
        }
        nlohmann::json bj = nlohmann::json::array();
        for (std::size_t bi = 0; bi < slots.size(); ++bi) bj.push_back({{"budget", budgets[bi]}, {"slots", slots[bi]}});
        nlohmann::json out{{"meta", ctx.prov.to_json()},
                           {"prompt_tokens", n},
                           {"methods", methods},
                           {"budgets", bj},
                           {"num_recent", num_recent},
                           {"gqa_reduce", gqa},
                           {"prefill_seconds", prefill_s},
                           {"score_seconds", score_s},
                           {"overlap_jaccard", overlap},
                           {"output", output.empty() ? nlohmann::json() : nlohmann::json(output)}};
        io::write_json("-", out);
        log::info("{} tokens, {} methods x {} budgets{}", n, ms.size(), slots.size(), output.empty() ? "" : " -> " + output);
      });
}
