// nn/foam (issue 29): FOAM's update against the paper's operator form written out in double
// (fold matrix A with 2^-l entries, unfold matrix E of ones, zero padding of the last dimension),
// with the reference code's choices (mean(g^2) for the folded second moment, the residual scale s
// on R and s^2 on R^2, the update scale, the bias correction in the step size with eps outside
// it, decay after the update); level 0 is the reference's Adam bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "nn/foam.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

using Mat = std::vector<std::vector<double>>;

/// x [rows, n] times M [n, k].
Mat mul(const Mat& x, const Mat& M) {
  Mat y(x.size(), std::vector<double>(M[0].size(), 0.0));
  for (std::size_t r = 0; r < x.size(); ++r)
    for (std::size_t i = 0; i < M.size(); ++i)
      for (std::size_t j = 0; j < M[0].size(); ++j) y[r][j] += x[r][i] * M[i][j];
  return y;
}

/// FOAM in the paper's matrix form over a zero-padded width np = ceil(n / f) f: A [np, np/f]
/// with A_ij = 1/f when i is in block j, E [np/f, np] with E_ij = 1 when j is in block i.  `steps`
/// gradients applied in turn to w [rows, n]; returns the final w.
Mat foam_matrix_form(Mat w, const std::vector<Mat>& grads, const FoamOptions& o, double lr) {
  const int n = static_cast<int>(w[0].size()), f = 1 << o.level, nb = (n + f - 1) / f, np = nb * f;
  Mat A(np, std::vector<double>(nb, 0.0)), E(nb, std::vector<double>(np, 0.0));
  for (int i = 0; i < np; ++i) {
    A[i][i / f] = 1.0 / f;
    E[i / f][i] = 1.0;
  }
  const std::size_t rows = w.size();
  Mat mf(rows, std::vector<double>(nb, 0.0)), vf = mf;
  for (std::size_t t = 1; t <= grads.size(); ++t) {
    Mat g = grads[t - 1], g2 = g;
    for (auto& row : g) row.resize(np, 0.0);  // zero padding
    for (auto& row : g2) {
      for (auto& x : row) x *= x;
      row.resize(np, 0.0);
    }
    const Mat gf = mul(g, A), qf_code = mul(g2, A);
    const Mat back = mul(gf, E);  // block means, unfolded
    for (std::size_t r = 0; r < rows; ++r)
      for (int j = 0; j < nb; ++j) {
        const double q = o.paper_second_moment ? gf[r][j] * gf[r][j] : qf_code[r][j];
        mf[r][j] = o.beta1 * mf[r][j] + (1 - o.beta1) * gf[r][j];
        vf[r][j] = o.beta2 * vf[r][j] + (1 - o.beta2) * q;
      }
    const Mat mu = mul(mf, E), vu = mul(vf, E);
    const double step = lr * std::sqrt(1 - std::pow(o.beta2, double(t))) / (1 - std::pow(o.beta1, double(t)));
    for (std::size_t r = 0; r < rows; ++r)
      for (int c = 0; c < n; ++c) {
        const double R = g[r][c] - back[r][c];
        const double m = mu[r][c] + o.res_scale * R, v = vu[r][c] + o.res_scale * o.res_scale * R * R;
        w[r][c] -= step * o.scale * m / (std::sqrt(v) + o.eps);
        w[r][c] -= lr * o.weight_decay * w[r][c];
      }
  }
  return w;
}

}  // namespace

TEST_CASE("nn FOAM: the update equals the paper's fold/unfold form in double, padding included, both second moments") {
  Rng rng(7);
  const int rows = 3, n = 7;  // 7 columns: at level 1 and 2 the last block is zero-padded
  for (int level : {1, 2})
    for (bool paper : {false, true}) {
      FoamOptions o;
      o.level = level;
      o.scale = 0.25;
      o.res_scale = 0.7;
      o.weight_decay = 0.05;
      o.paper_second_moment = paper;
      Mat w0(rows, std::vector<double>(n));
      for (auto& row : w0)
        for (auto& x : row) x = rng.normal();
      std::vector<Mat> grads(3, Mat(rows, std::vector<double>(n)));
      for (auto& g : grads)
        for (auto& row : g)
          for (auto& x : row) x = rng.normal();
      const Mat want = foam_matrix_form(w0, grads, o, 1e-2);
      std::vector<double> w, g, mf(rows * foam_folded_cols(n, level), 0.0), vf = mf;
      for (const auto& row : w0) w.insert(w.end(), row.begin(), row.end());
      for (int t = 0; t < 3; ++t) {
        g.clear();
        for (const auto& row : grads[t]) g.insert(g.end(), row.begin(), row.end());
        foam_update(w.data(), g.data(), mf.data(), vf.data(), rows, n, t + 1, 1e-2, o, true);
      }
      double worst = 0;
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < n; ++c) worst = std::max(worst, std::abs(w[r * n + c] - want[r][c]));
      INFO("level " << level << " paper " << paper);
      CHECK(worst < 1e-13);
      // The paper's and the code's second moments differ (they are not the same rule).
      if (paper) CHECK(std::abs(w[0] - foam_matrix_form(w0, grads, [&] { auto q = o; q.paper_second_moment = false; return q; }(), 1e-2)[0][0]) > 1e-9);
    }
  CHECK(foam_folded_cols(7, 2) == 2);
  CHECK(foam_folded_cols(8, 2) == 2);
  CHECK(foam_folded_cols(9, 2) == 3);
}

TEST_CASE("nn FOAM: level 0 with scale 1 is the reference's Adam bit for bit, and that Adam is the hand-computed step") {
  Rng rng(8);
  const int rows = 4, n = 6;
  FoamOptions o;
  o.level = 0;
  o.scale = 1;
  o.weight_decay = 0.1;
  std::vector<float> w(rows * n), g(w.size());
  for (auto& x : w) x = static_cast<float>(rng.normal());
  std::vector<float> w2 = w, m(w.size(), 0), v = m, m2 = m, v2 = m;
  for (int t = 1; t <= 4; ++t) {
    for (auto& x : g) x = static_cast<float>(rng.normal());
    foam_update(w.data(), g.data(), m.data(), v.data(), rows, n, t, 3e-3, o, true);
    foam_adam_update(w2.data(), g.data(), m2.data(), v2.data(), w.size(), t, 3e-3, o, true);
  }
  CHECK(w == w2);
  CHECK(m == m2);
  CHECK(v == v2);
  // One step of the reference's Adam in double: m = (1 - b1) g, v = (1 - b2) g^2, the bias
  // correction folded into the step size, eps outside the square root, decay after.
  std::vector<double> wd{0.5, -1.25}, gd{0.3, -2.0}, md(2, 0.0), vd(2, 0.0);
  foam_adam_update(wd.data(), gd.data(), md.data(), vd.data(), 2, 1, 1e-2, o, true);
  for (int j = 0; j < 2; ++j) {
    const double w0 = j == 0 ? 0.5 : -1.25, g0 = j == 0 ? 0.3 : -2.0;
    const double mm = 0.1 * g0, vv = 0.001 * g0 * g0;
    double want = w0 - 1e-2 * std::sqrt(0.001) / 0.1 * mm / (std::sqrt(vv) + 1e-8);
    want -= 1e-2 * 0.1 * want;
    CHECK(wd[j] == doctest::Approx(want).epsilon(1e-14));
  }
}

TEST_CASE("nn FOAM optimizer: folds every matrix but the embedding and head, state 2 m ceil(n / 2^l)") {
  ParamStore<float> store;
  store.add("token_embd.weight", {10, 8}, true);
  store.add("blk.0.attn_q.weight", {8, 8}, true);
  store.add("blk.0.ffn_down.weight", {8, 6}, true);
  store.add("blk.0.attn_norm.weight", {8}, false);
  store.add("output.weight", {10, 8}, true);
  FoamOptions o;
  o.level = 2;
  Foam foam(store, o);
  std::size_t floats = 0;
  for (const auto& b : foam.state()) floats += b.data->size();
  // Adam-sized for embedding, head and norm (2 x (80 + 80 + 8)), folded for the matrices
  // (2 x 8 x 2 and 2 x 8 x ceil(6 / 4) = 2 x 8 x 2).
  CHECK(floats == 2 * (80 + 80 + 8) + 2 * 8 * 2 + 2 * 8 * 2);
  CHECK(foam_folds("blk.0.attn_q.weight", {8, 8}));
  CHECK_FALSE(foam_folds("output.weight", {10, 8}));
  CHECK_FALSE(foam_folds("blk.0.attn_norm.weight", {8}));
  o.level = 3;  // blocks of 8 entries: wider than ffn_down's 6 columns
  CHECK_THROWS_WITH_AS(Foam(store, o), doctest::Contains("blk.0.ffn_down.weight (6 columns)"), UsageError);
}

// ---- Adam-mini (a FOAM / POET-X baseline) ----------------------------------------------------

#include "nn/adam_mini.hpp"

// With blocks of one entry Adam-mini is Adam (torch form); with larger blocks the second moment is
// the block mean of g^2, written out by hand; the partition follows the package's name classes.
TEST_CASE("nn Adam-mini: one-entry blocks are Adam, larger blocks average g^2, the partition by role") {
  Rng rng(9);
  const int n = 6;
  std::vector<double> w(n), g(n);
  for (auto& x : w) x = rng.normal();
  AdamWOptions o;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.weight_decay = 0.1;
  std::vector<double> wa = w, ma(n, 0), va(n, 0), wm = w, mm(n, 0), vm(n, 0);
  for (int t = 1; t <= 3; ++t) {
    for (auto& x : g) x = rng.normal();
    adamw_update(wa.data(), g.data(), ma.data(), va.data(), n, t, 1e-2, o, true);
    adam_mini_update(wm.data(), g.data(), mm.data(), vm.data(), n, 1, t, 1e-2, o, true);
  }
  for (int j = 0; j < n; ++j) CHECK(wm[j] == doctest::Approx(wa[j]).epsilon(1e-13));
  // Blocks of 3, one step from zero state: vm_b = (1 - b2) mean(g^2 over block b).
  std::vector<double> w1 = w, m1(n, 0), v1(2, 0);
  adam_mini_update(w1.data(), g.data(), m1.data(), v1.data(), n, 3, 1, 1e-2, o, false);
  for (int b = 0; b < 2; ++b) {
    const double q = (g[3 * b] * g[3 * b] + g[3 * b + 1] * g[3 * b + 1] + g[3 * b + 2] * g[3 * b + 2]) / 3;
    CHECK(v1[b] == doctest::Approx(0.001 * q).epsilon(1e-14));
    for (int j = 3 * b; j < 3 * b + 3; ++j) {
      const double mh = 0.1 * g[j] / 0.1, vh = 0.001 * q / 0.001;
      CHECK(w1[j] == doctest::Approx(w[j] - 1e-2 * mh / (std::sqrt(vh) + 1e-8)).epsilon(1e-13));
    }
  }
  ParamStore<float> store;
  store.add("token_embd.weight", {10, 8}, true);
  store.add("blk.0.attn_q.weight", {8, 8}, true);  // 2 heads of head_dim 4
  store.add("blk.0.attn_k.weight", {4, 8}, true);  // 1 KV head
  store.add("blk.0.attn_v.weight", {4, 8}, true);
  store.add("blk.0.attn_norm.weight", {8}, false);
  store.add("output_norm.weight", {8}, false);
  AdamMini mini(store, o, 4);
  std::vector<std::size_t> vsizes;
  for (const auto& b : mini.state())
    if (b.name.rfind("v/", 0) == 0) vsizes.push_back(b.data->size());
  CHECK(vsizes == std::vector<std::size_t>{10, 2, 1, 4, 1, 1});
  CHECK(adam_mini_blocks("output_norm.weight", {8}) == MiniBlocks::per_tensor);  // not the head's rule
  CHECK_THROWS_WITH_AS(AdamMini(store, o, 3), doctest::Contains("not a multiple of the head size 3"), UsageError);
}

// ---- GaLore (a FOAM / POET-X baseline) -------------------------------------------------------

#include <Eigen/SVD>

#include "nn/galore.hpp"

// GaLore's projection keeps the gradient's top-r right singular vectors (m >= n) or left ones
// (m < n): the residual of projecting G on them is the sum of the other squared singular values
// (an SVD in double); the first update from zero state is lr * scale * sign(G P^T) P (Adam's first
// step is the sign, eps aside); the subspace is renewed only every T steps.
TEST_CASE("nn GaLore: the top-r subspace, the first step's sign update, renewal every T steps") {
  Rng rng(10);
  for (const auto& shape : {std::vector<int>{12, 5}, std::vector<int>{5, 12}}) {
    ParamStore<float> store;
    const int i = store.add("blk.0.ffn_up.weight", shape, false);
    auto& p = store.params[i];
    for (auto& x : p.value) x = static_cast<float>(rng.normal());
    for (auto& x : p.grad) x = static_cast<float>(rng.normal());
    const std::vector<float> w0 = p.value, g0 = p.grad;
    AdamWOptions a;
    a.beta1 = 0.9;
    a.beta2 = 0.999;
    a.weight_decay = 0;
    GaloreOptions o;
    o.rank = 2;
    o.update_gap = 2;
    o.scale = 0.25;
    Galore gal(store, a, o);
    gal.step(store, 1e-2);
    const int m = shape[0], n = shape[1];
    const bool right = m >= n;
    std::vector<float>* P = nullptr;
    for (auto& b : gal.state())
      if (b.name == "p/blk.0.ffn_up.weight") P = b.data;
    REQUIRE(P != nullptr);
    Eigen::MatrixXd G(m, n), Pd = right ? Eigen::MatrixXd(2, n) : Eigen::MatrixXd(m, 2);
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < n; ++c) G(r, c) = g0[r * n + c];
    for (int r = 0; r < Pd.rows(); ++r)
      for (int c = 0; c < Pd.cols(); ++c) Pd(r, c) = (*P)[r * Pd.cols() + c];
    const Eigen::VectorXd sv = Eigen::JacobiSVD<Eigen::MatrixXd>(G).singularValues();
    double tail = 0;
    for (int k = 2; k < sv.size(); ++k) tail += sv(k) * sv(k);
    const Eigen::MatrixXd resid = right ? Eigen::MatrixXd(G - G * Pd.transpose() * Pd) : Eigen::MatrixXd(G - Pd * Pd.transpose() * G);
    CHECK(resid.squaredNorm() == doctest::Approx(tail).epsilon(1e-4));
    const Eigen::MatrixXd low = right ? Eigen::MatrixXd(G * Pd.transpose()) : Eigen::MatrixXd(Pd.transpose() * G);
    const Eigen::MatrixXd sgn = low.unaryExpr([](double x) { return x > 0 ? 1.0 : -1.0; });
    const Eigen::MatrixXd upd = right ? Eigen::MatrixXd(sgn * Pd) : Eigen::MatrixXd(Pd * sgn);
    double worst = 0;
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < n; ++c) worst = std::max(worst, std::abs(p.value[r * n + c] - (w0[r * n + c] - 1e-2 * 0.25 * upd(r, c))));
    CHECK(worst < 1e-6);
    // Step 1 (t = 1, not a multiple of T = 2) keeps P; step 2 renews it from the new gradient.
    const std::vector<float> keep = *P;
    for (auto& x : p.grad) x = static_cast<float>(rng.normal());
    gal.step(store, 1e-2);
    CHECK(*P == keep);
    for (auto& x : p.grad) x = static_cast<float>(rng.normal());
    gal.step(store, 1e-2);
    CHECK(*P != keep);
  }
  ParamStore<float> s2;
  s2.add("token_embd.weight", {6, 4}, true);
  CHECK_FALSE(galore_projects("token_embd.weight", {6, 4}));
  CHECK(galore_projects("blk.3.attn_q.weight", {4, 4}));
  GaloreOptions bad;
  bad.rank = 0;
  CHECK_THROWS_AS(Galore(s2, AdamWOptions{}, bad), UsageError);
}

// ---- AdamW's sparse-state hooks (issue 29, for sparse training) ---------------------------------
// Against the dense optimizer (all entries active), against Adam's update written out by hand for
// an entry reset to step 0 and for one on its own step count, and through the state buffers.

namespace {
ParamStore<float> two_tensors(Rng& rng) {
  ParamStore<float> s;
  s.add("blk.0.attn_q.weight", {4, 5}, true);
  s.add("blk.0.attn_norm.weight", {5}, false);
  for (auto& p : s.params)
    for (auto& x : p.value) x = static_cast<float>(rng.normal());
  return s;
}
void random_grads(ParamStore<float>& s, Rng& rng) {
  for (auto& p : s.params)
    for (auto& x : p.grad) x = static_cast<float>(rng.normal());
}
}  // namespace

TEST_CASE("adamw sparse state: every entry active is dense AdamW, and the state shrinks with the active set") {
  Rng rng(3);
  ParamStore<float> a = two_tensors(rng), b = a;
  AdamWOptions o;
  AdamW dense(a, o), sparse(b, o);
  std::vector<std::int32_t> all(20);
  for (int i = 0; i < 20; ++i) all[i] = i;
  Rng g1(4);
  for (int s = 0; s < 2; ++s) {  // two dense steps, then the tensor turns sparse with all entries
    random_grads(a, g1);
    b.params[0].grad = a.params[0].grad;
    b.params[1].grad = a.params[1].grad;
    dense.step(a, 1e-2);
    sparse.step(b, 1e-2);
  }
  sparse.set_active(0, all);
  CHECK(sparse.entry_steps(0).empty());  // one global count: none stored per entry
  sparse.set_per_entry_steps(true);
  CHECK(sparse.entry_steps(0) == std::vector<std::int32_t>(20, 2));  // carried over from the global count
  for (int s = 0; s < 3; ++s) {
    random_grads(a, g1);
    b.params[0].grad = a.params[0].grad;
    b.params[1].grad = a.params[1].grad;
    dense.step(a, 1e-2);
    sparse.step(b, 1e-2);
  }
  for (int i = 0; i < 20; ++i) CHECK(b.params[0].value[i] == doctest::Approx(a.params[0].value[i]).epsilon(1e-6));
  CHECK(b.params[1].value == a.params[1].value);  // the dense tensor is untouched by the hooks
  std::size_t before = 0, after = 0;
  for (const auto& s : sparse.state()) before += s.bytes();
  sparse.set_active(0, {2, 7, 11});
  for (const auto& s : sparse.state()) after += s.bytes();
  CHECK(before - after == 17 * 4 * 4);  // m, v, index and step count of 17 dropped entries
  const std::vector<float> frozen(b.params[0].value);
  b.params[0].grad.assign(3, 0.0f);  // a sparse tensor's gradient holds its active entries only
  random_grads(b, g1);
  sparse.step(b, 1e-2);
  for (int i = 0; i < 20; ++i)
    if (i != 2 && i != 7 && i != 11) CHECK(b.params[0].value[i] == frozen[i]);  // inactive entries never move
    else CHECK(b.params[0].value[i] != frozen[i]);
}

TEST_CASE("adamw sparse state: reset entries restart at step 0, kept ones keep their state, by hand") {
  Rng rng(5);
  ParamStore<float> s = two_tensors(rng);
  AdamWOptions o;
  o.beta1 = 0.9;
  o.beta2 = 0.99;
  o.weight_decay = 0.1;
  const double lr = 1e-2;
  for (int per_entry = 0; per_entry < 2; ++per_entry) {
    AdamW opt(s, o);
    opt.set_per_entry_steps(per_entry);
    opt.set_active(0, {1, 3, 4, 9});
    s.params[0].grad.assign(4, 0.0f);  // the gradient of the active entries, aligned with them
    Rng g(6);
    std::vector<double> m(4, 0), v(4, 0), w(4);
    const int idx[4] = {1, 3, 4, 9};
    for (int k = 0; k < 4; ++k) w[k] = s.params[0].value[idx[k]];
    int t_entry[4] = {0, 0, 0, 0};
    for (int step = 1; step <= 4; ++step) {
      if (step == 3) {  // entry 4 is regrown: m = v = 0, step 0
        opt.reset_entries(0, {4});
        m[2] = v[2] = 0;
        t_entry[2] = 0;
      }
      random_grads(s, g);
      opt.step(s, lr);
      for (int k = 0; k < 4; ++k) {
        const double gk = s.params[0].grad[k];
        const int t = per_entry ? ++t_entry[k] : step;
        m[k] = 0.9 * m[k] + 0.1 * gk;
        v[k] = 0.99 * v[k] + 0.01 * gk * gk;
        w[k] = w[k] * (1 - lr * 0.1) - lr / (1 - std::pow(0.9, t)) * m[k] / (std::sqrt(v[k]) / std::sqrt(1 - std::pow(0.99, t)) + o.eps);
        INFO("per-entry steps " << per_entry << ", step " << step << ", entry " << idx[k]);
        CHECK(s.params[0].value[idx[k]] == doctest::Approx(w[k]).epsilon(1e-5));
      }
    }
    CHECK(opt.entry_steps(0) == (per_entry ? std::vector<std::int32_t>{4, 4, 2, 4} : std::vector<std::int32_t>{}));
    // The state buffers carry it all: a second optimizer with the same active list, loaded from
    // them, continues bit for bit.
    AdamW copy(s, o);
    copy.set_active(0, {1, 3, 4, 9});
    copy.set_per_entry_steps(per_entry);
    copy.set_steps(opt.steps());
    auto from = opt.state(), to = copy.state();
    REQUIRE(from.size() == to.size());
    for (std::size_t i = 0; i < from.size(); ++i) {
      CHECK(from[i].name == to[i].name);
      if (from[i].ints) *to[i].ints = *from[i].ints;
      else *to[i].data = *from[i].data;
    }
    ParamStore<float> s2 = s;
    random_grads(s, g);
    s2.params[0].grad = s.params[0].grad;
    s2.params[1].grad = s.params[1].grad;
    opt.step(s, lr);
    copy.step(s2, lr);
    CHECK(s.params[0].value == s2.params[0].value);
  }
  AdamW opt(s, o);
  CHECK_THROWS_AS(opt.reset_entries(0, {1}), UsageError);  // not sparse
  opt.set_active(0, {1, 3});
  CHECK_THROWS_AS(opt.reset_entries(0, {2}), UsageError);  // not active
  CHECK_THROWS_AS(opt.set_active(0, {3, 1}), UsageError);
  CHECK_THROWS_AS(opt.set_active(0, {20}), UsageError);
  opt.set_active(0, {3, 5});  // 3 keeps its (zero) state, 1 is dropped
  CHECK(opt.active(0) == std::vector<std::int32_t>{3, 5});
  opt.set_dense(0);
  CHECK(opt.active(0).empty());
  CHECK(opt.state()[0].data->size() == 20);
}
