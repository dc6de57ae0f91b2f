// nn/adamw: the one Adam/AdamW implementation, used by the LM trainer (float parameter store)
// and the CDE models (double views).  Truth: the torch.optim.Adam/AdamW update written out in
// double precision, and (bitwise) the float loop that lm-train used before the two Adam
// implementations were merged, kept here as the reference for resume bit-identity.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "nn/adamw.hpp"
#include "nn/layers.hpp"
#include "util/rng.hpp"

using namespace icmlkit;
using namespace icmlkit::nn;

namespace {

// The former AdamW::step inner loop (float), verbatim in its arithmetic.
void previous_float_adamw(float* w, const float* g, float* m, float* v, std::size_t n, std::int64_t t, double lr,
                          const AdamWOptions& o, bool decay) {
  const double bc1 = 1.0 - std::pow(o.beta1, double(t));
  const double bc2 = 1.0 - std::pow(o.beta2, double(t));
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float step_size = static_cast<float>(lr / bc1);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(o.eps);
  const float keep = decay ? static_cast<float>(1.0 - lr * o.weight_decay) : 1.0f;
  for (std::size_t j = 0; j < n; ++j) {
    m[j] = b1 * m[j] + (1.0f - b1) * g[j];
    v[j] = b2 * v[j] + (1.0f - b2) * g[j] * g[j];
    w[j] *= keep;
    w[j] -= step_size * m[j] / (std::sqrt(v[j]) / sqrt_bc2 + eps);
  }
}

// torch.optim.Adam(W) in double: bias-corrected moments, decoupled decay.
void torch_adamw(double* w, const double* g, double* m, double* v, int n, int t, double lr, double b1, double b2,
                 double eps, double wd) {
  for (int j = 0; j < n; ++j) {
    m[j] = b1 * m[j] + (1 - b1) * g[j];
    v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
    w[j] -= lr * wd * w[j];
    const double mhat = m[j] / (1 - std::pow(b1, t)), vhat = v[j] / (1 - std::pow(b2, t));
    w[j] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

}  // namespace

// On the reference kernel set the float update is bitwise the former loop; the fast set's
// vectorised loop (nn/vecmath.hpp, FMA contracted on AVX paths) agrees to a few float ulps.
TEST_CASE("nn adamw_update in float: bitwise the former loop (reference kernels), within 1e-6 (fast)") {
  const TrainKernels keep = train_kernels();
  for (const TrainKernels kernels : {TrainKernels::reference, TrainKernels::fast}) {
    set_train_kernels(kernels);
    Rng rng(11);
    const std::size_t n = 257;
    std::vector<float> w(n), g(n), m(n, 0.0f), v(n, 0.0f);
    for (auto& x : w) x = static_cast<float>(rng.normal());
    std::vector<float> w2 = w, m2 = m, v2 = v;
    AdamWOptions o;  // lm-train's defaults: betas 0.9/0.95, eps 1e-8, wd 0.1
    for (int t = 1; t <= 5; ++t) {
      for (auto& x : g) x = static_cast<float>(rng.normal() * 0.1);
      const bool decay = t % 2 == 1;
      adamw_update(w.data(), g.data(), m.data(), v.data(), n, t, 3e-3, o, decay);
      previous_float_adamw(w2.data(), g.data(), m2.data(), v2.data(), n, t, 3e-3, o, decay);
    }
    if (kernels == TrainKernels::reference) {
      CHECK(std::memcmp(w.data(), w2.data(), n * sizeof(float)) == 0);
      CHECK(std::memcmp(m.data(), m2.data(), n * sizeof(float)) == 0);
      CHECK(std::memcmp(v.data(), v2.data(), n * sizeof(float)) == 0);
    } else {
      // Each array's largest difference relative to its largest entry (m can cancel to ~0).
      auto rel = [&](const std::vector<float>& a, const std::vector<float>& b) {
        double d = 0, s = 0;
        for (std::size_t i = 0; i < n; ++i) {
          d = std::max(d, double(std::abs(a[i] - b[i])));
          s = std::max(s, double(std::abs(b[i])));
        }
        return d / s;
      };
      const double worst = std::max({rel(w, w2), rel(m, m2), rel(v, v2)});
      INFO("worst relative difference " << worst);
      CHECK(worst < 1e-6);
      CHECK(std::memcmp(w.data(), w2.data(), n * sizeof(float)) != 0);  // the fast loop really ran
    }
  }
  set_train_kernels(keep);
}

TEST_CASE("nn ViewAdamW equals torch Adam and AdamW in double, and AdamW with weight decay 0 is Adam") {
  for (const double wd : {0.0, 0.05}) {
    double p[3] = {1.0, -2.0, 0.25}, gp[3] = {0, 0, 0};
    double q[3] = {1.0, -2.0, 0.25}, m[3] = {0, 0, 0}, v[3] = {0, 0, 0};
    ViewAdamW opt({{"p", p, gp, 3, 3, 1}}, 0.01, AdamWOptions{0.9, 0.999, 1e-8, wd});
    // The float store optimizer on the same problem (decay on: the view optimizer decays every view).
    ParamStore<float> st;
    st.add("p", {3}, true);
    st.params[0].value = {1.0f, -2.0f, 0.25f};
    AdamW fopt(st, AdamWOptions{0.9, 0.999, 1e-8, wd});
    const double grads[3][3] = {{0.5, -1.0, 2.0}, {-0.25, 0.5, 1.0}, {0.1, 0.0, -3.0}};
    for (int t = 1; t <= 3; ++t) {
      for (int j = 0; j < 3; ++j) {
        gp[j] = grads[t - 1][j];
        st.params[0].grad[j] = static_cast<float>(grads[t - 1][j]);
      }
      opt.step();
      fopt.step(st, 0.01);
      torch_adamw(q, grads[t - 1], m, v, 3, t, 0.01, 0.9, 0.999, 1e-8, wd);
    }
    CHECK(opt.steps() == 3);
    for (int j = 0; j < 3; ++j) {
      // Same formula, rounding order differs: agreement to ~1e-15 relative (double).
      CHECK(p[j] == doctest::Approx(q[j]).epsilon(1e-13));
      // Float arithmetic on the same problem: agreement to float precision.
      CHECK(st.params[0].value[j] == doctest::Approx(q[j]).epsilon(1e-6));
    }
  }
}
