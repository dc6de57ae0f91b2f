// hybridflow-train-router: trains HybridFlow's utility router on offline edge/cloud subtask
// profiles, evaluates a router against random and fixed-threshold routing at equal cloud share, and
// scores raw inputs (the parity check against torch) (arXiv 2512.22137; reference
// planner/router_train.py and planner/router.py).
#include <fmt/core.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_tool.hpp"
#include "hybridflow/client.hpp"
#include "hybridflow/router.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/jsonl_log.hpp"
#include "io/sha256.hpp"
#include "util/error.hpp"
#include "util/log.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::hybridflow;
using nlohmann::json;

namespace {

std::vector<float> float_array(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) throw InputError(fmt::format("missing field {}", key), where);
  if (!it->is_array()) throw InputError(fmt::format("field {} is not an array of numbers", key), where);
  std::vector<float> v;
  v.reserve(it->size());
  for (const json& x : *it) {
    if (!x.is_number()) throw InputError(fmt::format("field {} is not an array of numbers", key), where);
    const double d = x.get<double>();
    if (!std::isfinite(d)) throw InputError(fmt::format("field {} has a value that is not finite", key), where);
    v.push_back(float(d));
  }
  return v;
}

double finite_number(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !std::isfinite(it->get<double>()))
    throw InputError(fmt::format("field {} must be a finite number", key), where);
  return it->get<double>();
}

// Embeddings file: one {"embedding": [...]} (optionally with "text") per profile, in order.
std::vector<std::vector<float>> read_embeddings(const std::string& path, const std::vector<std::string>& texts,
                                                const std::string& flag, io::Provenance& prov) {
  std::string sha;
  std::vector<std::vector<float>> out;
  std::size_t text_mismatch = 0;
  io::for_each_jsonl(path, [&](const json& j, const std::string& where) {
    std::vector<float> e = float_array(j, "embedding", where);
    if (e.empty()) throw InputError("empty embedding", where);
    if (!out.empty() && e.size() != out[0].size())
      throw InputError(fmt::format("embedding of length {}, the first has {}", e.size(), out[0].size()), where);
    if (auto t = j.find("text"); t != j.end() && t->is_string() && out.size() < texts.size() && *t != texts[out.size()])
      ++text_mismatch;
    out.push_back(std::move(e));
  }, &sha);
  prov.add_input(path, sha);
  if (out.size() != texts.size())
    throw InputError(fmt::format("{} embeddings for {} profiles (one line per profile, in order)", out.size(), texts.size()),
                     path + " (" + flag + ")");
  if (text_mismatch > 0)
    log::warn("{}: {} rows have a \"text\" other than the router's text (task + description{})", path, text_mismatch,
              flag == "--embeddings" ? ", see --reference-meta" : "");
  return out;
}

// Embeds `texts` through an OpenAI-compatible endpoint, 8 texts a request (router_train.py).
std::vector<std::vector<float>> embed_texts(const Endpoint& ep, const std::vector<std::string>& texts) {
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < texts.size(); i += 8) {
    const std::vector<std::string> batch(texts.begin() + long(i), texts.begin() + long(std::min(texts.size(), i + 8)));
    std::vector<std::vector<float>> e = embed(ep, batch);
    if (e.size() != batch.size())
      throw RuntimeError(fmt::format("the embedding server returned {} vectors for {} texts", e.size(), batch.size()), ep.base_url);
    for (auto& v : e) {
      if (!out.empty() && v.size() != out[0].size())
        throw RuntimeError(fmt::format("the embedding server returned vectors of length {} and {}", out[0].size(), v.size()),
                           ep.base_url);
      out.push_back(std::move(v));
    }
    log::debug("embedded {}/{} texts", out.size(), texts.size());
  }
  return out;
}

std::string embeddings_jsonl(const std::vector<std::string>& texts, const std::vector<std::vector<float>>& emb) {
  std::string s;
  for (std::size_t i = 0; i < emb.size(); ++i) {
    json e = json::array();
    for (const float v : emb[i]) e.push_back(io::float_for_json(v));
    s += json{{"text", texts[i]}, {"embedding", e}}.dump() + "\n";
  }
  return s;
}

json options_json(const TrainOptions& o) {
  return {{"epochs", o.epochs},         {"batch", o.batch},       {"lr", o.lr},
          {"weight_decay", o.weight_decay}, {"betas", {o.beta1, o.beta2}}, {"eps", o.eps},
          {"clip_grad_norm", o.clip},   {"dropout", o.dropout},   {"huber_delta", o.huber_delta},
          {"delta0", o.delta0},         {"alpha_B", o.alpha_B},   {"alpha_L", o.alpha_L},
          {"tau", o.tau},               {"B_max", o.B_max},       {"L_max", o.L_max},
          {"lambda_B", o.lambda_B},     {"lambda_L", o.lambda_L}, {"r_range", {o.r_lo, o.r_hi}},
          {"reference_meta", o.reference_meta}, {"hidden", o.hidden}, {"depth", o.depth}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string profiles_path, output, embeddings_path, embed_url, embed_model = "Qwen/Qwen3-Embedding-0.6B", api_key_env;
  std::string save_embeddings, log_path, summary = "-", evaluate_path, evaluate_embeddings, router_path, score_path;
  double embed_timeout = 120;
  std::size_t random_draws = 1000;
  TrainOptions opt;
  cli::ToolInfo info{
      "hybridflow-train-router",
      "HybridFlow's utility router (arXiv 2512.22137; reference planner/router_train.py): an MLP on\n"
      "concat(embedding, meta[8], r_B, r_L) -> Linear(hidden) -> ReLU -> Dropout(0.1) (depth times) -> Linear(1),\n"
      "trained on offline profiles of each subtask run on both the edge and the cloud model, to regress\n"
      "dU = dq - 0.5 dt - 0.001 k_c (dq = (cloud - edge completion tokens)/100, dt = L_c - L_e in seconds, k_c = cloud\n"
      "total tokens) with Huber(1) on the raw output plus the budget penalties lambda_B relu(mean(p k_c) - B_max)^2 +\n"
      "lambda_L relu(mean(p L_c + (1-p) L_e) - L_max)^2, p = sigmoid((s_raw - delta)/tau), delta = delta0 + alpha_B (r_B - 1)\n"
      "+ alpha_L (r_L - 1), r_B, r_L ~ U(0.5, 1.5) once per row; AdamW, gradient-norm clip 1, in double precision.\n"
      "The meta vector is by default the one inference computes ([n_depends, words, min(words/100, 1), 0...] of\n"
      "task + description joined without a space, router.py's question + Task); --reference-meta trains on\n"
      "router_train.py's [n_depends, k_e, k_c, L_e, L_c, dq, dt, dU] (which contains the target and is not what\n"
      "inference passes) and embeds task + \" \" + description, as the reference does.\n"
      "PROFILES: JSON Lines {\"task\", \"subtask\": {\"description\", \"depends_on\": [...]}, \"edge\": {\"latency_ms\",\n"
      "\"usage\": {\"total_tokens\", \"completion_tokens\"}}, \"cloud\": {...}, \"difficulty\" (1..9, optional), \"id\" (optional)}.\n"
      "Embeddings come from --embeddings (JSON Lines, one {\"embedding\": [...]} per profile in order, \"text\" optional)\n"
      "or from an OpenAI-compatible server (--embed URL, 8 texts a request; --save-embeddings keeps them).\n"
      "Output: the router as safetensors with torch's keys net.{0,3,6}.{weight,bias} (-o), and a JSON summary\n"
      "(stdout or --summary): per-epoch mean batch loss, options, provenance.  --evaluate HELDOUT.jsonl (after training,\n"
      "or with --router FILE) compares at equal cloud share the router (its top-scored subtasks, scored at r_B = r_L = 1\n"
      "on the inference input) with the fixed difficulty thresholds 2..9, random routing (exact expectation and\n"
      "--random-draws seeded draws) and the oracle, and at shares 0.25, 0.5, 0.75; utility = mean of (cloud ? dU : 0).\n"
      "--score INPUTS.jsonl --router FILE prints {\"raw\", \"s\"} per row {\"x\": [input_dim]} or {\"embedding\", \"meta\",\n"
      "\"r_B\", \"r_L\"} (eval mode, double accumulation: the parity check against torch).",
      "  hybridflow-train-router profiles.jsonl --embeddings emb.jsonl -o router.safetensors --log loss.jsonl\n"
      "  hybridflow-train-router profiles.jsonl --embed http://127.0.0.1:8001/v1 -o router.safetensors --evaluate heldout.jsonl\n"
      "  hybridflow-train-router --router router.safetensors --evaluate heldout.jsonl --evaluate-embeddings heldout_emb.jsonl\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("profiles", profiles_path, "Training profiles, JSON Lines (- = stdin); not with --router");
        app.add_option("-o,--output", output, "The trained router (.safetensors)");
        app.add_option("--embeddings", embeddings_path, "Embeddings of the training profiles, JSON Lines, one per profile in order");
        app.add_option("--embed", embed_url, "OpenAI-compatible base URL to embed texts with (e.g. http://127.0.0.1:8001/v1)");
        app.add_option("--embed-model", embed_model, "The embedding model name sent to --embed")->capture_default_str();
        app.add_option("--api-key-env", api_key_env, "Environment variable holding the --embed server's API key");
        app.add_option("--embed-timeout", embed_timeout, "Deadline of one embedding request, seconds")
            ->check(cli::positive())
            ->capture_default_str();
        app.add_option("--save-embeddings", save_embeddings, "With --embed: write the training embeddings here (.jsonl)");
        app.add_option("--epochs", opt.epochs, "Training epochs")->check(cli::int_range(1, 1000000))->capture_default_str();
        app.add_option("--batch", opt.batch, "Minibatch size")->check(cli::int_range(1, 1000000))->capture_default_str();
        app.add_option("--lr", opt.lr, "AdamW learning rate")->check(cli::positive())->capture_default_str();
        app.add_option("--weight-decay", opt.weight_decay, "AdamW decoupled weight decay")->check(cli::non_negative())->capture_default_str();
        app.add_option("--tau", opt.tau, "Temperature of p = sigmoid((s_raw - delta)/tau) in the penalty")
            ->check(cli::positive())
            ->capture_default_str();
        app.add_option("--B-max", opt.B_max, "Token budget of the penalty (tokens)")->capture_default_str();
        app.add_option("--L-max", opt.L_max, "Latency budget of the penalty (seconds)")->capture_default_str();
        app.add_option("--lambda-B", opt.lambda_B, "Weight of the token penalty")->check(cli::non_negative())->capture_default_str();
        app.add_option("--lambda-L", opt.lambda_L, "Weight of the latency penalty")->check(cli::non_negative())->capture_default_str();
        app.add_option("--alpha-B", opt.alpha_B, "delta's slope in r_B - 1")->capture_default_str();
        app.add_option("--alpha-L", opt.alpha_L, "delta's slope in r_L - 1")->capture_default_str();
        app.add_option("--delta0", opt.delta0, "delta's base")->capture_default_str();
        app.add_option("--hidden", opt.hidden, "Hidden width")->check(cli::int_range(1, 65536))->capture_default_str();
        app.add_option("--depth", opt.depth, "Hidden layers")->check(cli::int_range(0, 64))->capture_default_str();
        app.add_flag("--reference-meta", opt.reference_meta,
                     "Train on router_train.py's meta vector (contains dU; not what inference passes) and its text");
        app.add_option("--log", log_path, "Per-epoch loss, JSON Lines {epoch, loss} (.jsonl, - = stdout)");
        app.add_option("--summary", summary, "The JSON summary (training, evaluation) or the --score lines (- = stdout)")
            ->capture_default_str();
        app.add_option("--evaluate", evaluate_path, "Held-out profiles to compare routings on at equal cloud share");
        app.add_option("--evaluate-embeddings", evaluate_embeddings, "Embeddings of the --evaluate profiles, JSON Lines, in order");
        app.add_option("--random-draws", random_draws, "Seeded random routings per row of the evaluation")
            ->check(cli::int_range(0, 10000000))
            ->capture_default_str();
        app.add_option("--router", router_path, "An existing router (.safetensors) to evaluate or --score, instead of training");
        app.add_option("--score", score_path, "With --router: rows {\"x\": [...]} or {\"embedding\", \"meta\", \"r_B\", \"r_L\"} to score");
      },
      [&](cli::Context& ctx) {
        // Modes and their flags.
        const bool train = router_path.empty();
        if (!score_path.empty() && train) throw UsageError("--score needs --router FILE", "--score");
        if (!train) {
          if (!profiles_path.empty()) throw UsageError("give PROFILES to train, or --router to use an existing router, not both", "--router");
          if (!output.empty()) throw UsageError("-o names the trained router; with --router nothing is trained", "-o");
          if (score_path.empty() && evaluate_path.empty()) throw UsageError("--router needs --evaluate or --score", "--router");
          if (!score_path.empty() && !evaluate_path.empty()) throw UsageError("--score and --evaluate are separate runs", "--score");
          if (!log_path.empty()) throw UsageError("--log is the training loss; nothing is trained with --router", "--log");
        } else {
          if (profiles_path.empty()) throw UsageError("give PROFILES (JSON Lines) to train on, or --router FILE", "profiles");
          if (output.empty()) throw UsageError("give -o ROUTER.safetensors for the trained router", "-o");
          io::require_output_extension(output, "-o", {".safetensors"}, "the router is safetensors");
          if (embeddings_path.empty() && embed_url.empty())
            throw UsageError("give --embeddings EMB.jsonl or --embed URL for the profiles' embeddings", "--embeddings");
        }
        if (!embeddings_path.empty() && !embed_url.empty()) throw UsageError("give --embeddings or --embed, not both", "--embed");
        if (!evaluate_path.empty() && evaluate_embeddings.empty() && embed_url.empty())
          throw UsageError("give --evaluate-embeddings EMB.jsonl or --embed URL for the held-out embeddings", "--evaluate");
        if (!evaluate_embeddings.empty() && !embed_url.empty())
          throw UsageError("give --evaluate-embeddings or --embed, not both", "--embed");
        if (!evaluate_embeddings.empty() && evaluate_path.empty())
          throw UsageError("--evaluate-embeddings needs --evaluate", "--evaluate-embeddings");
        if (!save_embeddings.empty()) {
          if (embed_url.empty() || !train) throw UsageError("--save-embeddings keeps what --embed fetched for training", "--save-embeddings");
          io::require_output_extension(save_embeddings, "--save-embeddings", {".jsonl"}, "embeddings are JSON Lines");
          io::check_output_dir(save_embeddings);
        }
        if (!log_path.empty() && log_path != "-") io::require_output_extension(log_path, "--log", {".jsonl"}, "the log is JSON Lines");
        if (score_path.empty()) {
          if (!io::is_stdout(summary)) io::require_output_extension(summary, "--summary", {".json"}, "the summary is JSON");
        } else if (!io::is_stdout(summary)) {
          io::require_output_extension(summary, "--summary", {".jsonl"}, "--score writes JSON Lines");
        }
        if (!io::is_stdout(summary)) io::check_output_dir(summary);
        std::vector<std::string> inputs;
        for (const auto* p : {&profiles_path, &embeddings_path, &evaluate_path, &evaluate_embeddings, &router_path, &score_path})
          if (!p->empty() && *p != "-") inputs.push_back(*p);
        io::check_distinct_outputs({{"-o", output}, {"--summary", summary}, {"--log", log_path}, {"--save-embeddings", save_embeddings}},
                                   inputs);
        std::optional<Endpoint> ep;
        if (!embed_url.empty()) {
          check_base_url(embed_url, "--embed");
          std::string key;
          if (!api_key_env.empty()) {
            const char* v = std::getenv(api_key_env.c_str());
            if (!v) throw UsageError("environment variable " + api_key_env + " is not set", "--api-key-env");
            key = v;
          }
          ep = Endpoint{embed_url, embed_model, key, embed_timeout};
        }

        // --score: raw inputs through an existing router.
        if (!score_path.empty()) {
          const RouterNet net = load_router(router_path);
          std::string sha;
          ctx.prov.add_input(router_path, io::sha256_file(router_path));

          std::string out;
          io::for_each_jsonl(score_path, [&](const json& j, const std::string& where) {
            std::vector<float> x;
            if (j.contains("x")) {
              x = float_array(j, "x", where);
            } else {
              x = float_array(j, "embedding", where);
              if (x.size() != std::size_t(net.embed_dim))
                throw InputError(fmt::format("embedding of length {}, the router takes {}", x.size(), net.embed_dim), where);
              const std::vector<float> m = float_array(j, "meta", where);
              if (m.size() != std::size_t(net.meta_dim))
                throw InputError(fmt::format("meta of length {}, the router takes {}", m.size(), net.meta_dim), where);
              x.insert(x.end(), m.begin(), m.end());
              x.push_back(float(finite_number(j, "r_B", where)));
              x.push_back(float(finite_number(j, "r_L", where)));
            }
            if (x.size() != std::size_t(net.input_dim()))
              throw InputError(fmt::format("x of length {}, the router takes {}", x.size(), net.input_dim()), where);
            const double raw = net.forward_raw(x.data());
            out += json{{"raw", raw}, {"s", 1.0 / (1.0 + std::exp(-raw))}}.dump() + "\n";
          }, &sha);
          ctx.prov.add_input(score_path, sha);
          io::write_text(summary, out);
          return;
        }

        json result = json::object();
        RouterNet net;
        if (train) {
          std::string sha;
          const std::vector<SubtaskProfile> profiles = read_profiles(profiles_path, &sha);
          ctx.prov.add_input(profiles_path, sha);
          std::vector<std::string> texts;
          for (const auto& p : profiles) texts.push_back(router_text(p, opt.reference_meta));
          std::vector<std::vector<float>> emb;
          if (ep) {
            emb = embed_texts(*ep, texts);
            if (!save_embeddings.empty()) io::write_text(save_embeddings, embeddings_jsonl(texts, emb));
          } else {
            emb = read_embeddings(embeddings_path, texts, "--embeddings", ctx.prov);
          }
          log::debug("training on {} profiles, embeddings of length {}", profiles.size(), emb[0].size());
          const TrainResult tr = train_router(profiles, emb, opt, ctx.common.seed);
          net = tr.net;
          if (!log_path.empty()) {
            io::JsonlLog jlog(log_path, false);
            for (std::size_t e = 0; e < tr.epoch_loss.size(); ++e) jlog.write({{"epoch", e + 1}, {"loss", tr.epoch_loss[e]}});
          }
          json training = {{"n_profiles", profiles.size()},
                           {"embed_dim", emb[0].size()},
                           {"input_dim", net.input_dim()},
                           {"meta_vector", opt.reference_meta ? "reference" : "inference"},
                           {"options", options_json(opt)},
                           {"epoch_loss", tr.epoch_loss},
                           {"final_loss", tr.epoch_loss.back()},
                           {"router", output}};
          result["training"] = training;
        } else {
          net = load_router(router_path);
          ctx.prov.add_input(router_path, io::sha256_file(router_path));
        }
        if (!evaluate_path.empty()) {
          std::string sha;
          const std::vector<SubtaskProfile> held = read_profiles(evaluate_path, &sha);
          ctx.prov.add_input(evaluate_path, sha);
          std::vector<std::string> texts;
          for (const auto& p : held) texts.push_back(router_text(p, false));
          const std::vector<std::vector<float>> emb =
              ep ? embed_texts(*ep, texts) : read_embeddings(evaluate_embeddings, texts, "--evaluate-embeddings", ctx.prov);
          if (emb[0].size() != std::size_t(net.embed_dim))
            throw InputError(fmt::format("embeddings of length {}, the router takes {}", emb[0].size(), net.embed_dim),
                             ep ? embed_url : evaluate_embeddings);
          const RoutingEvaluation ev = evaluate_routing(net, held, emb, random_draws, derive_seed(ctx.common.seed, 1000));
          result["evaluation"] = evaluation_json(ev);
        }
        result["meta"] = ctx.prov.to_json();
        if (train)  // after the evaluation, so that a failure there leaves no router file
          save_router(output, net,
                      {{"tool", "hybridflow-train-router"},
                       {"options", options_json(opt)},
                       {"seed", std::to_string(ctx.common.seed)},
                       {"meta_vector", opt.reference_meta ? "reference" : "inference"},
                       {"embed_model", ep ? embed_model : ""},
                       {"provenance", ctx.prov.to_json()}});
        io::write_json(summary, result);
      });
}
