#include "nn/lora_run.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "util/error.hpp"

namespace icmlkit::nn {

namespace {
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Checks that `groups` partitions `jobs`.
void check_partition(const std::vector<std::vector<int>>& groups, const std::vector<int>& jobs) {
  std::vector<int> seen;
  for (const auto& g : groups) seen.insert(seen.end(), g.begin(), g.end());
  std::vector<int> want = jobs;
  std::sort(seen.begin(), seen.end());
  std::sort(want.begin(), want.end());
  if (seen != want) throw UsageError("the schedule does not run every job exactly once");
}
}  // namespace

LoraRunSummary run_lora_jobs(PackedLoraTrainer& trainer, const std::vector<LoraRunJob>& jobs,
                             const std::vector<int>& order, const LoraPlanner& plan, const LoraRunOptions& opt,
                             const std::function<void(int, const LoraJobResult&)>& on_done) {
  const auto t0 = Clock::now();
  LoraRunSummary sum;
  sum.jobs.resize(std::size_t(trainer.job_count()));
  const bool halving = opt.halving_eta >= 2 && !opt.rungs.empty();
  auto has_val = [&](int j) { return jobs[std::size_t(j)].val && jobs[std::size_t(j)].val->size() > 1; };
  if (halving)
    for (int j : order)
      if (!has_val(j))
        throw InputError(fmt::format("successive halving needs validation data: job {} has no held-out documents", trainer.options(j).name));

  // per job: the training-loss window of its log records
  std::vector<double> window_loss(sum.jobs.size(), 0.0);
  std::vector<int> window_n(sum.jobs.size(), 0);
  std::vector<char> started(sum.jobs.size(), 0);
  auto eval = [&](int j) {
    return has_val(j) ? trainer.evaluate(j, *jobs[std::size_t(j)].val, opt.eval_batch > 0 ? opt.eval_batch : trainer.options(j).batch, opt.eval_tokens).loss
                      : std::numeric_limits<double>::quiet_NaN();
  };
  auto log = [&](int j, nlohmann::json rec) {
    if (jobs[std::size_t(j)].log) jobs[std::size_t(j)].log(rec);
  };
  auto finish = [&](int j, bool stopped) {
    LoraJobResult& r = sum.jobs[std::size_t(j)];
    r.steps = trainer.steps_done(j);
    r.stopped_early = stopped;
    if (std::isnan(r.val_loss) || !stopped) r.val_loss = eval(j);
    log(j, {{"summary", true}, {"job", trainer.options(j).name}, {"steps", r.steps}, {"tokens", r.tokens}, {"diverged", r.diverged},
            {"train_loss", r.train_loss}, {"val_loss", std::isnan(r.val_loss) ? nlohmann::json() : nlohmann::json(r.val_loss)},
            {"stopped_early", stopped}, {"start_s", r.start_s}, {"end_s", r.end_s}, {"busy_s", r.busy_s}});
    if (on_done) on_done(j, r);
    trainer.release(j);
  };

  std::vector<int> alive = order;
  const std::size_t rounds = halving ? opt.rungs.size() + 1 : 1;
  for (std::size_t round = 0; round < rounds && !alive.empty(); ++round) {
    const std::int64_t until = round < opt.rungs.size() && halving ? opt.rungs[round] : std::numeric_limits<std::int64_t>::max();
    const auto groups = plan(alive, until);
    check_partition(groups, alive);
    for (const auto& g : groups) {
      LoraGroupRecord rec;
      rec.round = static_cast<int>(round);
      rec.jobs = g;
      rec.start_s = since(t0);
      auto target = [&](int j) { return std::min(until, trainer.options(j).steps); };
      for (;;) {
        std::vector<int> active;
        for (int j : g)
          if (!trainer.diverged(j) && trainer.steps_done(j) < target(j)) active.push_back(j);
        if (active.empty()) break;
        const double s0 = since(t0);
        const auto steps = trainer.step(active);
        const double s1 = since(t0);
        ++rec.packed_steps;
        for (const LoraJobStep& st : steps) {
          const int j = st.job;
          LoraJobResult& r = sum.jobs[std::size_t(j)];
          if (st.diverged) {
            r.diverged = true;
            log(j, {{"job", trainer.options(j).name}, {"event", "diverged"}, {"step", st.step + 1},
                    {"train_loss", std::isfinite(st.loss) ? nlohmann::json(st.loss) : nlohmann::json()},
                    {"grad_norm", std::isfinite(st.grad_norm) ? nlohmann::json(st.grad_norm) : nlohmann::json()}});
            finish(j, false);
            continue;
          }
          if (!started[std::size_t(j)]) r.start_s = s0;
          started[std::size_t(j)] = 1;
          r.end_s = s1;
          r.busy_s += s1 - s0;
          r.tokens = st.tokens;
          r.train_loss = st.loss;
          sum.tokens += std::int64_t(trainer.options(j).batch) * trainer.options(j).accum * trainer.seq_len();
          window_loss[std::size_t(j)] += st.loss;
          ++window_n[std::size_t(j)];
          const bool last = st.step >= trainer.options(j).steps;
          const bool do_eval = opt.eval_every > 0 && st.step % opt.eval_every == 0 && !last;
          if (st.step % opt.log_every == 0 || last || do_eval) {
            nlohmann::json rec_line = {{"job", trainer.options(j).name}, {"step", st.step}, {"tokens", st.tokens},
                                       {"train_loss", window_loss[std::size_t(j)] / window_n[std::size_t(j)]},
                                       {"lr", st.lr}, {"grad_norm", st.grad_norm}, {"packed_jobs", steps.size()},
                                       {"step_seconds", s1 - s0}};
            if (do_eval) {
              const double v = eval(j);
              if (!std::isnan(v)) rec_line["val_loss"] = v;
            }
            log(j, rec_line);
            window_loss[std::size_t(j)] = 0;
            window_n[std::size_t(j)] = 0;
          }
          if (last) finish(j, false);
        }
      }
      rec.end_s = since(t0);
      sum.groups.push_back(std::move(rec));
      trainer.trim();
    }
    // the round's end: survivors by validation loss (halving), the rest stop here
    std::vector<int> next;
    for (int j : alive)
      if (!trainer.finished(j)) next.push_back(j);
    if (halving && round + 1 < rounds && !next.empty()) {
      std::vector<std::pair<double, int>> ranked;
      for (int j : next) {
        sum.jobs[std::size_t(j)].val_loss = eval(j);
        log(j, {{"job", trainer.options(j).name}, {"event", "rung"}, {"step", trainer.steps_done(j)},
                {"val_loss", sum.jobs[std::size_t(j)].val_loss}});
        ranked.emplace_back(std::isnan(sum.jobs[std::size_t(j)].val_loss) ? std::numeric_limits<double>::infinity()
                                                                          : sum.jobs[std::size_t(j)].val_loss,
                            j);
      }
      std::stable_sort(ranked.begin(), ranked.end());
      const std::size_t keep = (ranked.size() + std::size_t(opt.halving_eta) - 1) / std::size_t(opt.halving_eta);
      next.clear();
      for (std::size_t i = 0; i < ranked.size(); ++i) {
        if (i < keep) next.push_back(ranked[i].second);
        else finish(ranked[i].second, true);
      }
      std::sort(next.begin(), next.end(), [&](int a, int b) {
        return std::find(order.begin(), order.end(), a) < std::find(order.begin(), order.end(), b);
      });
    }
    alive = next;
  }
  sum.seconds = since(t0);
  return sum;
}

}  // namespace icmlkit::nn
