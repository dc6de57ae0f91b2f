// The mLSTM kernels on their own (issue 35, nn/mlstm.hpp): runs the three forms on given tensors
// (the peer check test/peer/xlstm_peer.py feeds the same tensors to NX-AI's xlstm backends), or
// times them on random ones (JSON on stdout).
// Usage:
//   bench-mlstm --in heads.json     heads.json: {"S", "dk", "dv", "heads": [{"q" [S dk], "k", "v" [S dv],
//                                   "ig" [S], "fg" [S]}], "chunk"}
//     out: {"recurrent": [[S dv] per head], "parallel": [...], "chunkwise": [...]} (float32 arithmetic)
//   bench-mlstm --time [--S 1024 --d 32 --heads 8 --chunk 64]
//     out: {"S", "d", "heads", "recurrent_ms", "parallel_ms", "chunkwise_ms"}
#include <CLI/CLI.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "nn/mlstm.hpp"
#include "util/rng.hpp"

using namespace icmlkit;

namespace {

struct Head {
  std::vector<float> q, k, v, ig, fg;
  nn::MlstmHead<float> view(int S, int dk, int dv) const {
    nn::MlstmHead<float> x;
    x.S = S; x.dk = dk; x.dv = dv;
    x.q = {q.data(), dk};
    x.k = {k.data(), dk};
    x.v = {v.data(), dv};
    x.ig = {ig.data(), 1};
    x.fg = {fg.data(), 1};
    return x;
  }
};

template <class F>
double millis(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mLSTM kernels: peer I/O and timing"};
  std::string in;
  bool time = false;
  int S = 1024, d = 32, heads = 8, chunk = 64;
  app.add_option("--in", in, "Heads to run (JSON)");
  app.add_flag("--time", time, "Time the three forms on random heads");
  app.add_option("--S", S);
  app.add_option("--d", d);
  app.add_option("--heads", heads);
  app.add_option("--chunk", chunk);
  CLI11_PARSE(app, argc, argv);
  try {
    if (!in.empty()) {
      std::ifstream f(in);
      const nlohmann::json j = nlohmann::json::parse(f);
      const int s = j.at("S"), dk = j.at("dk"), dv = j.at("dv");
      const int ch = j.value("chunk", 64);
      nlohmann::json out{{"recurrent", nlohmann::json::array()}, {"parallel", nlohmann::json::array()}, {"chunkwise", nlohmann::json::array()}};
      for (const auto& hj : j.at("heads")) {
        Head h{hj.at("q").get<std::vector<float>>(), hj.at("k").get<std::vector<float>>(), hj.at("v").get<std::vector<float>>(),
               hj.at("ig").get<std::vector<float>>(), hj.at("fg").get<std::vector<float>>()};
        const auto x = h.view(s, dk, dv);
        std::vector<float> r(std::size_t(s) * dv), p(r.size()), c(r.size());
        nn::mlstm_recurrent(x, r.data(), dv);
        nn::mlstm_parallel(x, p.data(), dv);
        nn::mlstm_chunkwise<float>(x, c.data(), dv, nullptr, ch);
        out["recurrent"].push_back(r);
        out["parallel"].push_back(p);
        out["chunkwise"].push_back(c);
      }
      std::cout << out.dump() << "\n";
      return 0;
    }
    if (!time) {
      std::cerr << "bench-mlstm: give --in FILE or --time\n";
      return 2;
    }
    Rng rng(1);
    std::vector<Head> hs(static_cast<std::size_t>(heads));
    for (auto& h : hs) {
      for (auto* v : {&h.q, &h.k, &h.v}) {
        v->resize(std::size_t(S) * d);
        for (auto& x : *v) x = static_cast<float>(rng.normal());
      }
      h.ig.resize(std::size_t(S));
      h.fg.resize(std::size_t(S));
      for (auto& x : h.ig) x = static_cast<float>(rng.normal());
      for (auto& x : h.fg) x = static_cast<float>(3 + rng.normal());
    }
    std::vector<float> out(std::size_t(S) * d);
    nlohmann::json j{{"S", S}, {"d", d}, {"heads", heads}, {"chunk", chunk}};
    j["recurrent_ms"] = millis([&] { for (auto& h : hs) nn::mlstm_recurrent(h.view(S, d, d), out.data(), d); });
    j["parallel_ms"] = millis([&] { for (auto& h : hs) nn::mlstm_parallel(h.view(S, d, d), out.data(), d); });
    j["chunkwise_ms"] = millis([&] { for (auto& h : hs) nn::mlstm_chunkwise<float>(h.view(S, d, d), out.data(), d, nullptr, chunk); });
    std::cout << j.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench-mlstm: error: " << e.what() << "\n";
    return 1;
  }
}
