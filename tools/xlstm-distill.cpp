// xlstm-distill: distil a Llama teacher into the hybrid mLSTM + sliding-window-attention student of
// "Effective Distillation to Hybrid xLSTM Architectures" (arXiv 2603.15590): Stage I (layer-wise
// alignment), Stage II (sparse top-k knowledge distillation), Stage III (--merge of experts), and
// the benchmarks the Win-and-Tie rate (winrate) compares students with (issue 35).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>

#include "cli/count.hpp"
#include "cli/run_tool.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/jsonl_log.hpp"
#include "io/table.hpp"
#include "lm/model_io.hpp"
#include "lm/tokenizer.hpp"
#include "nn/corpus.hpp"
#include "nn/corpus_flags.hpp"
#include "nn/distill.hpp"
#include "nn/distill_bench.hpp"
#include "nn/trainer.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

using namespace icmlkit;

namespace {

/// The KJV book groups of the miniature (lm/README keys "Ge1" .. "Rev22"): law and history,
/// poetry and prophets, gospels and Acts, epistles and Revelation.
const std::vector<std::string> kKjvGroups{
    "law:Ge,Exo,Lev,Num,Deu,Josh,Jdgs,Ruth,1Sm,2Sm,1Ki,2Ki,1Chr,2Chr,Ezra,Neh,Est",
    "prophets:Job,Psa,Prv,Eccl,SSol,Isa,Jer,Lam,Eze,Dan,Hos,Joel,Amos,Obad,Jonah,Mic,Nahum,Hab,Zep,Hag,Zec,Mal",
    "gospels:Mat,Mark,Luke,John,Acts",
    "epistles:Rom,1Cor,2Cor,Gal,Eph,Phi,Col,1Th,2Th,1Tim,2Tim,Titus,Phmn,Heb,Jas,1Pet,2Pet,1Jn,2Jn,3Jn,Jude,Rev"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

/// Each "name:p1,p2,..." -> (name, prefixes).  Throws UsageError naming --group.
std::vector<std::pair<std::string, std::vector<std::string>>> parse_groups(const std::vector<std::string>& specs) {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const std::string& g : specs) {
    const auto colon = g.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == g.size())
      throw UsageError(fmt::format("group '{}' is not name:prefix,prefix,...", g), "--group");
    out.emplace_back(g.substr(0, colon), split(g.substr(colon + 1), ','));
  }
  return out;
}

std::vector<double> parse_weights(const std::string& list) {
  if (list.empty() || list.front() == ',' || list.back() == ',' || list.find(",,") != std::string::npos)
    throw UsageError(fmt::format("'{}' is not a comma-separated list of weights", list), "--merge-weights");
  std::vector<double> w;
  for (const std::string& x : split(list, ',')) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(x, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != x.size()) throw UsageError(fmt::format("cannot read '{}' as a weight", x), "--merge-weights");
    w.push_back(v);
  }
  return w;
}

void require_same_tokenizer(const lm::Model& teacher, const lm::Model& m, const std::string& who) {
  if (m.tokenizer_model != teacher.tokenizer_model || m.config.vocab_size != teacher.config.vocab_size)
    throw InputError("its tokenizer differs from the teacher's: a student must share the teacher's vocabulary", who);
}

/// Throws UsageError when output `out` (flag `flag`) is one of the inputs.
void not_an_input(const std::string& out, const char* flag, const std::vector<std::string>& inputs) {
  std::error_code ec;
  for (const auto& in : inputs)
    if (!in.empty() && (out == in || std::filesystem::equivalent(out, in, ec)))
      throw UsageError(fmt::format("{} would replace the input {}: write it elsewhere", out, in), flag);
}

std::string sibling(const std::string& out, const std::string& suffix) {
  const std::filesystem::path p(out);
  return (p.parent_path() / (p.stem().string() + suffix)).string();
}

}  // namespace

int main(int argc, char** argv) {
  std::string teacher_path, corpus_path, output, log_path, init_path, merge_weights, speed_path;
  std::string mixer_name = "hybrid";
  std::vector<std::string> merge_paths, eval_paths, eval_names, group_specs;
  nn::CorpusOptions copt;
  int window = 64, sinks = 4, student_ctx = 16384, seq_len = 256, batch = 8, top_k = 256, checkpoint_every = 50;
  std::int64_t align_tokens = 131072, kd_tokens = 524288, bench_tokens = 8192;
  double align_lr = 1e-2, align_min_lr = 1e-5, kd_lr = 3e-4, ce_weight = 0.9, kl_weight = 0.1, weight_decay = 0.1;
  bool resume = false;
  std::string books;
  CLI::App* app_ptr = nullptr;
  cli::ToolInfo info{
      "xlstm-distill",
      "Distil a Llama teacher into a hybrid xLSTM student (arXiv 2603.15590; issue 35).  Every block becomes\n"
      "mlstm-hybrid: the teacher's embeddings, norms, W_q/W_k/W_v/W_o and MLP are kept; each query head mixes an\n"
      "mLSTM over Hedgehog features of q and k with softmax attention over a sliding window of --window tokens\n"
      "plus --sinks first tokens, by a sigmoid gate on [q; k; v] (eq. 11; --mixer linear and swa are the\n"
      "ablations' linear-attention and window-only students).  Stage I (--align-tokens) trains only the feature\n"
      "maps and gates so that each block's output matches the teacher block's on the teacher's input; Stage II\n"
      "(--kd-tokens) fine-tunes everything on 0.9 cross-entropy + 0.1 KL to the teacher's top-k (256) softmax;\n"
      "a run writes OUT.stage1.h5 after Stage I and a resumable OUT.ckpt.h5 during Stage II (--resume).\n"
      "--merge: Stage III, theta = sum_i lambda_i theta_i of experts (--merge-weights, >= 0, summing to 1).\n"
      "--evaluate: the benchmarks (higher is better) of the teacher and each student as a CSV for winrate:\n"
      "top-1/top-5 next-token accuracy on the held-out documents of each --group book group, repeated-passage\n"
      "recall at 64, 256 and 768 tokens, and agreement with the teacher's greedy 64-token continuations;\n"
      "--speed adds prefill/decode tokens/s and cache bytes at contexts 256, 1024 and 4096.",
      "  xlstm-distill data/models/kjv7m.h5 data/corpus/kjv.tsv.gz --column 2 --doc-column 1 -o student.h5 --log s.jsonl\n"
      "  xlstm-distill kjv7m.h5 kjv.tsv.gz --column 2 --doc-column 1 --init student.stage1.h5 --align-tokens 0 --books Mat,Mark,Luke,John,Acts -o gospels.h5\n"
      "  xlstm-distill --merge law.h5 --merge gospels.h5 --merge-weights 0.5,0.5 -o merged.h5\n"
      "  xlstm-distill kjv7m.h5 kjv.tsv.gz --column 2 --doc-column 1 --evaluate student.h5 --evaluate merged.h5 -o scores.csv\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app_ptr = &app;
        app.add_option("teacher", teacher_path, "The teacher: a model of llama blocks (native .h5, GGUF or Hugging Face)");
        app.add_option("corpus", corpus_path, "Distillation / benchmark text: .txt, .tsv or .jsonl");
        app.add_option("-o,--output", output, "The student (.h5), the merged model (.h5) or the scores (.csv)")->required();
        nn::add_corpus_flags(app, copt);
        app.add_option("--books", books, "TSV: distil on the rows whose --doc-column key starts with one of these comma-separated prefixes (an expert's data)");
        app.add_option("--mixer", mixer_name, "Student mixer: hybrid (the paper's), linear (linear attention) or swa (window only)")
            ->capture_default_str()->check(CLI::IsMember({"hybrid", "linear", "swa"}));
        app.add_option("--window", window, "Sliding window W of the student's attention (tokens)")->capture_default_str();
        app.add_option("--sinks", sinks, "Sink tokens S the window also attends")->capture_default_str();
        app.add_option("--student-ctx", student_ctx, "The student's position limit n_ctx (its cache stays W + S slots and a state)")
            ->capture_default_str()->check(cli::int_range(1, 1 << 24));
        app.add_option("--init", init_path, "Start from this student (e.g. OUT.stage1.h5 for an expert) instead of the teacher");
        app.add_option("--align-tokens", align_tokens, "Stage I tokens (0 = skip)")->capture_default_str();
        app.add_option("--align-lr", align_lr, "Stage I learning rate, cosine to --align-min-lr")->capture_default_str();
        app.add_option("--align-min-lr", align_min_lr, "Stage I final learning rate")->capture_default_str();
        app.add_option("--kd-tokens", kd_tokens, "Stage II tokens (0 = skip)")->capture_default_str();
        app.add_option("--kd-lr", kd_lr, "Stage II learning rate (constant, as the paper's)")->capture_default_str();
        app.add_option("--ce-weight", ce_weight, "Stage II: weight gamma of the cross-entropy")->capture_default_str();
        app.add_option("--kl-weight", kl_weight, "Stage II: weight beta of the top-k KL")->capture_default_str();
        app.add_option("--top-k", top_k, "Stage II: the teacher's logits kept per position")->capture_default_str();
        app.add_option("--weight-decay", weight_decay, "Stage II AdamW weight decay")->capture_default_str();
        app.add_option("--seq-len", seq_len, "Tokens per training window")->capture_default_str()->check(cli::int_range(2, 1 << 16));
        app.add_option("--batch", batch, "Windows per step")->capture_default_str()->check(cli::int_range(1, 4096));
        app.add_option("--checkpoint-every", checkpoint_every, "Stage II steps between checkpoints (OUT.ckpt.h5)")->capture_default_str()->check(cli::int_range(1, 1 << 30));
        app.add_option("--log", log_path, "JSON Lines log of every step (stage, loss, lr, ...)");
        app.add_flag("--resume", resume, "Continue an interrupted run: Stage II from OUT.ckpt.h5, or from OUT.stage1.h5");
        app.add_option("--merge", merge_paths, "Stage III: an expert to merge (repeat; all from the same Stage I model)");
        app.add_option("--merge-weights", merge_weights, "Stage III: comma-separated weights, >= 0, summing to 1");
        app.add_option("--evaluate", eval_paths, "A student to benchmark against the teacher (repeat); -o is the scores CSV");
        app.add_option("--name", eval_names, "The column name of each --evaluate student (default: its file stem)");
        app.add_option("--group", group_specs, "A benchmark book group, name:key-prefix,key-prefix,... (repeat; default: the KJV's law, prophets, gospels, epistles)");
        app.add_option("--bench-tokens", bench_tokens, "Targets scored per group")->capture_default_str();
        app.add_option("--speed", speed_path, "With --evaluate: write prefill/decode speed and cache bytes at contexts 256, 1024, 4096 here (.json)");
      },
      [&](cli::Context& ctx) {
        CLI::App& app = *app_ptr;
        if (!merge_paths.empty()) {  // ---- Stage III ----
          if (!teacher_path.empty() || !eval_paths.empty()) throw UsageError("--merge takes no teacher, corpus or --evaluate", "--merge");
          for (const char* f : {"--books", "--log", "--init", "--resume", "--mixer", "--window", "--sinks", "--speed", "--name", "--group"})
            if (app.count(f)) throw UsageError(fmt::format("{} does not apply to --merge", f), f);
          not_an_input(output, "-o", merge_paths);
          if (merge_weights.empty()) throw UsageError("--merge needs --merge-weights", "--merge-weights");
          const std::vector<double> w = parse_weights(merge_weights);
          std::vector<lm::Model> experts;
          for (const auto& p : merge_paths) {
            ctx.prov.add_input(p, lm::model_sha256(p));
            experts.push_back(lm::load_any(p));
          }
          lm::Model merged = nn::merge_experts(experts, w, merge_paths);
          ctx.prov.extra["merge"] = {{"experts", merge_paths}, {"weights", w}};
          lm::save_any(output, lm::output_format(output), merged, io::h5::FloatStorage::f32, ctx.prov);
          log::info("merged {} experts -> {}", experts.size(), output);
          return;
        }
        if (teacher_path.empty() || corpus_path.empty()) throw UsageError("give the teacher and the corpus (or --merge)", "teacher");
        if (window < 1) throw UsageError(fmt::format("the window must be >= 1 token (got {})", window), "--window");
        if (sinks < 0) throw UsageError(fmt::format("sinks must be >= 0 (got {})", sinks), "--sinks");
        ctx.prov.add_input(teacher_path, lm::model_sha256(teacher_path));
        const lm::Model teacher = lm::load_any(teacher_path);
        if (!books.empty() && copt.doc_column < 1 && copt.doc_field.empty())
          throw UsageError("--books selects documents by their key: give --doc-column (TSV) or --doc-field (JSONL)", "--books");
        nn::Documents docs = nn::read_corpus(corpus_path, copt);
        if (!books.empty()) {  // the split is the whole corpus's (so held-out chapters stay held out), then the books
          const std::vector<std::string> prefixes = split(books, ',');
          std::vector<std::string> kept;
          for (std::size_t i = 0; i < docs.train.size(); ++i)
            for (const auto& p : prefixes)
              if (docs.train_keys[i].compare(0, p.size(), p) == 0) {
                kept.push_back(std::move(docs.train[i]));
                break;
              }
          if (kept.empty()) throw InputError("no training document's key starts with a --books prefix", corpus_path);
          docs.train = std::move(kept);
        }
        ctx.prov.add_input(corpus_path, docs.sha256);
        const lm::Tokenizer tok(teacher.tokenizer_model, teacher_path + ": tokenizer");
        const int bos = teacher.config.add_bos ? teacher.config.bos_id : -1;

        if (!eval_paths.empty()) {  // ---- benchmarks ----
          if (!books.empty()) throw UsageError("--books selects distillation data; --evaluate reads every group's held-out chapters", "--books");
          if (!eval_names.empty() && eval_names.size() != eval_paths.size())
            throw UsageError(fmt::format("{} --name for {} --evaluate", eval_names.size(), eval_paths.size()), "--name");
          if (bench_tokens < 1) throw UsageError(fmt::format("--bench-tokens must be >= 1 (got {})", bench_tokens), "--bench-tokens");
          io::require_output_extension(output, "-o", {".csv", ".json"}, "the scores are a table", true);
          std::vector<std::string> inputs{teacher_path, corpus_path};
          inputs.insert(inputs.end(), eval_paths.begin(), eval_paths.end());
          not_an_input(output, "-o", inputs);
          if (!speed_path.empty()) {
            io::require_output_extension(speed_path, "--speed", {".json"}, "the speed table is JSON", false);
            io::check_output_dir(speed_path);
            not_an_input(speed_path, "--speed", inputs);
            if (speed_path == output) throw UsageError("--speed and -o name the same file", "--speed");
          }
          std::vector<std::string> names{"teacher"};
          std::vector<lm::Model> students;
          for (std::size_t i = 0; i < eval_paths.size(); ++i) {  // every student read and checked before any benchmark runs
            const std::string name = eval_names.empty() ? std::filesystem::path(eval_paths[i]).stem().string() : eval_names[i];
            if (name.empty() || name.find_first_of(",\"\n") != std::string::npos)
              throw UsageError(fmt::format("student name '{}' is empty or holds a comma, quote or newline", name), "--name");
            if (std::find(names.begin(), names.end(), name) != names.end())
              throw UsageError(fmt::format("two columns would be named '{}': give distinct --name", name), "--name");
            names.push_back(name);
            ctx.prov.add_input(eval_paths[i], lm::model_sha256(eval_paths[i]));
            students.push_back(lm::load_any(eval_paths[i]));
            require_same_tokenizer(teacher, students.back(), eval_paths[i]);
          }
          nn::BenchData data;
          const auto groups = parse_groups(group_specs.empty() ? kKjvGroups : group_specs);
          for (const auto& [name, prefixes] : groups) {
            std::vector<std::string> chosen;
            for (std::size_t i = 0; i < docs.val.size(); ++i)
              for (const auto& p : prefixes)
                if (docs.val_keys[i].compare(0, p.size(), p) == 0) {
                  chosen.push_back(docs.val[i]);
                  break;
                }
            if (chosen.empty())
              throw InputError(fmt::format("no held-out document's key starts with a prefix of group '{}' (keys come from --doc-column)", name),
                               corpus_path);
            data.groups.push_back(name);
            data.group_tokens.push_back(nn::tokenize_documents(tok, chosen, bos, corpus_path));
          }
          data.pool = nn::tokenize_documents(tok, docs.val, -1, corpus_path);
          nn::BenchOptions bo;
          bo.group_tokens = bench_tokens;
          bo.seed = ctx.prov.seed;
          const auto cont = nn::teacher_continuations(teacher, data, bo);
          std::vector<std::vector<std::pair<std::string, double>>> scores{nn::distill_benchmarks(teacher, data, cont, bo)};
          nlohmann::json speed = nlohmann::json::object();
          const std::vector<int> contexts{256, 1024, 4096};
          auto speed_json = [&](const lm::Model& m) {
            nlohmann::json rows = nlohmann::json::array();
            for (const auto& p : nn::engine_speed(m, data.pool, contexts, 64))
              rows.push_back(p.ran ? nlohmann::json{{"context", p.context}, {"prefill_tok_s", p.prefill_tok_s}, {"decode_tok_s", p.decode_tok_s},
                                                    {"cache_bytes", p.cache_bytes}}
                                   : nlohmann::json{{"context", p.context}, {"skipped", "beyond the model's n_ctx"}});
            return rows;
          };
          if (!speed_path.empty()) speed["teacher"] = speed_json(teacher);
          for (std::size_t i = 0; i < students.size(); ++i) {
            log::info("benchmarking {}", names[i + 1]);
            scores.push_back(nn::distill_benchmarks(students[i], data, cont, bo));
            if (!speed_path.empty()) speed[names[i + 1]] = speed_json(students[i]);
          }
          io::Table table;
          std::vector<std::string> bench_names;
          for (const auto& s : scores[0]) bench_names.push_back(s.first);
          table.set_column("benchmark", bench_names);
          for (std::size_t m = 0; m < scores.size(); ++m) {
            std::vector<double> col;
            for (const auto& s : scores[m]) col.push_back(s.second);
            table.set_column(names[m], col);
          }
          if (!speed_path.empty()) {
            speed["meta"] = ctx.prov.to_json();
            io::write_json(speed_path, speed);
          }
          table.write(output, &ctx.prov);
          log::info("{} benchmarks of {} models -> {}", scores[0].size(), names.size(), output);
          return;
        }

        // ---- Stages I and II ----
        for (const char* f : {"--name", "--group", "--bench-tokens", "--speed"})
          if (app.count(f)) throw UsageError(fmt::format("{} goes with --evaluate", f), f);
        if (app.count("--merge-weights")) throw UsageError("--merge-weights goes with --merge", "--merge-weights");
        io::require_output_extension(output, "-o", {".h5"}, "the student is a native HDF5 model", false);
        if (io::is_stream_path(output))
          throw UsageError("the student goes to a file: its Stage I model and checkpoint are written beside it", "-o");
        if (align_tokens < 0 || kd_tokens < 0) throw UsageError("token budgets must be >= 0", align_tokens < 0 ? "--align-tokens" : "--kd-tokens");
        for (auto [v, f] : {std::pair{align_lr, "--align-lr"}, {align_min_lr, "--align-min-lr"}, {kd_lr, "--kd-lr"}})
          if (!(v > 0) || !std::isfinite(v)) throw UsageError(fmt::format("the learning rate must be > 0 (got {})", v), f);
        if (!(weight_decay >= 0) || !std::isfinite(weight_decay))
          throw UsageError(fmt::format("weight decay must be >= 0 (got {})", weight_decay), "--weight-decay");
        if (seq_len > student_ctx) throw UsageError(fmt::format("--seq-len {} exceeds the student's n_ctx {}", seq_len, student_ctx), "--student-ctx");
        if (seq_len > teacher.config.n_ctx)
          throw UsageError(fmt::format("--seq-len {} exceeds the teacher's n_ctx {}", seq_len, teacher.config.n_ctx), "--seq-len");
        lm::MlstmConfig mix;
        mix.window = window;
        mix.sinks = sinks;
        mix.mixer = lm::parse_mlstm_mixer(mixer_name, "--mixer");
        const std::string stage1_path = sibling(output, ".stage1.h5"), ckpt_path = sibling(output, ".ckpt.h5");
        for (const auto& [out, flag] : {std::pair{output, "-o"}, {stage1_path, "-o"}, {ckpt_path, "-o"}, {log_path, "--log"}})
          not_an_input(out, flag, {teacher_path, corpus_path, init_path});
        // the top-k KL's settings, checked before any stage runs
        std::optional<nn::TopKDistillLoss> kd_loss;
        if (kd_tokens > 0) kd_loss.emplace(teacher, seq_len, top_k, ce_weight, kl_weight);
        io::JsonlLog jlog(log_path.empty() ? "/dev/null" : log_path, resume);
        const bool have_ckpt = resume && nn::holds_training_state(ckpt_path);
        const bool have_stage1 = resume && std::filesystem::exists(stage1_path);
        if (resume && !have_ckpt && !have_stage1)
          throw UsageError(fmt::format("nothing to resume: neither {} nor {} exists", ckpt_path, stage1_path), "--resume");
        if (!resume && nn::holds_training_state(ckpt_path))
          throw UsageError(fmt::format("{} holds a run's training state: --resume continues it (or delete it to start over)", ckpt_path), "--resume");
        lm::Model student;
        if (!init_path.empty()) {
          for (const char* f : {"--mixer", "--window", "--sinks", "--student-ctx"})
            if (app.count(f)) throw UsageError(fmt::format("{} shapes a new student; --init's student keeps its own", f), f);
          ctx.prov.add_input(init_path, lm::model_sha256(init_path));
          student = lm::load_any(init_path);
          require_same_tokenizer(teacher, student, init_path);
          if (!student.config.has_mlstm()) throw InputError("not an mlstm-hybrid student", init_path);
        } else {
          student = nn::make_student(teacher, mix, student_ctx);
        }
        const std::vector<int> stream = nn::tokenize_documents(tok, docs.train, bos, corpus_path);
        const std::vector<int> val_stream = nn::tokenize_documents(tok, docs.val, bos, corpus_path);
        const std::int64_t per_step = std::int64_t(seq_len) * batch;
        if (align_tokens > 0 && !have_ckpt && !have_stage1) {
          nn::AlignOptions ao;
          ao.seq_len = seq_len;
          ao.batch = batch;
          ao.steps = std::max<std::int64_t>(1, align_tokens / per_step);
          ao.lr = align_lr;
          ao.min_lr = align_min_lr;
          ao.seed = ctx.prov.seed;
          log::info("Stage I: {} steps of {} tokens (feature maps and gates)", ao.steps, per_step);
          nn::align_layers(teacher, student, stream, ao, [&](const nn::AlignStep& s) {
            jlog.write({{"stage", 1}, {"step", s.step}, {"mse", s.mse}, {"block_mse", s.block_mse}, {"lr", s.lr}, {"grad_norm", s.grad_norm}});
            if (s.step % 10 == 0 || s.step == ao.steps) log::info("Stage I step {}/{}: mse {:.5f}", s.step, ao.steps, s.mse);
          });
          ctx.prov.extra["stage1"] = {{"steps", ao.steps}, {"tokens", ao.steps * per_step}, {"lr", align_lr}, {"min_lr", align_min_lr}};
          lm::save_checkpoint(stage1_path, student, io::h5::FloatStorage::f32, ctx.prov);
        } else if (have_stage1 && !have_ckpt) {
          student = lm::load_checkpoint(stage1_path);
          log::info("resuming after Stage I from {}", stage1_path);
        }
        if (kd_tokens > 0) {
          nn::TrainOptions t;
          t.seq_len = seq_len;
          t.batch = batch;
          t.steps = std::max<std::int64_t>(1, kd_tokens / per_step);
          t.lr = t.min_lr = kd_lr;
          t.warmup = 0;
          t.adam.weight_decay = weight_decay;
          t.seed = ctx.prov.seed;
          nn::Trainer trainer(student, stream, t);
          trainer.set_corpus_sha256(docs.sha256);
          trainer.set_logits_hook(*kd_loss);
          if (have_ckpt) {
            trainer.load(ckpt_path);
            log::info("resumed Stage II at step {}", trainer.steps_done());
          }
          log::info("Stage II: {} steps of {} tokens ({} CE + {} top-{} KL)", t.steps, per_step, ce_weight, kl_weight, top_k);
          while (trainer.steps_done() < t.steps) {
            const nn::StepStats s = trainer.step();
            nlohmann::json line{{"stage", 2}, {"step", s.step}, {"loss", s.loss}, {"kl", s.hook_loss}, {"lr", s.lr}, {"grad_norm", s.grad_norm}};
            if (s.step % checkpoint_every == 0 || s.step == t.steps) {
              if (val_stream.size() > 1) line["val_loss"] = nn::evaluate(trainer.params(), val_stream, seq_len, batch, 16384).loss;
              trainer.save(ckpt_path, ctx.prov);
              log::info("Stage II step {}/{}: loss {:.4f}, KL {:.4f}{}", s.step, t.steps, s.loss, s.hook_loss,
                        line.contains("val_loss") ? fmt::format(", val {:.4f}", line["val_loss"].get<double>()) : std::string());
            }
            jlog.write(line);
          }
          student = trainer.model();
          ctx.prov.extra["stage2"] = {{"steps", t.steps}, {"tokens", t.steps * per_step}, {"lr", kd_lr}, {"ce_weight", ce_weight},
                                      {"kl_weight", kl_weight}, {"top_k", top_k}, {"weight_decay", weight_decay}};
        }
        ctx.prov.extra["student"] = {{"mixer", lm::mlstm_mixer_name(student.config.mlstm.mixer)}, {"window", student.config.mlstm.window},
                                     {"sinks", student.config.mlstm.sinks}, {"books", books}};
        lm::save_checkpoint(output, student, io::h5::FloatStorage::f32, ctx.prov);
        log::info("student -> {}", output);
      });
}
