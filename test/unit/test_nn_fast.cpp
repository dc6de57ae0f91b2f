// The fast float training path (issue 24): the packed GEMM against a double-precision naive
// product, its determinism contract (a row's bits independent of the rows beside it, the thread
// count and the code path), flash attention and the vectorised layers against the double
// reference layers (whose own gradients are checked by finite differences in test_nn.cpp), and
// the whole-model loss and gradient of the float fast path against the double reference.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "lm/forward.hpp"
#include "lm/model.hpp"
#include "nn/flash_attention.hpp"
#include "nn/gemm.hpp"
#include "nn/layers.hpp"
#include "nn/llama_train.hpp"
#include "nn/vecmath.hpp"
#include "util/rng.hpp"
#include "util/threads.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

std::vector<float> randf(std::size_t n, Rng& rng, double s = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(s * rng.normal());
  return v;
}
std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// max |a − b| / max |b|: the error relative to the result's scale.
double scaled_err(const std::vector<float>& a, const std::vector<double>& b) {
  double err = 0, scale = 1e-30;
  for (std::size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(double(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / scale;
}

/// Restores the kernel set and thread count when a test ends.
struct Restore {
  TrainKernels k = train_kernels();
  int t = threads();
  ~Restore() {
    set_train_kernels(k);
    set_threads(t);
    set_gemm_path(GemmPath::automatic);
  }
};

const GemmPath kPaths[] = {GemmPath::avx512, GemmPath::avx2, GemmPath::portable};

}  // namespace

// Truth: the product in double with plain loops.  Float error of a length-K sum of products of
// N(0,1) values is ~sqrt(K)·6e-8 relative to its scale; 1e-5 leaves two orders of margin.
TEST_CASE("nn gemm: every transpose, path and accumulation mode against a double product") {
  Rng rng(1);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (GemmPath path : kPaths)
        for (int acc = 0; acc < 2; ++acc) {
          const int M = 29, N = 71, K = 600;  // K spans three K blocks; M, N partial tiles
          const auto A = randf(std::size_t(M) * K, rng), B = randf(std::size_t(K) * N, rng);
          const int lda = ta ? M : K, ldb = tb ? K : N, ldc = N + 3;
          std::vector<float> C(std::size_t(M) * ldc, 0.5f);
          gemm_path(path, 2, ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc, acc);
          std::vector<float> got;
          std::vector<double> want;
          for (int i = 0; i < M; ++i)
            for (int j = 0; j < N; ++j) {
              double s = acc ? 0.5 : 0.0;
              for (int k = 0; k < K; ++k)
                s += double(ta ? A[std::size_t(k) * lda + i] : A[std::size_t(i) * lda + k]) *
                     double(tb ? B[std::size_t(j) * ldb + k] : B[std::size_t(k) * ldb + j]);
              want.push_back(s);
              got.push_back(C[std::size_t(i) * ldc + j]);
            }
          INFO("transA " << ta << " transB " << tb << " path " << int(path) << " accumulate " << acc);
          CHECK(scaled_err(got, want) < 1e-5);
          CHECK(C[N] == 0.5f);  // the padding column past N is untouched
        }
  // K = 0: C = 0, or unchanged when accumulating.
  std::vector<float> C(4, 3.0f), A(1), B(1);
  gemm(false, false, 2, 2, 0, A.data(), 1, B.data(), 2, C.data(), 2, true);
  CHECK(C[0] == 3.0f);
  gemm(false, false, 2, 2, 0, A.data(), 1, B.data(), 2, C.data(), 2, false);
  CHECK(C[3] == 0.0f);
}

// The contract of gemm.hpp, on the three shapes training uses (forward x·W^T, dx = dy·W and
// dW = dy^T·x): the first rows of a 2048-row product, computed with 1, 7, 256 or 2048 rows, on
// 1 or 2 threads, on every path, are the same bits.
TEST_CASE("nn gemm: a row's bits do not depend on M, the thread count or the code path") {
  Rng rng(2);
  const int Mmax = 2048, N = 40, K = 300;
  for (int shape = 0; shape < 3; ++shape) {
    const bool ta = shape == 2, tb = shape == 0;
    const auto A = randf(std::size_t(Mmax) * K, rng), B = randf(std::size_t(K) * N, rng);
    const int lda = ta ? Mmax : K, ldb = tb ? K : N;
    std::vector<float> ref(std::size_t(Mmax) * N);
    gemm_path(GemmPath::automatic, 2, ta, tb, Mmax, N, K, A.data(), lda, B.data(), ldb, ref.data(), N, false);
    for (int M : {1, 7, 256, 2048})
      for (int nt : {1, 2})
        for (GemmPath path : kPaths) {
          std::vector<float> C(std::size_t(M) * N);
          gemm_path(path, nt, ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), N, false);
          INFO("shape " << shape << " M " << M << " threads " << nt << " path " << int(path));
          CHECK(std::equal(C.begin(), C.end(), ref.begin()));
        }
    // Columns too: the first 5 columns alone equal those of the 40-column product.
    std::vector<float> C5(std::size_t(Mmax) * 5);
    const std::vector<float> Bt = [&] {  // the first 5 columns of op(B), same layout
      std::vector<float> b(std::size_t(K) * 5);
      for (int k = 0; k < K; ++k)
        for (int j = 0; j < 5; ++j) b[tb ? std::size_t(j) * K + k : std::size_t(k) * 5 + j] = tb ? B[std::size_t(j) * K + k] : B[std::size_t(k) * N + j];
      return b;
    }();
    gemm_path(GemmPath::automatic, 2, ta, tb, Mmax, 5, K, A.data(), lda, Bt.data(), tb ? K : 5, C5.data(), 5, false);
    int diff = 0;
    for (int i = 0; i < Mmax; ++i)
      for (int j = 0; j < 5; ++j) diff += C5[std::size_t(i) * 5 + j] != ref[std::size_t(i) * N + j];
    INFO("shape " << shape);
    CHECK(diff == 0);
  }
}

// The layer contract: linear_forward and the dx of linear_backward for rows 0..M-1 are the
// same bits at M in {1, 7, 256, 2048} and on 1 or 2 threads.
TEST_CASE("nn fast linear: a row's forward and dx bits do not depend on the batch or threads") {
  Restore restore;
  set_train_kernels(TrainKernels::fast);
  Rng rng(3);
  const int Mmax = 2048, K = 96, O = 70;
  const auto x = randf(std::size_t(Mmax) * K, rng), W = randf(std::size_t(O) * K, rng, 0.1);
  const auto dy = randf(std::size_t(Mmax) * O, rng);
  set_threads(2);
  std::vector<float> y_ref(std::size_t(Mmax) * O), dx_ref(std::size_t(Mmax) * K);
  linear_forward(x.data(), Mmax, K, W.data(), O, y_ref.data());
  linear_backward(dy.data(), x.data(), Mmax, K, W.data(), O, dx_ref.data(), static_cast<float*>(nullptr));
  for (int M : {1, 7, 256, 2048})
    for (int nt : {1, 2}) {
      set_threads(nt);
      std::vector<float> y(std::size_t(M) * O), dx(std::size_t(M) * K);
      linear_forward(x.data(), M, K, W.data(), O, y.data());
      linear_backward(dy.data(), x.data(), M, K, W.data(), O, dx.data(), static_cast<float*>(nullptr));
      INFO("M " << M << " threads " << nt);
      CHECK(std::equal(y.begin(), y.end(), y_ref.begin()));
      CHECK(std::equal(dx.begin(), dx.end(), dx_ref.begin()));
    }
}

// Truth: std::exp in double.  The Cephes polynomial's error bound is ~1.5 ulp (1.8e-7).
TEST_CASE("nn vec::exp is within 2e-7 relative of exp over the softmax range") {
  double worst = 0;
  for (double x = -87.0; x < 88.0; x += 0.000731) {
    const double want = std::exp(double(float(x)));
    worst = std::max(worst, std::abs(double(vec::exp(float(x))) - want) / want);
  }
  INFO("worst relative error " << worst);
  CHECK(worst < 2e-7);
  CHECK(vec::exp(0.0f) == 1.0f);
  CHECK(vec::exp(-1000.0f) < 1e-37f);  // clamped, finite, tiny
}

// Flash attention against the double reference attention (FD-checked in test_nn.cpp), on
// sequences long enough for several partial tiles, with GQA and two sequences in the batch, on
// every code path (panel sizes 12x32, 6x16, 4x8) and 1 or 2 threads.
TEST_CASE("nn flash attention forward and backward match the double reference") {
  Restore restore;
  Rng rng(5);
  for (GemmPath path : kPaths)
  for (int nt : {1, 2}) {
    set_gemm_path(path);
    set_threads(nt);
    const AttnShape s{2, 150, 4, 2, 16};
    const int N = s.B * s.S, dq = s.n_heads * s.head_dim, dkv = s.n_kv_heads * s.head_dim;
    const auto q = randf(std::size_t(N) * dq, rng), k = randf(std::size_t(N) * dkv, rng);
    const auto v = randf(std::size_t(N) * dkv, rng), dout = randf(std::size_t(N) * dq, rng);
    std::vector<float> o(std::size_t(N) * dq), mx(std::size_t(N) * s.n_heads), iv(mx.size());
    std::vector<float> gq(q.size()), gk(k.size()), gv(v.size());
    flash_attention_forward(q.data(), k.data(), v.data(), s, o.data(), mx.data(), iv.data());
    flash_attention_backward(dout.data(), q.data(), k.data(), v.data(), o.data(), mx.data(), iv.data(), s,
                             gq.data(), gk.data(), gv.data());
    const auto qd = widen(q), kd = widen(k), vd = widen(v), dod = widen(dout);
    std::vector<double> od(o.size()), mxd(mx.size()), ivd(mx.size()), gqd(q.size()), gkd(k.size()), gvd(v.size());
    attention_forward(qd.data(), kd.data(), vd.data(), s, od.data(), mxd.data(), ivd.data());
    attention_backward(dod.data(), qd.data(), kd.data(), vd.data(), od.data(), mxd.data(), ivd.data(), s,
                       gqd.data(), gkd.data(), gvd.data());
    INFO("threads " << nt << " path " << int(path));
    CHECK(scaled_err(o, od) < 1e-5);
    CHECK(scaled_err(mx, mxd) < 1e-5);
    CHECK(scaled_err(iv, ivd) < 1e-5);
    CHECK(scaled_err(gq, gqd) < 1e-4);
    CHECK(scaled_err(gk, gkd) < 1e-4);
    CHECK(scaled_err(gv, gvd) < 1e-4);
    // A sequence's results do not depend on the other sequence: run the second one alone.
    const AttnShape one{1, s.S, s.n_heads, s.n_kv_heads, s.head_dim};
    std::vector<float> o1(o.size() / 2), mx1(mx.size() / 2), iv1(mx1.size());
    flash_attention_forward(q.data() + std::size_t(s.S) * dq, k.data() + std::size_t(s.S) * dkv,
                            v.data() + std::size_t(s.S) * dkv, one, o1.data(), mx1.data(), iv1.data());
    CHECK(std::equal(o1.begin(), o1.end(), o.begin() + o1.size()));
  }
}

// The vectorised RMSNorm, SwiGLU and cross-entropy (forward and backward) against the double
// reference layers on the same inputs.
TEST_CASE("nn fast RMSNorm, SwiGLU and cross-entropy match the double reference") {
  Restore restore;
  set_train_kernels(TrainKernels::fast);
  Rng rng(6);
  const int N = 37, d = 83, V = 301;
  const auto x = randf(std::size_t(N) * d, rng), w = randf(d, rng), dy = randf(x.size(), rng);
  std::vector<float> y(x.size()), r(N), dx(x.size(), 0.0f), dw(d, 0.0f);
  rmsnorm_forward(x.data(), N, d, w.data(), 1e-5, y.data(), r.data());
  rmsnorm_backward(dy.data(), x.data(), N, d, w.data(), r.data(), dx.data(), dw.data());
  const auto xd = widen(x), wd = widen(w), dyd = widen(dy);
  std::vector<double> yd(x.size()), rd(N), dxd(x.size(), 0.0), dwd(d, 0.0);
  rmsnorm_forward(xd.data(), N, d, wd.data(), 1e-5, yd.data(), rd.data());
  rmsnorm_backward(dyd.data(), xd.data(), N, d, wd.data(), rd.data(), dxd.data(), dwd.data());
  CHECK(scaled_err(y, yd) < 1e-6);
  CHECK(scaled_err(dx, dxd) < 1e-5);
  CHECK(scaled_err(dw, dwd) < 1e-5);

  const auto g = randf(x.size(), rng, 3.0), u = randf(x.size(), rng);
  std::vector<float> h(x.size()), dg(x.size()), du(x.size());
  swiglu_forward(g.data(), u.data(), std::int64_t(x.size()), h.data());
  swiglu_backward(dy.data(), g.data(), u.data(), std::int64_t(x.size()), dg.data(), du.data());
  const auto gd = widen(g), ud = widen(u);
  std::vector<double> hd(x.size()), dgd(x.size()), dud(x.size());
  swiglu_forward(gd.data(), ud.data(), std::int64_t(x.size()), hd.data());
  swiglu_backward(dyd.data(), gd.data(), ud.data(), std::int64_t(x.size()), dgd.data(), dud.data());
  CHECK(scaled_err(h, hd) < 1e-6);
  CHECK(scaled_err(dg, dgd) < 1e-6);
  CHECK(scaled_err(du, dud) < 1e-6);

  const auto logits = randf(std::size_t(N) * V, rng, 4.0);
  std::vector<int> tgt(N);
  for (auto& t : tgt) t = int(rng.below(V));
  tgt[5] = -1;
  std::vector<float> dl(logits.size());
  const double loss = cross_entropy(logits.data(), N, V, tgt.data(), dl.data(), 0.5);
  const auto ld = widen(logits);
  std::vector<double> dld(ld.size());
  const double lossd = cross_entropy(ld.data(), N, V, tgt.data(), dld.data(), 0.5);
  CHECK(loss == doctest::Approx(lossd).epsilon(1e-6));
  CHECK(scaled_err(dl, dld) < 1e-6);
}

// The whole float fast path (GEMM products, flash attention, vectorised layers) against the
// double reference, whose gradient test_nn.cpp checks by finite differences: loss to 1e-5
// relative, every gradient tensor to 1e-3 of its own scale (float rounding through two layers
// of a model with S = 70, i.e. two attention tiles).
TEST_CASE("nn fast training loss and gradients match the double reference model") {
  Restore restore;
  set_train_kernels(TrainKernels::fast);
  for (GemmPath path : kPaths) {
  set_gemm_path(path);
  lm::ModelConfig c;
  c.vocab_size = 53;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 40;
  c.n_ctx = 80;
  c.rope_theta = 100.0;
  const lm::Model m = lm::random_model(c, 7, 0.2);
  auto Pf = params_from_model<float>(m);
  auto Pd = params_from_model<double>(m);
  const int B = 2, S = 70;
  Rng rng(8);
  std::vector<int> tok(B * S), tgt(B * S);
  for (auto& t : tok) t = int(rng.below(c.vocab_size));
  for (auto& t : tgt) t = int(rng.below(c.vocab_size));
  TrainCache<float> cf;
  TrainCache<double> cd;
  Pf.store.zero_grad();
  Pd.store.zero_grad();
  const double lf = llama_loss(Pf, tok, tgt, B, S, 1.0 / (B * S), cf);
  const double ld = llama_loss(Pd, tok, tgt, B, S, 1.0 / (B * S), cd);
  CHECK(lf == doctest::Approx(ld).epsilon(1e-5));
  for (std::size_t i = 0; i < Pf.store.params.size(); ++i) {
    INFO(Pf.store.params[i].name << " path " << int(path));
    CHECK(scaled_err(Pf.store.params[i].grad, Pd.store.params[i].grad) < 1e-3);
  }
  }
}
