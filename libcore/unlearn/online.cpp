#include "unlearn/online.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "unlearn/lm_run.hpp"
#include "util/error.hpp"

namespace icmlkit::unlearn {

std::vector<DeletionRequest> RequestFeed::poll() {
  std::vector<DeletionRequest> out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;  // not there yet
  in.seekg(offset_);
  std::string line;
  while (true) {
    const std::streamoff start = in.tellg();
    if (!std::getline(in, line)) break;
    if (in.eof()) {  // no newline yet: a line still being written
      offset_ = start;
      return out;
    }
    offset_ = in.tellg();
    ++line_;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}, line {}", path_, line_);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw InputError("malformed JSON", where);
    }
    out.push_back(DeletionRequest::from_json(j, where));
  }
  return out;
}

OnlineRun::OnlineRun(nn::Trainer& trainer, TrajectoryWriter& writer, TrajectoryMeta meta, std::vector<int> stream,
                     std::vector<std::string> train_docs, io::Provenance prov)
    : trainer_(trainer), writer_(writer), meta_(std::move(meta)), stream_(std::move(stream)), docs_(std::move(train_docs)),
      prov_(std::move(prov)) {}

std::vector<std::int64_t> OnlineRun::next_batch() {
  const std::size_t n = std::size_t(trainer_.options().batch) * std::size_t(trainer_.options().accum);
  std::vector<std::int64_t> w;
  std::int64_t drawn_without_use = 0;
  while (w.size() < n) {
    std::int64_t x;
    if (!requeue_.empty()) {
      x = requeue_.front();
      requeue_.pop_front();
    } else {
      if (drawn_.empty()) {
        const auto more = trainer_.next_windows();
        drawn_.insert(drawn_.end(), more.begin(), more.end());
      }
      x = drawn_.front();
      drawn_.pop_front();
    }
    if (deleted_.count(x)) {
      if (++drawn_without_use > 4 * meta_.windows + std::int64_t(n))
        throw RuntimeError("every training window has been deleted: nothing left to train on");
      continue;
    }
    w.push_back(x);
  }
  return w;
}

nn::StepStats OnlineRun::step() {
  nn::StepStats st = trainer_.step(next_batch());
  writer_.record(st, trainer_.options().clip);
  StepRecord r;
  r.step = st.step - 1;
  r.lr = st.lr;
  r.windows = st.windows;
  r.loss = st.loss;
  r.grad_norm = st.grad_norm;
  r.clipped = trainer_.options().clip > 0 && st.grad_norm > trainer_.options().clip;
  steps_.push_back(std::move(r));
  if (writer_.due(trainer_.steps_done())) writer_.checkpoint(trainer_, prov_);
  return st;
}

nlohmann::json OnlineRun::apply(const DeletionRequest& r) {
  try {
    return apply_checked(r);
  } catch (const Error& e) {  // a request's error is its own, not the command line's
    throw InputError(e.what(), fmt::format("request '{}'{}", r.id, e.where().empty() ? "" : ", " + e.where()));
  }
}

nlohmann::json OnlineRun::apply_checked(const DeletionRequest& r) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::int64_t tau = trainer_.steps_done();
  ++applied_;
  const ResolvedDeletion d = resolve_deletion(r, meta_, steps_, docs_);
  const nlohmann::json& s = r.settings;
  LmCleanerOptions lo;
  lo.K = 16;
  if (s.contains("K")) lo.K = s["K"].is_string() && s["K"] == "inf" ? -1 : s["K"].get<std::int64_t>();
  lo.mode = parse_hvp_mode(s.value("hvp", std::string("fisher")));
  lo.probe = s.value("probe", true);
  NoiseOptions no;
  no.kind = s.value("noise", std::string("none"));
  no.epsilon = s.value("epsilon", 1.0);
  no.delta = s.value("delta", 1e-5);
  no.rank = s.value("rank", 100);
  no.beta = s.value("beta", 0.1);
  no.seed = s.value("seed", static_cast<std::uint64_t>(eps_.size()));
  BoundOptions bo;
  if (s.contains("gamma")) bo.gamma = s["gamma"].get<double>();
  if (s.contains("c_lin")) bo.c_lin = s["c_lin"].get<double>();
  check_noise_options(no, bo);

  nlohmann::json line{{"event", "unlearn"},
                      {"request", r.id},
                      {"step", tau},
                      {"windows", d.windows.size()},
                      {"deleted_steps", d.steps},
                      {"untrained_windows", d.untrained.size()}};
  std::vector<std::int64_t> lag;
  for (const std::int64_t z : d.steps) lag.push_back(tau - z);
  line["lag"] = lag;
  for (const std::int64_t w : d.data_windows) deleted_.insert(w);
  // the benign windows of the deleted batches go back into the pool (LMCleaner's deferred re-learning)
  std::int64_t requeued = 0;
  for (const std::int64_t w : d.requeue)
    if (!deleted_.count(w)) {
      requeue_.push_back(w);
      ++requeued;
    }
  line["requeued"] = requeued;
  if (!d.steps.empty()) {
    // LMCleaner on the trajectory recorded so far: the store holds every step up to tau
    if (!writer_.due(tau)) writer_.checkpoint(trainer_, prov_);  // theta[tau] itself, so the walk's end is exact
    const Trajectory traj = Trajectory::read(writer_.dir());
    LmRun run(traj, stream_);
    const Correction c = lmcleaner_correction(run, d.steps, lo);
    const Certificate cert = certify(c, bo, no);
    std::vector<double> theta;
    run.seek(tau);
    run.params(theta);
    for (std::size_t i = 0; i < theta.size(); ++i) theta[i] -= c.v[i];
    const NoiseDraw draw = add_noise(theta, cert, no);
    if (draw.swamps())
      line["warning"] = fmt::format("the calibrated noise (norm {:.4g}) is larger than the weights: the run will not recover", draw.norm);
    // the corrected weights replace the live ones; the optimizer's moments are kept
    assign_trainable(trainer_.params().store, theta);
    writer_.checkpoint(trainer_, prov_);  // ckpt-<tau> now holds the corrected state later replays start from
    std::ofstream(std::filesystem::path(writer_.dir()) / "corrections.jsonl", std::ios::app)
        << nlohmann::json{{"step", tau}, {"request", r.id}}.dump() << '\n';
    nlohmann::json cj = cert.to_json(c);
    cj["noise_norm"] = draw.norm;
    line["certificate"] = cj;
    line["correction_norm"] = [&] {
      double n2 = 0;
      for (double x : c.v) n2 += x * x;
      return std::sqrt(n2);
    }();
    if (cert.kind != "none") {
      eps_.push_back(no.epsilon);
      delta_.push_back(no.delta);
      const auto [et, dt] = compose(eps_, delta_, s.value("delta_prime", 1e-5));
      line["composed_epsilon"] = et;  // advanced composition (the paper's theorem)
      line["composed_delta"] = dt;
      double basic = 0, basic_delta = 0;
      for (std::size_t i = 0; i < eps_.size(); ++i) basic += eps_[i], basic_delta += delta_[i];
      line["composed_epsilon_basic"] = basic;  // sum of epsilon_i with delta = sum of delta_i: tighter for few requests
      line["composed_delta_basic"] = basic_delta;
    }
  }
  line["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return line;
}

}  // namespace icmlkit::unlearn
