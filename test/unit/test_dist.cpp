// dist/ (issue 41): the fixed-order reduction of data parallelism, on ranks that are threads of
// this process (dist::make_thread_group).  Truth: the left fold ((g_0 + g_1) + g_2) + ... computed
// here in one loop, which every rank count must reproduce bit for bit; the data are chosen so that
// another order (the pairwise tree an allreduce may use) gives other bits, so a reduction that
// summed in any other order would fail.  Then whole Trainers: 2 and 3 ranks against one process.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "dist/comm.hpp"
#include "lm/model.hpp"
#include "nn/plora.hpp"
#include "nn/trainer.hpp"
#include "nn_test_support.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;

namespace {

/// g_a for micro-batch a: values whose float sums depend on the order (magnitudes 1e-3 .. 1e4,
/// both signs).
std::vector<float> micro_floats(int a, std::size_t n) {
  Rng rng(1000 + std::uint64_t(a));
  std::vector<float> g(n);
  for (auto& x : g) x = static_cast<float>((rng.uniform() - 0.5) * std::pow(10.0, 7.0 * rng.uniform() - 3.0));
  return g;
}
std::vector<double> micro_doubles(int a) { return {0.1 * (a + 1), 1e16 + a, -1e16, 3.0 / (a + 1)}; }

/// Runs `body(comm)` on each rank of a thread group of n.
template <class F>
void on_ranks(int n, F body) {
  auto group = dist::make_thread_group(n);
  std::vector<std::thread> ts;
  std::vector<std::string> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    ts.emplace_back([&, r] {
      try {
        body(*group[std::size_t(r)]);
      } catch (const std::exception& e) {
        errors[std::size_t(r)] = e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (const auto& e : errors) CHECK(e == "");
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("dist: the chained reduction gives the left fold's bits on 1 to 4 ranks, any accumulation and chunk") {
  const std::size_t n = 1000;
  for (int accum : {1, 2, 3, 5, 7}) {
    // the truth: one loop, micro-batch order
    std::vector<float> want = micro_floats(0, n);
    std::vector<double> want_d = micro_doubles(0);
    for (int a = 1; a < accum; ++a) {
      const auto g = micro_floats(a, n);
      const auto d = micro_doubles(a);
      for (std::size_t i = 0; i < n; ++i) want[i] = want[i] + g[i];
      for (std::size_t i = 0; i < d.size(); ++i) want_d[i] = want_d[i] + d[i];
    }
    if (accum >= 4) {  // the pairwise tree ((g0 + g1) + (g2 + g3)) + ... differs somewhere: order matters here
      std::vector<std::vector<float>> level;
      for (int a = 0; a < accum; ++a) level.push_back(micro_floats(a, n));
      while (level.size() > 1) {
        std::vector<std::vector<float>> up;
        for (std::size_t k = 0; k + 1 < level.size(); k += 2) {
          std::vector<float> s(n);
          for (std::size_t i = 0; i < n; ++i) s[i] = level[k][i] + level[k + 1][i];
          up.push_back(std::move(s));
        }
        if (level.size() % 2) up.push_back(level.back());
        level = std::move(up);
      }
      CHECK_FALSE(same_bits(level[0], want));
    }
    for (int ranks = 1; ranks <= 4; ++ranks)
      for (std::size_t chunk : {std::size_t(7), std::size_t(1) << 18}) {
        CAPTURE(accum);
        CAPTURE(ranks);
        CAPTURE(chunk);
        std::vector<std::vector<float>> got(static_cast<std::size_t>(ranks));
        std::vector<std::vector<double>> got_d(static_cast<std::size_t>(ranks));
        on_ranks(ranks, [&](dist::Comm& comm) {
          dist::ChainReducer red(comm, accum, chunk);
          std::vector<float> buf(n);
          std::vector<double> dbuf(4);
          for (int a : red.mine()) {
            buf = micro_floats(a, n);
            dbuf = micro_doubles(a);
            red.add(a, {buf, dbuf});
          }
          red.finish({buf, dbuf});
          got[std::size_t(comm.rank())] = buf;
          got_d[std::size_t(comm.rank())] = dbuf;
        });
        for (int r = 0; r < ranks; ++r) {
          CHECK(same_bits(got[std::size_t(r)], want));
          CHECK(got_d[std::size_t(r)] == want_d);
        }
      }
  }
}

TEST_CASE("dist: micro-batch a runs on rank a mod N, and misuse is refused") {
  on_ranks(3, [](dist::Comm& comm) {
    dist::ChainReducer red(comm, 7);
    const std::vector<std::vector<int>> want = {{0, 3, 6}, {1, 4}, {2, 5}};
    CHECK(red.mine() == want[std::size_t(comm.rank())]);
  });
  dist::SelfComm self;
  dist::ChainReducer red(self, 2);
  std::vector<float> g(3, 1.0f);
  std::vector<double> d;
  CHECK_THROWS_AS(red.add(1, {g, d}), InputError);  // micro-batch 1 before 0
  red.add(0, {g, d});
  CHECK_THROWS_AS(red.finish({g, d}), InputError);  // before the last micro-batch
  red.add(1, {g, d});
  red.finish({g, d});
  CHECK(g == std::vector<float>(3, 2.0f));
  CHECK_THROWS_AS(red.add(1, {g, d}), InputError);  // a new step starts at micro-batch 0 (no stale running sum)
  dist::ChainReducer three(self, 3);
  three.add(0, {g, d});
  CHECK_THROWS_AS(three.add(2, {g, d}), InputError);  // micro-batch 1 skipped
  CHECK_THROWS_AS(dist::ChainReducer(self, 0), InputError);
  CHECK_THROWS_AS(self.send(g.data(), 4, 1), RuntimeError);
}

TEST_CASE("dist: the start-up check names the first rank whose configuration differs") {
  for (int odd : {-1, 1, 2}) {
    std::vector<int> verdict(3, -7);
    on_ranks(3, [&](dist::Comm& comm) {
      const std::string text = comm.rank() == odd ? "lr=2e-3" : "lr=1e-3";
      verdict[std::size_t(comm.rank())] = dist::first_mismatch(comm, text);
    });
    CHECK(verdict == std::vector<int>(3, odd));  // every rank gets the same answer
  }
}

TEST_CASE("dist: Trainers on 2 and 3 ranks give one process's weights bit for bit (AdamW, accumulation 6)") {
  // a tiny llama model, 6 micro-batches of 2 windows per step, 4 steps
  lm::Model m = lm::random_model(nn::testing::tiny_config(lm::RopeStyle::half, false), 3, 0.05);
  std::vector<int> stream(4000);
  Rng rng(9);
  for (auto& t : stream) t = static_cast<int>(rng.uniform() * m.config.vocab_size) % m.config.vocab_size;
  nn::TrainOptions o;
  o.seq_len = 16;
  o.batch = 2;
  o.accum = 6;
  o.steps = 4;
  o.warmup = 1;
  o.lr = 3e-3;
  o.seed = 5;
  auto weights = [](nn::Trainer& t) {
    std::vector<float> w;
    for (const auto& p : t.params().store.params) w.insert(w.end(), p.value.begin(), p.value.end());
    return w;
  };
  nn::Trainer alone(m, stream, o);
  std::vector<double> losses;
  for (int s = 0; s < o.steps; ++s) losses.push_back(alone.step().loss);
  const std::vector<float> want = weights(alone);
  // a different micro-batching of the same global batch (12 windows) gives other bits: the check can fail
  nn::TrainOptions o2 = o;
  o2.batch = 4;
  o2.accum = 3;
  nn::Trainer other(m, stream, o2);
  for (int s = 0; s < o.steps; ++s) other.step();
  CHECK_FALSE(same_bits(weights(other), want));
  for (int ranks : {2, 3}) {
    CAPTURE(ranks);
    std::vector<std::vector<float>> got(static_cast<std::size_t>(ranks));
    std::vector<std::vector<double>> got_loss(static_cast<std::size_t>(ranks));
    on_ranks(ranks, [&](dist::Comm& comm) {
      nn::Trainer t(m, stream, o);
      t.set_comm(&comm);
      CHECK(t.ranks() == ranks);
      for (int s = 0; s < o.steps; ++s) got_loss[std::size_t(comm.rank())].push_back(t.step().loss);
      got[std::size_t(comm.rank())] = weights(t);
    });
    for (int r = 0; r < ranks; ++r) {
      CHECK(same_bits(got[std::size_t(r)], want));
      CHECK(got_loss[std::size_t(r)] == losses);
    }
  }
}

TEST_CASE("dist: LoRA fine-tuning on 2 and 3 ranks gives one process's adapter bit for bit (accumulation 4, dropout)") {
  lm::Model m = lm::random_model(nn::testing::tiny_config(lm::RopeStyle::half, false), 3, 0.05);
  std::vector<int> stream(3000);
  Rng rng(21);
  for (auto& t : stream) t = static_cast<int>(rng.below(std::uint64_t(m.config.vocab_size)));
  nn::LoraJobOptions job;
  job.lora.rank = 4;
  job.lora.alpha = 8;
  job.lora.dropout = 0.1;  // each micro-batch its own dropout stream
  job.lora.targets = {"q", "v", "down"};
  job.batch = 2;
  job.accum = 4;
  job.steps = 3;
  job.lr = 1e-2;
  job.seed = 7;
  const int S = 16;
  auto adapter = [](nn::PackedLoraTrainer& t) {
    std::vector<float> w;
    for (const auto& p : t.job_params(0).store.params) w.insert(w.end(), p.value.begin(), p.value.end());
    return w;
  };
  auto train = [&](const nn::LoraJobOptions& o, dist::Comm* comm, std::vector<double>* loss) {
    nn::PackedLoraTrainer t(m, S);
    t.add_job(o, &stream);
    t.set_comm(comm);
    while (!t.finished(0)) {
      const double l = t.step({0})[0].loss;
      if (loss) loss->push_back(l);
    }
    return adapter(t);
  };
  std::vector<double> losses;
  const std::vector<float> want = train(job, nullptr, &losses);
  // the same 8 windows per step as 2 micro-batches of 4 give other bits: the check can fail
  nn::LoraJobOptions two = job;
  two.batch = 4;
  two.accum = 2;
  CHECK_FALSE(same_bits(train(two, nullptr, nullptr), want));
  for (int ranks : {2, 3}) {
    CAPTURE(ranks);
    std::vector<std::vector<float>> got(static_cast<std::size_t>(ranks));
    std::vector<std::vector<double>> got_loss(static_cast<std::size_t>(ranks));
    on_ranks(ranks, [&](dist::Comm& comm) { got[std::size_t(comm.rank())] = train(job, &comm, &got_loss[std::size_t(comm.rank())]); });
    for (int r = 0; r < ranks; ++r) {
      CHECK(same_bits(got[std::size_t(r)], want));
      CHECK(got_loss[std::size_t(r)] == losses);
    }
  }
  // one micro-batch through the reduction is the packed step's computation (plora-train's bits)
  nn::LoraJobOptions one = job;
  one.accum = 1;
  dist::SelfComm self;
  CHECK(same_bits(train(one, &self, nullptr), train(one, nullptr, nullptr)));
  // a job that accumulates is never packed
  nn::PackedLoraTrainer t(m, S);
  t.add_job(job, &stream);
  t.add_job(one, &stream);
  CHECK_THROWS_AS(t.step({0, 1}), UsageError);
  nn::LoraJobOptions bad = job;
  bad.accum = 0;
  CHECK_THROWS_AS(t.add_job(bad, &stream), UsageError);
}
