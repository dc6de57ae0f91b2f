#include "cde/train.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "io/atomic_file.hpp"
#include "io/hdf5.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace icmlkit::cde {

namespace {
std::string case_name(size_t i) { return "series " + std::to_string(i + 1); }

int argmax(const Eigen::VectorXd& v) {
  Eigen::Index k = 0;
  v.maxCoeff(&k);
  return static_cast<int>(k);
}
}  // namespace

EpochStats train_epoch(Model& m, nn::ViewAdamW& opt, const Dataset& d, int batch, const SolveOptions& so, Rng& rng,
                       int threads) {
  Stopwatch sw;
  EpochStats es;
  const size_t n = d.series.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  const int T = std::max(1, threads);
  std::vector<Model> reps(static_cast<size_t>(T), m);
  std::vector<SampleOutput> outs(n);
  for (size_t start = 0; start < n; start += static_cast<size_t>(batch)) {
    const size_t end = std::min(n, start + static_cast<size_t>(batch));
    for (auto& r : reps) {
      auto dst = r.params(), src = m.params();
      for (size_t j = 0; j < dst.size(); ++j) std::copy(src[j].value, src[j].value + src[j].size, dst[j].value);
      r.zero_grad();
    }
    std::string err;
    bool failed = false;
    std::exception_ptr eptr;
    // Replica r takes a fixed contiguous chunk of the batch, so the gradient sums (and the
    // result) do not depend on how many OS threads OpenMP actually delivers.
    const long nb = static_cast<long>(end - start);
#pragma omp parallel for num_threads(T) schedule(static, 1)
    for (int r = 0; r < T; ++r) {
      const long lo = static_cast<long>(start) + nb * r / T, hi = static_cast<long>(start) + nb * (r + 1) / T;
      for (long i = lo; i < hi; ++i) {
        const size_t idx = order[static_cast<size_t>(i)];
        try {
          outs[static_cast<size_t>(i)] = reps[static_cast<size_t>(r)].run(d.series[idx], d.labels[idx], so, case_name(idx));
        } catch (...) {
#pragma omp critical
          if (!failed) { failed = true; eptr = std::current_exception(); }
        }
      }
    }
    if (failed) std::rethrow_exception(eptr);
    m.zero_grad();
    for (auto& r : reps) m.add_grad(r);
    const double scale = 1.0 / static_cast<double>(end - start);
    for (auto& p : m.params())
      for (Eigen::Index i = 0; i < p.size; ++i) p.grad[i] *= scale;
    opt.step();
  }
  for (size_t i = 0; i < n; ++i) {
    es.loss += outs[i].loss;
    es.nfe += static_cast<double>(outs[i].nfe);
    es.nfe_backward += static_cast<double>(outs[i].nfe_backward);
    es.train_accuracy += argmax(outs[i].logits) == d.labels[order[i]] ? 1.0 : 0.0;
  }
  const double dn = static_cast<double>(std::max<size_t>(1, n));
  es.loss /= dn;
  es.nfe /= dn;
  es.nfe_backward /= dn;
  es.train_accuracy /= dn;
  es.seconds = sw.seconds();
  return es;
}

EvalStats evaluate(Model& m, const Dataset& d, const SolveOptions& so, int threads) {
  Stopwatch sw;
  EvalStats ev;
  const size_t n = d.series.size();
  const int T = std::max(1, threads);
  std::vector<Model> reps(static_cast<size_t>(T), m);
  std::vector<SampleOutput> outs(n);
  bool failed = false;
  std::exception_ptr eptr;
#pragma omp parallel for num_threads(T) schedule(static)
  for (long i = 0; i < static_cast<long>(n); ++i) {
    try {
      outs[static_cast<size_t>(i)] = reps[static_cast<size_t>(omp_get_thread_num())].run(d.series[static_cast<size_t>(i)], -1, so, case_name(static_cast<size_t>(i)));
    } catch (...) {
#pragma omp critical
      if (!failed) { failed = true; eptr = std::current_exception(); }
    }
  }
  if (failed) std::rethrow_exception(eptr);
  ev.n = static_cast<long>(n);
  for (size_t i = 0; i < n; ++i) {
    const int p = argmax(outs[i].logits);
    ev.predictions.push_back(p);
    ev.accuracy += p == d.labels[i] ? 1.0 : 0.0;
    ev.nfe += static_cast<double>(outs[i].nfe);
    const Eigen::VectorXd& l = outs[i].logits;
    const double mx = l.maxCoeff();
    ev.loss += -(l(d.labels[i]) - mx - std::log((l.array() - mx).exp().sum()));
  }
  const double dn = static_cast<double>(std::max<size_t>(1, n));
  ev.accuracy /= dn;
  ev.nfe /= dn;
  ev.loss /= dn;
  ev.seconds = sw.seconds();
  return ev;
}

nlohmann::json to_json(const ModelConfig& c) {
  return {{"model", to_string(c.kind)},
          {"path", to_string(c.path)},
          {"kernel", to_string(c.smooth.kernel)},
          {"bandwidth", c.smooth.bandwidth},
          {"length_scale", c.smooth.length_scale},
          {"noise_std", c.smooth.noise_std},
          {"bandwidths", c.bandwidths},
          {"channels", c.channels},
          {"hidden", c.hidden},
          {"width", c.width},
          {"classes", c.classes}};
}

nlohmann::json to_json(const SolveOptions& s) {
  return {{"solver", s.method == Method::rk4 ? "rk4" : "dopri5"}, {"step", s.step}, {"rtol", s.rtol}, {"atol", s.atol}};
}

void save_checkpoint(const std::string& path, Model& m, const CheckpointInfo& info, const io::Provenance& prov) {
  nlohmann::json cfg = {{"format", "icmlkit-cde-checkpoint/1"},
                        {"model", to_json(info.model)},
                        {"solve", to_json(info.solve)},
                        {"time", {{"dt", info.time.dt}, {"time_channel", info.time.time_channel}}},
                        {"standardize", {{"mean", info.norm.mean}, {"std", info.norm.std}}},
                        {"class_names", info.class_names},
                        {"training", info.extra}};
  nlohmann::json shapes = nlohmann::json::object();
  for (auto& p : m.params()) shapes[p.name] = {p.rows, p.cols};
  cfg["shapes"] = shapes;
  io::AtomicFile out(path);
  {
    auto f = io::h5::create_file(out.temp_path().string());
    auto root = io::h5::open_group(f, "/", path);
    for (auto& p : m.params()) io::h5::write_doubles(root, p.name, std::vector<double>(p.value, p.value + p.size));
    io::h5::write_attr(root, "config", cfg.dump());
    root.reset();
    io::h5::write_provenance(f, prov);
    io::h5::close_file(f, path);
  }
  out.commit();
}

Model load_checkpoint(const std::string& path, CheckpointInfo& info) {
  auto f = io::h5::open_file(path);
  auto root = io::h5::open_group(f, "/", path);
  std::string text;
  if (!io::h5::read_attr(root, "config", text)) throw InputError("not a cde checkpoint (no config attribute)", path);
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(text);
    if (cfg.at("format") != "icmlkit-cde-checkpoint/1") throw InputError("unknown checkpoint format", path);
    const auto& mj = cfg.at("model");
    ModelConfig mc;
    mc.kind = parse_model_kind(mj.at("model").get<std::string>(), path);
    mc.path = parse_path_kind(mj.at("path").get<std::string>(), path);
    mc.smooth.kernel = parse_kernel_kind(mj.at("kernel").get<std::string>(), path);
    mc.smooth.bandwidth = mj.at("bandwidth").get<double>();
    mc.smooth.length_scale = mj.at("length_scale").get<double>();
    mc.smooth.noise_std = mj.at("noise_std").get<double>();
    mc.bandwidths = mj.at("bandwidths").get<std::vector<double>>();
    mc.channels = mj.at("channels").get<int>();
    mc.hidden = mj.at("hidden").get<int>();
    mc.width = mj.at("width").get<int>();
    mc.classes = mj.at("classes").get<int>();
    info.model = mc;
    const auto& sj = cfg.at("solve");
    info.solve.method = parse_method(sj.at("solver").get<std::string>(), path);
    info.solve.step = sj.at("step").get<double>();
    info.solve.rtol = sj.at("rtol").get<double>();
    info.solve.atol = sj.at("atol").get<double>();
    info.time.dt = cfg.at("time").at("dt").get<double>();
    info.time.time_channel = cfg.at("time").at("time_channel").get<bool>();
    info.norm.mean = cfg.at("standardize").at("mean").get<std::vector<double>>();
    info.norm.std = cfg.at("standardize").at("std").get<std::vector<double>>();
    info.class_names = cfg.at("class_names").get<std::vector<std::string>>();
    info.extra = cfg.value("training", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("malformed checkpoint config: ") + e.what(), path);
  } catch (const UsageError& e) {
    throw InputError("malformed checkpoint config: " + e.message(), path);
  }
  if (static_cast<int>(info.norm.mean.size()) != info.model.channels || static_cast<int>(info.class_names.size()) != info.model.classes)
    throw InputError("checkpoint config is inconsistent (channels or classes)", path);
  Model m(info.model);
  for (auto& p : m.params()) {
    const auto col = io::h5::read_column(root, p.name, path + ":/" + p.name);
    const auto* v = std::get_if<std::vector<double>>(&col);
    if (!v || static_cast<Eigen::Index>(v->size()) != p.size)
      throw InputError("parameter has the wrong size or type", path + ":/" + p.name);
    for (size_t i = 0; i < v->size(); ++i) {
      if (!std::isfinite((*v)[i])) throw InputError("non-finite parameter value", path + ":/" + p.name);
      p.value[i] = (*v)[i];
    }
  }
  return m;
}

}  // namespace icmlkit::cde
