// The trainer's optimizers on their own (issue 29): applies steps to given tensors (the peer check
// test/peer/optim_peer.py feeds the same tensors to the authors' PyTorch code), or times the step
// on the parameter store of a Llama shape (JSON on stdout).
// Usage:
//   bench-optim-step --optimizer adamw|adam-mini|galore|foam [flags] --in steps.json     (one JSON object out)
//     steps.json: {"params": [{"name", "shape", "value", "decay"}], "grads": [[per param] per step],
//                  "lr": [per step], "head_rows": h}
//     out: {"values": {name: [...]}, "state_floats": n}
//   bench-optim-step --optimizer ... --time [--d-model 256 --n-layers 6 --d-ff 768 --vocab 4096 --steps 20]
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
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;

int main(int argc, char** argv) {
  CLI::App app{"Optimizer steps on given tensors, or their step time"};
  std::string optimizer = "adamw", in_path, moment = "code";
  nn::AdamWOptions adam;
  nn::FoamOptions foam;
  nn::GaloreOptions galore;
  bool time = false;
  int d = 256, layers = 6, ff = 768, vocab = 4096, heads = 8, kv = 4, steps = 20, nthreads = 0;
  app.add_option("--optimizer", optimizer)->check(CLI::IsMember({"adamw", "adam-mini", "galore", "foam"}));
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
    for (const auto& b : opt->state()) state += b.data->size();
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
