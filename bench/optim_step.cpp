// The trainer's optimizers on their own (issue 29): applies steps to given tensors (the peer check
// test/peer/optim_peer.py feeds the same tensors to the authors' PyTorch code), or times the step
// on the parameter store of a Llama shape (JSON on stdout).
// Usage:
//   bench-optim-step --optimizer adamw|adam-mini|galore|foam [flags] --in steps.json     (one JSON object out)
//     steps.json: {"params": [{"name", "shape", "value", "decay"}], "grads": [[per param] per step],
//                  "lr": [per step], "head_rows": h}
//     out: {"values": {name: [...]}, "state_floats": n}
//   bench-optim-step --optimizer ... --time [--d-model 256 --n-layers 6 --d-ff 768 --vocab 4096 --steps 20]
//   bench-optim-step --optimizer poet-x --in layer.json     (one POET-X matrix: forward, backward, one step)
//     layer.json: {"rows", "cols", "block", "polynomial": "neumann"|"series", "terms", "fully_stochastic",
//                  "weight": W0, "q": Q entries, "perm_in", "perm_out", "N", "x", "dy", "lr", "poet_scale",
//                  "beta1", "beta2", "eps"}
//     out: {"y", "dx", "grad_q", "effective_weight", "q_after_step"}
//   bench-optim-step --optimizer poet-x --time --rows 768 --cols 256 --block 128 --tokens 2048
//     (prepare + forward + backward + dL/dQ of one matrix, ms)
//   bench-optim-step --optimizer smet --in topo.json   (one sparse matrix: a topology update, then one step)
//     topo.json: {"numel", "block", "weight" [numel], "blocks" (active, increasing), "m", "v" (per active
//                 entry, in entry order), "steps" (per active block), "global_step", "prune_rate",
//                 "scores" [num_blocks] (the regrowth draws), "grad" [numel] (dense; its active entries
//                 are used), "lr", "beta1", "beta2", "eps", "warmup", "code_form" (the reference code's
//                 warm-up and step restart), "local_steps"}
//     out: {"pruned", "grown", "blocks", "weight", "m", "v", "steps" (per active entry)}
#include <CLI/CLI.hpp>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "lm/config.hpp"
#include "nn/adam_mini.hpp"
#include "nn/adamw.hpp"
#include "nn/foam.hpp"
#include "nn/galore.hpp"
#include "nn/llama_train.hpp"
#include "nn/poet.hpp"
#include "nn/sparse.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

namespace {

/// One POET-X matrix on given tensors (the peer check's) or timed on a random one.
int poet_layer(const std::string& in_path, bool time, int rows, int cols, int block, int tokens, int steps) {
  nlohmann::json in;
  if (!time) {
    std::ifstream f(in_path);
    if (!f) throw std::runtime_error("cannot read " + in_path);
    in = nlohmann::json::parse(f);
    rows = in["rows"];
    cols = in["cols"];
    block = in["block"];
    tokens = in["N"];
  }
  const bool fs = !time && in.value("fully_stochastic", false);
  nn::ParamStore<float> store;
  nn::PoetLinear<float> pl;
  pl.rows = rows;
  pl.cols = cols;
  pl.b = block;
  pl.out_blocks = fs ? 1 : rows / block;
  pl.in_blocks = fs ? 1 : cols / block;
  pl.coeffs = nn::cayley_coefficients(time || in.value("polynomial", "neumann") == "neumann" ? nn::CayleyPolynomial::neumann
                                                                                          : nn::CayleyPolynomial::series,
                                      time ? 3 : in.value("terms", 3));
  pl.weight = store.add("w0", {rows, cols}, true);
  pl.q = store.add("q", {pl.out_blocks + pl.in_blocks, block * (block - 1) / 2}, false);
  store.freeze(pl.weight);
  std::vector<float> x(std::size_t(tokens) * cols), dy(std::size_t(tokens) * rows);
  if (time) {
    Rng rng(1);
    pl.draw_permutations(2);
    for (auto& v : store.params[0].value) v = static_cast<float>(0.05 * rng.normal());
    for (auto& v : store.params[1].value) v = static_cast<float>(1e-3 * rng.normal());
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (auto& v : dy) v = static_cast<float>(1e-3 * rng.normal());
  } else {
    store.params[0].value = in["weight"].get<std::vector<float>>();
    store.params[1].value = in["q"].get<std::vector<float>>();
    pl.perm_in = in["perm_in"].get<std::vector<int>>();
    pl.perm_out = in["perm_out"].get<std::vector<int>>();
    pl.perm_in_inv.assign(cols, 0);
    pl.perm_out_inv.assign(rows, 0);
    for (int i = 0; i < cols; ++i) pl.perm_in_inv[pl.perm_in[i]] = i;
    for (int i = 0; i < rows; ++i) pl.perm_out_inv[pl.perm_out[i]] = i;
    x = in["x"].get<std::vector<float>>();
    dy = in["dy"].get<std::vector<float>>();
    if (store.params[0].value.size() != std::size_t(rows) * cols || store.params[1].value.size() != pl.q_size() ||
        x.size() != std::size_t(tokens) * cols || dy.size() != std::size_t(tokens) * rows)
      throw std::runtime_error("layer.json: a tensor has the wrong size");
  }
  nn::PoetWork<float> w;
  std::vector<float> y(dy.size()), y0, dx(x.size());
  auto pass = [&] {
    store.params[1].grad.assign(pl.q_size(), 0.0f);
    pl.prepare(store, w);
    pl.forward(x.data(), tokens, store.params[0].value.data(), y.data(), y0, w);
    pl.backward(dy.data(), x.data(), tokens, store.params[0].value.data(), dx.data(), false, y0, w);
    pl.finish(store, w);
  };
  if (time) {
    pass();  // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) pass();
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << nlohmann::json{{"optimizer", "poet-x"}, {"rows", rows}, {"cols", cols}, {"block", block}, {"tokens", tokens},
                                {"fwd_bwd_ms", 1e3 * sec / steps}, {"threads", threads()}}
                     .dump()
              << "\n";
    return 0;
  }
  pass();
  std::vector<float> weff(std::size_t(rows) * cols);
  pl.effective_weight(store.params[0].value.data(), weff.data());
  const std::vector<float> grad_q = store.params[1].grad;
  nn::FoamOptions a;
  a.beta1 = in.value("beta1", 0.9);
  a.beta2 = in.value("beta2", 0.999);
  a.eps = in.value("eps", 1e-6);
  nn::PoetAdamW opt(store, {0, 1}, a, in.value("poet_scale", 0.5), 0);
  opt.step(store, in["lr"].get<double>());
  std::cout << nlohmann::json{{"y", y}, {"dx", dx}, {"grad_q", grad_q}, {"effective_weight", weff},
                              {"q_after_step", store.params[1].value}}
                   .dump()
            << "\n";
  return 0;
}

/// One sparse matrix through SMET's topology update (magnitude prune, regrowth by the given scores,
/// state reset) and the optimizer step after it, on given tensors (test/peer/smet_peer.py).
int smet_layer(const std::string& in_path) {
  std::ifstream f(in_path);
  if (!f) throw std::runtime_error("cannot read " + in_path);
  const nlohmann::json in = nlohmann::json::parse(f);
  nn::SparseMask mask;
  mask.numel = in["numel"];
  mask.block = in["block"];
  mask.blocks = in["blocks"].get<std::vector<std::int32_t>>();
  nn::ParamStore<float> store;
  store.add("w", {static_cast<int>(mask.numel)}, false);
  store.params[0].value = in["weight"].get<std::vector<float>>();
  nn::AdamWOptions a;
  a.beta1 = in.value("beta1", 0.9);
  a.beta2 = in.value("beta2", 0.999);
  a.eps = in.value("eps", 1e-8);
  a.weight_decay = 0;
  const bool code = in.value("code_form", true);
  nn::AdamW opt(store, a);
  opt.set_active(0, mask.entries());
  opt.set_per_entry_steps(in.value("local_steps", true));
  opt.set_momentum_warmup(in.value("warmup", 100), code);
  opt.set_steps(in["global_step"].get<std::int64_t>());
  const std::vector<std::int32_t> block_steps = in["steps"].get<std::vector<std::int32_t>>();
  std::vector<std::int32_t> entry_steps;
  for (std::size_t k = 0; k < mask.blocks.size(); ++k) {
    const auto [lo, hi] = mask.block_range(mask.blocks[k]);
    entry_steps.insert(entry_steps.end(), hi - lo, block_steps.at(k));
  }
  for (const auto& b : opt.state()) {
    if (b.name == "m/w") *b.data = in["m"].get<std::vector<float>>();
    if (b.name == "v/w") *b.data = in["v"].get<std::vector<float>>();
    if (b.name == "t/w") *b.ints = entry_steps;
  }
  float* w = store.params[0].value.data();
  const std::size_t n = nn::prune_count(mask, in["prune_rate"].get<double>());
  const auto pruned = nn::magnitude_prune(mask, w, n);
  const auto grown = nn::score_regrow(mask, in["scores"].get<std::vector<float>>(), n);
  nn::apply_topology(mask, pruned, grown);
  nn::zero_blocks(mask, pruned, w);
  const std::vector<std::int32_t> e = mask.entries();
  opt.set_active(0, e, code ? 1 : 0);
  const std::vector<float> g = in["grad"].get<std::vector<float>>();
  store.params[0].grad.clear();
  for (std::int32_t j : e) store.params[0].grad.push_back(g.at(std::size_t(j)));
  opt.step(store, in["lr"].get<double>());
  nlohmann::json out{{"pruned", pruned}, {"grown", grown}, {"blocks", mask.blocks}, {"weight", store.params[0].value},
                     {"steps", opt.entry_steps(0)}};
  for (const auto& b : opt.state()) {
    if (b.name == "m/w") out["m"] = *b.data;
    if (b.name == "v/w") out["v"] = *b.data;
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Optimizer steps on given tensors, or their step time"};
  std::string optimizer = "adamw", in_path, moment = "code";
  nn::AdamWOptions adam;
  nn::FoamOptions foam;
  nn::GaloreOptions galore;
  bool time = false;
  int d = 256, layers = 6, ff = 768, vocab = 4096, heads = 8, kv = 4, steps = 20, nthreads = 0;
  int rows = 768, cols = 256, block = 128, tokens = 2048;
  app.add_option("--optimizer", optimizer)->check(CLI::IsMember({"adamw", "adam-mini", "galore", "foam", "poet-x", "smet"}));
  app.add_option("--rows", rows);
  app.add_option("--cols", cols);
  app.add_option("--block", block);
  app.add_option("--tokens", tokens);
  app.add_option("--galore-rank", galore.rank);
  app.add_option("--galore-gap", galore.update_gap);
  app.add_option("--galore-scale", galore.scale);
  app.add_option("--in", in_path);
  app.add_option("--beta1", adam.beta1);
  app.add_option("--beta2", adam.beta2);
  app.add_option("--eps", adam.eps);
  app.add_option("--weight-decay", adam.weight_decay);
  app.add_option("--foam-level", foam.level);
  app.add_option("--foam-scale", foam.scale);
  app.add_option("--foam-res-scale", foam.res_scale);
  app.add_option("--foam-second-moment", moment)->check(CLI::IsMember({"code", "paper"}));
  app.add_flag("--time", time);
  app.add_option("--d-model", d);
  app.add_option("--n-layers", layers);
  app.add_option("--d-ff", ff);
  app.add_option("--vocab", vocab);
  app.add_option("--steps", steps);
  app.add_option("--threads", nthreads);
  CLI11_PARSE(app, argc, argv);
  if (nthreads > 0) set_threads(nthreads);
  foam.beta1 = adam.beta1;
  foam.beta2 = adam.beta2;
  foam.eps = adam.eps;
  foam.weight_decay = adam.weight_decay;
  foam.paper_second_moment = moment == "paper";
  try {
    if (optimizer == "poet-x") return poet_layer(in_path, time, rows, cols, block, tokens, steps);
    if (optimizer == "smet") return smet_layer(in_path);
    nn::ParamStore<float> store;
    nlohmann::json in;
    int head_rows = d / heads;
    if (time) {
      lm::ModelConfig c;
      c.vocab_size = vocab;
      c.d_model = d;
      c.n_layers = layers;
      c.n_heads = heads;
      c.n_kv_heads = kv;
      c.d_ff = ff;
      store = nn::LlamaParams<float>(c).store;
      Rng rng(1);
      for (auto& p : store.params)
        for (std::size_t i = 0; i < p.numel(); ++i) {
          p.value[i] = static_cast<float>(0.02 * rng.normal());
          p.grad[i] = static_cast<float>(1e-3 * rng.normal());
        }
    } else {
      std::ifstream f(in_path);
      if (!f) throw std::runtime_error("cannot read " + in_path);
      in = nlohmann::json::parse(f);
      head_rows = in.value("head_rows", 1);
      for (const auto& p : in["params"]) {
        const int i = store.add(p["name"], p["shape"].get<std::vector<int>>(), p.value("decay", true));
        store.params[i].value = p["value"].get<std::vector<float>>();
        if (store.params[i].value.size() != store.params[i].numel()) throw std::runtime_error("value size of " + p["name"].get<std::string>());
      }
    }
    std::unique_ptr<nn::Optimizer> opt;
    if (optimizer == "adamw") opt = std::make_unique<nn::AdamW>(store, adam);
    else if (optimizer == "foam") opt = std::make_unique<nn::Foam>(store, foam);
    else if (optimizer == "galore") opt = std::make_unique<nn::Galore>(store, adam, galore);
    else opt = std::make_unique<nn::AdamMini>(store, adam, head_rows);
    std::size_t state = 0;
    for (const auto& b : opt->state()) state += b.bytes() / sizeof(float);
    if (time) {
      opt->step(store, 1e-3);  // warm-up
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < steps; ++s) opt->step(store, 1e-3);
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::cout << nlohmann::json{{"optimizer", optimizer},     {"params", store.numel()}, {"state_floats", state},
                                  {"step_ms", 1e3 * sec / steps}, {"threads", threads()}}
                       .dump()
                << "\n";
      return 0;
    }
    const auto& grads = in["grads"];
    for (std::size_t s = 0; s < grads.size(); ++s) {
      for (std::size_t i = 0; i < store.params.size(); ++i) store.params[i].grad = grads[s][i].get<std::vector<float>>();
      opt->step(store, in["lr"][s].get<double>());
    }
    nlohmann::json out{{"state_floats", state}, {"values", nlohmann::json::object()}};
    for (const auto& p : store.params) out["values"][p.name] = p.value;
    std::cout << out.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "bench-optim-step: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
