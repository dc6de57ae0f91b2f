#include "unlearn/least_squares.hpp"

#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "util/error.hpp"

namespace icmlkit::unlearn {

namespace {

Eigen::Map<const Eigen::VectorXd> view(const std::vector<double>& x) {
  return {x.data(), static_cast<Eigen::Index>(x.size())};
}

}  // namespace

LinearModelRun::LinearModelRun(const Eigen::MatrixXd& A, Eigen::VectorXd b, Eigen::VectorXd theta0,
                               std::vector<std::vector<int>> batches, std::vector<double> lrs,
                               double weight_decay, std::int64_t checkpoint_every)
    : At_(A.transpose()), b_(std::move(b)), batches_(std::move(batches)), lrs_(std::move(lrs)),
      lambda_(weight_decay), every_(checkpoint_every), theta_(std::move(theta0)) {
  if (b_.size() != A.rows())
    throw InputError(fmt::format("{} targets for {} samples", b_.size(), A.rows()));
  if (theta_.size() != A.cols())
    throw InputError(fmt::format("theta0 has {} entries for {} features", theta_.size(), A.cols()));
  if (lrs_.size() != batches_.size())
    throw InputError(fmt::format("{} learning rates for {} steps", lrs_.size(), batches_.size()));
  if (!(lambda_ >= 0)) throw InputError(fmt::format("weight decay {} is not >= 0", lambda_));
  if (every_ < 1) throw InputError(fmt::format("checkpoint interval {} is not >= 1", every_));
  for (std::size_t s = 0; s < batches_.size(); ++s) {
    if (batches_[s].empty()) throw InputError(fmt::format("step {} has an empty batch", s));
    for (int i : batches_[s])
      if (i < 0 || i >= A.rows()) throw InputError(fmt::format("step {}: sample {} outside [0, {})", s, i, A.rows()));
  }
  const Eigen::Index p = A.cols();
  u_.resize(p);
  g_.resize(p);
  u2_.resize(p);
  g2_.resize(p);
  hv_.resize(p);
}

void LinearModelRun::record() {
  const std::int64_t tau = end_step();
  pos_ = 0;
  for (; pos_ < tau; ++pos_) {
    if (pos_ % every_ == 0) states_[pos_] = theta_;
    update_at(theta_, u_, g_);
    theta_ += u_;
  }
  states_[tau] = theta_;
  theta_ = states_.at(0);
  pos_ = 0;
  on_trajectory_ = true;
  g_valid_ = false;
}

void LinearModelRun::update_at(const Eigen::VectorXd& theta, Eigen::VectorXd& u, Eigen::VectorXd& g) const {
  const auto& batch = batches_[static_cast<std::size_t>(pos_)];
  g.setZero();
  double d1 = 0, d2 = 0;
  for (int i : batch) {
    loss_derivatives(At_.col(i).dot(theta), b_[i], d1, d2);
    g += d1 * At_.col(i);
  }
  g /= static_cast<double>(batch.size());
  u = -lrs_[static_cast<std::size_t>(pos_)] * (g + lambda_ * theta);
}

const Eigen::VectorXd& LinearModelRun::cached_gradient() {
  if (!g_valid_) {
    update_at(theta_, u_, g_);
    g_valid_ = true;
  }
  return g_;
}

double LinearModelRun::lr(std::int64_t s) const {
  if (s < 0 || s >= end_step()) throw InputError(fmt::format("step {} outside [0, {})", s, end_step()));
  return lrs_[static_cast<std::size_t>(s)];
}

void LinearModelRun::seek(std::int64_t s) {
  if (s < 0 || s > end_step()) throw InputError(fmt::format("cannot seek to step {} of a run of {} steps", s, end_step()));
  auto base = std::prev(states_.upper_bound(s));  // states_ holds 0, so this is valid
  if (!on_trajectory_ || pos_ > s || s - pos_ > s - base->first) {
    theta_ = base->second;
    pos_ = base->first;
    on_trajectory_ = true;
    g_valid_ = false;
  }
  while (pos_ < s) advance();
}

void LinearModelRun::advance(bool skip) {
  if (pos_ >= end_step()) throw RuntimeError(fmt::format("cannot advance past the last step {}", end_step()));
  if (skip) {
    on_trajectory_ = false;
  } else {
    update_at(theta_, u_, g_);
    theta_ += u_;
  }
  ++pos_;
  g_valid_ = false;
}

void LinearModelRun::params(std::vector<double>& theta) { theta.assign(theta_.data(), theta_.data() + theta_.size()); }

void LinearModelRun::set_params(const std::vector<double>& theta) {
  if (theta.size() != dim()) throw InputError(fmt::format("{} parameters for a model of {}", theta.size(), dim()));
  theta_ = view(theta);
  on_trajectory_ = false;
  g_valid_ = false;
}

void LinearModelRun::jacobian_product(HvpMode mode, const std::vector<double>& v, std::vector<double>& out) {
  if (v.size() != dim()) throw InputError(fmt::format("{} entries for a model of {}", v.size(), dim()));
  if (pos_ >= end_step()) throw RuntimeError("no step to linearise at the end of the run");
  const auto vv = view(v);
  const double eta = lrs_[static_cast<std::size_t>(pos_)];
  if (mode == HvpMode::fisher) {
    const Eigen::VectorXd& g = cached_gradient();
    hv_ = g * g.dot(vv);
  } else {
    const auto& batch = batches_[static_cast<std::size_t>(pos_)];
    hv_.setZero();
    double d1 = 0, d2 = 0;
    for (int i : batch) {
      loss_derivatives(At_.col(i).dot(theta_), b_[i], d1, d2);
      hv_ += (d2 * At_.col(i).dot(vv)) * At_.col(i);
    }
    hv_ /= static_cast<double>(batch.size());
  }
  out.resize(v.size());
  Eigen::Map<Eigen::VectorXd>(out.data(), vv.size()) = -eta * (hv_ + lambda_ * vv);
}

void LinearModelRun::update_difference(const std::vector<double>& v, std::vector<double>& out) {
  if (v.size() != dim()) throw InputError(fmt::format("{} entries for a model of {}", v.size(), dim()));
  if (pos_ >= end_step()) throw RuntimeError("no step to evaluate at the end of the run");
  update_at(theta_, u_, g_);
  g_valid_ = true;
  update_at(theta_ - view(v), u2_, g2_);
  out.resize(v.size());
  Eigen::Map<Eigen::VectorXd>(out.data(), u_.size()) = u_ - u2_;
}

void LinearModelRun::gradient(std::vector<double>& g) {
  if (pos_ >= end_step()) throw RuntimeError("no step's batch at the end of the run");
  const Eigen::VectorXd& gr = cached_gradient();
  g.assign(gr.data(), gr.data() + gr.size());
}

std::string LinearModelRun::assumption() const {
  return fmt::format("plain SGD with L2 weight decay {}: J_s = -eta_s (H_s + lambda I) is the step map's exact Jacobian", lambda_);
}

double LinearModelRun::step_flop() const {
  if (batches_.empty()) return 0;
  return 4.0 * static_cast<double>(batches_.front().size()) * static_cast<double>(dim());
}

double LinearModelRun::hvp_flop(HvpMode mode) const {
  return mode == HvpMode::fisher ? 4.0 * static_cast<double>(dim()) : step_flop();
}

LeastSquaresRun::LeastSquaresRun(const Eigen::MatrixXd& A, Eigen::VectorXd b, Eigen::VectorXd theta0,
                                 std::vector<std::vector<int>> batches, std::vector<double> lrs,
                                 double weight_decay, std::int64_t checkpoint_every)
    : LinearModelRun(A, std::move(b), std::move(theta0), std::move(batches), std::move(lrs), weight_decay,
                     checkpoint_every) {
  record();
}

void LeastSquaresRun::loss_derivatives(double z, double y, double& d1, double& d2) const {
  d1 = z - y;
  d2 = 1;
}

LogisticRun::LogisticRun(const Eigen::MatrixXd& A, Eigen::VectorXd b, Eigen::VectorXd theta0,
                         std::vector<std::vector<int>> batches, std::vector<double> lrs, double weight_decay,
                         std::int64_t checkpoint_every)
    : LinearModelRun(A, b, std::move(theta0), std::move(batches), std::move(lrs), weight_decay, checkpoint_every) {
  for (Eigen::Index i = 0; i < b.size(); ++i)
    if (b[i] != 0 && b[i] != 1) throw InputError(fmt::format("label {} of sample {} is not 0 or 1", b[i], i));
  record();
}

void LogisticRun::loss_derivatives(double z, double y, double& d1, double& d2) const {
  const double p = z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z));
  d1 = p - y;
  d2 = p * (1 - p);
}

}  // namespace icmlkit::unlearn
