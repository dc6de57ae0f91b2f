// obcache-score: OBCache's output-aware KV saliency and the heuristic scores it generalises
// (H2O, TOVA, SnapKV, StreamingLLM) on one prompt: per-layer, per-KV-head, per-token scores and
// the slots each method keeps at each budget, prefill-only eviction as in the paper's protocol.
#include <fmt/core.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "ann/h5matrix.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/gnuplot.hpp"
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

/// The scoring window's attention per layer, dense over the n prompt slots: rows [1, W] (int32),
/// probs and logits [n_heads, W, n] (0 where a row does not attend), outputs [n_heads, W,
/// head_dim], values [n_kv_heads, n, head_dim] (float32): what the scores are computed from.
void write_attention(const io::h5::Handle& h5, const lm::KvCache& cache, int n_heads, const std::set<int>& rowset,
                     const std::vector<lm::AttentionRecord>& records) {
  const int L = cache.n_layers(), nkv = cache.n_kv_heads(), hd = cache.head_dim(), n = cache.size();
  const std::vector<int> rows(rowset.begin(), rowset.end());
  const int W = static_cast<int>(rows.size());
  using U = std::uint64_t;
  for (int l = 0; l < L; ++l) {
    std::vector<float> probs(std::size_t(n_heads) * W * n, 0.0f), logits(probs.size(), 0.0f), outputs(std::size_t(n_heads) * W * hd, 0.0f),
        values(std::size_t(nkv) * n * hd);
    for (const auto& rec : records) {
      if (rec.layer != l) continue;
      const std::size_t i = std::size_t(std::lower_bound(rows.begin(), rows.end(), rec.row) - rows.begin());
      const std::size_t base = (std::size_t(rec.head) * W + i) * n;
      for (std::size_t t = 0; t < rec.keys.size(); ++t) {
        const int slot = rec.keys[t] >= 0 ? rec.keys[t] : -(rec.keys[t] + 1);  // prefill: batch row r is slot r
        probs[base + slot] = rec.probs[t];
        logits[base + slot] = rec.scores[t];
      }
      std::copy(rec.output.begin(), rec.output.end(), outputs.begin() + std::ptrdiff_t((std::size_t(rec.head) * W + i) * hd));
    }
    for (int g = 0; g < nkv; ++g)
      for (int j = 0; j < n; ++j) std::copy_n(cache.value(l, g, j), hd, values.begin() + std::ptrdiff_t((std::size_t(g) * n + j) * hd));
    const std::string base = fmt::format("attention/layer_{}", l);
    ann::h5_write_ints(h5, base + "/rows", std::vector<std::int32_t>(rows.begin(), rows.end()), ann::Shape2{1, std::size_t(W)});
    io::h5::write_floats(h5, base + "/probs", probs.data(), {U(n_heads), U(W), U(n)});
    io::h5::write_floats(h5, base + "/logits", logits.data(), {U(n_heads), U(W), U(n)});
    io::h5::write_floats(h5, base + "/outputs", outputs.data(), {U(n_heads), U(W), U(hd)});
    io::h5::write_floats(h5, base + "/values", values.data(), {U(nkv), U(n), U(hd)});
  }
}

/// One image row per (method, budget), one column per prompt slot: the fraction of (layer, KV
/// head) pairs whose keep set holds the slot.
void plot_keeps(io::AtomicFile& png, const std::vector<kv::PrefillMethod>& ms, const std::vector<int>& slots,
                const std::vector<std::vector<std::vector<std::vector<std::int32_t>>>>& keeps, int n) {
  std::string data, tics;
  int row = 0;
  for (std::size_t mi = 0; mi < ms.size(); ++mi)
    for (std::size_t bi = 0; bi < slots.size(); ++bi, ++row) {
      std::vector<double> frac(std::size_t(n), 0.0);
      const auto& sets = keeps[mi][bi];
      for (const auto& k : sets)
        for (std::int32_t j : k) frac[std::size_t(j)] += 1.0 / static_cast<double>(sets.size());
      for (int j = 0; j < n; ++j) data += fmt::format("{}{:.6g}", j ? " " : "", frac[std::size_t(j)]);
      data += "\n";
      tics += fmt::format("{}{} {}", row ? ", " : "", io::gnuplot_quote(fmt::format("{} @{}", ms[mi].name, slots[bi])), row);
    }
  const int rows = row;
  io::gnuplot_png(
      png, data,
      [&](const std::string& dat) {
        return fmt::format(
            "set title 'kept KV slots over the prompt (fraction of layer x KV-head keep sets)'\nset xlabel 'prompt slot'\n"
            "set xrange [-0.5:{}.5]\nset yrange [{}.5:-0.5]\nset ytics ({})\nset cbrange [0:1]\nset cblabel 'fraction kept'\n"
            "set palette defined (0 'white', 1 'dark-blue')\nplot {} matrix using 1:2:3 with image notitle",
            n - 1, rows - 1, tics, dat);
      },
      1200, 120 + 22 * rows);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, prompt, prompt_file, prompt_ids, output, gqa = "sum", plot;
  std::vector<std::string> methods{"streaming", "h2o", "h2o+obcV", "h2o+obcK", "h2o+obcVK",
                                   "tova",      "tova+obcVK", "snapkv", "snapkv+obcVK"};
  std::vector<double> budgets{0.05, 0.1, 0.2};
  int prompt_tokens = 0, num_recent = 16, kernel = 7;
  bool reference_norm = false, save_attention = false;
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
      "Jaccard overlap of each pair of methods' kept sets, and each keep set's attention-output error\n"
      "sqrt(sum ||o' - o||^2 / sum ||o||^2) on the recorded window rows per layer, averaged over layers: the\n"
      "quantity the scores minimise) to stdout; --save-attention adds the window's attention\n"
      "(what the scores come from), --plot a heat map of each method's keep sets over the prompt.",
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
        a.add_flag("--save-attention", save_attention,
                   "Also write the scoring window's attention to -o: /attention/layer_<l>/{rows, probs, logits, outputs, values}");
        a.add_option("-o,--output", output, "Scores and keep sets (.h5); without it, the JSON summary only");
        a.add_option("--plot", plot, "Heat map (.png, gnuplot): per method and budget, the fraction of (layer, KV head) pairs keeping each prompt slot");
      },
      [&](cli::Context& ctx) {
        if (!output.empty()) io::require_output_extension(output, "-o", {".h5", ".hdf5"}, "the scores are HDF5");
        if (kernel % 2 == 0) throw UsageError("the pooling width must be odd", "--kernel");
        if (!plot.empty()) {
          io::require_output_extension(plot, "--plot", {".png"}, "the heat map is a PNG");
          io::require_gnuplot("--plot");
        }
        if (save_attention && output.empty()) throw UsageError("needs -o, the HDF5 file the attention goes to", "--save-attention");
        lm::check_prompt_sources(*app, prompt_file, prompt_ids);
        if (app->count("--prompt") == 0 && prompt_file.empty() && app->count("--prompt-ids") == 0)
          throw UsageError("give one of --prompt, --prompt-file, --prompt-ids: the prompt to score");
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
        // The heat map first (gnuplot is the step most likely to fail), committed with -o at the end.
        std::unique_ptr<io::AtomicFile> plot_file;
        if (!plot.empty()) {
          plot_file = std::make_unique<io::AtomicFile>(plot);
          plot_keeps(*plot_file, ms, slots, keeps, n);
        }
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
          if (save_attention) write_attention(h5, cache, c.n_heads, rows, fr.attention);
          io::h5::close_file(h5, output);
          out_file.commit();
        }
        if (plot_file) plot_file->commit();
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
        // The output error of each keep set on the recorded window rows themselves: the quantity
        // OBCache's scores minimise to first order, token by token.
        nlohmann::json window_err = nlohmann::json::object();
        {
          std::vector<int> row_slot(n);
          std::iota(row_slot.begin(), row_slot.end(), 0);
          const int group = c.n_heads / nkv;
          for (std::size_t bi = 0; bi < slots.size(); ++bi) {
            nlohmann::json per = nlohmann::json::object();
            for (std::size_t mi = 0; mi < ms.size(); ++mi) {
              // sqrt(sum ||o' - o||^2 / sum ||o||^2) per layer, averaged over layers.
              std::vector<kv::OutputError> layer_err(std::size_t(c.n_layers));
              for (const auto& rec : fr.attention) {
                const int g = rec.head / group;
                layer_err[std::size_t(rec.layer)] += kv::evicted_output_error(rec, row_slot, cache, g, keeps[mi][bi][std::size_t(rec.layer) * nkv + g], n);
              }
              double mean = 0;
              for (const auto& e : layer_err) mean += e.relative() / c.n_layers;
              per[ms[mi].name] = mean;
            }
            window_err[std::to_string(slots[bi])] = per;
          }
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
                           {"window_rows", std::vector<int>(rows.begin(), rows.end())},
                           {"window_output_error", window_err},
                           {"output", output.empty() ? nlohmann::json() : nlohmann::json(output)}};
        io::write_json("-", out);
        log::info("{} tokens, {} methods x {} budgets{}", n, ms.size(), slots.size(), output.empty() ? "" : " -> " + output);
      });
}
