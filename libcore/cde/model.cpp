#include "cde/model.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include "util/error.hpp"

namespace icmlkit::cde {

using Mat = Eigen::MatrixXd;
using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

ModelKind parse_model_kind(const std::string& s, const std::string& flag) {
  if (s == "cde") return ModelKind::cde;
  if (s == "mv-cde") return ModelKind::mv_cde;
  if (s == "mvc-cde") return ModelKind::mvc_cde;
  throw UsageError("unknown model '" + s + "' (cde, mv-cde, mvc-cde)", flag);
}

std::string to_string(ModelKind k) {
  switch (k) {
    case ModelKind::cde: return "cde";
    case ModelKind::mv_cde: return "mv-cde";
    case ModelKind::mvc_cde: return "mvc-cde";
  }
  return "?";
}

// The joint vector field of the H heads of one sample: F(z)_h = f_h(z_h) X_h'(t).
class CdeField final : public VectorField {
 public:
  CdeField(Model& m, std::vector<Path*> paths) : m_(m), paths_(std::move(paths)) {
    H_ = static_cast<int>(paths_.size());
    hid_ = m.cfg_.hidden;
    C_ = m.cfg_.channels;
    const auto W = m.f1_[0].out();
    a1_.resize(W, 1); ga1_.resize(W, 1);
    o_.resize(hid_ * C_, 1); go_.resize(hid_ * C_, 1);
    dx_.resize(C_); gdx_.resize(C_);
    gz_.resize(hid_, 1);
  }
  int dim() const override { return H_ * hid_; }
  void eval(double t, int side, const double* z, double* dz) override {
    for (int h = 0; h < H_; ++h) {
      forward_head(h, t, side, z + h * hid_);
      Eigen::Map<Eigen::VectorXd>(dz + h * hid_, hid_).noalias() = Eigen::Map<const RowMat>(o_.data(), hid_, C_) * dx_;
    }
  }
  void vjp(double t, int side, const double* z, const double* g, double* gz) override {
    for (int h = 0; h < H_; ++h) {
      forward_head(h, t, side, z + h * hid_);
      Eigen::Map<const Eigen::VectorXd> gh(g + h * hid_, hid_);
      Eigen::Map<RowMat>(go_.data(), hid_, C_).noalias() = gh * dx_.transpose();
      if (paths_[h]->weighted()) {
        gdx_.noalias() = Eigen::Map<const RowMat>(o_.data(), hid_, C_).transpose() * gh;
        paths_[h]->backward_derivative(t, side, gdx_.data());
      }
      nn::tanh_backward(go_, o_);
      Eigen::Ref<Mat> ga1(ga1_);
      m_.f2_[h].backward(a1_, go_, &ga1);
      nn::relu_backward(ga1_, a1_);
      Eigen::Map<const Mat> zh(z + h * hid_, hid_, 1);
      Eigen::Ref<Mat> gzr(gz_);
      m_.f1_[h].backward(zh, ga1_, &gzr);
      Eigen::Map<Eigen::VectorXd>(gz + h * hid_, hid_) = gz_.col(0);
    }
  }

 private:
  void forward_head(int h, double t, int side, const double* z) {
    m_.f1_[h].forward(Eigen::Map<const Mat>(z, hid_, 1), a1_);
    nn::relu_inplace(a1_);
    m_.f2_[h].forward(a1_, o_);
    nn::tanh_inplace(o_);
    paths_[h]->derivative(t, side, dx_.data());
  }
  Model& m_;
  std::vector<Path*> paths_;
  int H_, hid_, C_;
  Mat a1_, ga1_, o_, go_, gz_;
  Eigen::VectorXd dx_, gdx_;
};

namespace {

// im2col for a kernel-3 Conv1d with replicate padding: X [Cin, L] -> U [3 Cin, L].
Mat im2col3(const Mat& X) {
  const Eigen::Index C = X.rows(), L = X.cols();
  Mat U(3 * C, L);
  for (Eigen::Index i = 0; i < L; ++i)
    for (int k = 0; k < 3; ++k) U.block(k * C, i, C, 1) = X.col(std::clamp<Eigen::Index>(i + k - 1, 0, L - 1));
  return U;
}
// Adjoint of im2col3.
Mat col2im3(const Mat& gU, Eigen::Index C) {
  const Eigen::Index L = gU.cols();
  Mat gX = Mat::Zero(C, L);
  for (Eigen::Index i = 0; i < L; ++i)
    for (int k = 0; k < 3; ++k) gX.col(std::clamp<Eigen::Index>(i + k - 1, 0, L - 1)) += gU.block(k * C, i, C, 1);
  return gX;
}

}  // namespace

Model::Model(ModelConfig cfg) : cfg_(std::move(cfg)) {
  if (cfg_.channels < 1 || cfg_.hidden < 1 || cfg_.width < 1 || cfg_.classes < 2)
    throw UsageError("model sizes must be >= 1 (and >= 2 classes)", "model");
  const int C = cfg_.channels, hid = cfg_.hidden;
  if (cfg_.kind != ModelKind::cde) {
    if (cfg_.path != PathKind::kernel && cfg_.path != PathKind::gp)
      throw UsageError("multi-view models need a kernel or gp path", "--path");
    if (cfg_.bandwidths.empty()) throw UsageError("multi-view models need at least one bandwidth (one per head)", "--bandwidths");
    for (double b : cfg_.bandwidths)
      if (!(b > 0)) throw UsageError("bandwidths must be > 0", "--bandwidths");
  }
  const int H = cfg_.heads();
  const int W = cfg_.kind == ModelKind::cde ? cfg_.width : hid;
  initial_ = nn::Linear(C, hid);
  for (int h = 0; h < H; ++h) {
    f1_.emplace_back(hid, W);
    f2_.emplace_back(W, hid * C);
  }
  readout_ = nn::Linear(H * hid, cfg_.classes);
  if (cfg_.kind == ModelKind::mv_cde) {
    q_ = Mat::Zero(H, C);
    gq_ = Mat::Zero(H, C);
  }
  if (cfg_.kind == ModelKind::mvc_cde) {
    conv1_ = nn::Linear(3 * C, hid);
    conv2_ = nn::Linear(3 * hid, hid);
    to_heads_ = nn::Linear(hid, H);
  }
}

void Model::init(Rng& rng) {
  initial_.init(rng);
  for (size_t h = 0; h < f1_.size(); ++h) {
    f1_[h].init(rng);
    f2_[h].init(rng);
  }
  readout_.init(rng);
  for (Eigen::Index j = 0; j < q_.cols(); ++j)
    for (Eigen::Index i = 0; i < q_.rows(); ++i) q_(i, j) = rng.normal();
  if (cfg_.kind == ModelKind::mvc_cde) {
    conv1_.init(rng);
    conv2_.init(rng);
    to_heads_.init(rng);
  }
}

std::vector<nn::ParamRef> Model::params() {
  std::vector<nn::ParamRef> p;
  initial_.params("initial", p);
  for (size_t h = 0; h < f1_.size(); ++h) {
    f1_[h].params("head" + std::to_string(h) + ".f1", p);
    f2_[h].params("head" + std::to_string(h) + ".f2", p);
  }
  readout_.params("readout", p);
  if (cfg_.kind == ModelKind::mv_cde) p.push_back({"queries", q_.data(), gq_.data(), q_.size(), q_.rows(), q_.cols()});
  if (cfg_.kind == ModelKind::mvc_cde) {
    conv1_.params("conv1", p);
    conv2_.params("conv2", p);
    to_heads_.params("to_heads", p);
  }
  return p;
}

void Model::zero_grad() {
  for (auto& p : params()) std::fill(p.grad, p.grad + p.size, 0.0);
}

void Model::add_grad(Model& other) {
  auto a = params(), b = other.params();
  for (size_t j = 0; j < a.size(); ++j)
    for (Eigen::Index i = 0; i < a[j].size; ++i) a[j].grad[i] += b[j].grad[i];
}

long Model::num_params() {
  long n = 0;
  for (auto& p : params()) n += static_cast<long>(p.size);
  return n;
}

void Model::scores(const Series& s, Mat& xz, Mat& S, std::vector<Mat>* acts) {
  const Eigen::Index L = s.x.rows();
  const int C = cfg_.channels;
  xz = s.x.unaryExpr([](double v) { return std::isfinite(v) ? v : 0.0; });
  if (cfg_.kind == ModelKind::mv_cde) {
    S.noalias() = q_ * xz.transpose() / std::sqrt(static_cast<double>(C));
    return;
  }
  Mat U1 = im2col3(xz.transpose());
  Mat A1(cfg_.hidden, L);
  conv1_.forward(U1, A1);
  nn::relu_inplace(A1);
  Mat U2 = im2col3(A1);
  Mat A2(cfg_.hidden, L);
  conv2_.forward(U2, A2);
  nn::relu_inplace(A2);
  S.resize(cfg_.heads(), L);
  to_heads_.forward(A2, S);
  if (acts) *acts = {std::move(U1), std::move(A1), std::move(U2), std::move(A2)};
}

namespace {
// Rows with at least one observed non-time value.
std::vector<char> observed_rows(const Series& s) {
  std::vector<char> obs(static_cast<size_t>(s.x.rows()), 0);
  for (Eigen::Index i = 0; i < s.x.rows(); ++i)
    for (Eigen::Index c = s.time_channel ? 1 : 0; c < s.x.cols(); ++c)
      if (std::isfinite(s.x(i, c))) obs[static_cast<size_t>(i)] = 1;
  return obs;
}
void masked_softmax(Mat& S, const std::vector<char>& obs, const std::string& where) {
  for (Eigen::Index h = 0; h < S.rows(); ++h) {
    double mx = -INFINITY;
    for (Eigen::Index i = 0; i < S.cols(); ++i)
      if (obs[static_cast<size_t>(i)]) mx = std::max(mx, S(h, i));
    if (!std::isfinite(mx)) throw InputError("series has no observed value", where);
    double sum = 0;
    for (Eigen::Index i = 0; i < S.cols(); ++i) {
      S(h, i) = obs[static_cast<size_t>(i)] ? std::exp(S(h, i) - mx) : 0.0;
      sum += S(h, i);
    }
    S.row(h) /= sum;
  }
}
}  // namespace

Eigen::MatrixXd Model::attention(const Series& s) {
  if (cfg_.kind == ModelKind::cde) return {};
  Mat xz, S;
  scores(s, xz, S, nullptr);
  masked_softmax(S, observed_rows(s), "");
  return S;
}

SampleOutput Model::run(const Series& s, int label, const SolveOptions& opt, const std::string& where) {
  const int H = cfg_.heads(), hid = cfg_.hidden, C = cfg_.channels;
  if (s.x.cols() != C)
    throw InputError("series has " + std::to_string(s.x.cols()) + " channels, the model " + std::to_string(C), where);
  const bool mv = cfg_.kind != ModelKind::cde;
  const Eigen::Index L = s.x.rows();
  Mat xz, A;
  std::vector<Mat> acts;
  std::vector<char> obs;
  if (mv) {
    scores(s, xz, A, &acts);
    obs = observed_rows(s);
    masked_softmax(A, obs, where);
  }
  std::vector<Eigen::VectorXd> w(static_cast<size_t>(H));
  std::vector<std::unique_ptr<Path>> paths;
  std::vector<Path*> raw;
  std::vector<double> jumps;
  for (int h = 0; h < H; ++h) {
    SmoothOptions so = cfg_.smooth;
    if (mv) {
      (cfg_.path == PathKind::kernel ? so.bandwidth : so.length_scale) = cfg_.bandwidths[static_cast<size_t>(h)];
      w[static_cast<size_t>(h)] = A.row(h).transpose();
    }
    paths.push_back(make_path(cfg_.path, s, so, mv ? &w[static_cast<size_t>(h)] : nullptr, where));
    raw.push_back(paths.back().get());
    for (double j : paths.back()->jump_times()) jumps.push_back(j);
  }
  const double t0 = raw[0]->t0(), t1 = raw[0]->t1();
  Mat X0(C, H), Z(hid, H);
  for (int h = 0; h < H; ++h) raw[static_cast<size_t>(h)]->value(t0, X0.col(h).data());
  initial_.forward(X0, Z);
  Eigen::VectorXd z = Eigen::Map<Eigen::VectorXd>(Z.data(), H * hid);
  CdeField field(*this, raw);
  SolveOptions o = opt;
  o.jump_times = std::move(jumps);
  Tape tape;
  SampleOutput out;
  SolveStats st;
  try {
    st = solve(field, z, t0, t1, o, label >= 0 ? &tape : nullptr);
  } catch (const RuntimeError& e) {
    // name the series as well as the solver position
    throw RuntimeError(std::string(e.what()), where.empty() ? e.where() : where + ", " + e.where());
  }
  out.nfe = st.nfe;
  Mat logits(cfg_.classes, 1);
  readout_.forward(Eigen::Map<const Mat>(z.data(), H * hid, 1), logits);
  out.logits = logits.col(0);
  if (label < 0) return out;
  if (label >= cfg_.classes) throw InputError("label out of range", where);
  Eigen::VectorXd gl(cfg_.classes);
  out.loss = nn::softmax_cross_entropy(out.logits, label, gl);
  Mat gz(H * hid, 1);
  Eigen::Ref<Mat> gzr(gz);
  readout_.backward(Eigen::Map<const Mat>(z.data(), H * hid, 1), gl, &gzr);
  Eigen::VectorXd g = gz.col(0);
  out.nfe_backward = backprop(field, tape, o, g);
  Mat gX0(C, H);
  Eigen::Ref<Mat> gX0r(gX0);
  initial_.backward(X0, Eigen::Map<const Mat>(g.data(), hid, H), &gX0r);
  if (!mv) return out;
  Mat gS(H, L);
  for (int h = 0; h < H; ++h) {
    raw[static_cast<size_t>(h)]->backward_value(t0, gX0.col(h).data());
    const Eigen::VectorXd gw = raw[static_cast<size_t>(h)]->weight_gradient();
    const Eigen::VectorXd a = A.row(h).transpose();
    const double dot = a.dot(gw);
    gS.row(h) = (a.array() * (gw.array() - dot)).matrix().transpose();  // softmax VJP (0 where masked)
  }
  if (cfg_.kind == ModelKind::mv_cde) {
    gq_.noalias() += gS * xz / std::sqrt(static_cast<double>(C));
    return out;
  }
  // mvc-cde: to_heads <- relu <- conv2 <- relu <- conv1
  Mat gA2(hid, L), gU2(3 * hid, L);
  Eigen::Ref<Mat> gA2r(gA2), gU2r(gU2);
  to_heads_.backward(acts[3], gS, &gA2r);
  nn::relu_backward(gA2, acts[3]);
  conv2_.backward(acts[2], gA2, &gU2r);
  Mat gA1 = col2im3(gU2, hid);
  nn::relu_backward(gA1, acts[1]);
  conv1_.backward(acts[0], gA1, nullptr);
  return out;
}

}  // namespace icmlkit::cde
