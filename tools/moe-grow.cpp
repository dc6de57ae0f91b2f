// moe-grow: grow a trained mixture-of-experts checkpoint in depth (interposition or stacking) and
// width (noisy expert duplication or random new experts), issue 32.
#include <fmt/core.h>

#include "cli/run_tool.hpp"
#include "lm/model_io.hpp"
#include "lm/moe_grow.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

using namespace icmlkit;


int main(int argc, char** argv) {
  std::string input, output, depth, width, dtype;
  int depth_factor = 2, width_factor = 2, to_layers = 0, to_experts = 0;
  double alpha = 0.01;
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "moe-grow",
      "Grow a trained model (issue 32; \"Beyond Sunk Costs\", arXiv 2510.08008): in depth, every block copied\n"
      "whole, norms included, either in place (--depth interpose: l1 l1' l2 l2' ..., the paper's choice for\n"
      "converged models) or as a repeated stack (--depth stack: l1 .. ln l1 .. ln); in width, each moe /\n"
      "latent-moe block's N experts become f N and top-K becomes f K (--width noisy: expert e's copies e + jN are\n"
      "its tensors and router row plus N(0, (alpha sigma)^2), sigma the std of the source layer's tensor, the\n"
      "paper's alpha = 0.01; --width random: new experts N(0, sigma^2), the baseline).  At alpha = 0 width growth\n"
      "keeps the function (a sigmoid router without --norm-topk gets routed_scaling / f for that); depth growth\n"
      "does not.  With both, depth is grown first.  Input: any model the toolkit reads (native .h5, GGUF,\n"
      "Hugging Face directory); output by the extension of -o as lm-convert.  A native output's provenance\n"
      "(root attribute meta) lists every growth step under \"growth\", the input's own first, so growing twice\n"
      "composes; lm-train --init carries the list into the model it trains.",
      "  moe-grow base.h5 --depth interpose -o deep.h5\n"
      "  moe-grow deep.h5 --width noisy --alpha 0.01 --seed 2 -o wide.h5\n"
      "  moe-grow base.h5 --depth stack --width random -o baseline.h5\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("input", input, "Model: native .h5, .gguf, or a Hugging Face directory")->required();
        app.add_option("-o,--output", output, "Grown model: *.h5 (native), *.gguf, or a directory (Hugging Face)")->required();
        app.add_option("--depth", depth, "Depth growth: interpose or stack")->check(CLI::IsMember({"interpose", "stack"}));
        app.add_option("--depth-factor", depth_factor, "Blocks become this many times as many (with --depth)")->capture_default_str();
        app.add_option("--width", width, "Width growth of the moe blocks: noisy or random")->check(CLI::IsMember({"noisy", "random"}));
        app.add_option("--width-factor", width_factor, "Experts and top-K become this many times as many (with --width)")->capture_default_str();
        app.add_option("--layers", to_layers, "With --depth: the grown block count instead of --depth-factor (a multiple of the model's)");
        app.add_option("--experts", to_experts, "With --width: the grown expert count instead of --width-factor (a multiple of the model's)");
        app.add_option("--alpha", alpha, "--width noisy: the noise's standard deviation as a multiple of the source tensor's")->capture_default_str();
        app.add_option("--dtype", dtype, "Storage of matrices: f32, f16 or bf16 (default: the input's)")
            ->transform(CLI::IsMember({"f32", "f16", "bf16"}, CLI::ignore_case));
      },
      [&](cli::Context& ctx) {
        CLI::App& app = *app_ptr;
        for (const char* f : {"--depth-factor", "--layers"})
          if (app.count(f) && depth.empty()) throw UsageError(fmt::format("{} needs --depth", f), f);
        for (const char* f : {"--width-factor", "--experts", "--alpha"})
          if (app.count(f) && width.empty()) throw UsageError(fmt::format("{} needs --width", f), f);
        if (depth.empty() && width.empty()) throw UsageError("nothing to grow: give --depth and/or --width", "--depth");
        if (app.count("--alpha") && width == "random") throw UsageError("--alpha sets the noise of --width noisy; random experts have none", "--alpha");
        if (app.count("--layers") && app.count("--depth-factor")) throw UsageError("give --layers or --depth-factor, not both", "--layers");
        if (app.count("--experts") && app.count("--width-factor")) throw UsageError("give --experts or --width-factor, not both", "--experts");
        if (!depth.empty() && (depth_factor < 2 || depth_factor > 64))
          throw UsageError(fmt::format("the depth factor must lie in [2, 64] (got {})", depth_factor), "--depth-factor");
        if (!width.empty() && (width_factor < 2 || width_factor > 64))
          throw UsageError(fmt::format("the width factor must lie in [2, 64] (got {})", width_factor), "--width-factor");
        if (!width.empty() && (!(alpha >= 0) || !std::isfinite(alpha)))
          throw UsageError(fmt::format("alpha must be >= 0 (got {})", alpha), "--alpha");
        if (output == "-") throw UsageError("a model cannot go to stdout: give *.h5, *.gguf or a directory", "-o");
        const lm::ModelFormat out_fmt = lm::output_format(output);
        ctx.prov.add_input(input, lm::model_sha256(input));
        lm::Model m = lm::load_any(input);
        if (!width.empty() && !m.config.has_moe())
          throw UsageError("width growth needs a model with moe or latent-moe blocks; " + input + " is dense", "--width");
        // a target count: a whole multiple (at least 2x) of the model's
        const auto factor_of = [](int target, int have, const char* flag, const char* what) {
          if (target < 2 * have || target % have != 0)
            throw UsageError(fmt::format("{} {} is not a multiple (2x or more) of the model's {} {}", flag, target, have, what), flag);
          if (target / have > 64) throw UsageError(fmt::format("{} {} grows more than 64x", flag, target), flag);
          return target / have;
        };
        if (app.count("--layers")) depth_factor = factor_of(to_layers, m.config.n_layers, "--layers", "blocks");
        if (!depth.empty() && std::int64_t(m.config.n_layers) * depth_factor > 4096)  // the GGUF and HF readers' limit
          throw UsageError(fmt::format("{} x {} blocks exceeds 4096", m.config.n_layers, depth_factor),
                           app.count("--layers") ? "--layers" : "--depth-factor");
        if (app.count("--experts")) width_factor = factor_of(to_experts, m.config.moe.n_experts, "--experts", "experts");
        nlohmann::json steps = lm::growth_history(input);
        const int layers0 = m.config.n_layers, experts0 = m.config.moe.n_experts;
        if (!depth.empty()) {
          const lm::DepthGrowth g = lm::parse_depth_growth(depth, "--depth");
          m = lm::grow_depth(m, g, depth_factor);
          steps.push_back(lm::depth_recipe(g, depth_factor));
        }
        if (!width.empty()) {
          const lm::WidthGrowth g = lm::parse_width_growth(width, "--width");
          m = lm::grow_width(m, g, width_factor, alpha, ctx.prov.seed);
          steps.push_back(lm::width_recipe(g, width_factor, alpha, ctx.prov.seed));
        }
        const io::h5::FloatStorage st = dtype.empty() ? m.stored : io::h5::parse_float_storage(dtype, "--dtype");
        ctx.prov.extra["growth"] = steps;
        lm::save_any(output, out_fmt, m, st, ctx.prov);
        std::int64_t active = 0;
        for (int l = 0; l < m.config.n_layers; ++l) active += m.config.block_active_params(l);
        log::info("{}: {} -> {} blocks{}, {} weights ({} active per token in the blocks) -> {}", input, layers0, m.config.n_layers,
                  m.config.has_moe() ? fmt::format(", {} -> {} experts per moe block", experts0, m.config.moe.n_experts) : std::string(),
                  m.config.n_params(), active, output);
      });
}
