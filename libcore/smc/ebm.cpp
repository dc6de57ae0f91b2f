#include "smc/ebm.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>
#include <vector>

namespace icmlkit::smc {
namespace {
using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
inline double sigmoid(double z) { return z >= 0 ? 1 / (1 + std::exp(-z)) : std::exp(z) / (1 + std::exp(z)); }
}  // namespace

MlpEnergy::MlpEnergy(int dim, int hidden, int depth) : dim_(dim), hidden_(hidden), depth_(depth) {
  if (dim < 1 || hidden < 1 || depth < 1) throw std::invalid_argument("MLP energy: dim, hidden and depth must be >= 1");
  n_params_ = hidden * dim + hidden + (depth - 1) * (hidden * hidden + hidden) + hidden + 1;
}

Eigen::VectorXd MlpEnergy::init(double init_std, Rng& rng) const {
  Eigen::VectorXd th = Eigen::VectorXd::Zero(n_params_);
  int off = 0, in = dim_;
  for (int l = 0; l <= depth_; ++l) {
    const int out = l < depth_ ? hidden_ : 1;
    for (int i = 0; i < out * in; ++i) th[off + i] = init_std * rng.normal();
    off += out * in + out;
    in = hidden_;
  }
  return th;
}

double MlpEnergy::energy(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  Eigen::VectorXd a = x;
  int off = 0, in = dim_;
  for (int l = 0; l < depth_; ++l) {
    Eigen::Map<const RowMat> W(theta.data() + off, hidden_, in);
    Eigen::Map<const Eigen::VectorXd> b(theta.data() + off + hidden_ * in, hidden_);
    Eigen::VectorXd z = W * a + b;
    for (Eigen::Index i = 0; i < z.size(); ++i) z[i] *= sigmoid(z[i]);
    a = std::move(z);
    off += hidden_ * in + hidden_;
    in = hidden_;
  }
  Eigen::Map<const Eigen::VectorXd> w(theta.data() + off, hidden_);
  return w.dot(a) + theta[off + hidden_];
}

double MlpEnergy::backward(const Eigen::VectorXd& theta, const Eigen::VectorXd& x, Eigen::VectorXd* gx,
                           Eigen::VectorXd* gtheta) const {
  // Forward, keeping each layer's input a_{l-1} and pre-activation z_l.
  std::vector<Eigen::VectorXd> acts(static_cast<std::size_t>(depth_) + 1), pre(static_cast<std::size_t>(depth_));
  std::vector<int> offs(static_cast<std::size_t>(depth_) + 1);
  acts[0] = x;
  int off = 0, in = dim_;
  for (int l = 0; l < depth_; ++l) {
    offs[static_cast<std::size_t>(l)] = off;
    Eigen::Map<const RowMat> W(theta.data() + off, hidden_, in);
    Eigen::Map<const Eigen::VectorXd> b(theta.data() + off + hidden_ * in, hidden_);
    auto& z = pre[static_cast<std::size_t>(l)];
    z = W * acts[static_cast<std::size_t>(l)] + b;
    Eigen::VectorXd a(hidden_);
    for (int i = 0; i < hidden_; ++i) a[i] = z[i] * sigmoid(z[i]);
    acts[static_cast<std::size_t>(l) + 1] = std::move(a);
    off += hidden_ * in + hidden_;
    in = hidden_;
  }
  offs[static_cast<std::size_t>(depth_)] = off;
  Eigen::Map<const Eigen::VectorXd> w(theta.data() + off, hidden_);
  const double e = w.dot(acts[static_cast<std::size_t>(depth_)]) + theta[off + hidden_];
  if (gtheta) {
    gtheta->resize(n_params_);
    gtheta->segment(off, hidden_) = acts[static_cast<std::size_t>(depth_)];
    (*gtheta)[off + hidden_] = 1;
  }
  // Backward: d = dE/da_l, then dE/dz_l = d * SiLU'(z_l), SiLU'(z) = s(z) (1 + z (1 - s(z))).
  Eigen::VectorXd d = w;
  for (int l = depth_ - 1; l >= 0; --l) {
    const auto& z = pre[static_cast<std::size_t>(l)];
    for (int i = 0; i < hidden_; ++i) {
      const double s = sigmoid(z[i]);
      d[i] *= s * (1 + z[i] * (1 - s));
    }
    const int lin = l == 0 ? dim_ : hidden_;
    const int lo = offs[static_cast<std::size_t>(l)];
    if (gtheta) {
      Eigen::Map<RowMat> GW(gtheta->data() + lo, hidden_, lin);
      GW.noalias() = d * acts[static_cast<std::size_t>(l)].transpose();
      gtheta->segment(lo + hidden_ * lin, hidden_) = d;
    }
    Eigen::Map<const RowMat> W(theta.data() + lo, hidden_, lin);
    Eigen::VectorXd dn = W.transpose() * d;
    d = std::move(dn);
  }
  if (gx) *gx = d;
  return e;
}

namespace {
// Rows per parallel work item.  The per-chunk products are coefficient-based (lazyProduct):
// Eigen's own GEMM threading inside these small products costs far more than it saves.
constexpr Eigen::Index kChunk = 1024;
}  // namespace

void MlpEnergy::chunk(const Eigen::VectorXd& theta, const Eigen::MatrixXd& X, Eigen::Index r0, Eigen::Index n,
                      const double* c, double* e, Eigen::MatrixXd* gx, Eigen::VectorXd* gtheta) const {
  using Mat = Eigen::MatrixXd;
  // acts[l] = a_l [n, width], pre[l] = z_{l+1} [n, hidden]
  std::vector<Mat> acts(static_cast<std::size_t>(depth_) + 1), sig(static_cast<std::size_t>(depth_)),
      pre(static_cast<std::size_t>(depth_));
  acts[0] = X.middleRows(r0, n);
  int off = 0, in = dim_;
  std::vector<int> offs(static_cast<std::size_t>(depth_) + 1);
  for (int l = 0; l < depth_; ++l) {
    const auto L = static_cast<std::size_t>(l);
    offs[L] = off;
    Eigen::Map<const RowMat> W(theta.data() + off, hidden_, in);
    Eigen::Map<const Eigen::RowVectorXd> b(theta.data() + off + hidden_ * in, hidden_);
    pre[L].noalias() = acts[L].lazyProduct(W.transpose());
    pre[L].rowwise() += b;
    sig[L] = (1.0 + (-pre[L].array()).exp()).inverse().matrix();
    acts[L + 1] = (pre[L].array() * sig[L].array()).matrix();
    off += hidden_ * in + hidden_;
    in = hidden_;
  }
  offs[static_cast<std::size_t>(depth_)] = off;
  Eigen::Map<const Eigen::VectorXd> w(theta.data() + off, hidden_);
  if (e) {
    Eigen::Map<Eigen::VectorXd> ev(e, n);
    ev.noalias() = acts[static_cast<std::size_t>(depth_)].lazyProduct(w);
    ev.array() += theta[off + hidden_];
  }
  if (!gx && !gtheta) return;
  // Upstream gradient per row: c_i (or 1) times dE/da_L = w.
  Eigen::VectorXd cv = c ? Eigen::VectorXd(Eigen::Map<const Eigen::VectorXd>(c, n)) : Eigen::VectorXd::Ones(n);
  Mat D = cv * w.transpose();
  if (gtheta) {
    gtheta->segment(off, hidden_).noalias() += acts[static_cast<std::size_t>(depth_)].transpose().lazyProduct(cv);
    (*gtheta)[off + hidden_] += cv.sum();
  }
  for (int l = depth_ - 1; l >= 0; --l) {
    const auto L = static_cast<std::size_t>(l);
    // dE/dz = D * SiLU'(z), SiLU'(z) = s (1 + z (1 - s))
    D.array() *= sig[L].array() * (1.0 + pre[L].array() * (1.0 - sig[L].array()));
    const int lin = l == 0 ? dim_ : hidden_;
    const int lo = offs[L];
    if (gtheta) {
      Eigen::Map<RowMat> GW(gtheta->data() + lo, hidden_, lin);
      GW.noalias() += D.transpose().lazyProduct(acts[L]);
      gtheta->segment(lo + hidden_ * lin, hidden_).noalias() += D.colwise().sum().transpose();
    }
    if (l > 0 || gx) {
      Eigen::Map<const RowMat> W(theta.data() + lo, hidden_, lin);
      Mat Dn = D.lazyProduct(W);
      D.swap(Dn);
    }
  }
  if (gx) gx->middleRows(r0, n) = D;
}

void MlpEnergy::energy_grad_x_batch(const Eigen::VectorXd& theta, const Eigen::MatrixXd& X, Eigen::VectorXd& e,
                                    Eigen::MatrixXd* gx) const {
  const Eigen::Index N = X.rows();
  e.resize(N);
  if (gx) gx->resize(N, dim_);
  const Eigen::Index chunks = (N + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(dynamic, 1) if (chunks > 1)
  for (Eigen::Index k = 0; k < chunks; ++k) {
    const Eigen::Index r0 = k * kChunk, n = std::min(kChunk, N - r0);
    chunk(theta, X, r0, n, nullptr, e.data() + r0, gx, nullptr);
  }
}

Eigen::VectorXd MlpEnergy::weighted_param_grad(const Eigen::VectorXd& theta, const Eigen::MatrixXd& X,
                                               const Eigen::VectorXd& c) const {
  const Eigen::Index N = X.rows();
  const Eigen::Index chunks = (N + kChunk - 1) / kChunk;
  Eigen::MatrixXd parts = Eigen::MatrixXd::Zero(n_params_, chunks);
#pragma omp parallel if (chunks > 1)
  {
    Eigen::VectorXd g(n_params_);
#pragma omp for schedule(dynamic, 1)
    for (Eigen::Index k = 0; k < chunks; ++k) {
      const Eigen::Index r0 = k * kChunk, n = std::min(kChunk, N - r0);
      g.setZero();
      chunk(theta, X, r0, n, c.data() + r0, nullptr, nullptr, &g);
      parts.col(k) = g;
    }
  }
  // Sum the chunks in order: the same result for any thread count.
  Eigen::VectorXd out = Eigen::VectorXd::Zero(n_params_);
  for (Eigen::Index k = 0; k < chunks; ++k) out += parts.col(k);
  return out;
}

Eigen::VectorXd train_ebm(const MlpEnergy& net, const Eigen::MatrixXd& data, const EbmTrainOptions& opt) {
  if (data.rows() < 1 || data.cols() != net.dim()) throw std::invalid_argument("EBM training: data must be [n, dim] with n >= 1");
  if (opt.iterations < 1 || opt.batch < 1 || opt.langevin_steps < 1 || !(opt.step_size > 0) || !(opt.learning_rate > 0))
    throw std::invalid_argument("EBM training: iterations, batch, Langevin steps, step size and learning rate must be positive");
  Rng rng(opt.seed);
  Eigen::VectorXd theta = net.init(opt.init_std, rng);
  const int P = net.n_params(), d = net.dim();
  const Eigen::Index buf_n = std::max<Eigen::Index>(data.rows(), opt.batch);
  Eigen::MatrixXd buffer(buf_n, d);
  for (Eigen::Index i = 0; i < buf_n; ++i)
    for (int j = 0; j < d; ++j) buffer(i, j) = rng.uniform(-opt.init_lim, opt.init_lim);
  Eigen::VectorXd m1 = Eigen::VectorXd::Zero(P), m2 = Eigen::VectorXd::Zero(P), g(P), e;
  Eigen::MatrixXd neg(opt.batch, d), pos(opt.batch, d), gx;
  const double sq = std::sqrt(2 * opt.step_size);
  std::vector<Eigen::Index> idx(static_cast<std::size_t>(opt.batch));
  for (int it = 0; it < opt.iterations; ++it) {
    // Negatives: buffer draws (some restarted uniformly), moved by clamped ULA (batched).
    for (int b = 0; b < opt.batch; ++b) {
      auto& i = idx[static_cast<std::size_t>(b)];
      i = static_cast<Eigen::Index>(rng.below(static_cast<std::uint64_t>(buf_n)));
      if (rng.uniform() < opt.reinit_prob)
        for (int j = 0; j < d; ++j) buffer(i, j) = rng.uniform(-opt.init_lim, opt.init_lim);
      neg.row(b) = buffer.row(i);
      pos.row(b) = data.row(static_cast<Eigen::Index>(rng.below(static_cast<std::uint64_t>(data.rows()))));
    }
    for (int s = 0; s < opt.langevin_steps; ++s) {
      net.energy_grad_x_batch(theta, neg, e, &gx);
      for (int b = 0; b < opt.batch; ++b)
        for (int j = 0; j < d; ++j)
          neg(b, j) = std::clamp(neg(b, j) - opt.step_size * gx(b, j) + sq * rng.normal(), -opt.clamp, opt.clamp);
    }
    for (int b = 0; b < opt.batch; ++b) buffer.row(idx[static_cast<std::size_t>(b)]) = neg.row(b);
    // Loss mean E(pos) - mean E(neg) + decay (mean E(pos)^2 + mean E(neg)^2): its parameter
    // gradient is sum_i c_i grad_theta E(x_i) with c = (+-1 + 2 decay E) / B.
    const double inv_b = 1.0 / opt.batch;
    net.energy_grad_x_batch(theta, neg, e, nullptr);
    g = net.weighted_param_grad(theta, neg, ((-1.0 + 2 * opt.energy_decay * e.array()) * inv_b).matrix());
    net.energy_grad_x_batch(theta, pos, e, nullptr);
    g += net.weighted_param_grad(theta, pos, ((1.0 + 2 * opt.energy_decay * e.array()) * inv_b).matrix());
    const double gn = g.norm();
    if (gn > opt.grad_clip) g *= opt.grad_clip / gn;
    // Adam (descent on the loss).
    m1 = 0.9 * m1 + 0.1 * g;
    m2 = 0.999 * m2 + 0.001 * g.cwiseAbs2();
    const double c1 = 1 - std::pow(0.9, it + 1), c2 = 1 - std::pow(0.999, it + 1);
    theta.array() -= opt.learning_rate * (m1.array() / c1) / ((m2.array() / c2).sqrt() + 1e-8);
  }
  return theta;
}

Eigen::MatrixXd make_circles(int n, double noise, double factor, double scale, Rng& rng) {
  if (n < 2) throw std::invalid_argument("make_circles: need n >= 2");
  const int n_out = n / 2, n_in = n - n_out;
  Eigen::MatrixXd X(n, 2);
  for (int i = 0; i < n_out; ++i) {
    const double t = 2 * std::numbers::pi * i / n_out;
    X(i, 0) = std::cos(t);
    X(i, 1) = std::sin(t);
  }
  for (int i = 0; i < n_in; ++i) {
    const double t = 2 * std::numbers::pi * i / n_in;
    X(n_out + i, 0) = factor * std::cos(t);
    X(n_out + i, 1) = factor * std::sin(t);
  }
  for (int i = 0; i < n; ++i) {
    X(i, 0) += noise * rng.normal();
    X(i, 1) += noise * rng.normal();
  }
  for (int c = 0; c < 2; ++c) {
    const double m = X.col(c).mean();
    const double sd = std::sqrt((X.col(c).array() - m).square().mean());
    X.col(c) = ((X.col(c).array() - m) / (sd + 1e-8) * scale).matrix();
  }
  return X;
}

Grid2d make_grid(double lim, int res) {
  if (res < 2 || !(lim > 0)) throw std::invalid_argument("grid: need res >= 2 and lim > 0");
  Grid2d g;
  g.x.resize(static_cast<Eigen::Index>(res) * res, 2);
  const double h = 2 * lim / (res - 1);
  for (int i = 0; i < res; ++i)
    for (int j = 0; j < res; ++j) {
      g.x(static_cast<Eigen::Index>(i) * res + j, 0) = -lim + h * j;
      g.x(static_cast<Eigen::Index>(i) * res + j, 1) = -lim + h * i;
    }
  g.cell = h * h;
  return g;
}

EbmRewardTuning::EbmRewardTuning(MlpEnergy net, Eigen::VectorXd theta0, double beta,
                                 std::function<double(const Eigen::VectorXd&)> reward)
    : net_(net), theta0_(std::move(theta0)), beta_(beta), reward_(std::move(reward)) {
  if (theta0_.size() != net_.n_params() || !(beta_ >= 0) || !reward_)
    throw std::invalid_argument("EBM reward tuning: need one value per parameter, beta >= 0 and a reward");
}

Eigen::VectorXd EbmRewardTuning::grad_x(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  Eigen::VectorXd gx;
  net_.backward(theta, x, &gx, nullptr);
  return gx;
}

Eigen::VectorXd EbmRewardTuning::grad_theta(const Eigen::VectorXd& theta, const Eigen::VectorXd& x) const {
  Eigen::VectorXd gx, gt;
  net_.backward(theta, x, &gx, &gt);
  return gt;
}

Eigen::VectorXd EbmRewardTuning::gradient(const Eigen::VectorXd& theta, const Eigen::MatrixXd& xs,
                                          const Eigen::ArrayXd& w) const {
  // ascent = -(E[Rg] - E[R]E[g]) - beta (E[delta g] - E[delta]E[g]) = -sum_i c_i g_i with
  // c_i = w_i (R_i - E[R]) + beta w_i (delta_i - E[delta]), delta = E_theta - E_0, g = grad_theta E:
  // one batched backward pass with upstream coefficients c.
  const Eigen::Index N = xs.rows();
  Eigen::VectorXd r(N), c(N), e, e0;
  for (Eigen::Index i = 0; i < N; ++i) r[i] = reward_(xs.row(i).transpose());
  const double er = (w.matrix().array() * r.array()).sum();
  c = (w * (r.array() - er)).matrix();
  if (beta_ > 0) {
    net_.energy_grad_x_batch(theta, xs, e, nullptr);
    net_.energy_grad_x_batch(theta0_, xs, e0, nullptr);
    const Eigen::ArrayXd d = (e - e0).array();
    const double ed = (w * d).sum();
    c.array() += beta_ * w * (d - ed);
  }
  return -net_.weighted_param_grad(theta, xs, c);
}

double EbmRewardTuning::estimate(const Eigen::VectorXd& /*theta*/, const Eigen::MatrixXd& xs, const Eigen::ArrayXd& w) const {
  double s = 0;
  for (Eigen::Index i = 0; i < xs.rows(); ++i) s += w[i] * reward_(xs.row(i).transpose());
  return s;
}

Eigen::ArrayXd EbmRewardTuning::grid_weights(const Eigen::VectorXd& theta, const Grid2d& grid) const {
  if (net_.dim() != 2) throw std::invalid_argument("grid quadrature needs a 2-D model");
  Eigen::ArrayXd lw(grid.x.rows());
#pragma omp parallel for schedule(static)
  for (Eigen::Index i = 0; i < grid.x.rows(); ++i) lw[i] = -net_.energy(theta, grid.x.row(i).transpose());
  const double m = lw.maxCoeff();
  Eigen::ArrayXd w = (lw - m).exp();
  return w / w.sum();
}

EbmRewardTuning::Summary EbmRewardTuning::summarise(const Eigen::VectorXd& theta, const Grid2d& grid) const {
  const Eigen::ArrayXd w = grid_weights(theta, grid), w0 = grid_weights(theta0_, grid);
  Summary s;
  for (Eigen::Index i = 0; i < grid.x.rows(); ++i) {
    s.mean_reward += w[i] * reward(grid.x.row(i).transpose());
    if (w[i] > 0) s.kl += w[i] * (std::log(w[i]) - std::log(std::max(w0[i], 1e-300)));
  }
  s.objective = s.mean_reward - beta_ * s.kl;
  return s;
}

Eigen::MatrixXd EbmRewardTuning::sample_grid(const Eigen::VectorXd& theta, const Grid2d& grid, int n, Rng& rng) const {
  const Eigen::ArrayXd w = grid_weights(theta, grid);
  std::vector<double> cdf(static_cast<std::size_t>(w.size()));
  double c = 0;
  for (Eigen::Index i = 0; i < w.size(); ++i) cdf[static_cast<std::size_t>(i)] = (c += w[i]);
  const double h = std::sqrt(grid.cell);
  Eigen::MatrixXd xs(n, 2);
  for (int k = 0; k < n; ++k) {
    const double u = rng.uniform() * c;
    auto it = std::lower_bound(cdf.begin(), cdf.end(), u);
    const auto i = std::min<Eigen::Index>(it - cdf.begin(), w.size() - 1);
    xs(k, 0) = grid.x(i, 0) + h * (rng.uniform() - 0.5);
    xs(k, 1) = grid.x(i, 1) + h * (rng.uniform() - 0.5);
  }
  return xs;
}

double EbmRewardTuning::optimal_reward(double p0, double beta) {
  // p e^{1/b} / (p e^{1/b} + 1 - p), written without overflow for small beta.
  if (p0 <= 0) return 0;
  return 1 / (1 + (1 - p0) / p0 * std::exp(-1 / beta));
}

}  // namespace icmlkit::smc

namespace icmlkit::smc {

namespace {
// Runs `steps` ULA steps of chain `c` (seeded per chain) from x in place; returns the sum of R
// over the states after `burn_in` steps.
double run_chain(const EbmRewardTuning* p, const Problem& prob, const Eigen::VectorXd& theta, Eigen::VectorXd& x,
                 int steps, int burn_in, double step_size, std::uint64_t seed) {
  Rng rng(seed);
  Eigen::VectorXd g(x.size());
  const double sq = std::sqrt(2 * step_size);
  double sum = 0;
  for (int s = 0; s < steps; ++s) {
    prob.energy_grad_x(theta, x, g);
    for (Eigen::Index j = 0; j < x.size(); ++j) x[j] += -step_size * g[j] + sq * rng.normal();
    if (p && s >= burn_in) sum += p->reward(x);
  }
  return sum;
}
}  // namespace

Eigen::MatrixXd ula_chains(const Problem& p, const Eigen::VectorXd& theta, const Eigen::MatrixXd& x, int steps,
                           double step_size, std::uint64_t seed) {
  if (steps < 0 || !(step_size > 0) || x.cols() != p.dim_x()) throw std::invalid_argument("ULA chains: need steps >= 0, step_size > 0, [C, dim] starts");
  Eigen::MatrixXd out = x;
#pragma omp parallel for schedule(dynamic, 1)
  for (Eigen::Index c = 0; c < x.rows(); ++c) {
    Eigen::VectorXd xc = x.row(c).transpose();
    run_chain(nullptr, p, theta, xc, steps, 0, step_size, derive_seed(seed, static_cast<std::uint64_t>(c)));
    out.row(c) = xc.transpose();
  }
  return out;
}

double chain_mean_reward(const EbmRewardTuning& p, const Eigen::VectorXd& theta, const Eigen::MatrixXd& x_init,
                         int steps, int burn_in, double step_size, std::uint64_t seed) {
  if (steps < 1 || burn_in < 0 || burn_in >= steps || !(step_size > 0) || x_init.rows() < 1 || x_init.cols() != p.dim_x())
    throw std::invalid_argument("chain evaluation: need 0 <= burn_in < steps, step_size > 0 and [chains, dim] starts");
  const Eigen::Index C = x_init.rows();
  Eigen::ArrayXd sums = Eigen::ArrayXd::Zero(C);
#pragma omp parallel for schedule(dynamic, 1)
  for (Eigen::Index c = 0; c < C; ++c) {
    Eigen::VectorXd x = x_init.row(c).transpose();
    sums[c] = run_chain(&p, p, theta, x, steps, burn_in, step_size, derive_seed(seed, static_cast<std::uint64_t>(c)));
  }
  return sums.sum() / (static_cast<double>(C) * (steps - burn_in));
}

}  // namespace icmlkit::smc
