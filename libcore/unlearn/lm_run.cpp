#include "unlearn/lm_run.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "nn/adamw.hpp"
#include "nn/layers.hpp"
#include "util/error.hpp"

namespace icmlkit::unlearn {

namespace {

double norm2(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

nn::TrainOptions options_of(const Trajectory& t) {
  const nn::TrainOptions o = train_options_from_json(t.meta.train_options, t.dir + "/trajectory.json");
  if (o.optimizer != "sgd" && o.optimizer != "adamw")
    throw InputError(fmt::format("the trajectory's optimizer {} is not one LMCleaner linearises (sgd, adamw)", o.optimizer),
                     t.dir);
  nn::set_train_kernels(t.meta.kernels == "reference" ? nn::TrainKernels::reference : nn::TrainKernels::fast);
  return o;
}

}  // namespace

LmRun::LmRun(const Trajectory& traj, std::vector<int> stream)
    : traj_(traj),
      opt_(options_of(traj)),
      trainer_(lm::load_checkpoint(traj.checkpoint_path(traj.checkpoints.front())), std::move(stream), opt_),
      dbl_(trainer_.params().config),
      flt_(trainer_.params().config) {
  if (trainer_.windows() != traj.meta.windows)
    throw InputError(fmt::format("the corpus gives {} training windows, the trajectory recorded {}: not the corpus it was trained on",
                                 trainer_.windows(), traj.meta.windows),
                     traj.dir);
  for (const auto& p : trainer_.params().store.params) {
    if (p.frozen) continue;
    dim_ += p.numel();
    decay_.insert(decay_.end(), p.numel(), p.decay ? 1 : 0);
  }
  const std::int64_t first = traj.checkpoints.front();
  trainer_.load(traj.checkpoint_path(first));
  at_ = first;
}

double LmRun::lr(std::int64_t s) const {
  if (s < 0 || s >= end_step()) throw UsageError(fmt::format("step {} outside the trajectory's [0, {})", s, end_step()));
  return traj_.steps[std::size_t(s)].lr;
}

const std::vector<std::int64_t>& LmRun::batch() const {
  if (at_ >= end_step()) throw UsageError(fmt::format("no step {}: the trajectory ends at {}", at_, end_step()));
  return traj_.steps[std::size_t(at_)].windows;
}

void LmRun::seek(std::int64_t s) {
  if (s < 0 || s > end_step()) throw UsageError(fmt::format("step {} outside the trajectory's [0, {}]", s, end_step()));
  const std::int64_t c = traj_.checkpoint_before(s);
  if (off_trajectory_ || s < at_ || c > at_) {
    trainer_.load(traj_.checkpoint_path(c));
    at_ = c;
    off_trajectory_ = false;
    theta_ok_ = grad_ok_ = false;
  }
  while (at_ < s) advance(false);
}

void LmRun::advance(bool skip) {
  const StepRecord& r = traj_.steps.at(std::size_t(at_));
  if (skip || r.skipped) {
    trainer_.skip_step();
  } else {
    const nn::StepStats st = trainer_.step(r.windows);
    ++replayed_;
    if (!off_trajectory_ && st.loss != r.loss)
      throw InputError(fmt::format("replaying step {} gives loss {:.17g}, the trajectory recorded {:.17g}: the corpus, model or "
                                   "build differs from the recorded run",
                                   at_, st.loss, r.loss),
                       traj_.dir);
    if (st.lr != r.lr)
      throw InputError(fmt::format("step {}'s learning rate {} differs from the recorded {}", at_, st.lr, r.lr), traj_.dir);
  }
  if (skip) off_trajectory_ = true;  // later losses are the counterfactual's, not the recorded ones
  ++at_;
  theta_ok_ = grad_ok_ = false;
  // an online correction replaced the weights here: the recorded run continued from its checkpoint
  if (!off_trajectory_ && std::binary_search(traj_.corrections.begin(), traj_.corrections.end(), at_))
    trainer_.load(traj_.checkpoint_path(at_));
}

void LmRun::params(std::vector<double>& theta) {
  current_theta(theta_);
  theta = theta_;
}

std::vector<double> flatten_trainable(const nn::ParamStore<float>& store) {
  std::vector<double> theta;
  theta.reserve(std::size_t(store.trainable_numel()));
  for (const auto& p : store.params)
    if (!p.frozen) theta.insert(theta.end(), p.value.begin(), p.value.end());
  return theta;
}

void assign_trainable(nn::ParamStore<float>& store, const std::vector<double>& theta) {
  if (theta.size() != std::size_t(store.trainable_numel()))
    throw UsageError(fmt::format("a parameter vector of {} entries for a model of {}", theta.size(), store.trainable_numel()));
  std::size_t o = 0;
  for (auto& p : store.params) {
    if (p.frozen) continue;
    for (float& x : p.value) x = static_cast<float>(theta[o++]);
  }
}

void LmRun::current_theta(std::vector<double>& theta) {
  if (theta_ok_ && &theta == &theta_) return;
  theta = flatten_trainable(trainer_.params().store);
  if (&theta == &theta_) theta_ok_ = true;
}

void LmRun::set_params(const std::vector<double>& theta) {
  assign_trainable(trainer_.params().store, theta);
  off_trajectory_ = true;
  theta_ok_ = grad_ok_ = false;
}

template <class T>
void LmRun::Mirror<T>::load(const nn::LlamaParams<float>& from, const std::vector<double>& theta) {
  std::size_t o = 0;
  for (std::size_t i = 0; i < from.store.params.size(); ++i) {
    const auto& fp = from.store.params[i];
    auto& dp = p.store.params[i];
    if (fp.frozen) {
      for (std::size_t k = 0; k < fp.value.size(); ++k) dp.value[k] = static_cast<T>(fp.value[k]);
      continue;
    }
    for (std::size_t k = 0; k < dp.numel(); ++k) dp.value[k] = static_cast<T>(theta[o + k]);
    o += dp.numel();
  }
}

template <class T>
double LmRun::Mirror<T>::gradient(const nn::Windows& src, const std::vector<std::int64_t>& windows, int B, std::vector<double>& g,
                                  std::size_t dim) {
  if (windows.empty()) throw UsageError("a gradient over no windows");
  const int S = src.S;
  const double scale = 1.0 / (double(windows.size()) * S);
  p.store.zero_grad();
  double loss = 0;
  for (std::size_t a = 0; a < windows.size(); a += std::size_t(B)) {
    const std::size_t n = std::min(windows.size() - a, std::size_t(B));
    in.clear();
    tg.clear();
    for (std::size_t b = 0; b < n; ++b) src.get(windows[a + b], in, tg);
    loss += nn::llama_loss(p, in, tg, int(n), S, scale, c);
  }
  g.resize(dim);
  std::size_t o = 0;
  for (const auto& t : p.store.params) {
    if (t.frozen) continue;
    for (std::size_t k = 0; k < t.numel(); ++k) g[o + k] = t.grad[k];
    o += t.numel();
  }
  return loss * scale;
}

template <class T>
void LmRun::Mirror<T>::ggn(const nn::LlamaParams<float>& from, const nn::Windows& src, const std::vector<std::int64_t>& w, int B,
                           const std::vector<double>& theta, const std::vector<double>& v, double h, std::vector<double>& hv) {
  // per micro-batch: J v from the logits at theta +- h v, then J^T (H_out J v) by the backward
  const int S = src.S, V = p.config.vocab_size;
  const double scale = 1.0 / (double(w.size()) * S);
  const std::size_t dim = theta.size();
  std::vector<double> shifted(dim);
  auto load_shift = [&](double sign) {
    for (std::size_t i = 0; i < dim; ++i) shifted[i] = theta[i] + sign * h * v[i];
    load(from, shifted);
  };
  std::vector<T> lp, lm, l0;
  for (std::size_t a = 0; a < w.size(); a += std::size_t(B)) {
    const std::size_t n = std::min(w.size() - a, std::size_t(B));
    in.clear();
    tg.clear();
    for (std::size_t b = 0; b < n; ++b) src.get(w[a + b], in, tg);
    const int N = int(n) * S;
    load_shift(+1);
    nn::llama_loss(p, in, tg, int(n), S, 0.0, c, &lp);
    load_shift(-1);
    nn::llama_loss(p, in, tg, int(n), S, 0.0, c, &lm);
    load(from, theta);
    nn::llama_loss(p, in, tg, int(n), S, 0.0, c, &l0);
    std::vector<T>& wout = c.dlogits_in;
    wout.assign(std::size_t(N) * V, T(0));
    std::vector<double> prob(static_cast<std::size_t>(V));
    for (int r = 0; r < N; ++r) {
      if (tg[std::size_t(r)] < 0) continue;
      const std::size_t row = std::size_t(r) * V;
      double mx = -std::numeric_limits<double>::infinity(), sum = 0, pjv = 0;
      for (int j = 0; j < V; ++j) mx = std::max(mx, double(l0[row + j]));
      for (int j = 0; j < V; ++j) sum += prob[std::size_t(j)] = std::exp(double(l0[row + j]) - mx);
      for (int j = 0; j < V; ++j) {
        prob[std::size_t(j)] /= sum;
        pjv += prob[std::size_t(j)] * (double(lp[row + j]) - double(lm[row + j])) / (2 * h);
      }
      for (int j = 0; j < V; ++j) {  // (diag(p) - p p^T) J v, scaled to the batch mean
        const double jv = (double(lp[row + j]) - double(lm[row + j])) / (2 * h);
        wout[row + j] = static_cast<T>(prob[std::size_t(j)] * (jv - pjv) * scale);
      }
    }
    p.store.zero_grad();
    nn::llama_loss(p, in, tg, int(n), S, 1.0, c);
    c.dlogits_in.clear();
    std::size_t off = 0;
    for (const auto& t : p.store.params) {
      if (t.frozen) continue;
      for (std::size_t k = 0; k < t.numel(); ++k) hv[off + k] += double(t.grad[k]);
      off += t.numel();
    }
  }
}

double LmRun::gradient_at(const std::vector<double>& theta, const std::vector<std::int64_t>& windows, std::vector<double>& g) {
  const nn::Windows& src = trainer_.window_source();
  if (double_) {
    dbl_.load(trainer_.params(), theta);
    return dbl_.gradient(src, windows, opt_.batch, g, dim_);
  }
  flt_.load(trainer_.params(), theta);
  return flt_.gradient(src, windows, opt_.batch, g, dim_);
}

void LmRun::gradient(std::vector<double>& g) {
  if (!grad_ok_) {
    current_theta(theta_);
    gradient_at(theta_, batch(), grad_);
    grad_ok_ = true;
  }
  g = grad_;
}

double LmRun::windows_gradient(const std::vector<std::int64_t>& windows, std::vector<double>& g) {
  for (const std::int64_t w : windows)
    if (w < 0 || w >= trainer_.windows()) throw UsageError(fmt::format("window {} outside the stream's {}", w, trainer_.windows()));
  current_theta(theta_);
  return gradient_at(theta_, windows, g);
}

void LmRun::hvp(HvpMode mode, const std::vector<double>& v, std::vector<double>& hv) {
  std::vector<double> g;
  gradient(g);  // also leaves theta_ current
  if (mode == HvpMode::fisher) {
    double gv = 0;
    for (std::size_t i = 0; i < dim_; ++i) gv += g[i] * v[i];
    hv.resize(dim_);
    for (std::size_t i = 0; i < dim_; ++i) hv[i] = g[i] * gv;
    return;
  }
  const double vn = norm2(v);
  hv.assign(dim_, 0.0);
  if (vn == 0) return;
  const double h = (double_ ? 1e-4 : 1e-2) * std::max(1.0, norm2(theta_)) / vn;
  const std::vector<std::int64_t>& w = batch();
  if (mode == HvpMode::exact) {
    std::vector<double> shifted(dim_), gp, gm;
    for (std::size_t i = 0; i < dim_; ++i) shifted[i] = theta_[i] + h * v[i];
    gradient_at(shifted, w, gp);
    for (std::size_t i = 0; i < dim_; ++i) shifted[i] = theta_[i] - h * v[i];
    gradient_at(shifted, w, gm);
    for (std::size_t i = 0; i < dim_; ++i) hv[i] = (gp[i] - gm[i]) / (2 * h);
    return;
  }
  if (double_) dbl_.ggn(trainer_.params(), trainer_.window_source(), w, opt_.batch, theta_, v, h, hv);
  else flt_.ggn(trainer_.params(), trainer_.window_source(), w, opt_.batch, theta_, v, h, hv);
}

void LmRun::adam_direction(const std::vector<double>& g, std::vector<double>& dir, bool linear) {
  // The AdamW step's direction (before -lr) at this position with the moments of the step before:
  // linear: the frozen-preconditioner factor (1 - b1) / (1 - b1^t) D g of a curvature product g;
  // otherwise the full m_hat / (sqrt(v_hat) + eps) for gradient g.
  const nn::AdamWOptions& a = opt_.adam;
  const double t = double(trainer_.steps_done() + 1);
  const double bc1 = 1 - std::pow(a.beta1, t), bc2 = 1 - std::pow(a.beta2, t);
  std::vector<nn::StateBuffer> st = trainer_.optimizer().state();  // m/<tensor>, v/<tensor> per trainable tensor
  const std::size_t T = st.size() / 2;
  dir.resize(dim_);
  const std::vector<double>& gs = grad_;  // the step's own gradient sets the second moment
  std::size_t o = 0;
  for (std::size_t i = 0; i < T; ++i) {
    const std::vector<float>& m = *st[2 * i].data;
    const std::vector<float>& v = *st[2 * i + 1].data;
    for (std::size_t k = 0; k < m.size(); ++k, ++o) {
      const double vt = a.beta2 * v[k] + (1 - a.beta2) * gs[o] * gs[o];
      const double D = 1.0 / (std::sqrt(vt / bc2) + a.eps);
      dir[o] = linear ? (1 - a.beta1) / bc1 * D * g[o] : (a.beta1 * m[k] + (1 - a.beta1) * g[o]) / bc1 * D;
    }
  }
}

void LmRun::jacobian_product(HvpMode mode, const std::vector<double>& v, std::vector<double>& out) {
  if (v.size() != dim_) throw UsageError("vector size differs from the model's parameters");
  std::vector<double> hv;
  hvp(mode, v, hv);
  const double eta = lr(at_);
  const double wd = opt_.adam.weight_decay;
  if (opt_.optimizer == "adamw") adam_direction(hv, hv, true);
  out.resize(dim_);
  for (std::size_t i = 0; i < dim_; ++i) out[i] = -eta * (hv[i] + (decay_[i] ? wd * v[i] : 0.0));
}

void LmRun::update_difference(const std::vector<double>& v, std::vector<double>& out) {
  std::vector<double> g0, g1, shifted(dim_);
  gradient(g0);
  for (std::size_t i = 0; i < dim_; ++i) shifted[i] = theta_[i] - v[i];
  gradient_at(shifted, batch(), g1);
  const double eta = lr(at_), wd = opt_.adam.weight_decay;
  if (opt_.optimizer == "adamw") {
    std::vector<double> d0, d1;
    adam_direction(g0, d0, false);
    adam_direction(g1, d1, false);
    g0.swap(d0);
    g1.swap(d1);
  }
  out.resize(dim_);
  for (std::size_t i = 0; i < dim_; ++i) out[i] = -eta * (g0[i] - g1[i] + (decay_[i] ? wd * v[i] : 0.0));
}

std::string LmRun::assumption() const {
  if (opt_.optimizer == "sgd")
    return "SGD: the step map's Jacobian is exactly -eta (H + wd I); its Hessian product is the chosen mode's";
  return "AdamW: the step's preconditioner D = 1 / (sqrt(v_hat) + eps) and the momentum are frozen along the recorded "
         "trajectory; J = -eta ((1 - beta1) / (1 - beta1^t) D H + wd I), the deviation's effect on the moments ignored";
}

double LmRun::step_flop() const {
  return nn::training_flop_per_token(dbl_.p.config, opt_.seq_len) * double(opt_.batch) * opt_.seq_len * opt_.accum;
}

double LmRun::hvp_flop(HvpMode mode) const {
  switch (mode) {
    case HvpMode::fisher: return step_flop();             // one gradient (reused by every deviation at the step)
    case HvpMode::exact: return 2 * step_flop();          // two gradients
    case HvpMode::ggn: return step_flop() * 5.0 / 3.0;    // three forwards and one backward
  }
  return 0;
}

std::int64_t LmRun::clipped_steps_in(std::int64_t a, std::int64_t b) const {
  std::int64_t n = 0;
  for (std::int64_t s = std::max<std::int64_t>(0, a); s < std::min(b, end_step()); ++s) n += traj_.steps[std::size_t(s)].clipped;
  return n;
}

lm::Model LmRun::model() { return trainer_.model(); }

std::vector<double> document_losses(nn::LlamaParams<float>& params, const lm::Tokenizer& tok,
                                    const std::vector<std::string>& docs, int bos_id, int seq_len) {
  nn::TrainCache<float> cache;
  std::vector<double> out;
  std::vector<int> in, tg;
  for (const auto& d : docs) {
    std::vector<int> ids;
    if (bos_id >= 0) ids.push_back(bos_id);
    const auto t = tok.encode(d, "document");
    ids.insert(ids.end(), t.begin(), t.end());
    double sum = 0;
    std::int64_t n = 0;
    for (std::size_t a = 0; a + 1 < ids.size(); a += std::size_t(seq_len)) {
      const std::size_t len = std::min(std::size_t(seq_len), ids.size() - 1 - a);
      in.assign(ids.begin() + std::ptrdiff_t(a), ids.begin() + std::ptrdiff_t(a + len));
      tg.assign(ids.begin() + std::ptrdiff_t(a + 1), ids.begin() + std::ptrdiff_t(a + len + 1));
      sum += nn::llama_loss(params, in, tg, 1, int(len), 0.0, cache);
      n += std::int64_t(len);
    }
    out.push_back(n > 0 ? sum / double(n) : std::numeric_limits<double>::quiet_NaN());
  }
  return out;
}

double windows_loss(nn::LlamaParams<float>& params, const nn::Windows& windows, const std::vector<std::int64_t>& ids,
                    int batch) {
  if (ids.empty()) return std::numeric_limits<double>::quiet_NaN();
  nn::TrainCache<float> cache;
  std::vector<int> in, tg;
  double sum = 0;
  for (std::size_t a = 0; a < ids.size(); a += std::size_t(batch)) {
    const std::size_t n = std::min(ids.size() - a, std::size_t(batch));
    in.clear();
    tg.clear();
    for (std::size_t b = 0; b < n; ++b) windows.get(ids[a + b], in, tg);
    sum += nn::llama_loss(params, in, tg, int(n), windows.S, 0.0, cache);
  }
  return sum / (double(ids.size()) * windows.S);
}

}  // namespace icmlkit::unlearn
