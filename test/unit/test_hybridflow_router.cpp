// hybridflow/router: HybridFlow's utility router (arXiv 2512.22137; reference planner/router.py,
// planner/router_train.py).  Expected values come from hand computation on a tiny net (worked out in
// the comments), the closed forms of the decision rule, central finite differences for the loss
// gradient, a bit-exact file round trip, and a synthetic profile set whose utility is a known
// function of n_depends.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "hybridflow/router.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::hybridflow;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  const fs::path d = fs::temp_directory_path() / ("icmlkit_hf_router_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// embed_dim 2, meta 8, hidden 3, depth 2: input [e0, e1, m0..m7, r_B, r_L] (12 columns).
RouterNet tiny_net() {
  RouterNet net;
  net.embed_dim = 2;
  net.meta_dim = 8;
  net.hidden = 3;
  net.depth = 2;
  RowMatrixF w0 = RowMatrixF::Zero(3, 12);
  w0(0, 0) = 0.5f, w0(0, 1) = 0.25f, w0(0, 2) = -1.f;  // row 0: e0, e1, m0
  w0(1, 0) = 1.f, w0(1, 10) = 2.f;                       // row 1: e0, r_B
  w0(2, 1) = -1.f, w0(2, 11) = 4.f, w0(2, 2) = 1.f;      // row 2: e1, r_L, m0
  Eigen::VectorXf b0(3);
  b0 << 0.5f, -0.5f, 0.f;
  RowMatrixF w1(3, 3);
  w1 << 1, 1, 1, 0, 2, -1, 1, -1, -1;
  Eigen::VectorXf b1(3);
  b1 << 0.f, 0.5f, 0.f;
  RowMatrixF w2(1, 3);
  w2 << 0.5f, -1.f, 7.f;
  Eigen::VectorXf b2(1);
  b2 << 0.25f;
  net.weight = {w0, w1, w2};
  net.bias = {b0, b1, b2};
  return net;
}

SubtaskProfile make_profile(std::size_t n_depends, long edge_completion, long cloud_completion, long cloud_total, double le,
                            double lc) {
  SubtaskProfile p;
  p.task = "What is the answer?";
  p.description = "Step " + std::to_string(n_depends);
  p.n_depends = n_depends;
  p.edge_latency_s = le;
  p.cloud_latency_s = lc;
  p.edge_total_tokens = 300 + edge_completion;
  p.edge_completion_tokens = edge_completion;
  p.cloud_total_tokens = cloud_total;
  p.cloud_completion_tokens = cloud_completion;
  return p;
}

}  // namespace

TEST_CASE("hybridflow router: the score of a tiny net equals the hand computation") {
  const RouterNet net = tiny_net();
  REQUIRE(net.input_dim() == 12);
  // x = [e0 1, e1 2, m0 3, m1..m7 0, r_B 0.5, r_L 0.25]
  std::vector<float> x(12, 0.f);
  x[0] = 1, x[1] = 2, x[2] = 3, x[10] = 0.5f, x[11] = 0.25f;
  // Layer 0: z = [0.5 + 0.5 - 3 + 0.5, 1 + 1 - 0.5, -2 + 1 + 3] = [-1.5, 1.5, 2] -> ReLU [0, 1.5, 2].
  // Layer 1: z = [3.5, 3 - 2 + 0.5, -1.5 - 2] = [3.5, 1.5, -3.5] -> ReLU [3.5, 1.5, 0].
  // Layer 2: 0.5*3.5 - 1.5 + 0 + 0.25 = 0.5;  s = sigmoid(0.5) = 1 / (1 + e^-0.5).
  CHECK(net.forward_raw(x.data()) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(net.score(x.data()) == doctest::Approx(1.0 / (1.0 + std::exp(-0.5))).epsilon(1e-15));

  // route(): text "a b c" (3 words) with 3 relied-on steps gives meta [3, 3, 0.03, 0...], so m0 = 3 as
  // above but m1 = 3 and m2 = 0.03 have zero weights; r_B = 1024 / 2048 = 0.5, r_L = 6.25 / 25 = 0.25.
  RouterParams rp;  // delta0 0, alpha 0.5, 0.5, tau 0.1
  const RouteDecision d = route(net, {1.f, 2.f}, 3, "a b c", 1024, 6.25, rp, 0.3);
  CHECK(d.r_B == 0.5);
  CHECK(d.r_L == 0.25);
  CHECK(d.score == doctest::Approx(1.0 / (1.0 + std::exp(-0.5))).epsilon(1e-15));
  // delta_t = 0.5*0.5 + 0.5*0.25 = 0.375; p = sigmoid((s - 0.375) / 0.1).
  CHECK(d.delta_t == doctest::Approx(0.375));
  const double p = 1.0 / (1.0 + std::exp(-(d.score - 0.375) / 0.1));
  CHECK(d.p_cloud == doctest::Approx(p).epsilon(1e-14));
  CHECK(d.cloud == (0.3 < p));
  CHECK(route(net, {1.f, 2.f}, 3, "a b c", 1024, 6.25, rp, 0.9999).cloud == (0.9999 < p));
  CHECK_THROWS_AS(route(net, {1.f, 2.f, 3.f}, 0, "", 0, 0, rp, 0.5), InputError);
  // The threshold is clipped to [0, 1].
  CHECK(route_threshold(10, 10, rp) == 1.0);
  RouterParams neg = rp;
  neg.delta0 = -5;
  CHECK(route_threshold(1, 1, neg) == 0.0);
}

TEST_CASE("hybridflow router: word count and the inference meta vector follow Python's str.split()") {
  CHECK(word_count("") == 0);
  CHECK(word_count("   \t\n") == 0);
  CHECK(word_count("one") == 1);
  CHECK(word_count("  two  words ") == 2);
  CHECK(word_count("a\tb\nc\rd\x0b" "e\x0c" "f\x1cg") == 7);
  CHECK(word_count("a\xc2\xa0" "b") == 2);          // U+00A0 is whitespace for str.split()
  CHECK(word_count("a\xe3\x80\x80" "b") == 2);      // U+3000 too
  CHECK(word_count("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87") == 2);  // other non-ASCII letters are word characters
  CHECK(word_count("bad \xff byte") == 3);
  const auto m = inference_meta("Solve x.Find y", 2);  // question + Task joined without a space: 3 words
  CHECK(m[0] == 2.f);
  CHECK(m[1] == 3.f);
  CHECK(m[2] == 0.03f);
  for (int k = 3; k < 8; ++k) CHECK(m[k] == 0.f);
  std::string long_text;
  for (int i = 0; i < 150; ++i) long_text += "w ";
  CHECK(inference_meta(long_text, 0)[2] == 1.f);  // min(150 / 100, 1)
}

TEST_CASE("hybridflow router: p_cloud is non-increasing in cumulative tokens and elapsed time") {
  RouterParams rp;
  for (const double s : {0.05, 0.3, 0.5, 0.8, 0.99}) {
    double prev = 2;
    for (double tok = 0; tok <= 8000; tok += 97) {
      const double p = cloud_probability(s, tok / rp.B_max, 3.0 / rp.L_max, rp);
      CHECK(p <= prev);
      prev = p;
    }
    prev = 2;
    for (double t = 0; t <= 60; t += 0.7) {
      const double p = cloud_probability(s, 500 / rp.B_max, t / rp.L_max, rp);
      CHECK(p <= prev);
      prev = p;
    }
  }
  // Through route() with a net that ignores r_B and r_L (their input columns zero), the whole
  // decision is monotone: the network's score is constant and only delta_t moves.
  RouterNet net = init_router(4, 8, 6, 2, 7);
  net.weight[0].col(12).setZero();
  net.weight[0].col(13).setZero();
  const std::vector<float> e = {0.1f, -0.4f, 0.3f, 0.9f};
  double prev = 2;
  for (int i = 0; i <= 40; ++i) {
    const RouteDecision d = route(net, e, 1, "q t", 100.0 * i, 1.5 * i, rp, 0.5);
    CHECK(d.p_cloud <= prev);
    CHECK(d.delta_t >= 0);
    CHECK(d.delta_t <= 1);
    prev = d.p_cloud;
  }
  // p_cloud = 1/2 exactly where s = delta_t.
  CHECK(cloud_probability(0.4, 0.4, 0.4, rp) == doctest::Approx(0.5));
}

TEST_CASE("hybridflow router: save and load round trip is bit-exact") {
  const fs::path dir = temp_dir();
  const std::string path = (dir / "router.safetensors").string();
  const RouterNet net = init_router(5, 8, 4, 3, 99);
  save_router(path, net, {{"note", "test"}, {"epochs", 3}});
  const RouterNet back = load_router(path);
  CHECK(back.embed_dim == 5);
  CHECK(back.meta_dim == 8);
  CHECK(back.hidden == 4);
  CHECK(back.depth == 3);
  REQUIRE(back.weight.size() == 4);
  for (std::size_t l = 0; l < 4; ++l) {
    REQUIRE(back.weight[l].rows() == net.weight[l].rows());
    REQUIRE(back.weight[l].cols() == net.weight[l].cols());
    CHECK(std::memcmp(back.weight[l].data(), net.weight[l].data(), sizeof(float) * net.weight[l].size()) == 0);
    CHECK(std::memcmp(back.bias[l].data(), net.bias[l].data(), sizeof(float) * net.bias[l].size()) == 0);
  }
  // The torch layout: net.0.weight is [hidden, input_dim] = [4, 15].
  CHECK(net.weight[0].rows() == 4);
  CHECK(net.weight[0].cols() == 15);
  // A file that is not a router, and a truncated one, are InputErrors.
  const std::string junk = (dir / "junk.safetensors").string();
  {
    std::ofstream f(junk, std::ios::binary);
    f << "not a safetensors file at all";
  }
  CHECK_THROWS_AS(load_router(junk), InputError);
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream f(junk, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size() - 10));
  }
  CHECK_THROWS_AS(load_router(junk), InputError);
  CHECK_THROWS_AS(load_router((dir / "missing.safetensors").string()), InputError);
  fs::remove_all(dir);
}

TEST_CASE("hybridflow router: the loss gradient matches central finite differences") {
  // A 3-d embedding, hidden 4, depth 2, batch 6; targets straddle the Huber knee (|d| < 1 and > 1);
  // the budgets are set low so that both penalties are active, then high so that neither is.
  Rng rng(11);
  RouterNet net = init_router(3, 8, 4, 2, 5);
  for (auto& w : net.weight) w *= 3.f;  // larger weights: outputs of order 1
  const RouterWeights w = weights_of(net);
  const int n = 6, in = net.input_dim();
  RouterBatch b;
  b.x.resize(n, in);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < in; ++j) b.x(i, j) = rng.uniform(-1, 1);
  b.dU.resize(n), b.k_c.resize(n), b.L_e.resize(n), b.L_c.resize(n), b.r_B.resize(n), b.r_L.resize(n);
  for (int i = 0; i < n; ++i) {
    b.dU[i] = (i % 2 ? 3.0 : 0.1) * rng.uniform(-1, 1);
    b.k_c[i] = rng.uniform(100, 900);
    b.L_e[i] = rng.uniform(0.5, 2);
    b.L_c[i] = rng.uniform(1, 4);
    b.r_B[i] = b.x(i, in - 2) = rng.uniform(0.5, 1.5);
    b.r_L[i] = b.x(i, in - 1) = rng.uniform(0.5, 1.5);
  }
  std::vector<Eigen::MatrixXd> masks;
  for (int l = 0; l < 2; ++l) {
    Eigen::MatrixXd m(n, 4);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < 4; ++c) m(r, c) = rng.uniform() < 0.25 ? 0.0 : 1.0 / 0.75;
    masks.push_back(m);
  }
  for (const bool active : {true, false}) {
    TrainOptions opt;
    opt.B_max = active ? 50 : 1e9;
    opt.L_max = active ? 0.5 : 1e9;
    opt.lambda_B = 1e-4;  // keeps the token penalty's scale comparable to the rest
    for (const bool use_masks : {true, false}) {
      const auto& mk = use_masks ? masks : std::vector<Eigen::MatrixXd>{};
      RouterWeights g;
      const double loss = router_loss(w, b, opt, mk, &g);
      CHECK(loss == router_loss(w, b, opt, mk, nullptr));
      double max_err = 0, max_g = 0;
      const double h = 1e-6;
      for (std::size_t l = 0; l < w.weight.size(); ++l) {
        for (int part = 0; part < 2; ++part) {
          const Eigen::Index size = part == 0 ? w.weight[l].size() : w.bias[l].size();
          for (Eigen::Index k = 0; k < size; ++k) {
            RouterWeights wp = w, wm = w;
            double* pp = part == 0 ? wp.weight[l].data() : wp.bias[l].data();
            double* pm = part == 0 ? wm.weight[l].data() : wm.bias[l].data();
            pp[k] += h;
            pm[k] -= h;
            const double fd = (router_loss(wp, b, opt, mk, nullptr) - router_loss(wm, b, opt, mk, nullptr)) / (2 * h);
            const double an = part == 0 ? g.weight[l].data()[k] : g.bias[l].data()[k];
            max_err = std::max(max_err, std::abs(fd - an));
            max_g = std::max(max_g, std::abs(an));
          }
        }
      }
      INFO("active " << active << " masks " << use_masks << " max |grad| " << max_g);
      CHECK(max_g > 1e-3);
      CHECK(max_err <= 1e-6 * std::max(1.0, max_g));  // central differences at h = 1e-6: error ~1e-9
    }
  }
}

TEST_CASE("hybridflow router: training learns a utility that depends on n_depends") {
  // dU = (n_depends - 2) - 0.1: cloud completion = edge completion + 100 (n_depends - 2), equal latency,
  // cloud total tokens 100.  The inference meta's first entry is n_depends, the embedding is noise.
  auto make_set = [](std::uint64_t seed, int n, std::vector<SubtaskProfile>& ps, std::vector<std::vector<float>>& es) {
    Rng rng(seed);
    for (int i = 0; i < n; ++i) {
      const std::size_t nd = rng.below(5);
      SubtaskProfile p = make_profile(nd, 300, long(300 + 100 * (long(nd) - 2)), 100, 1.0, 1.0);
      p.difficulty = 1 + int(rng.below(9));
      ps.push_back(p);
      std::vector<float> e(6);
      for (auto& v : e) v = float(rng.normal());
      es.push_back(e);
    }
  };
  std::vector<SubtaskProfile> train, held;
  std::vector<std::vector<float>> etrain, eheld;
  make_set(1, 256, train, etrain);
  make_set(2, 200, held, eheld);
  CHECK(delta_utility(train[0]) == doctest::Approx(double(train[0].n_depends) - 2.1));
  TrainOptions opt;
  opt.hidden = 32;
  opt.lr = 1e-3;
  opt.epochs = 30;
  const TrainResult r = train_router(train, etrain, opt, 3);
  REQUIRE(r.epoch_loss.size() == 30);
  CHECK(r.epoch_loss.back() < r.epoch_loss.front());
  const RoutingEvaluation ev = evaluate_routing(r.net, held, eheld, 50, 4);
  CHECK(ev.have_difficulty);
  REQUIRE(ev.rows.size() == 11);  // thresholds 2..9 and shares 0.25, 0.5, 0.75
  const ShareComparison& half = ev.rows[9];
  CHECK(half.rule == "share");
  CHECK(half.n_cloud == 100);
  INFO("router " << half.router_utility << " random " << half.random_expected << " oracle " << half.oracle_utility);
  CHECK(half.random_expected == doctest::Approx(0.5 * ev.mean_dU));
  CHECK(half.router_utility > half.random_expected + 0.8 * (half.oracle_utility - half.random_expected));
  CHECK(half.router_beats_draws == 1.0);
  // The difficulty is random, so every threshold rule is beaten at its own share (when it sends any).
  for (std::size_t k = 0; k < 8; ++k)
    if (ev.rows[k].n_cloud > 0 && ev.rows[k].n_cloud < ev.n) CHECK(ev.rows[k].router_utility > ev.rows[k].threshold_utility);

  // Deterministic for a seed; another seed gives other weights.
  TrainOptions quick = opt;
  quick.epochs = 2;
  const TrainResult a = train_router(train, etrain, quick, 9), a2 = train_router(train, etrain, quick, 9),
                    c = train_router(train, etrain, quick, 10);
  CHECK(a.epoch_loss == a2.epoch_loss);
  CHECK(a.net.weight[1] == a2.net.weight[1]);
  CHECK(a.net.weight[1] != c.net.weight[1]);
  // The reference's meta vector (which contains dU) is offered too.
  quick.reference_meta = true;
  CHECK(train_router(train, etrain, quick, 9).epoch_loss.size() == 2);
  const auto rm = profile_meta(train[0], true);
  CHECK(rm[7] == float(delta_utility(train[0])));
  CHECK(rm[0] == float(train[0].n_depends));
}

TEST_CASE("hybridflow router: profiles are read, and a malformed line is an InputError naming it") {
  const fs::path dir = temp_dir();
  const std::string good =
      R"({"task": "Q?", "subtask": {"description": "D", "depends_on": ["1", "2"]}, "edge": {"latency_ms": 1500, "usage": {"total_tokens": 400, "completion_tokens": 120}}, "cloud": {"latency_ms": 2500, "usage": {"total_tokens": 600, "completion_tokens": 320}}, "difficulty": 6, "id": 17})";
  const std::string path = (dir / "p.jsonl").string();
  {
    std::ofstream f(path);
    f << good << "\n\n" << good << "\n";
  }
  std::string sha;
  const auto ps = read_profiles(path, &sha);
  REQUIRE(ps.size() == 2);
  CHECK(sha.size() == 64);
  CHECK(ps[0].task == "Q?");
  CHECK(ps[0].description == "D");
  CHECK(ps[0].n_depends == 2);
  CHECK(ps[0].edge_latency_s == 1.5);
  CHECK(ps[0].cloud_latency_s == 2.5);
  CHECK(ps[0].cloud_total_tokens == 600);
  CHECK(ps[0].difficulty == 6);
  CHECK(ps[0].id == "17");
  // dq = (320 - 120) / 100 = 2, dt = 1, k_c = 600: dU = 2 - 0.5 - 0.6 = 0.9.
  CHECK(delta_utility(ps[0]) == doctest::Approx(0.9));
  CHECK(router_text(ps[0]) == "Q?D");
  CHECK(router_text(ps[0], true) == "Q? D");

  auto expect_error = [&](const std::string& line3, const std::string& what) {
    {
      std::ofstream f(path, std::ios::trunc);
      f << good << "\n\n" << line3 << "\n";
    }
    try {
      read_profiles(path);
      FAIL("no error for " << line3);
    } catch (const InputError& e) {
      const std::string msg = e.message();
      CHECK(msg.find("line 3") != std::string::npos);
      CHECK(msg.find(what) != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    }
  };
  expect_error("{not json", "malformed JSON");
  expect_error(R"({"task": "Q", "subtask": {"description": "D"}, "edge": {"latency_ms": 1, "usage": {"total_tokens": 1, "completion_tokens": 1}}})",
               "cloud");
  expect_error(R"({"task": "Q", "subtask": {"description": "D"}, "edge": {"latency_ms": 1, "usage": {"total_tokens": 1, "completion_tokens": 1}}, "cloud": {"latency_ms": -4, "usage": {"total_tokens": 1, "completion_tokens": 1}}})",
               "cloud.latency_ms");
  expect_error(R"({"task": "Q", "subtask": {"description": "D"}, "edge": {"latency_ms": 1, "usage": {"total_tokens": 1.5, "completion_tokens": 1}}, "cloud": {"latency_ms": 4, "usage": {"total_tokens": 1, "completion_tokens": 1}}})",
               "edge.usage.total_tokens");
  expect_error(R"({"task": 3, "subtask": {"description": "D"}})", "task");
  std::string hard = good;
  hard.replace(hard.find("\"difficulty\": 6"), 15, "\"difficulty\": 12");
  expect_error(hard, "difficulty");
  {
    std::ofstream f(path, std::ios::trunc);
    f << "\n";
  }
  CHECK_THROWS_AS(read_profiles(path), InputError);
  CHECK_THROWS_AS(read_profiles((dir / "missing.jsonl").string()), InputError);
  fs::remove_all(dir);
}
