// lm-train: train a Llama-style language model (model contract v2) on a text corpus on the CPU.
#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <filesystem>
#include <fstream>
#include <cmath>
#include <map>
#include <iostream>
#include <memory>
#include <thread>

#include "cli/count.hpp"
#include "cli/run_tool.hpp"
#include "dist/world.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/jsonl_log.hpp"
#include "io/sha256.hpp"
#include "lm/model.hpp"
#include "lm/moe_grow.hpp"
#include "lm/presets.hpp"
#include "io/table.hpp"
#include "lm/model_io.hpp"
#include "lm/tokenizer.hpp"
#include "nn/corpus.hpp"
#include "nn/corpus_flags.hpp"
#include "nn/gemm.hpp"
#include "nn/layers.hpp"
#include "nn/llama_train.hpp"
#include "nn/lora_run.hpp"
#include "lm/lora.hpp"
#include "nn/trainer.hpp"
#include "unlearn/online.hpp"
#include "unlearn/trajectory.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/memory.hpp"
#include "util/progress.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

namespace {

/// Tokenizer training sentences: each document cut into pieces of at most 4 lines (newlines kept).
std::vector<std::string> tokenizer_sentences(const std::vector<std::string>& docs) {
  std::vector<std::string> out;
  for (const auto& d : docs) {
    std::string cur;
    int lines = 0;
    std::size_t start = 0;
    while (start <= d.size()) {
      std::size_t end = d.find('\n', start);
      if (end == std::string::npos) end = d.size();
      if (lines > 0) cur += '\n';
      cur.append(d, start, end - start);
      if (++lines == 4) { out.push_back(cur); cur.clear(); lines = 0; }
      start = end + 1;
    }
    if (lines > 0) out.push_back(cur);
  }
  return out;
}

/// Reads a model shape from JSON (keys as the checkpoint attributes) into c; a key whose flag
/// (d_model -> --d-model) was given on the command line keeps the flag's value.
void apply_config_json(const nlohmann::json& j, lm::ModelConfig& c, const std::string& path,
                       const std::function<bool(const std::string&)>& flag_given) {
  if (!j.is_object()) throw InputError("model config must be a JSON object", path);
  auto has = [&](std::string k) {
    if (!j.contains(k)) return false;
    std::replace(k.begin(), k.end(), '_', '-');
    return !flag_given("--" + k);
  };
  auto geti = [&](const char* k, int& f) {
    if (!has(k)) return;
    if (!j[k].is_number_integer()) throw InputError(fmt::format("'{}' must be an integer", k), path);
    f = j[k].get<int>();
  };
  geti("vocab_size", c.vocab_size);
  geti("d_model", c.d_model);
  geti("n_layers", c.n_layers);
  geti("n_heads", c.n_heads);
  geti("n_kv_heads", c.n_kv_heads);
  geti("d_ff", c.d_ff);
  geti("n_ctx", c.n_ctx);
  if (has("rope_theta")) c.rope_theta = j["rope_theta"].get<double>();
  if (has("rms_eps")) c.rms_eps = j["rms_eps"].get<double>();
  if (has("tied")) c.tied = j["tied"].is_boolean() ? j["tied"].get<bool>() : j["tied"].get<int>() != 0;
  if (has("rope_style")) {
    const std::string s = j["rope_style"].get<std::string>();
    if (s != "half" && s != "interleaved") throw InputError("rope_style must be half or interleaved", path);
    c.rope_style = s == "half" ? lm::RopeStyle::half : lm::RopeStyle::interleaved;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {  // a key it does not read would be silently lost
    const std::string& k = it.key();
    if (k == "block_types" || k.rfind("moe", 0) == 0)
      throw InputError(fmt::format("'{}': a mixture-of-experts shape is given with the --moe flags (--moe, --experts, --top-k, ...), not in --config", k), path);
    if (k != "vocab_size" && k != "d_model" && k != "n_layers" && k != "n_heads" && k != "n_kv_heads" && k != "d_ff" && k != "n_ctx" &&
        k != "rope_theta" && k != "rms_eps" && k != "tied" && k != "rope_style" && k != "meta")
      throw InputError(fmt::format("unknown key '{}' (the config takes vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, n_ctx, rope_theta, rms_eps, tied, rope_style)", k), path);
  }
}

/// SHA-256 of a token stream as it lies in memory (the start-up comparison of ranks).
std::string tokens_sha256(const std::vector<int>& tokens) {
  return io::sha256_hex(std::string_view(reinterpret_cast<const char*>(tokens.data()), tokens.size() * sizeof(int)));
}

/// Data parallelism's start-up check: each part's text (named by its first member) is compared
/// with rank 0's by hash on every rank.  Throws UsageError naming the first rank that differs.
void check_same_start(dist::World& world, const std::vector<std::pair<const char*, std::string>>& parts) {
  for (const auto& [what, text] : parts) {
    const int bad = dist::first_mismatch(world.comm(), text);
    if (bad >= 0)
      throw UsageError(fmt::format("rank {} of {} was started with other {} than rank 0: every rank must run the same command "
                                   "on the same files",
                                   bad, world.size(), what));
  }
}

std::string best_path_for(const std::string& out) {
  if (io::is_stream_path(out)) return out;  // -o /dev/null: the best checkpoint goes there too
  std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + ".best.h5")).string();
}

/// The LoRA flags (issue 33).
struct LoraFlags {
  int rank = 0;  ///< 0: full fine-tuning (no --lora-rank)
  double alpha = 8, dropout = 0;
  bool rslora = false;
  std::vector<std::string> targets{"q", "v"};
  std::string targets_list = "q,v";  ///< --lora-targets as given
};

/// lm-train --lora-rank: fine-tunes a LoRA adapter on the frozen --init model (nn/lora_run.hpp: the
/// one-job case of plora-train, so its trajectory is plora-train's for the same job) and writes it
/// as a PEFT directory -o.
void train_lora(cli::Context& ctx, dist::World& world, CLI::App& app, const LoraFlags& lf, const std::string& corpus_path,
                const nn::CorpusOptions& copt, const std::string& init_path, const std::string& output,
                const std::string& log_path_in, nn::TrainOptions t, std::int64_t tokens_budget, std::int64_t eval_every,
                std::int64_t eval_tokens, std::int64_t log_every, const std::string& kernels) {
  const bool writer = world.rank() == 0;  // rank 0 writes the adapter and the log
  for (const char* f : {"--config", "--preset", "--tokenizer", "--vocab-size", "--d-model", "--n-layers", "--n-heads", "--n-kv-heads",
                        "--d-ff", "--n-ctx", "--tied", "--rope-style", "--init-std", "--resume", "--overwrite",
                        "--allow-corpus-change", "--export", "--export-dtype", "--best", "--checkpoint-every", "--optimizer", "--sparse",
                        "--moe", "--exit-loss", "--stop-at", "--moe-aux-loss", "--router-bias-update", "--moe-capacity-factor",
                        "--experts", "--top-k", "--d-expert", "--d-shared", "--latent", "--expert-act", "--router", "--routed-scaling",
                        "--no-norm-topk", "--exit-every", "--exit-curriculum", "--exit-weights", "--foam-level", "--foam-scale",
                        "--foam-res-scale", "--foam-second-moment", "--galore-rank", "--galore-gap", "--galore-scale", "--poet-block",
                        "--poet-merge-every", "--poet-terms", "--poet-cayley", "--poet-fully-stochastic", "--poet-lr", "--poet-scale",
                        "--poet-no-normalize", "--poet-clip-ramp-until", "--density", "--update-every", "--prune-rate", "--prune-rate-min",
                        "--prune-schedule", "--sparse-block", "--sparse-local-steps", "--sparse-warmup", "--sparse-density-lr",
                        "--sparse-code-form", "--probe-steps", "--probe-control"})
    if (app.count(f)) throw UsageError(fmt::format("{} does not apply to LoRA fine-tuning (--lora-rank)", f), f);
  if (init_path.empty()) throw UsageError("LoRA fine-tunes a base model: give it with --init", "--init");
  if (t.steps > 0 && tokens_budget > 0) throw UsageError("give --steps or --tokens, not both", "--tokens");
  if (t.steps == 0 && tokens_budget == 0) throw UsageError("give --steps or --tokens", "--steps");
  if (io::is_stream_path(output) || io::is_stdout(output)) throw UsageError("-o names the adapter's directory", "-o");
  if (std::filesystem::exists(output) && !std::filesystem::is_directory(output))
    throw UsageError(fmt::format("-o {} exists and is not a directory (the adapter is a PEFT directory)", output), "-o");
  io::check_distinct_outputs({{"-o", output}, {"--log", log_path_in}}, {corpus_path, init_path});
  io::JsonlLog jlog(writer ? log_path_in : std::string(), false);
  lm::LoraConfig lc;
  lc.rank = lf.rank;
  lc.alpha = lf.alpha;
  lc.dropout = lf.dropout;
  lc.rslora = lf.rslora;
  lc.targets = lf.targets;

  const nn::Documents docs = nn::read_corpus(corpus_path, copt);
  ctx.prov.add_input(corpus_path, docs.sha256);
  if (docs.train.empty()) throw InputError("no training documents", corpus_path);
  auto base = std::make_unique<lm::Model>(lm::load_any(init_path));
  ctx.prov.add_input(init_path, lm::model_sha256(init_path));
  if (base->tokenizer_model.empty())
    throw InputError("the model has no tokenizer (" + lm::tokenizer_location(init_path) + " missing)", init_path);
  const lm::ModelConfig mc = base->config;
  lm::check_lora_config(lc, mc);
  if (!app.count("--seq-len")) t.seq_len = mc.n_ctx;
  if (t.seq_len > mc.n_ctx)
    throw InputError(fmt::format("context --seq-len {} is larger than the model allows (n_ctx = {})", t.seq_len, mc.n_ctx), "--seq-len");
  const lm::Tokenizer tok(base->tokenizer_model, "model tokenizer");
  const std::vector<int> train_stream = nn::tokenize_documents(tok, docs.train, mc.add_bos ? mc.bos_id : -1, corpus_path);
  const std::vector<int> val_stream = nn::tokenize_documents(tok, docs.val, mc.add_bos ? mc.bos_id : -1, corpus_path);
  const std::int64_t step_tokens = std::int64_t(t.batch) * t.accum * t.seq_len;
  if (tokens_budget > 0) t.steps = std::max<std::int64_t>(1, (tokens_budget + step_tokens - 1) / step_tokens);
  nn::LoraJobOptions job;
  job.name = std::filesystem::path(output).filename().string();
  if (job.name.empty()) job.name = "adapter";
  job.lora = lc;
  job.batch = t.batch;
  job.accum = t.accum;
  job.steps = t.steps;
  job.lr = t.lr;
  job.min_lr = t.min_lr < 0 ? t.lr / 10 : t.min_lr;
  job.warmup = t.warmup < 0 ? t.steps / 20 : t.warmup;
  job.clip = t.clip;
  // Adam: PEFT fine-tuning's usual settings (transformers' Trainer) unless given
  job.adam.beta1 = t.adam.beta1;
  job.adam.beta2 = app.count("--beta2") ? t.adam.beta2 : 0.999;
  job.adam.eps = t.adam.eps;
  job.adam.weight_decay = app.count("--weight-decay") ? t.adam.weight_decay : 0.0;
  job.seed = ctx.common.seed;

  nn::PackedLoraTrainer trainer(*base, t.seq_len);
  base.reset();  // the trainer holds the (frozen) weights
  trainer.add_job(job, &train_stream);
  if (writer) io::check_output_dir(output);  // the directory -o goes in must exist and be writable (the writer creates -o itself)
  if (world.distributed()) {
    const nlohmann::json run{{"job", job.to_json()}, {"seq_len", t.seq_len},      {"kernels", kernels},
                             {"eval_every", eval_every}, {"eval_tokens", eval_tokens}, {"log_every", log_every}};
    check_same_start(world, {{"training options (flags)", run.dump()},
                             {"corpus or split (the training stream)", docs.sha256 + tokens_sha256(train_stream) + tokens_sha256(val_stream)},
                             {"base model", trainer.base_sha256()}});
    trainer.set_comm(&world.comm());
    ctx.prov.extra["ranks"] = world.size();
    ctx.prov.extra["transport"] = world.comm().transport();
  }
  auto emit = [&](const nlohmann::json& j) {
    if (writer) jlog.write(j);
  };
  const std::int64_t adapter_params = lm::lora_param_count(mc, lc.rank, lc.targets);
  ctx.prov.extra["lora"] = job.to_json();
  ctx.prov.extra["base_sha256"] = trainer.base_sha256();
  ctx.prov.extra["adapter_params"] = adapter_params;
  ctx.prov.extra["frozen_bytes"] = trainer.base_bytes();
  ctx.prov.extra["trainable_bytes"] = adapter_params * std::int64_t(sizeof(float));
  ctx.prov.extra["train_tokens"] = static_cast<std::int64_t>(train_stream.size());
  ctx.prov.extra["val_tokens"] = static_cast<std::int64_t>(val_stream.size());
  emit(nlohmann::json{{"meta", ctx.prov.to_json()}});
  log::info("LoRA rank {} on {} ({} adapter weights, base frozen); {} steps of {} tokens", lc.rank, fmt::format("{}", fmt::join(lc.targets, ",")),
            adapter_params, job.steps, step_tokens);
  nn::LoraRunOptions ro;
  ro.log_every = log_every;
  ro.eval_every = eval_every;
  ro.eval_tokens = eval_tokens;
  std::vector<nn::LoraRunJob> rj(1);
  rj[0].val = &val_stream;
  rj[0].log = [&](const nlohmann::json& j) {
    if (j.contains("summary")) return;  // the tool's own summary below
    nlohmann::json line = j;
    line.erase("job");
    line.erase("packed_jobs");
    emit(line);
  };
  nn::LoraJobResult result;
  const auto run = nn::run_lora_jobs(
      trainer, rj, {0}, [](const std::vector<int>& jobs, std::int64_t) { return std::vector<std::vector<int>>{jobs}; }, ro,
      [&](int j, const nn::LoraJobResult& r) {
        result = r;
        if (r.diverged || !writer) return;  // an adapter that overflows is not written over -o (a good one may be there)
        lm::LoraAdapter a = trainer.adapter(j);
        a.base_model = init_path;
        lm::write_peft_adapter(output, a, mc, ctx.prov);
      });
  nlohmann::json summary{{"steps", result.steps},
                         {"tokens", result.tokens},
                         {"train_loss", result.train_loss},
                         {"val_loss", std::isnan(result.val_loss) ? nlohmann::json() : nlohmann::json(result.val_loss)},
                         {"adapter_params", adapter_params},
                         {"optimizer_state_bytes", adapter_params * 2 * std::int64_t(sizeof(float))},
                         {"frozen_bytes", trainer.base_bytes()},
                         {"peak_rss_bytes", peak_rss_bytes()},
                         {"seconds", run.seconds},
                         {"tokens_per_s", double(run.tokens) / std::max(run.seconds, 1e-9)},
                         {"output", output}};
  if (world.distributed()) {
    summary["ranks"] = world.size();
    summary["reduce_seconds"] = trainer.reduce_seconds();
    summary["reduce_share"] = trainer.reduce_seconds() / std::max(run.seconds, 1e-9);
    summary["reduce_bytes_sent_per_step"] = result.steps > 0 ? trainer.reduce_bytes_sent() / result.steps : 0;
  }
  if (result.diverged) summary["diverged"] = true;
  emit(nlohmann::json{{"summary", summary}});
  if (result.diverged)
    throw RuntimeError(fmt::format("non-finite training loss or gradient at step {} (lower --lr); no adapter written", result.steps + 1),
                       output);
  log::info("step {}: train loss {:.4f}{} -> {}", result.steps, result.train_loss,
            std::isnan(result.val_loss) ? std::string() : fmt::format(", val loss {:.4f}", result.val_loss), output);
}

}  // namespace

int main(int argc, char** argv) {
  prefer_short_openmp_spin(argv);  // dozens of short parallel regions per forward pass: spin briefly, then sleep
  // Data parallelism (issue 41): under mpirun every rank runs this program with the same command;
  // rank 0 reads and writes the files, the others only train.
  dist::World* world_ptr = nullptr;
  try {
    world_ptr = &dist::World::init(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "lm-train: error: %s\n", e.message().c_str());
    return static_cast<int>(e.code());
  }
  dist::World& world = *world_ptr;
  const bool writer = world.rank() == 0;  // rank 0 writes -o, --best, --export and the log
  // A rank > 0 holds its error line: a failure every rank meets (a bad flag, a missing file) is
  // reported once, by rank 0, whose MPI_Abort ends the job before the others would speak.
  std::string held_error;
  if (world.distributed() && !writer) cli::set_error_sink([&](const std::string& line) { held_error = line; });
  std::string corpus_path, output, init_path, config_path, preset, tokenizer_path, log_path = "-", best_path;
  std::string rope = "half", export_path, export_dtype = "bf16", kernels = "fast", exit_curriculum = "rot", exit_weights = "sum_l",
              foam_moment = "code", poet_cayley = "neumann", sparse_method = "dense", prune_schedule = "cosine";
  std::vector<std::string> sparse_code_form;
  bool poet_no_normalize = false;
  nn::CorpusOptions copt;
  nn::TrainOptions t;
  lm::ModelConfig c = lm::default_shape();
  c.moe.n_experts = 8;  // the defaults --moe shows
  c.moe.top_k = 2;
  lm::MoeFlags moe_flags;
  lm::RecdepthFlags recdepth_flags;
  LoraFlags lora;
  bool tied = false, resume = false, allow_corpus_change = false, overwrite = false;
  double init_std = 0.02;
  std::int64_t tokens_budget = 0, eval_every = 100, eval_tokens = 0, ckpt_every = 0, log_every = 10, stop_at = 0;
  std::string trajectory_dir, requests_path;
  std::int64_t trajectory_every = 50;
  t.steps = 0;
  t.warmup = -1;
  t.min_lr = -1;
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "lm-train",
      "Train a Llama-style decoder (model contract v2: llama, moe, latent-moe or recurrent-depth blocks) on a text corpus on the CPU: AdamW with decoupled weight\n"
      "decay, global-norm clipping, linear warmup + cosine decay, gradient accumulation, seeded data order.\n"
      "Documents (blank-line separated paragraphs, TSV rows grouped by --doc-column, JSONL records) are\n"
      "tokenized with BOS before each, joined in order and packed into windows of --seq-len tokens; every\n"
      "--val-every-th document is held out for validation.  The model comes from --init (an lm-init or\n"
      "lm-train checkpoint), --config (JSON with the checkpoint's attribute names) or --preset and shape\n"
      "flags, with a tokenizer from --tokenizer or trained here on the training documents (--vocab-size).\n"
      "-o is an f32 checkpoint that every lm tool reads, with the training state under /train (optimizer\n"
      "moments, step, data position, corpus SHA-256), written atomically every --checkpoint-every steps and\n"
      "at the end; --resume continues from it bit-identically (a different corpus is refused unless\n"
      "--allow-corpus-change).  The lowest validation loss is kept in --best.  A NaN or\n"
      "inf loss stops the run (exit 1) and leaves the last good checkpoint.  The log is JSON Lines: a meta\n"
      "line, then step, tokens, train_loss (the mean over the --log-every steps since the last line), val_loss (when\n"
      "evaluated), lr, grad_norm, tokens_per_s and mfu, then a summary line (its train_loss: the last step's).\n"
      "Every training option must be the same on --resume (the checkpoint's state SHA-256 is checked too).\n"
      "mfu is the model-FLOP utilisation: training FLOP per token (6 x matrix weights +\n"
      "6 x n_layers x seq_len x d_model; the input embedding lookup and the norms do not count) x tokens/s over\n"
      "the rate of a 1024^3 f32 product on the same threads, measured at the start of the run (and again at the\n"
      "end for the summary, which keeps the higher rate: gemm_gflops).  On a machine shared with other work both\n"
      "numbers move with its load.  --kernels reference trains on the v1\n"
      "arithmetic (bitwise the inference engine's forward; 3x slower at seq 256, 5x at seq 1024); a run resumes bit-identically\n"
      "with the same --kernels, on any --threads.  --exit-loss E adds LayerSkip's early-exit loss (Elhoushi et\n"
      "al. 2024, sec. 4.2, as torchtune's early_exit_loss): the shared final norm and head after every\n"
      "--exit-every-th block (rotated or enabled gradually by --exit-curriculum), each exit's loss weighted by\n"
      "--exit-weights times E and all weights normalised with the final layer's; train_loss stays the final\n"
      "layer's, the log adds objective and exit_losses (layer -> mean loss), and mfu does not count the exits' heads.\n"
      "Optimizers (--beta1/--beta2/--adam-eps/--weight-decay apply to each; the recipes are the authors' scripts'):\n"
      "--optimizer adam-mini: one second moment per head (q, k), per row (embedding, head, v, o, MLP), per norm.\n"
      "--optimizer galore (Zhao et al. 2024): Adam on a subspace (of rank --galore-rank) of each attention/MLP gradient\n"
      "from an SVD every --galore-gap steps (recipe: --lr 1e-2 --galore-scale 0.25 --galore-gap 200 --beta2 0.999\n"
      "--weight-decay 0, rank d_model/4).  --optimizer foam (Wen et al., ICML 2026; zqOuO/FOAM): Adam moments of\n"
      "every matrix but the embedding and head folded to blocks of 2^--foam-level entries along the input dimension,\n"
      "the residual recomputed each step (recipe: --lr 1e-2 --foam-level 2 --foam-scale 0.25 --beta2 0.999\n"
      "--weight-decay 0; level 0 is Adam with the matrices' step still scaled by --foam-scale).  --optimizer poet-x\n"
      "(Qiu et al., ICML 2026; Sphere-AI-Lab/poet): each attention/MLP matrix W = R W0 P with W0 fixed (rows\n"
      "normalised) and R, P block-diagonal orthogonal (Cayley-Neumann of skew-symmetric blocks of --poet-block, under\n"
      "random permutations), merged into W0 every --poet-merge-every steps; the Q entries train at --poet-lr x\n"
      "--poet-scale, the embedding, head and norms at --lr; after each merge the --clip limit ramps up over 10 steps\n"
      "(recipe: --lr 1e-3 --poet-lr 5e-4 --clip 0.1 --beta2 0.999 --adam-eps 1e-6 --weight-decay 0).  The meta and\n"
      "summary lines give optimizer_state_bytes, trainable_bytes and frozen_bytes (POET-X's W0) counted from the\n"
      "buffers, the summary also peak_rss_bytes.\n"
      "Sparse training (--sparse, AdamW only; Xiao et al., ICML 2026, QiaoXiao7282/SMET): every attention/MLP matrix\n"
      "keeps a random floor(--density x blocks) of its blocks (runs of --sparse-block consecutive entries of the\n"
      "row-major matrix, which must divide it; 1 = unstructured), the rest exactly 0; embedding, head and norms stay\n"
      "dense.  The products stay dense (masked weights): tokens/s and MFU are the dense run's; what shrinks is the\n"
      "gradient and Adam state, held for active entries only with an int32 index each (and an int32 local step\n"
      "with local steps) in optimizer_state_bytes; mask_bytes is the mask's block list (/train/sparse).  Every\n"
      "--update-every steps set/rigl/smet prune, of each matrix's active blocks, the fraction p_t with the smallest\n"
      "sum |w| (p_t follows --prune-schedule from --prune-rate at step 0 to --prune-rate-min at the last step) and\n"
      "regrow as many at w = 0: set and smet uniformly among the blocks inactive before, rigl those of largest\n"
      "|gradient| (that step's dense gradient).  set trains with one global Adam step count; smet adds SMET's three\n"
      "parts, each also a flag of its own (the paper's ablation ladder): --sparse-local-steps (a regrown entry restarts\n"
      "at step 0 with m = v = 0), --sparse-warmup W (its update scaled by min(t/W, 1); 100 with smet) and\n"
      "--sparse-density-lr (lr/d on each sparse matrix, d its density).  Recipe (the reference's scripts: 130M at\n"
      "d = 0.5): --sparse smet --density 0.5 --lr 2e-3 --beta2 0.999 --weight-decay 0, updates every 100 steps, p0\n"
      "0.2 cosine to 0.005 (the defaults).  --sparse-code-form takes the reference code's form where it differs from\n"
      "the paper: warmup = the stored m multiplied by min(t/W, 1) each step (so it compounds) and dense tensors warmed\n"
      "up too for the first W steps; steps = a regrown entry restarts at step 1, so its first update has t = 2;\n"
      "lr = lr divided by each matrix's density in turn, cumulatively over the parameter list (the code's bug: it\n"
      "diverges within a few steps; offered to reproduce it).  The log adds {event: probe, step, since_update,\n"
      "probe_loss} lines around each update u (a fixed probe batch, the training stream's first min(batch, 8)\n"
      "windows, at u - 1 and u + 1 .. u + --probe-steps; static logs the same at its --update-every and --probe-steps,\n"
      "with since_update 0 at u, as the control without updates) and an {event: topology} line (prune_fraction, probe_before,\n"
      "probe_after, pruning_jump; per matrix pruned, regrown, density).  --probe-control adds the paired control: at\n"
      "each update u the run also trains --probe-steps steps from the same state on the same batches without the update,\n"
      "logs {event: probe_control, step: u, probe_loss: [loss after u + 1 .. u + k]} and rewinds (the run itself is\n"
      "unchanged, bit for bit), so probe_loss(u + k) minus its k-th control loss is the update's excess loss with the training\n"
      "noise cancelled (it costs --probe-steps extra steps per update).  Meta and summary give sparse {density,\n"
      "active_weights, grad_bytes, mask_bytes}.  With --density 1 every matrix stays dense (plain dense training).\n"
      "A --init checkpoint's mask is not kept (a new one is drawn).\n"
      "Recurrent-depth models (issue 36; Huginn, arXiv 2502.05171): --arch recurrent-depth --prelude P --core C --coda D\n"
      "builds prelude, core and coda sandwich blocks; each micro-batch runs the core n + k times, (n, k) drawn from\n"
      "Huginn's log-normal Poisson with mean --mean-recurrence r (default 16), gradient through the last k <=\n"
      "--backprop-depth iterations only (truncated backpropagation), the initial state drawn from (--seed, step);\n"
      "each log line adds the step's recurrence n + k.  Validation runs at r.  Not with --exit-loss, LoRA or a schedule.\n"
      "Mixtures of experts (issue 31): --moe standard|latent makes every block's FFN routed (the flags of lm-init:\n"
      "--experts, --top-k, --d-expert, --d-shared, --latent, --expert-act, --router, --routed-scaling, --no-norm-topk),\n"
      "or --init brings such a model.  The objective adds alpha x L_aux per moe block (--moe-aux-loss alpha, default\n"
      "0.01; L_aux = E sum_e f_e P_e, f_e the share of routed entries sent to expert e, P_e its mean normalised router\n"
      "score: 1 when balanced).  --router-bias-update gamma moves a sigmoid router's selection bias after each step\n"
      "(DeepSeek-V3's auxiliary-loss-free balancing; pass --moe-aux-loss 0 for that method alone).  Each log line\n"
      "adds {moe: {aux_loss (the window's mean L_aux, before alpha), layers: [{layer, load (each expert's share of the\n"
      "window's routed entries), entropy (of load, divided by ln E: 1 = uniform), max_over_mean, dropped_tokens\n"
      "(routed entries the capacity limit dropped in the window; 0 without one)}]}}.  --moe-capacity-factor c\n"
      "(GShard/Switch token dropping, default 0 = no limit) lets each expert take at most ceil(c x rows x K / E)\n"
      "entries per forward call, the first in batch order; a dropped entry adds nothing to its row.  Held-out losses\n"
      "never drop (as the engine and lm-eval).  AdamW only; no --sparse.\n"
      "LoRA (Hu et al. 2021, as Hugging Face PEFT; issue 33): --lora-rank r fine-tunes adapters on the frozen --init model\n"
      "(every base tensor frozen: no gradient, no optimizer state): W x + s B A dropout(x) on each --lora-targets projection,\n"
      "A [r, in] kaiming-uniform, B [out, r] = 0, s = --lora-alpha / r (/ sqrt r with --rslora).  -o is then the adapter's\n"
      "PEFT directory (adapter_config.json, adapter_model.safetensors) that lm-eval, lm-generate and fafo-generate take with\n"
      "--lora and lm-convert --merge-lora merges; transformers + peft load it too.  Adam there defaults to beta2 0.999 and\n"
      "weight decay 0 (transformers' Trainer), and the run is plora-train's job of the same settings, bit for bit (the\n"
      "one-job case).  The other defaults are lm-train's own (batch 8, --seq-len n_ctx, 5% warmup, --seed 20260701), not\n"
      "a plora-train space's (batch 1, warmup 10, seed 0): give them to repeat a space's job.  A non-finite loss stops the\n"
      "run with exit 1 and writes no adapter.  --accum A makes each step A micro-batches of --batch windows (each with\n"
      "its own dropout stream), also over mpirun's ranks.  Not with --resume, --optimizer, --sparse, --moe or --exit-loss.\n"
      "Data parallelism (issue 41): mpirun -np N lm-train ... (the same command on every rank; built with MPI: --version\n"
      "says mpi: on) runs micro-batch a of each step on rank a mod N (--accum A >= N, a multiple of N best) and sums the\n"
      "gradients in micro-batch order by a chained reduction, so N ranks end in one process's bits at the same --accum,\n"
      "whatever N and --threads (default: the cores bound to the rank).  Rank 0 writes -o, --best, --export and the log;\n"
      "every rank reads the inputs (and -o on --resume), so all need the same paths.  Ranks started with other flags, data\n"
      "or model are refused at start, naming the rank; a rank that fails ends the job (mpirun exits non-zero, the rank\n"
      "named, the last checkpoint intact); --resume continues at any N, bit for bit.  The summary adds ranks,\n"
      "reduce_seconds, reduce_share and reduce_bytes_sent_per_step.  Every optimizer, sparse method, MoE, the exit loss,\n"
      "recurrent depth and LoRA run so; not --trajectory.  Example: mpirun -np 4 --bind-to core lm-train\n"
      "data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --init data/models/kjv7m.h5 --seq-len 256 --batch 2 --accum 8 --steps 100 -o run.h5 --log run.jsonl",
      "  lm-train data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --vocab-size 4096 --preset 7m --steps 2000 -o kjv.h5 --log kjv.jsonl\n"
      "  lm-train data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --vocab-size 4096 --d-model 256 --n-layers 6 --n-heads 8 --n-kv-heads 4 --d-ff 768 --n-ctx 256 --tokens 1.5e6 --optimizer poet-x --poet-block 64 --lr 1e-3 --poet-lr 5e-4 --clip 0.1 --beta2 0.999 --adam-eps 1e-6 --weight-decay 0 -o poet.h5\n"
      "  lm-train data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --vocab-size 2048 --d-model 128 --n-layers 6 --n-heads 4 --n-kv-heads 2 --d-ff 384 --n-ctx 128 --steps 800 --lr 2e-3 --beta2 0.999 --weight-decay 0 --sparse smet --density 0.25 -o smet.h5 --log smet.jsonl\n"
      "  lm-train data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --vocab-size 2048 --d-model 256 --n-layers 4 --n-heads 8 --n-kv-heads 4 --n-ctx 128 --moe latent --experts 32 --top-k 8 --d-expert 256 --latent 64 --steps 500 --lr 2e-3 -o lmoe.h5 --log lmoe.jsonl\n"
      "  lm-train psalms.tsv --column 2 --doc-column 1 --init data/models/kjv7m.h5 --lora-rank 8 --lora-targets q,k,v,o --seq-len 256 --steps 300 -o psalms-lora --log lora.jsonl\n"
      "  lm-train notes.txt --tokenizer t.model --d-model 128 --n-layers 4 --n-heads 4 --n-kv-heads 2 --d-ff 344 --n-ctx 256 --tokens 2e6 -o notes.h5\n"
      "  lm-train data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --steps 2000 --resume -o kjv.h5 --log kjv.jsonl   # after an interruption\n"};
  const int rc = cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("corpus", corpus_path, "Training text: .txt, .tsv or .jsonl (- for stdin)")->required();
        app.add_option("-o,--output", output, "Checkpoint to write (.h5), also the one --resume reads; with --lora-rank the adapter's PEFT directory")->required();
        nn::add_corpus_flags(app, copt);
        // model
        app.add_option("--init", init_path, "Start from this checkpoint (shape and tokenizer from it)");
        app.add_option("--config", config_path, "Model shape as JSON (vocab_size, d_model, n_layers, n_heads, n_kv_heads, d_ff, n_ctx, ...)");
        app.add_option("--preset", preset, "tiny | 7m (as lm-init)")->check(CLI::IsMember({"tiny", "7m"}));
        app.add_option("--tokenizer", tokenizer_path, "SentencePiece model to embed");
        app.add_option("--vocab-size", c.vocab_size, "Train a BPE tokenizer of this size on the training documents")->check(cli::int_range(260, 1 << 20));
        lm::add_shape_flags(app, c);
        lm::add_moe_flags(app, c, moe_flags);
        lm::add_recdepth_flags(app, c, recdepth_flags);
        app.add_option("--rope-style", rope, "half or interleaved")->check(CLI::IsMember({"half", "interleaved"}));
        app.add_flag("--tied", tied, "LM head shares the token embedding");
        app.add_option("--init-std", init_std, "Std of random initial matrices")->capture_default_str()->check(cli::positive());
        // optimisation
        app.add_option("--seq-len", t.seq_len, "Tokens per training window (default n_ctx)")->check(cli::int_range(1, 1 << 20));
        app.add_option("--batch", t.batch, "Windows per micro-batch")->capture_default_str()->check(cli::int_range(1, 1 << 16));
        app.add_option("--accum", t.accum, "Micro-batches per optimizer step")->capture_default_str()->check(cli::int_range(1, 1 << 16));
        app.add_option("--steps", t.steps, "Optimizer steps")->transform(cli::count(1, std::int64_t(1) << 40));
        app.add_option("--tokens", tokens_budget, "Training tokens (sets --steps)")->transform(cli::count(1, std::int64_t(1) << 50));
        app.add_option("--lr", t.lr, "Peak learning rate")->capture_default_str()->check(cli::positive());
        app.add_option("--min-lr", t.min_lr, "Final learning rate of the cosine (default lr/10)")->check(cli::non_negative());
        app.add_option("--warmup", t.warmup, "Warmup steps (default 5% of the steps)")->transform(cli::count(0, std::int64_t(1) << 40));
        app.add_option("--weight-decay", t.adam.weight_decay, "Decoupled weight decay (matrices only)")->capture_default_str()->check(cli::non_negative());
        app.add_option("--beta1", t.adam.beta1, "AdamW beta1")->capture_default_str()->check(CLI::Range(0.0, 0.999999));
        app.add_option("--beta2", t.adam.beta2, "AdamW beta2")->capture_default_str()->check(CLI::Range(0.0, 0.999999));
        app.add_option("--adam-eps", t.adam.eps, "AdamW epsilon")->capture_default_str()->check(cli::positive());
        app.add_option("--clip", t.clip, "Global gradient-norm limit (0 = off)")->capture_default_str()->check(cli::non_negative());
        // evaluation, checkpoints, log
        app.add_option("--eval-every", eval_every, "Validation every N steps (0 = only at the end)")->capture_default_str()->transform(cli::count(0, std::int64_t(1) << 40));
        app.add_option("--eval-tokens", eval_tokens, "Validation tokens per evaluation (0 = all)")->capture_default_str()->transform(cli::count(0, std::int64_t(1) << 50));
        app.add_option("--checkpoint-every", ckpt_every, "Write -o every N steps (default: --eval-every)")->transform(cli::count(0, std::int64_t(1) << 40));
        app.add_option("--best", best_path, "Best-validation checkpoint (default <output>.best.h5)");
        app.add_option("--log", log_path, "JSON Lines log (- = stdout); lines are flushed as they come")->capture_default_str();
        app.add_option("--log-every", log_every, "Log every N steps")->capture_default_str()->transform(cli::count(1, 1 << 30));
        app.add_option("--lora-rank", lora.rank, "LoRA fine-tuning (Hu et al. 2021; PEFT's LoraLayer): rank r of the adapters on the frozen --init model; -o is then the adapter's PEFT directory")->check(cli::int_range(1, 1 << 16));
        app.add_option("--lora-alpha", lora.alpha, "LoRA: alpha; the adapter's output is scaled by alpha / r (alpha / sqrt r with --rslora)")->capture_default_str()->check(cli::positive());
        // one argument (a comma list), so that a positional after it is not taken as another target
        app.add_option("--lora-targets", lora.targets_list, "LoRA: the projections adapted, a comma list of q, k, v, o, gate, up, down (PEFT's default for Llama: q,v)")->capture_default_str();
        app.add_flag("--rslora", lora.rslora, "LoRA: rank-stabilised scaling alpha / sqrt r (Kalajdzievski 2023)");
        app.add_option("--lora-dropout", lora.dropout, "LoRA: dropout p on the adapters' input during training")->capture_default_str()->check(CLI::Range(0.0, 0.999));
        app.add_flag("--resume", resume, "Continue the run saved in -o (model and tokenizer from it; the same training options)");
        app.add_flag("--overwrite", overwrite, "Start a new run even though -o holds a training run (which is then replaced)");
        app.add_flag("--allow-corpus-change", allow_corpus_change, "With --resume: continue on a corpus other than the one the checkpoint was trained on (refused by default)");
        app.add_option("--export", export_path, "When the run finishes, also write the best-validation weights (the final ones without validation) as a plain model (.h5)");
        app.add_option("--export-dtype", export_dtype, "Precision of --export matrices: f32, f16 or bf16")->capture_default_str()->check(CLI::IsMember({"f32", "f16", "bf16"}));
        app.add_option("--kernels", kernels, "fast (blocked GEMM, flash attention, vectorised layers) or reference (the v1 trainer's arithmetic)")->capture_default_str()->check(CLI::IsMember({"fast", "reference"}));
        app.add_option("--optimizer", t.optimizer, "adamw, adam-mini (one second moment per head / row / norm, Zhang et al. 2025), galore (Adam on a rank-r SVD subspace of each attention/MLP gradient, Zhao et al. 2024), foam (folded moments, Wen et al. 2026) poet-x (orthogonal equivalence transformation of every attention/MLP matrix, Qiu et al. 2026) or sgd (plain mini-batch SGD, no momentum; --weight-decay as L2: LMCleaner's setting)")->capture_default_str()->check(CLI::IsMember({"adamw", "adam-mini", "galore", "foam", "poet-x", "sgd"}));
        app.add_option("--poet-block", t.poet.block, "poet-x: block size b of the orthogonal blocks (must divide every attention/MLP dimension; with --poet-fully-stochastic at most the smallest)")->capture_default_str()->check(cli::int_range(2, 1 << 16));
        app.add_option("--poet-merge-every", t.poet.merge_every, "poet-x: merge-then-reinitialise every T steps (0 = never)")->capture_default_str()->check(cli::int_range(0, 1 << 30));
        app.add_option("--poet-terms", t.poet.terms, "poet-x: k of the Cayley-Neumann polynomial")->capture_default_str()->check(cli::int_range(1, 16));
        app.add_option("--poet-cayley", poet_cayley, "poet-x: neumann = (I+Q)(I+Q+...+Q^k), the reference's Triton kernel (k = 3); series = I+2(Q+...+Q^k), its PyTorch fallback (k = 4)")->capture_default_str()->check(CLI::IsMember({"neumann", "series"}));
        app.add_flag("--poet-fully-stochastic", t.poet.fully_stochastic, "poet-x: POET-FS, one b x b block per side on a random index subset (redrawn at each merge) instead of all m/b blocks");
        app.add_option("--poet-lr", t.poet.lr, "poet-x: peak learning rate of the Q entries (on the run's schedule; --lr is the embedding's, head's and norms')")->capture_default_str()->check(cli::positive());
        app.add_option("--poet-scale", t.poet.scale, "poet-x: poet_scale, multiplies the Q learning rate")->capture_default_str()->check(cli::non_negative());
        app.add_flag("--poet-no-normalize", poet_no_normalize, "poet-x: keep W0's rows as they are (the reference normalises them to unit norm)");
        app.add_option("--poet-clip-ramp-until", t.poet.clip_ramp_until, "poet-x: the clip limit ramps from 0.1x to 1x over the 10 steps after each merge up to this step (gd_warmup_steps)")->capture_default_str()->transform(cli::count(0, std::int64_t(1) << 40));
        app.add_option("--galore-rank", t.galore.rank, "galore: subspace rank r")->capture_default_str()->check(cli::int_range(1, 1 << 20));
        app.add_option("--galore-gap", t.galore.update_gap, "galore: steps between SVDs of the gradient (T)")->capture_default_str()->check(cli::int_range(1, 1 << 30));
        app.add_option("--galore-scale", t.galore.scale, "galore: scale of the projected-back update")->capture_default_str()->check(cli::non_negative());
        app.add_option("--foam-level", t.foam.level, "foam: fold level l (blocks of 2^l entries along each matrix's input dimension; 0 = Adam)")->capture_default_str()->check(cli::int_range(0, 16));
        app.add_option("--foam-scale", t.foam.scale, "foam: scale of the folded matrices' update (the reference's `scale`)")->capture_default_str()->check(cli::non_negative());
        app.add_option("--foam-res-scale", t.foam.res_scale, "foam: weight of the residual in the moments (res_scale)")->capture_default_str()->check(cli::non_negative());
        app.add_option("--foam-second-moment", foam_moment, "foam: folded second-moment input: code (mean of g^2 per block, the reference's) or paper ((mean g)^2)")->capture_default_str()->check(CLI::IsMember({"code", "paper"}));
        app.add_option("--sparse", sparse_method, "Sparse training of every attention/MLP matrix (embedding, head and norms dense): dense, static (a random mask kept), set (magnitude prune + random regrow, Mocanu et al. 2018), rigl (regrow by gradient magnitude, Evci et al. 2020) or smet (SET with local steps, momentum warm-up and lr / d, Xiao et al. 2026); AdamW only")->capture_default_str()->check(CLI::IsMember({"dense", "static", "set", "rigl", "smet"}));
        app.add_option("--density", t.sparse.density, "sparse: fraction d in (0, 1] of each sparse matrix's blocks kept active (floor(d x blocks), at least 1; 1 = every matrix dense)")->capture_default_str();
        app.add_option("--update-every", t.sparse.update_every, "sparse: steps between topology updates (prune + regrow; static: where its control probes are logged)")->capture_default_str();
        app.add_option("--prune-rate", t.sparse.prune_rate, "sparse: p0, the prune (and regrow) fraction of the schedule at step 0, in [0, 1)")->capture_default_str();
        app.add_option("--prune-rate-min", t.sparse.prune_rate_min, "sparse: the fraction the schedule decays to at the end of the run")->capture_default_str();
        app.add_option("--prune-schedule", prune_schedule, "sparse: cosine, linear or constant decay of the prune fraction over the run")->capture_default_str()->check(CLI::IsMember({"cosine", "linear", "constant"}));
        app.add_option("--sparse-block", t.sparse.block, "sparse: entries per block, a run of consecutive entries of the row-major matrix (may cross rows; must divide every attention/MLP matrix; 1 = unstructured)")->capture_default_str();
        app.add_flag("--sparse-local-steps", t.sparse.local_steps, "sparse: per-entry Adam step counts, a regrown entry restarts at step 0 with m = v = 0 (SMET's local reset; on with smet)");
        app.add_option("--sparse-warmup", t.sparse.warmup, "sparse: momentum warm-up over W local steps, the update scaled by min(t / W, 1) (SMET; default 0 = off, 100 with smet)");
        app.add_flag("--sparse-density-lr", t.sparse.density_lr, "sparse: learning rate lr / d on each sparse matrix, d its density (SMET; on with smet)");
        app.add_option("--sparse-code-form", sparse_code_form, "sparse: the reference code's form where it differs from the paper (see the description above), a comma list of warmup, lr, steps")->delimiter(',')->check(CLI::IsMember({"warmup", "lr", "steps"}));
        app.add_option("--moe-aux-loss", t.moe_aux, "moe models: the load-balancing loss coefficient alpha (alpha E sum_e f_e P_e per moe block, Switch/Mixtral; 0 = off)")->capture_default_str();
        app.add_option("--moe-capacity-factor", t.moe_capacity, "moe models: the capacity factor c of token dropping in training (each expert takes at most ceil(c x rows x K / E) routed entries per forward call, the first in batch order; 0 = no limit)")->capture_default_str();
        app.add_option("--router-bias-update", t.router_bias_update, "moe models with --router sigmoid: the auxiliary-loss-free balancing step gamma (DeepSeek-V3: after each step b_e += gamma sign(mean load - load_e); 0 = off)")->capture_default_str();
        app.add_option("--probe-steps", t.sparse.probe_steps, "sparse: probe-batch losses logged for this many steps after each topology update")->capture_default_str();
        app.add_flag("--probe-control", t.sparse.probe_control, "sparse (set, rigl, smet): at each topology update also train --probe-steps steps without the update from the same state on the same batches, log their probe losses (event probe_control), then rewind: the paired control of the optimizer spike");
        app.add_option("--exit-loss", t.exit.scale, "LayerSkip's early-exit loss: e_scale, the weight of the intermediate exits (the shared final norm and head after blocks) against the final layer (0 = off)")->check(cli::non_negative());
        app.add_option("--exit-every", t.exit.every, "Exits after every R-th block (with --exit-loss)")->capture_default_str()->check(cli::int_range(1, 1 << 20));
        app.add_option("--exit-curriculum", exit_curriculum, "Which exits train each step: rot (the every-R set shifted by one block per step), gradual (from the last block down, all on at half the run) or all")->capture_default_str()->check(CLI::IsMember({"rot", "gradual", "all"}));
        app.add_option("--exit-weights", exit_weights, "Exit loss weights before normalisation: sum_l (cumulative sum of layer numbers, LayerSkip's), l or one")->capture_default_str()->check(CLI::IsMember({"sum_l", "l", "one"}));
        app.add_option("--stop-at", stop_at, "Stop after this step (checkpoint written; resume later)")->transform(cli::count(0, std::int64_t(1) << 40));
        app.add_option("--trajectory", trajectory_dir, "Record the run's trajectory in this directory for lmcleaner-unlearn (issue 34): each step's batch (window ids) and learning rate in steps.jsonl, a training checkpoint every --trajectory-every steps; --optimizer sgd or adamw")->group("Unlearning");
        app.add_option("--trajectory-every", trajectory_every, "Steps between the trajectory's checkpoints (C: rebuilding a state replays at most C - 1 steps)")->capture_default_str()->transform(cli::count(1, std::int64_t(1) << 40))->group("Unlearning");
        app.add_option("--unlearn-requests", requests_path, "Online unlearning: a JSON Lines file of deletion requests read at every step boundary (lines appended while the run trains are picked up); each is applied by LMCleaner without stopping, the other windows of its batches re-queued; a request's \"at_step\": N holds it until N steps are done (needs --trajectory)")->group("Unlearning");
      },
      [&](cli::Context& ctx) {
        CLI::App* app = app_ptr;
        for (const char* f : {"--lora-alpha", "--lora-targets", "--rslora", "--lora-dropout"})
          if (app->count(f) && lora.rank == 0) throw UsageError(fmt::format("{} needs --lora-rank", f), f);
        if (!requests_path.empty() && trajectory_dir.empty())
          throw UsageError("--unlearn-requests applies deletions on a recorded trajectory: give --trajectory DIR", "--unlearn-requests");
        if (app->count("--trajectory-every") && trajectory_dir.empty())
          throw UsageError("--trajectory-every needs --trajectory", "--trajectory-every");
        if (!trajectory_dir.empty() && (lora.rank > 0 || resume))
          throw UsageError(fmt::format("--trajectory records a full training run from its start (not {})", lora.rank > 0 ? "--lora-rank" : "--resume"),
                           "--trajectory");
        if (world.distributed()) {
          if (!writer) log::set_level(log::Level::quiet);  // rank 0 speaks for the job
          if (!app->count("--threads")) set_threads(world.default_threads());
          if (!trajectory_dir.empty())
            throw UsageError("--trajectory records a single process's run: run it without mpirun", "--trajectory");
          if (t.accum < world.size())
            throw UsageError(fmt::format("--accum {} gives each step {} micro-batch{} for {} ranks: give --accum at least {}, best a multiple "
                                         "(micro-batch a of a step runs on rank a mod {})",
                                         t.accum, t.accum, t.accum == 1 ? "" : "es", world.size(), world.size(), world.size()),
                             "--accum");
          if (t.accum % world.size() != 0)
            log::warn("--accum {} is not a multiple of the {} ranks: in each step's last round {} rank(s) wait", t.accum, world.size(),
                      world.size() - t.accum % world.size());
        }
        if (lora.rank > 0) {
          lora.targets.clear();
          for (std::size_t a = 0; a <= lora.targets_list.size();) {
            const std::size_t b = std::min(lora.targets_list.find(',', a), lora.targets_list.size());
            lora.targets.push_back(lora.targets_list.substr(a, b - a));
            a = b + 1;
          }
          if (kernels == "reference") nn::set_train_kernels(nn::TrainKernels::reference);
          return train_lora(ctx, world, *app, lora, corpus_path, copt, init_path, output, log_path, t, tokens_budget, eval_every,
                            eval_tokens, log_every, kernels);
        }
        io::require_output_extension(output, "-o", {".h5", ".hdf5"}, "the checkpoint is HDF5");
        io::check_distinct_outputs({{"-o", output},
                                    {"--best", best_path.empty() ? best_path_for(output) : best_path},
                                    {"--export", export_path},
                                    {"--log", log_path}},
                                   {corpus_path, tokenizer_path, config_path, init_path});
        if (!init_path.empty() && (!config_path.empty() || !preset.empty() || app->count("--vocab-size") || !tokenizer_path.empty()))
          throw UsageError("--init takes the shape and tokenizer from the checkpoint; drop --config/--preset/--vocab-size/--tokenizer", "--init");
        for (const char* f : {"--d-model", "--n-layers", "--n-heads", "--n-kv-heads", "--d-ff", "--n-ctx", "--tied", "--rope-style", "--moe",
                              "--experts", "--top-k", "--d-expert", "--d-shared", "--latent", "--expert-act", "--router",
                              "--routed-scaling", "--no-norm-topk", "--arch", "--prelude", "--core", "--coda", "--mean-recurrence",
                              "--backprop-depth", "--no-qk-bias"})
          if (!init_path.empty() && app->count(f)) throw UsageError(fmt::format("{} conflicts with --init", f), f);
        if (!tokenizer_path.empty() && app->count("--vocab-size"))
          throw UsageError("give --tokenizer or --vocab-size, not both", "--vocab-size");
        if (!resume && init_path.empty() && tokenizer_path.empty() && !app->count("--vocab-size"))
          throw UsageError("give --init, --tokenizer or --vocab-size", "--vocab-size");
        if (t.steps > 0 && tokens_budget > 0) throw UsageError("give --steps or --tokens, not both", "--tokens");
        if (t.steps == 0 && tokens_budget == 0) throw UsageError("give --steps or --tokens", "--steps");
        if (resume && overwrite) throw UsageError("give --resume or --overwrite, not both");
        if (recdepth_flags.arch == "recurrent-depth" && t.exit.enabled())
          throw UsageError("--exit-loss has no blocks to exit from in a recurrent-depth model (its depth is the recurrence)", "--exit-loss");

        for (const char* f : {"--exit-every", "--exit-curriculum", "--exit-weights"})
          if (app->count(f) && !(t.exit.scale > 0)) throw UsageError(fmt::format("{} needs --exit-loss > 0", f), f);
        for (const char* f : {"--foam-level", "--foam-scale", "--foam-res-scale", "--foam-second-moment"})
          if (app->count(f) && t.optimizer != "foam") throw UsageError(fmt::format("{} needs --optimizer foam", f), f);
        for (const char* f : {"--galore-rank", "--galore-gap", "--galore-scale"})
          if (app->count(f) && t.optimizer != "galore") throw UsageError(fmt::format("{} needs --optimizer galore", f), f);
        for (const char* f : {"--poet-block", "--poet-merge-every", "--poet-terms", "--poet-cayley", "--poet-fully-stochastic",
                              "--poet-lr", "--poet-scale", "--poet-no-normalize", "--poet-clip-ramp-until"})
          if (app->count(f) && t.optimizer != "poet-x") throw UsageError(fmt::format("{} needs --optimizer poet-x", f), f);
        t.sparse.method = nn::parse_sparse_method(sparse_method);
        for (const char* f : {"--prune-rate", "--prune-rate-min", "--prune-schedule"})
          if (app->count(f) && !t.sparse.dynamic())
            throw UsageError(fmt::format("{} needs a topology that changes (--sparse set, rigl or smet){}", f,
                                         t.sparse.method == nn::SparseMethod::fixed ? "; static keeps its mask" : ""),
                             f);
        for (const char* f : {"--density", "--update-every", "--probe-steps", "--sparse-block", "--sparse-local-steps", "--sparse-warmup",
                              "--sparse-density-lr", "--sparse-code-form"})
          if (app->count(f) && !t.sparse.enabled()) throw UsageError(fmt::format("{} needs --sparse static, set, rigl or smet", f), f);
        if (app->count("--probe-control") && !t.sparse.dynamic())
          throw UsageError("--probe-control needs a topology that changes (--sparse set, rigl or smet)", "--probe-control");
        t.sparse.schedule = nn::parse_prune_schedule(prune_schedule);
        for (const auto& f : sparse_code_form) {
          if (f == "warmup") t.sparse.code_warmup = true;
          if (f == "lr") t.sparse.code_lr = true;
          if (f == "steps") t.sparse.code_steps = true;
        }
        if (t.sparse.code_warmup && !app->count("--sparse-warmup") && t.sparse.method != nn::SparseMethod::smet)
          throw UsageError("--sparse-code-form warmup needs a warm-up (--sparse-warmup W or --sparse smet)", "--sparse-code-form");
        if (t.sparse.code_lr && !t.sparse.density_lr && t.sparse.method != nn::SparseMethod::smet)
          throw UsageError("--sparse-code-form lr needs the density-aware learning rate (--sparse-density-lr or --sparse smet)", "--sparse-code-form");
        nn::resolve_sparse_options(t.sparse, app->count("--sparse-warmup") > 0);
        if (t.sparse.enabled()) nn::check_sparse_options(t.sparse);
        t.poet.polynomial = poet_cayley == "series" ? nn::CayleyPolynomial::series : nn::CayleyPolynomial::neumann;
        t.poet.normalize = !poet_no_normalize;
        t.foam.paper_second_moment = foam_moment == "paper";
        t.exit.curriculum = nn::parse_exit_curriculum(exit_curriculum);
        t.exit.weights = nn::parse_exit_weights(exit_weights);
        if (resume)  // the usual way to resume is the same command line plus --resume: say, don't refuse
          for (const char* flag : {"--init", "--preset", "--config", "--tokenizer", "--vocab-size"})
            if (app->count(flag) > 0)
              log::warn("{} is ignored with --resume: the model and tokenizer come from -o {}", flag, output);
        // Forgetting --resume must not throw away a run: -o holding training state is kept.
        if (!resume && !overwrite && nn::holds_training_state(output))
          throw UsageError(fmt::format("-o {} already holds a training run: --resume continues it, --overwrite replaces it", output));
        if (best_path.empty()) best_path = best_path_for(output);
        if (ckpt_every == 0) ckpt_every = eval_every;
        // Unwritable outputs fail now, before any work (AtomicFile checks the directory).
        if (writer) { io::AtomicFile probe(output); io::AtomicFile probe2(best_path); }
        if (!export_path.empty()) {
          io::require_output_extension(export_path, "--export", {".h5", ".hdf5"}, "the exported model is HDF5");
          if (writer) io::AtomicFile probe3(export_path);
        }
        // The log is opened at its first line, so a run that fails while reading its inputs
        // leaves an existing log untouched.
        io::JsonlLog jlog(log_path, resume);
        Progress* active_bar = nullptr;  // cleared before a record goes to stdout (same terminal)
        auto emit = [&](const nlohmann::json& j) {
          if (!writer) return;
          jlog.write(j, [&] {
            if (active_bar) active_bar->clear();
          });
        };

        // ---- data ----
        const nn::Documents docs = nn::read_corpus(corpus_path, copt);
        ctx.prov.add_input(corpus_path, docs.sha256);
        if (docs.train.empty()) throw InputError("no training documents", corpus_path);

        // ---- model ----
        lm::Model init;
        if (resume) {  // shape and tokenizer from the run's own checkpoint
          if (!std::filesystem::exists(output)) throw InputError("nothing to resume: the checkpoint does not exist", output);
          init = lm::load_checkpoint(output);
          // the same command with --resume is the usual way to continue: shape flags may repeat the
          // checkpoint's values, but one that differs would be silently ignored, so it is refused
          const lm::ModelConfig& k = init.config;
          auto same = [&](const char* flag, double given, double stored) {
            if (app->count(flag) && given != stored)
              throw UsageError(fmt::format("{} {} differs from the checkpoint's {} (a resumed run keeps the checkpoint's shape)", flag, given, stored),
                               flag);
          };
          same("--vocab-size", c.vocab_size, k.vocab_size);
          same("--d-model", c.d_model, k.d_model);
          same("--n-layers", c.n_layers, k.n_layers);
          same("--n-heads", c.n_heads, k.n_heads);
          same("--n-kv-heads", c.n_kv_heads, k.n_kv_heads);
          same("--d-ff", c.d_ff, k.d_ff);
          same("--n-ctx", c.n_ctx, k.n_ctx);
          same("--tied", tied, k.tied);
          if (app->count("--rope-style") && (rope == "half") != (k.rope_style == lm::RopeStyle::half))
            throw UsageError(fmt::format("--rope-style {} differs from the checkpoint's {}", rope, lm::rope_style_name(k.rope_style)), "--rope-style");
          if (app->count("--moe")) {
            const lm::BlockType want = moe_flags.kind == "latent" ? lm::BlockType::latent_moe : lm::BlockType::moe;
            if (k.block_types.empty() || k.block_type(0) != want)
              throw UsageError(fmt::format("--moe {} differs from the checkpoint's blocks ({})", moe_flags.kind,
                                           lm::join_block_types(k.all_block_types())),
                               "--moe");
          }
          same("--experts", c.moe.n_experts, k.moe.n_experts);
          same("--top-k", c.moe.top_k, k.moe.top_k);
          same("--d-expert", c.moe.d_expert, k.moe.d_expert);
          same("--d-shared", c.moe.d_shared, k.moe.d_shared);
          same("--latent", c.moe.d_latent, k.moe.d_latent);
          same("--routed-scaling", c.moe.routed_scaling, k.moe.routed_scaling);
          same("--no-norm-topk", moe_flags.no_norm_topk, !k.moe.norm_topk);
          if (app->count("--expert-act") && moe_flags.act != lm::expert_act_name(k.moe.act))
            throw UsageError(fmt::format("--expert-act {} differs from the checkpoint's {}", moe_flags.act, lm::expert_act_name(k.moe.act)), "--expert-act");
          if (app->count("--router") && moe_flags.router != lm::router_kind_name(k.moe.router))
            throw UsageError(fmt::format("--router {} differs from the checkpoint's {}", moe_flags.router, lm::router_kind_name(k.moe.router)), "--router");
          if (app->count("--arch") && (recdepth_flags.arch == "recurrent-depth") != k.is_recdepth())
            throw UsageError(fmt::format("--arch {} differs from the checkpoint's ({})", recdepth_flags.arch,
                                         k.is_recdepth() ? "recurrent-depth" : "llama"), "--arch");
          same("--prelude", recdepth_flags.prelude, k.recdepth_prelude());
          same("--core", recdepth_flags.core, k.recdepth_core());
          same("--coda", recdepth_flags.coda, k.recdepth_coda());
          same("--mean-recurrence", c.recdepth.mean_recurrence, k.recdepth.mean_recurrence);
          same("--backprop-depth", c.recdepth.backprop_depth, k.recdepth.backprop_depth);
          same("--no-qk-bias", recdepth_flags.no_qk_bias, k.is_recdepth() && !k.recdepth.qk_bias);
        } else if (!init_path.empty()) {
          init = lm::load_any(init_path);
          ctx.prov.add_input(init_path, lm::model_sha256(init_path));
          if (init.tokenizer_model.empty())
            throw InputError("the model has no tokenizer (" + lm::tokenizer_location(init_path) + " missing)", init_path);
        } else {
          if (!preset.empty()) lm::apply_preset(preset, c, [&](const char* flag) { return std::string(flag) == "--vocab-size" || app->count(flag) > 0; });
          if (!config_path.empty()) {
            std::string sha;
            const auto j = io::read_json(config_path, &sha);
            ctx.prov.add_input(config_path, sha);
            apply_config_json(j, c, config_path, [&](const std::string& f) { return app->count(f) > 0; });
          }
          if (app->count("--rope-style")) c.rope_style = rope == "half" ? lm::RopeStyle::half : lm::RopeStyle::interleaved;
          if (app->count("--tied")) c.tied = tied;
          lm::apply_moe_flags(moe_flags, c, [&](const char* flag) { return app->count(flag) > 0; });
          lm::apply_recdepth_flags(recdepth_flags, c, [&](const char* flag) { return app->count(flag) > 0; });
          std::string tok_bytes;
          if (!tokenizer_path.empty()) {
            tok_bytes = io::read_file(tokenizer_path);
            ctx.prov.add_input(tokenizer_path, io::sha256_hex(tok_bytes));
          } else {
            lm::TokenizerTrainOptions to;
            to.vocab_size = c.vocab_size;
            to.threads = ctx.common.threads > 0 ? ctx.common.threads : 1;
            log::debug("training a {}-piece BPE tokenizer on {} documents", c.vocab_size, docs.train.size());
            try {
              tok_bytes = lm::train_tokenizer(tokenizer_sentences(docs.train), to);
            } catch (const InputError& e) {
              const std::string why = e.what();
              if (why.find("too high") != std::string::npos)
                throw InputError(fmt::format("vocabulary of {} pieces is larger than the corpus supports ({})",
                                             c.vocab_size, why.substr(why.rfind(']') + 2)), "--vocab-size");
              throw InputError(why, "--vocab-size");
            }
          }
          const lm::Tokenizer tok(tok_bytes, tokenizer_path.empty() ? "trained tokenizer" : tokenizer_path);
          c.vocab_size = tok.vocab_size();
          c.bos_id = tok.bos_id() < c.vocab_size ? tok.bos_id() : -1;
          c.eos_id = tok.eos_id() < c.vocab_size ? tok.eos_id() : -1;
          c.add_bos = c.bos_id >= 0;
          try {
            c.validate("model config");
          } catch (const InputError& e) {
            throw UsageError(e.what());
          }
          if (c.is_recdepth() && app->count("--init-std"))
            throw UsageError("--arch recurrent-depth uses Huginn's initialisation (std sqrt(2 / (5 d)), scaled output projections)", "--init-std");
          init = c.is_recdepth() ? lm::random_recdepth_model(c, ctx.common.seed) : lm::random_model(c, ctx.common.seed, init_std);
          init.tokenizer_model = tok_bytes;
        }
        const lm::ModelConfig& mc = init.config;
        for (const char* f : {"--moe-aux-loss", "--router-bias-update", "--moe-capacity-factor"})
          if (app->count(f) && !mc.has_moe())
            throw UsageError(fmt::format("{} needs a model with moe blocks (--moe standard or latent, or an --init model that has them)", f), f);
        if (mc.is_recdepth() && t.exit.enabled())
          throw UsageError("--exit-loss has no blocks to exit from in a recurrent-depth model (its depth is the recurrence)", "--exit-loss");
        // Combinations the trainer cannot run are refused now, before the corpus is tokenized.
        if (kernels == "reference" && t.optimizer == "poet-x")
          throw UsageError("--kernels reference runs the v1 trainer's arithmetic, which has no POET-X path (its input-centric products run on the fast kernels only)", "--kernels");
        nn::check_train_options(t, mc);
        if (!trajectory_dir.empty()) unlearn::check_trajectory_options(t, mc);
        if (!app->count("--seq-len")) t.seq_len = mc.n_ctx;
        if (t.seq_len > mc.n_ctx)
          throw InputError(fmt::format("context --seq-len {} is larger than the model allows (n_ctx = {})", t.seq_len, mc.n_ctx), "--seq-len");
        const lm::Tokenizer tok(init.tokenizer_model, "model tokenizer");
        std::vector<std::int64_t> doc_starts;
        std::vector<int> train_stream = nn::tokenize_documents(tok, docs.train, mc.add_bos ? mc.bos_id : -1, corpus_path, &doc_starts);
        const std::vector<int> val_stream = nn::tokenize_documents(tok, docs.val, mc.add_bos ? mc.bos_id : -1, corpus_path);
        const std::vector<int> trajectory_stream = trajectory_dir.empty() ? std::vector<int>() : train_stream;
        const std::int64_t step_tokens = std::int64_t(t.batch) * t.seq_len * t.accum;
        if (tokens_budget > 0) t.steps = std::max<std::int64_t>(1, (tokens_budget + step_tokens - 1) / step_tokens);
        if (t.warmup < 0) t.warmup = t.steps / 20;
        if (t.min_lr < 0) t.min_lr = t.lr / 10;
        t.seed = ctx.common.seed;
        const std::int64_t train_tokens = static_cast<std::int64_t>(train_stream.size());
        if (t.exit.enabled() && t.exit.every >= init.config.n_layers)
          log::warn("--exit-every {} >= the model's {} blocks: only {}", t.exit.every, init.config.n_layers,
                    t.exit.curriculum == nn::ExitCurriculum::rotational ? "a rotating exit trains in some steps" : "the final layer trains");
        if (!init_path.empty() && !resume) {  // a sparse checkpoint's mask does not carry over to a new run
          const nlohmann::json was = nn::checkpoint_train_options(init_path);
          if (was.is_object() && was.contains("sparse"))
            log::warn("--init {} was trained sparse; {}", init_path,
                      t.sparse.enabled() ? "its mask is not kept: a new one is drawn from --seed and the weights outside it are set to 0"
                                         : "this run trains every entry (its zeros included) dense");
        }
        // the training stream as tokenized here (corpus, split and tokenizer): compared across ranks
        const std::string stream_sha256 = world.distributed() ? tokens_sha256(train_stream) : std::string();
        nn::Trainer trainer(init, std::move(train_stream), t);
        trainer.set_corpus_sha256(docs.sha256);
        if (t.sparse.dynamic() && t.sparse.update_every >= t.steps)
          log::warn("--update-every {} >= the run's {} steps: the topology never changes ({} trains as static)", t.sparse.update_every,
                    t.steps, nn::sparse_method_name(t.sparse.method));
        for (const auto& [i, mask] : trainer.sparse_masks())
          if (double(mask.num_blocks()) * t.sparse.density < 1.0) {  // floor(d x blocks) = 0, rounded up to one block
            log::warn("--density {} is below one block of {} in {}: it keeps one block (density {:.3g})", t.sparse.density,
                      mask.block, trainer.params().store.params[std::size_t(i)].name, mask.density());
            break;
          }
        if (val_stream.size() < 2 && copt.val_every > 0)
          log::warn("no validation documents (fewer than --val-every {} documents); no validation loss", copt.val_every);

        double best_val = std::numeric_limits<double>::infinity();
        std::int64_t last_ckpt_step = -1;
        if (resume) {
          const auto extra = trainer.load(output);
          const std::string& was = trainer.checkpoint_corpus_sha256();
          if (!was.empty() && was != docs.sha256) {
            if (!allow_corpus_change)
              throw InputError(fmt::format("resume: the corpus differs from the one the checkpoint was trained on (SHA-256 {} "
                                           "here, {} in the checkpoint; --allow-corpus-change continues anyway)",
                                           docs.sha256.substr(0, 12), was.substr(0, 12)),
                               corpus_path);
            log::warn("resuming on a different corpus (SHA-256 {}, the checkpoint's is {})", docs.sha256.substr(0, 12), was.substr(0, 12));
          } else if (was.empty()) {
            log::warn("the checkpoint does not record its corpus; cannot check that the corpus is the same");
          }
          if (extra.contains("best_val") && extra["best_val"].is_number()) best_val = extra["best_val"].get<double>();
          last_ckpt_step = trainer.steps_done();
          log::info("resumed at step {} ({} tokens)", trainer.steps_done(), trainer.tokens_seen());
          if (trainer.steps_done() >= t.steps) log::info("the run is already finished (step {} of {}): nothing to train", trainer.steps_done(), t.steps);
        }
        if (world.distributed()) {
          // The ranks must run the same step on the same state: compared by hash before any step,
          // the rank that differs named (all ranks get the same verdict and stop together).
          const nlohmann::json run{{"options", t.to_json()}, {"kernels", kernels}, {"end", stop_at > 0 ? std::min(stop_at, t.steps) : t.steps},
                                   {"ckpt_every", ckpt_every}, {"eval_every", eval_every}, {"log_every", log_every}};
          check_same_start(world, {{"training options (flags)", run.dump()},
                                   {"corpus or split (the training stream)", docs.sha256 + stream_sha256},
                                   {"model and training state", trainer.state_sha256()}});
          trainer.set_comm(&world.comm());
          ctx.prov.extra["ranks"] = world.size();
          ctx.prov.extra["transport"] = world.comm().transport();
          log::info("data parallel: {} ranks of {} thread(s), {} micro-batch(es) of {} windows each per step", world.size(), threads(),
                    t.accum, t.batch);
        }
        const std::int64_t n_params = mc.n_params();
        ctx.prov.extra["n_params"] = n_params;
        if (mc.has_moe()) {  // the weights a token multiplies: top-K experts, router, shared expert, projections
          std::int64_t active = n_params;
          for (int l = 0; l < mc.n_layers; ++l) active -= mc.block_params(l) - mc.block_active_params(l);
          ctx.prov.extra["n_active_params"] = active;
        }
        ctx.prov.extra["optimizer_state_bytes"] = trainer.optimizer_state_bytes();
        ctx.prov.extra["trainable_bytes"] = trainer.trainable_bytes();
        ctx.prov.extra["frozen_bytes"] = trainer.frozen_bytes();
        // Sparse training: the measured density over the sparse matrices and the bytes that shrink with it.
        auto sparse_info = [&] {
          std::int64_t active = 0, total = 0, mask_bytes = 0;
          for (const auto& [i, mask] : trainer.sparse_masks()) {
            active += static_cast<std::int64_t>(mask.active_entries());
            total += static_cast<std::int64_t>(mask.numel);
            mask_bytes += static_cast<std::int64_t>(mask.blocks.size() * sizeof(std::int32_t));
          }
          return nlohmann::json{{"method", nn::sparse_method_name(t.sparse.method)},
                                {"sparse_matrices", trainer.sparse_masks().size()},
                                {"active_weights", active},
                                {"sparse_matrix_weights", total},
                                {"density", total > 0 ? nlohmann::json(double(active) / double(total)) : nlohmann::json(1.0)},
                                {"grad_bytes", trainer.grad_bytes()},
                                {"mask_bytes", mask_bytes}};
        };
        if (t.sparse.enabled()) ctx.prov.extra["sparse"] = sparse_info();
        ctx.prov.extra["train_tokens"] = train_tokens;
        ctx.prov.extra["val_tokens"] = static_cast<std::int64_t>(val_stream.size());
        t.moe_model = mc.has_moe();  // the moe settings are part of the run's options (as the Trainer records them)
        ctx.prov.extra["options"] = t.to_json();
        // a grown model's growth steps stay in the trained model's provenance: from --init, or on
        // --resume from the checkpoint being resumed (which carries them from its own --init)
        if (resume || !init_path.empty()) {
          const nlohmann::json growth = lm::growth_history(resume ? output : init_path);
          if (!growth.empty()) ctx.prov.extra["growth"] = growth;
        }
        nn::set_train_kernels(kernels == "reference" ? nn::TrainKernels::reference : nn::TrainKernels::fast);
        ctx.prov.extra["train_kernels"] = kernels;
        ctx.prov.extra["gemm_path"] = nn::gemm_path_name();
        ctx.prov.extra["threads"] = threads();
        emit(nlohmann::json{{"meta", ctx.prov.to_json()}});
        log::info("{} weights; {} training tokens ({} windows of {}), {} validation tokens; {} steps of {} tokens",
                  n_params, train_tokens, trainer.windows(), t.seq_len, val_stream.size(), t.steps, step_tokens);

        // The trajectory store (issue 34) and the online deletions: from step 0 on.
        std::unique_ptr<unlearn::TrajectoryWriter> traj_writer;
        std::unique_ptr<unlearn::OnlineRun> online;
        std::unique_ptr<unlearn::RequestFeed> feed;
        std::vector<unlearn::DeletionRequest> waiting;  // requests read but held until their "at_step"
        auto due_requests = [&](bool final) {
          for (auto& r : feed->poll()) waiting.push_back(std::move(r));
          std::vector<unlearn::DeletionRequest> due, later;
          for (auto& r : waiting) {
            const std::int64_t at = r.settings.value("at_step", std::int64_t(0));
            if (final && at > trainer.steps_done())
              log::warn("request '{}' waits for step {} but the run ends at {}: applied now", r.id, at, trainer.steps_done());
            ((final || at <= trainer.steps_done()) ? due : later).push_back(std::move(r));
          }
          waiting = std::move(later);
          return due;
        };
        if (!trajectory_dir.empty()) {
          unlearn::TrajectoryMeta meta;
          meta.train_options = t.to_json();
          meta.corpus = copt;
          meta.corpus_sha256 = docs.sha256;
          meta.checkpoint_every = trajectory_every;
          meta.windows = trainer.windows();
          meta.seq_len = t.seq_len;
          meta.doc_starts = doc_starts;
          meta.stream_tokens = static_cast<std::int64_t>(trajectory_stream.size());
          meta.kernels = kernels;
          traj_writer = std::make_unique<unlearn::TrajectoryWriter>(trajectory_dir, meta, overwrite);
          traj_writer->checkpoint(trainer, ctx.prov);
          online = std::make_unique<unlearn::OnlineRun>(trainer, *traj_writer, meta, trajectory_stream, docs.train, ctx.prov);
          if (!requests_path.empty()) feed = std::make_unique<unlearn::RequestFeed>(requests_path);
        }
        auto save_extra = [&] { return nlohmann::json{{"best_val", std::isfinite(best_val) ? nlohmann::json(best_val) : nlohmann::json()}}; };
        auto checkpoint = [&] {
          if (writer) trainer.save(output, ctx.prov, save_extra());
          last_ckpt_step = trainer.steps_done();
        };
        auto validate = [&](nlohmann::json& line) {
          if (val_stream.size() < 2 || !writer) return;  // rank 0 evaluates; the others go on to the next step's data
          if (active_bar) active_bar->clear();
          const std::int64_t val_targets = static_cast<std::int64_t>(val_stream.size()) - 1;
          Progress vbar(static_cast<std::size_t>(eval_tokens > 0 ? std::min(val_targets, eval_tokens) : val_targets), "validation tokens");
          std::int64_t shown = 0;
          const auto r = nn::evaluate(trainer.params(), val_stream, t.seq_len, t.batch, eval_tokens, [&](std::int64_t done, std::int64_t) {
            vbar.tick(static_cast<std::size_t>(done - shown));
            shown = done;
          });
          vbar.finish();
          line["val_loss"] = r.loss;
          line["val_tokens"] = r.tokens;
          if (!std::isfinite(r.loss))
            throw RuntimeError(fmt::format("non-finite validation loss at step {}", trainer.steps_done()));
          if (r.loss < best_val) {
            best_val = r.loss;
            trainer.save(best_path, ctx.prov, save_extra());
            line["best"] = true;
          }
        };

        const std::int64_t end = stop_at > 0 ? std::min(stop_at, t.steps) : t.steps;
        // The machine's GEMM rate on these threads, for the model-FLOP utilisation (only when
        // there is something to train: a 1024^3 product takes a few tenths of a second).
        const double flop_per_token = nn::training_flop_per_token(trainer.params().config, t.seq_len);
        // Under mpirun every rank measures at once, so the rate is that of cores all busy, as in training.
        double gemm_rate = trainer.steps_done() < end ? nn::gemm_gflops(1024, 3) * 1e9 : 0.0;
        auto mfu = [&](double tokens_per_s) {  // over every rank's cores (each assumed to run rank 0's rate)
          return gemm_rate > 0 ? nlohmann::json(tokens_per_s * flop_per_token / (gemm_rate * world.size())) : nlohmann::json();
        };
        Progress bar(static_cast<std::size_t>(std::max<std::int64_t>(0, end - trainer.steps_done())), "steps");
        active_bar = &bar;
        const auto t_start = std::chrono::steady_clock::now();
        double train_seconds = 0, window_seconds = 0, window_loss = 0, window_objective = 0;
        std::map<int, std::pair<double, int>> window_exits;  // layer -> (summed mean loss, steps)
        std::vector<std::vector<double>> window_load;  // moe: routed entries per layer and expert
        std::vector<double> window_dropped;  // moe: entries the capacity limit dropped per layer
        double window_aux = 0;
        std::int64_t window_tokens = 0, window_steps = 0, start_tokens = trainer.tokens_seen(), start_step = trainer.steps_done();
        nn::StepStats st;
        nlohmann::json last_val;
        while (trainer.steps_done() < end) {
          const auto t0 = std::chrono::steady_clock::now();
          try {
            if (feed)  // deletion requests that arrived by this step boundary
              for (const auto& req : due_requests(false)) {
                if (active_bar) active_bar->clear();
                emit(online->apply(req));
              }
            st = online ? online->step() : trainer.step();
          } catch (const RuntimeError& e) {
            bar.finish();
            throw RuntimeError(std::string(e.what()) + (last_ckpt_step >= 0
                                   ? fmt::format("; the last good checkpoint is step {}", last_ckpt_step)
                                   : std::string("; no checkpoint was written")), output);
          }
          const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          train_seconds += dt;
          window_seconds += dt;
          window_tokens += step_tokens;
          window_loss += st.loss;
          window_objective += st.objective;
          if (!st.expert_load.empty()) {  // moe: the router statistics of the window
            window_load.resize(st.expert_load.size());
            for (std::size_t l = 0; l < st.expert_load.size(); ++l) {
              window_load[l].resize(st.expert_load[l].size(), 0.0);
              for (std::size_t e = 0; e < st.expert_load[l].size(); ++e) window_load[l][e] += st.expert_load[l][e];
            }
            window_aux += st.aux_loss;
            window_dropped.resize(st.expert_dropped.size(), 0.0);
            for (std::size_t l = 0; l < st.expert_dropped.size(); ++l) window_dropped[l] += st.expert_dropped[l];
          }
          for (const auto& [layer, l] : st.exit_losses) {
            auto& [sum, count] = window_exits[layer];
            sum += l;
            ++count;
          }
          ++window_steps;
          bar.tick();
          if (!std::isnan(st.probe_loss))  // sparse training: the fixed probe batch around topology updates
            emit(nlohmann::json{{"event", "probe"}, {"step", st.step}, {"since_update", st.since_update}, {"probe_loss", st.probe_loss}});
          if (st.topology) {
            nlohmann::json layers = nlohmann::json::array();
            for (const auto& L : st.topology->layers)
              layers.push_back({{"name", L.name}, {"pruned", L.pruned}, {"regrown", L.regrown}, {"density", L.density}});
            emit(nlohmann::json{{"event", "topology"},
                                {"step", st.step},
                                {"prune_fraction", st.topology->prune_fraction},
                                {"probe_before", st.topology->probe_before},
                                {"probe_after", st.topology->probe_after},
                                {"pruning_jump", st.topology->probe_after - st.topology->probe_before},
                                {"layers", layers}});
            if (!st.topology->control_probe.empty())  // --probe-control: the no-update branch, paired with the probes that follow
              emit(nlohmann::json{{"event", "probe_control"}, {"step", st.step}, {"probe_loss", st.topology->control_probe}});
          }
          const bool do_eval = (eval_every > 0 && st.step % eval_every == 0) || st.step == t.steps;
          const bool do_log = st.step % log_every == 0 || do_eval || st.step == end;
          if (do_log) {
            nlohmann::json line{{"step", st.step},
                                {"tokens", st.tokens},
                                {"train_loss", window_loss / double(window_steps)},
                                {"lr", st.lr},
                                {"grad_norm", st.grad_norm},
                                {"tokens_per_s", window_tokens / std::max(window_seconds, 1e-9)},
                                {"mfu", mfu(window_tokens / std::max(window_seconds, 1e-9))}};
            if (std::isfinite(st.recurrence)) line["recurrence"] = st.recurrence;  // recurrent-depth: this step's sampled n + k
            if (t.exit.enabled()) {  // the objective minimised, and each exit's mean loss over the steps it trained
              line["objective"] = window_objective / double(window_steps);
              nlohmann::json ex = nlohmann::json::object();
              for (const auto& [layer, sc] : window_exits) ex[std::to_string(layer)] = sc.first / sc.second;
              line["exit_losses"] = ex;
            }
            if (!window_load.empty()) {  // per moe block: each expert's share of the routed entries, its entropy
              nlohmann::json layers = nlohmann::json::array();
              for (std::size_t l = 0; l < window_load.size(); ++l) {
                double total = 0, h = 0, mx = 0;
                for (double x : window_load[l]) total += x;
                if (window_load[l].empty() || total <= 0) continue;
                std::vector<double> share;
                for (double x : window_load[l]) {
                  share.push_back(x / total);
                  if (x > 0) h -= x / total * std::log(x / total);
                  mx = std::max(mx, x / total);
                }
                const double E = double(window_load[l].size());
                layers.push_back({{"layer", l}, {"load", share}, {"entropy", E > 1 ? h / std::log(E) : 1.0}, {"max_over_mean", mx * E},
                                  {"dropped_tokens", static_cast<long long>(l < window_dropped.size() ? window_dropped[l] : 0.0)}});
              }
              line["moe"] = {{"aux_loss", window_aux / double(window_steps)}, {"layers", layers}};
              window_load.clear();
              window_dropped.clear();
              window_aux = 0;
            }
            if (do_eval) {
              validate(line);
              if (line.contains("val_loss")) last_val = line["val_loss"];
            }
            emit(line);
            window_seconds = 0;
            window_tokens = 0;
            window_loss = 0;
            window_objective = 0;
            window_exits.clear();
            window_steps = 0;
          }
          if ((ckpt_every > 0 && st.step % ckpt_every == 0) || st.step == end) checkpoint();
        }
        bar.finish();
        active_bar = nullptr;
        if (feed) {  // requests that came in during the last step
          bool applied = false;
          for (const auto& req : due_requests(true)) {
            emit(online->apply(req));
            applied = true;
          }
          if (applied) last_ckpt_step = -1;  // -o must hold the corrected weights
        }
        if (last_ckpt_step != trainer.steps_done()) checkpoint();
        if (writer && !export_path.empty() && trainer.steps_done() >= t.steps) {
          const bool have_best = std::isfinite(best_val) && !io::is_stream_path(best_path) && std::filesystem::exists(best_path);
          lm::Model shipped = have_best ? lm::load_checkpoint(best_path) : trainer.model();
          io::Provenance prov = ctx.prov;
          prov.extra["exported_from"] = have_best ? "best validation checkpoint" : "final weights";
          if (have_best) prov.extra["val_loss"] = best_val;
          lm::save_checkpoint(export_path, shipped, io::h5::parse_float_storage(export_dtype, "--export-dtype"), prov);
        }
        const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
        // The rate is measured again at the end and the higher one kept: a product that ran
        // while the machine was busy understates what the cores can do (and would inflate MFU).
        if (gemm_rate > 0) gemm_rate = std::max(gemm_rate, nn::gemm_gflops(1024, 3) * 1e9);
        nlohmann::json summary{{"steps", trainer.steps_done()},
                               {"tokens", trainer.tokens_seen()},
                               {"train_loss", st.step > 0 ? nlohmann::json(st.loss) : nlohmann::json()},
                               {"val_loss", last_val},
                               {"best_val_loss", std::isfinite(best_val) ? nlohmann::json(best_val) : nlohmann::json()},
                               {"n_params", n_params},
                               {"optimizer", t.optimizer},
                               {"optimizer_state_bytes", trainer.optimizer_state_bytes()},
                               {"trainable_bytes", trainer.trainable_bytes()},
                               {"frozen_bytes", trainer.frozen_bytes()},
                               {"peak_rss_bytes", peak_rss_bytes()},
                               {"seconds", wall},
                               {"tokens_per_s", (trainer.tokens_seen() - start_tokens) / std::max(train_seconds, 1e-9)},
                               {"mfu", mfu((trainer.tokens_seen() - start_tokens) / std::max(train_seconds, 1e-9))},
                               {"model_gflop_per_token", flop_per_token / 1e9},
                               {"gemm_gflops", gemm_rate > 0 ? nlohmann::json(gemm_rate / 1e9) : nlohmann::json()},
                               {"train_kernels", kernels},
                               {"ranks", world.size()},
                               {"output", output},
                               {"finished", trainer.steps_done() >= t.steps}};
        if (last_val.is_number()) summary["val_perplexity"] = std::exp(last_val.get<double>());
        if (t.sparse.enabled()) summary["sparse"] = sparse_info();
        if (world.distributed()) {  // the reduction's share of the training time, and what it moved
          const std::int64_t stepped = trainer.steps_done() - start_step;
          summary["reduce_seconds"] = trainer.reduce_seconds();
          summary["reduce_share"] = trainer.reduce_seconds() / std::max(train_seconds, 1e-9);
          summary["reduce_bytes_sent_per_step"] = stepped > 0 ? trainer.reduce_bytes_sent() / stepped : 0;
        }
        if (traj_writer) {
          if (!traj_writer->due(trainer.steps_done())) traj_writer->checkpoint(trainer, ctx.prov);  // the last state
          summary["trajectory"] = {{"dir", trajectory_dir}, {"bytes", traj_writer->bytes()}, {"checkpoint_every", trajectory_every}};
          if (online) summary["unlearn_requests"] = online->requests();
        }
        emit(nlohmann::json{{"summary", summary}});
        log::info("step {}: {}, {} -> {}", trainer.steps_done(),
                  st.step > 0 ? fmt::format("train loss {:.4f}", st.loss) : std::string("no steps trained in this call"),
                  last_val.is_number() ? fmt::format("val loss {:.4f}", last_val.get<double>()) : std::string("no validation"), output);
      });
  if (rc != 0 && !held_error.empty()) {
    std::this_thread::sleep_for(std::chrono::seconds(3));  // rank 0 reports a failure of every rank first
    const std::string tag = "lm-train: error: ";
    std::fprintf(stderr, "%s%s", tag.c_str(), fmt::format("rank {}: {}", world.rank(), held_error.substr(tag.size())).c_str());
  }
  return world.finish(rc);
}
