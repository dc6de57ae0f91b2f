// The LM trajectory store as an unlearning Run (issue 34, unlearn/lm_run.hpp): on a tiny decoder
// trained here with SGD and recorded with a TrajectoryWriter (as lm-train --trajectory does), the
// step map's products are checked against what they are built from (the Fisher product against
// g (g^T v) from gradient(), the exact product against finite differences of gradient() taken
// independently through set_params), the Gauss-Newton product's symmetry and sign, replay's bits
// against the live run's, and a tampered steps.jsonl is refused on replay.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "io/provenance.hpp"
#include "lm/model.hpp"
#include "nn/trainer.hpp"
#include "nn_test_support.hpp"
#include "unlearn/lm_run.hpp"
#include "unlearn/trajectory.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
namespace fs = std::filesystem;

namespace {

std::atomic<int> scratch_counter{0};

/// A fresh directory name under the system temp directory (not created); removed by the owner.
fs::path scratch_dir(const std::string& name) {
  return fs::temp_directory_path() /
         ("icmlkit_test_unlearn_lm_" + std::to_string(::getpid()) + "_" + std::to_string(scratch_counter++) + "_" + name);
}

/// A learnable token stream: a repeating pattern with some noise.
std::vector<int> pattern_stream(int n, int vocab, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<int> s(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) s[std::size_t(i)] = rng.uniform() < 0.8 ? (i * 5) % vocab : int(rng.below(std::uint64_t(vocab)));
  return s;
}

std::vector<double> flat(nn::LlamaParams<float>& p) {
  std::vector<double> out;
  for (const auto& t : p.store.params)
    if (!t.frozen) out.insert(out.end(), t.value.begin(), t.value.end());
  return out;
}

std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (double& x : v) x = scale * rng.normal();
  return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double norm(const std::vector<double>& a) { return std::sqrt(dot(a, a)); }

double l2_distance(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}

/// A tiny SGD run of `steps` steps recorded the way lm-train --trajectory records one: ckpt-0,
/// every step in steps.jsonl, a checkpoint every `every` steps and at the end.  `live[s]` holds
/// theta[s] as the training loop had it (the truth replay must reproduce bit for bit).
struct TinyTrajectory {
  fs::path dir;
  std::vector<int> stream;
  std::vector<std::vector<double>> live;
  double wd = 0;

  TinyTrajectory(const std::string& name, double weight_decay, std::int64_t steps = 24, std::int64_t every = 8)
      : dir(scratch_dir(name)), wd(weight_decay) {
    const lm::Model m = lm::random_model(nn::testing::tiny_config(lm::RopeStyle::half, false), 7, 0.1);
    stream = pattern_stream(400, m.config.vocab_size, 3);
    nn::TrainOptions o;
    o.seq_len = 8;
    o.batch = 2;
    o.accum = 2;
    o.steps = steps;
    o.lr = 0.5;
    o.min_lr = 0.05;
    o.warmup = 0;
    o.clip = 0;
    o.seed = 5;
    o.optimizer = "sgd";
    o.adam.weight_decay = weight_decay;
    nn::Trainer trainer(m, stream, o);
    unlearn::check_trajectory_options(o, m.config);
    unlearn::TrajectoryMeta meta;
    meta.train_options = o.to_json();
    meta.corpus_sha256 = std::string(64, '0');
    meta.checkpoint_every = every;
    meta.windows = trainer.windows();
    meta.seq_len = o.seq_len;
    meta.doc_starts = {0};
    meta.stream_tokens = static_cast<std::int64_t>(stream.size());
    meta.kernels = "fast";
    unlearn::TrajectoryWriter writer(dir.string(), meta, false);
    const io::Provenance prov;
    writer.checkpoint(trainer, prov);
    live.push_back(flat(trainer.params()));
    for (std::int64_t s = 0; s < steps; ++s) {
      const nn::StepStats st = trainer.step();
      writer.record(st, o.clip);
      if (writer.due(trainer.steps_done())) writer.checkpoint(trainer, prov);
      live.push_back(flat(trainer.params()));
    }
    if (!writer.due(trainer.steps_done())) writer.checkpoint(trainer, prov);
  }
  ~TinyTrajectory() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  TinyTrajectory(const TinyTrajectory&) = delete;
  TinyTrajectory& operator=(const TinyTrajectory&) = delete;
};

/// Per flat entry: whether weight decay applies (the run's trainable tensors in store order).
std::vector<char> decay_mask(unlearn::LmRun& run) {
  std::vector<char> out;
  for (const auto& p : run.float_params().store.params)
    if (!p.frozen) out.insert(out.end(), p.numel(), p.decay ? 1 : 0);
  return out;
}

/// H v (the mode's curvature product) recovered from the step map's product
/// J v = -eta (H v + wd v on decay entries).
std::vector<double> curvature_product(unlearn::LmRun& run, unlearn::HvpMode mode, const std::vector<double>& v, double wd,
                                      const std::vector<char>& decay) {
  std::vector<double> jv;
  run.jacobian_product(mode, v, jv);
  const double eta = run.lr(run.at());
  std::vector<double> hv(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) hv[i] = -jv[i] / eta - (decay[i] ? wd * v[i] : 0.0);
  return hv;
}

}  // namespace

TEST_CASE("unlearn lm: the Fisher product is -eta (g g^T v + wd v) with g the step's batch gradient") {
  for (const double wd : {0.0, 0.05}) {
    CAPTURE(wd);
    TinyTrajectory t("fisher", wd);
    const unlearn::Trajectory traj = unlearn::Trajectory::read(t.dir.string());
    REQUIRE(traj.steps.size() == 24);
    REQUIRE(traj.checkpoints == std::vector<std::int64_t>{0, 8, 16, 24});
    unlearn::LmRun run(traj, t.stream);
    const std::vector<char> decay = decay_mask(run);
    REQUIRE(decay.size() == run.dim());
    std::size_t decayed = 0;
    for (char c : decay) decayed += c ? 1 : 0;
    CHECK(decayed > 0);
    CHECK(decayed < run.dim());  // the norms' gains carry no decay
    for (const std::int64_t s : {std::int64_t(3), std::int64_t(17)}) {
      CAPTURE(s);
      run.seek(s);
      std::vector<double> g;
      run.gradient(g);
      REQUIRE(g.size() == run.dim());
      // gradient() is the batch gradient the recorded step took (the trainer's norm before clipping)
      CHECK(std::abs(norm(g) - traj.steps[std::size_t(s)].grad_norm) <= 1e-5 * traj.steps[std::size_t(s)].grad_norm);
      const std::vector<double> v = random_vector(run.dim(), 100 + std::uint64_t(s));
      std::vector<double> jv;
      run.jacobian_product(unlearn::HvpMode::fisher, v, jv);
      const double eta = run.lr(s);
      CHECK(eta == traj.steps[std::size_t(s)].lr);
      const double gv = dot(g, v);
      std::vector<double> want(run.dim());
      double scale = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        want[i] = -eta * (g[i] * gv + (decay[i] ? wd * v[i] : 0.0));
        scale = std::max(scale, std::abs(want[i]));
      }
      double worst = 0;
      for (std::size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(jv[i] - want[i]));
      CHECK(worst <= 1e-12 * scale);
      // a product reuses the step's gradient: the same call again gives the same bits
      std::vector<double> again;
      run.jacobian_product(unlearn::HvpMode::fisher, v, again);
      CHECK(again == jv);
    }
  }
}

TEST_CASE("unlearn lm: gradient() is the derivative of the batch loss (windows_gradient's loss at theta +- h v)") {
  TinyTrajectory t("grad", 0.0);
  const unlearn::Trajectory traj = unlearn::Trajectory::read(t.dir.string());
  unlearn::LmRun run(traj, t.stream);
  run.set_double_products(true);
  const std::int64_t s = 11;
  run.seek(s);
  std::vector<double> theta, g, scratch;
  run.params(theta);
  run.gradient(g);
  const std::vector<std::int64_t>& batch = traj.steps[std::size_t(s)].windows;
  const std::vector<double> v = random_vector(run.dim(), 7);
  const double h = 1e-3 * norm(theta) / norm(v);
  std::vector<double> shifted(theta.size());
  // set_params rounds to float: the step actually taken is measured from the rounded vectors
  auto loss_at = [&](double sign, std::vector<double>& at) {
    for (std::size_t i = 0; i < theta.size(); ++i) shifted[i] = theta[i] + sign * h * v[i];
    run.set_params(shifted);
    run.params(at);
    return run.windows_gradient(batch, scratch);
  };
  std::vector<double> tp, tm;
  const double lp = loss_at(+1, tp), lm = loss_at(-1, tm);
  std::vector<double> step(theta.size());
  for (std::size_t i = 0; i < theta.size(); ++i) step[i] = tp[i] - tm[i];
  const double numeric = lp - lm, analytic = dot(g, step);
  CHECK(std::abs(numeric - analytic) <= 1e-4 * std::abs(analytic));
  CHECK(std::abs(analytic) > 0);
}

TEST_CASE("unlearn lm: exact products in double match finite differences of gradient() and are symmetric") {
  TinyTrajectory t("exact", 0.0);
  const unlearn::Trajectory traj = unlearn::Trajectory::read(t.dir.string());
  unlearn::LmRun run(traj, t.stream);
  run.set_double_products(true);
  const std::vector<char> decay = decay_mask(run);
  for (const std::int64_t s : {std::int64_t(5), std::int64_t(20)}) {
    CAPTURE(s);
    run.seek(s);
    std::vector<double> theta;
    run.params(theta);
    const std::vector<double> u = random_vector(run.dim(), 31 + std::uint64_t(s)), v = random_vector(run.dim(), 47 + std::uint64_t(s));
    const std::vector<double> hv = curvature_product(run, unlearn::HvpMode::exact, v, 0.0, decay);
    const std::vector<double> hu = curvature_product(run, unlearn::HvpMode::exact, u, 0.0, decay);
    // symmetry: u^T H v = v^T H u, relative to the products' scale ||u|| ||H v|| (the forms
    // themselves are sums of terms of both signs: H is indefinite)
    const double uhv = dot(u, hv), vhu = dot(v, hu);
    const double form_scale = std::max(norm(u) * norm(hv), norm(v) * norm(hu));
    CHECK(std::abs(uhv - vhu) <= 1e-6 * form_scale);
    // independent: central differences of the batch gradient through set_params (float weights:
    // the step actually taken is the difference of the rounded parameter vectors, so h v is
    // kept large against float rounding and the quotient is taken along that step)
    const double h = 1e-3 * norm(theta) / norm(v);
    std::vector<double> shifted(theta.size()), gp, gm, tp, tm;
    for (std::size_t i = 0; i < theta.size(); ++i) shifted[i] = theta[i] + h * v[i];
    run.set_params(shifted);
    run.params(tp);
    run.gradient(gp);
    for (std::size_t i = 0; i < theta.size(); ++i) shifted[i] = theta[i] - h * v[i];
    run.set_params(shifted);
    run.params(tm);
    run.gradient(gm);
    // H (tp - tm) ~= gp - gm; compare with H v scaled to the step's length along v
    std::vector<double> step(theta.size()), fd(theta.size());
    for (std::size_t i = 0; i < theta.size(); ++i) step[i] = tp[i] - tm[i];
    const double along = dot(step, v) / dot(v, v);  // ~ 2h
    CHECK(std::abs(along / (2 * h) - 1) < 1e-4);
    for (std::size_t i = 0; i < theta.size(); ++i) fd[i] = (gp[i] - gm[i]) / along;
    CHECK(l2_distance(fd, hv) <= 5e-4 * norm(hv));
    CHECK(norm(hv) > 0);
    // the exact Hessian is not the Fisher's rank-one g g^T
    run.seek(s);  // back on the trajectory (set_params left it)
    const std::vector<double> fv = curvature_product(run, unlearn::HvpMode::fisher, v, 0.0, decay);
    CHECK(l2_distance(fv, hv) > 0.1 * norm(hv));
  }
}

TEST_CASE("unlearn lm: the Gauss-Newton product is symmetric positive semi-definite and not the Hessian") {
  TinyTrajectory t("ggn", 0.05);
  const unlearn::Trajectory traj = unlearn::Trajectory::read(t.dir.string());
  unlearn::LmRun run(traj, t.stream);
  run.set_double_products(true);
  const std::vector<char> decay = decay_mask(run);
  run.seek(13);
  std::vector<std::vector<double>> vs, gvs;
  for (std::uint64_t k = 0; k < 3; ++k) {
    vs.push_back(random_vector(run.dim(), 500 + k));
    gvs.push_back(curvature_product(run, unlearn::HvpMode::ggn, vs.back(), t.wd, decay));
  }
  for (std::size_t a = 0; a < vs.size(); ++a) {
    CAPTURE(a);
    const double vgv = dot(vs[a], gvs[a]);
    CHECK(vgv > 0);  // (J v)^T H_out (J v) with H_out = diag(p) - p p^T >= 0
    for (std::size_t b = a + 1; b < vs.size(); ++b) {
      const double x = dot(vs[a], gvs[b]), y = dot(vs[b], gvs[a]);
      CHECK(std::abs(x - y) <= 1e-6 * std::max(std::sqrt(dot(vs[a], gvs[a]) * dot(vs[b], gvs[b])), 1e-300));
    }
    const std::vector<double> hv = curvature_product(run, unlearn::HvpMode::exact, vs[a], t.wd, decay);
    CHECK(l2_distance(gvs[a], hv) > 1e-3 * norm(hv));
  }
  // more random directions: the quadratic form never goes negative
  double min_ggn = 1e300;
  for (std::uint64_t k = 0; k < 6; ++k) {
    const std::vector<double> v = random_vector(run.dim(), 900 + k);
    min_ggn = std::min(min_ggn, dot(v, curvature_product(run, unlearn::HvpMode::ggn, v, t.wd, decay)));
  }
  CHECK(min_ggn >= 0);
}

TEST_CASE("unlearn lm: seek rebuilds theta[s] bit for bit from any starting point") {
  TinyTrajectory t("seek", 0.05);
  const unlearn::Trajectory traj = unlearn::Trajectory::read(t.dir.string());
  unlearn::LmRun run(traj, t.stream);
  std::vector<double> a, b;
  // forward from the first checkpoint, backwards (reload), from a checkpoint, from just before
  for (const std::int64_t s : {std::int64_t(13), std::int64_t(22), std::int64_t(13), std::int64_t(8), std::int64_t(13),
                               std::int64_t(12), std::int64_t(13), std::int64_t(24), std::int64_t(0)}) {
    CAPTURE(s);
    run.seek(s);
    CHECK(run.at() == s);
    run.params(a);
    CHECK(a == t.live[std::size_t(s)]);  // bitwise the training loop's weights
  }
  // leaving the trajectory (a no-op step, replaced parameters) does not leak into a later seek
  run.seek(10);
  run.advance(true);
  run.seek(13);
  run.params(a);
  run.set_params(std::vector<double>(run.dim(), 0.25));
  run.seek(13);
  run.params(b);
  CHECK(a == t.live[13]);
  CHECK(b == t.live[13]);
  CHECK(run.steps_replayed() > 0);
}

TEST_CASE("unlearn lm: replaying a step whose recorded loss was altered is refused") {
  TinyTrajectory t("tamper", 0.0);
  const fs::path steps = t.dir / "steps.jsonl";
  std::vector<std::string> lines;
  {
    std::ifstream in(steps);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  REQUIRE(lines.size() == 24);
  nlohmann::json j = nlohmann::json::parse(lines[10]);
  REQUIRE(j["step"] == 10);
  j["loss"] = j["loss"].get<double>() * (1 + 1e-12);
  lines[10] = j.dump();
  {
    std::ofstream out(steps, std::ios::trunc);
    for (const auto& l : lines) out << l << '\n';
  }
  const unlearn::Trajectory traj = unlearn::Trajectory::read(t.dir.string());
  unlearn::LmRun run(traj, t.stream);
  run.seek(10);  // replays steps 8 and 9 only: fine
  std::vector<double> a;
  run.params(a);
  CHECK(a == t.live[10]);
  CHECK_THROWS_WITH_AS(run.seek(11), doctest::Contains("replaying step 10"), InputError);
  // the steps after the next checkpoint do not replay step 10
  unlearn::LmRun other(traj, t.stream);
  other.seek(20);
  other.params(a);
  CHECK(a == t.live[20]);
}
