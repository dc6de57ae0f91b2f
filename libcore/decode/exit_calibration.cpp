#include "decode/exit_calibration.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "lm/forward.hpp"
#include "lm/sampler.hpp"
#include "util/error.hpp"
#include "util/threads.hpp"

namespace icmlkit::decode {

LensData make_lens(const lm::ModelConfig& c, std::vector<int> ks) {
  LensData d;
  d.n_layers = c.n_layers;
  d.vocab = c.vocab_size;
  for (int& k : ks) k = std::clamp(k, 2, c.vocab_size);
  std::sort(ks.begin(), ks.end());
  ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
  d.ks = ks;
  const int L = c.n_layers;
  d.argmax.resize(std::size_t(std::max(L - 1, 0)));
  d.gap.resize(d.argmax.size());
  d.proxy_gap.resize(d.argmax.size());
  d.proxy_ok.resize(d.argmax.size());
  for (int s = 1; s < L; ++s) {
    d.proxy_gap[s - 1].assign(ks.size(), std::vector<std::vector<float>>(std::size_t(L - s)));
    d.proxy_ok[s - 1].assign(ks.size(), std::vector<std::vector<std::uint8_t>>(std::size_t(L - s)));
  }
  return d;
}

void add_lens_window(const lm::Model& model, const std::vector<int>& tokens, LensData& d) {
  const lm::ModelConfig& c = model.config;
  const int W = static_cast<int>(tokens.size()), L = c.n_layers, V = c.vocab_size;
  if (W == 0 || W > c.n_ctx) throw InputError(fmt::format("a calibration window of {} tokens (1..n_ctx = {})", W, c.n_ctx));
  if (d.n_layers != L || d.vocab != V) throw InputError("lens data of another model shape");
  lm::KvCache cache(c);
  lm::ForwardOptions o;
  o.hidden = true;
  o.all_logits = false;
  const lm::ForwardResult r = lm::forward(model, cache, lm::Batch::causal(tokens, 0), o);
  std::vector<lm::Matrix> lens(static_cast<std::size_t>(L));  // logits after l + 1 blocks
  for (int l = 0; l < L; ++l) lens[l] = lm::apply_head(model, r.hidden[std::size_t(l) + 1]);
  const std::size_t T0 = d.tokens(), T = T0 + std::size_t(W);
  d.final_argmax.resize(T);
  for (int l = 0; l + 1 < L; ++l) {
    d.argmax[l].resize(T);
    d.gap[l].resize(T);
  }
  for (int s = 1; s < L; ++s)
    for (auto& per_k : d.proxy_gap[s - 1])
      for (auto& v : per_k) v.resize(T);
  for (int s = 1; s < L; ++s)
    for (auto& per_k : d.proxy_ok[s - 1])
      for (auto& v : per_k) v.resize(T);
  const int kmax = d.ks.empty() ? 0 : d.ks.back();
  const int nk = static_cast<int>(d.ks.size());
  const int nthreads = threads();
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
  {
    std::vector<int> ids(V);
#pragma omp for schedule(dynamic, 8)
    for (int i = 0; i < W; ++i) {
      const std::size_t t = T0 + std::size_t(i);
      const int fin = lm::greedy_token(lens[L - 1].row(i), V);
      d.final_argmax[t] = fin;
      for (int l = 0; l + 1 < L; ++l) {
        int best = 0;
        d.gap[l][t] = static_cast<float>(top2_gap(lens[l].row(i), V, &best));
        d.argmax[l][t] = best;
      }
      if (kmax == 0) continue;
      for (int s = 1; s < L; ++s) {
        const float* zs = lens[s - 1].row(i);
        std::iota(ids.begin(), ids.end(), 0);
        std::partial_sort(ids.begin(), ids.begin() + kmax, ids.end(), [zs](int a, int b) { return zs[a] != zs[b] ? zs[a] > zs[b] : a < b; });
        for (int l = s; l < L; ++l) {
          const float* z = lens[l - 1].row(i);
          double m = -std::numeric_limits<double>::infinity();
          for (int j = 0; j < kmax; ++j) m = std::max(m, double(z[ids[j]]));
          int top1 = -1, top2 = -1, ki = 0;
          double sum = 0;
          for (int j = 0; j < kmax; ++j) {
            const float zj = z[ids[j]];
            sum += std::exp(double(zj) - m);
            if (top1 < 0 || zj > z[ids[top1]]) {
              top2 = top1;
              top1 = j;
            } else if (top2 < 0 || zj > z[ids[top2]]) {
              top2 = j;
            }
            if (j + 1 == d.ks[ki]) {
              const double p1 = std::exp(double(z[ids[top1]]) - m), p2 = top2 < 0 ? 0.0 : std::exp(double(z[ids[top2]]) - m);
              d.proxy_gap[s - 1][ki][l - s][t] = static_cast<float>((p1 - p2) / sum);
              d.proxy_ok[s - 1][ki][l - s][t] = ids[top1] == fin;
              if (++ki == nk) break;
            }
          }
        }
      }
    }
  }
  for (int i = 0; i < W; ++i) d.context_sum += i + 1;
}

std::vector<double> threshold_grid() {
  std::vector<double> g;
  for (int i = 1; i <= 19; ++i) g.push_back(i / 20.0);  // the nearest doubles to 0.05, 0.1, ...
  for (double v : {0.97, 0.98, 0.99, 0.995, 0.999}) g.push_back(v);
  return g;
}

std::vector<double> depth_agreement(const LensData& d) {
  const int L = d.n_layers;
  std::vector<double> a(std::size_t(L), 1.0);
  const double T = static_cast<double>(d.tokens());
  for (int l = 0; l + 1 < L; ++l) {
    std::size_t same = 0;
    for (std::size_t t = 0; t < d.tokens(); ++t) same += d.argmax[l][t] == d.final_argmax[t];
    a[l] = T > 0 ? same / T : 0.0;
  }
  return a;
}

std::vector<std::int64_t> saturation_histogram(const LensData& d) {
  const int L = d.n_layers;
  std::vector<std::int64_t> h(std::size_t(L), 0);
  for (std::size_t t = 0; t < d.tokens(); ++t) {
    int sat = L;
    while (sat > 1 && d.argmax[sat - 2][t] == d.final_argmax[t]) --sat;
    ++h[sat - 1];
  }
  return h;
}

namespace {

/// The exit-depth histogram of one rule: cnt[f], ok[f] for f = 0..L (f = L: no exit).
struct Hist {
  std::vector<double> cnt, ok;
};

/// Folds a histogram into a choice, the checks ending at depth `end` (tokens exiting later go
/// to the full model).  `exit_cost(f)` / `exit_head(f)` and `full_cost` / `full_head` price them.
template <class F1, class F2>
ExitChoice fold(const Hist& h, int end, int L, double T, F1 exit_cost, F2 exit_head, double full_cost, double full_head) {
  ExitChoice c;
  double agree = 0, depth = 0, exits = 0, flops = 0, head = 0;
  for (int f = 0; f <= L; ++f) {
    if (h.cnt[f] == 0) continue;
    if (f <= end && f < L) {
      agree += h.ok[f];
      depth += h.cnt[f] * f;
      exits += h.cnt[f];
      flops += h.cnt[f] * exit_cost(f);
      head += h.cnt[f] * exit_head(f);
    } else {
      agree += h.cnt[f];
      depth += h.cnt[f] * L;
      flops += h.cnt[f] * full_cost;
      head += h.cnt[f] * full_head;
    }
  }
  c.agreement = agree / T;
  c.mean_depth = depth / T;
  c.exit_rate = exits / T;
  c.flops = flops / T;
  c.head_flops = head / T;
  return c;
}

/// Whether `a` is a better pick than `b` for `target`: cheaper among those meeting it, else more accurate.
bool better(const ExitChoice& a, const ExitChoice& b, double target) {
  const bool am = a.agreement >= target, bm = b.agreement >= target;
  if (am != bm) return am;
  if (am) return a.flops < b.flops;
  return a.agreement > b.agreement;
}

Hist proxy_hist(const LensData& d, int s, int ki, double tau) {
  const int L = d.n_layers;
  Hist h{std::vector<double>(std::size_t(L) + 1, 0.0), std::vector<double>(std::size_t(L) + 1, 0.0)};
  const auto& gaps = d.proxy_gap[s - 1][ki];
  const auto& oks = d.proxy_ok[s - 1][ki];
  for (std::size_t t = 0; t < d.tokens(); ++t) {
    int f = L;
    for (int l = s; l < L; ++l)
      if (gaps[l - s][t] >= tau) {
        f = l;
        break;
      }
    h.cnt[f] += 1;
    h.ok[f] += f < L ? oks[f - s][t] : 1;
  }
  return h;
}

Hist calm_hist(const LensData& d, int m, double tau) {
  const int L = d.n_layers;
  Hist h{std::vector<double>(std::size_t(L) + 1, 0.0), std::vector<double>(std::size_t(L) + 1, 0.0)};
  for (std::size_t t = 0; t < d.tokens(); ++t) {
    int f = L;
    for (int l = m; l < L; ++l)
      if (d.gap[l - 1][t] >= tau) {
        f = l;
        break;
      }
    h.cnt[f] += 1;
    h.ok[f] += f < L ? d.argmax[f - 1][t] == d.final_argmax[t] : 1;
  }
  return h;
}

/// Settings for a choice (the search's and simulate()'s).
ExitChoice wave_fold(const LensData& d, const Hist& h, int s, int ki, double tau, int e, const StepCost& cost, ExitMethod method) {
  const int L = d.n_layers;
  const double K = d.ks[ki], T = static_cast<double>(d.tokens());
  auto head_at = [&](int f) { return cost.head + (f - s) * K * cost.head_row; };
  const double full_head = 2 * cost.head + (e - s) * K * cost.head_row;
  ExitChoice c = fold(
      h, e, L, T, [&](int f) { return cost.block * f + head_at(f) + (L - f) * cost.state_copy; }, head_at, cost.block * L + full_head, full_head);
  c.config.method = method;
  c.config.window_start = s;
  c.config.window_end = e;
  c.config.dvp_layer = s;
  c.config.proxy_k = d.ks[ki];
  c.config.threshold = tau;
  return c;
}

ExitChoice wave_choice(const LensData& d, int s, int ki, double tau, int e, const StepCost& cost, ExitMethod method) {
  return wave_fold(d, proxy_hist(d, s, ki, tau), s, ki, tau, e, cost, method);
}

ExitChoice calm_choice(const LensData& d, int m, double tau, const StepCost& cost) {
  const int L = d.n_layers;
  const Hist h = calm_hist(d, m, tau);
  auto head_at = [&](int f) { return (f - m + 1) * cost.head; };
  const double full_head = (L - m + 1) * cost.head;
  ExitChoice c = fold(
      h, L - 1, L, static_cast<double>(d.tokens()), [&](int f) { return cost.block * f + head_at(f) + (L - f) * cost.state_copy; }, head_at,
      cost.block * L + full_head, full_head);
  c.config.method = ExitMethod::calm;
  c.config.min_layer = m;
  c.config.threshold = tau;
  return c;
}

ExitChoice layerskip_choice(const LensData& d, int e, const StepCost& cost) {
  const int L = d.n_layers;
  ExitChoice c;
  c.config.method = ExitMethod::layerskip;
  c.config.exit_layer = e;
  c.agreement = depth_agreement(d)[std::size_t(e) - 1];
  c.mean_depth = e;
  c.exit_rate = e < L ? 1.0 : 0.0;
  c.head_flops = cost.head;
  c.flops = cost.block * e + cost.head + (L - e) * cost.state_copy;
  return c;
}

int k_index(const LensData& d, int k) {
  const auto it = std::find(d.ks.begin(), d.ks.end(), k);
  if (it == d.ks.end()) throw InputError(fmt::format("proxy size {} was not calibrated (calibrated: {})", k, fmt::join(d.ks, ", ")));
  return static_cast<int>(it - d.ks.begin());
}

}  // namespace

ExitChoice calibrate(const LensData& d, ExitMethod method, double target, const StepCost& cost, const ExitConfig& base) {
  if (d.tokens() == 0) throw InputError("no calibration tokens");
  const int L = d.n_layers;
  const std::vector<double> taus = threshold_grid();
  ExitChoice best;
  bool have = false;
  auto consider = [&](ExitChoice c) {
    if (!have || better(c, best, target)) best = std::move(c);
    have = true;
  };
  switch (method) {
    case ExitMethod::wave:
      for (int s = 1; s < L; ++s)
        for (int ki = 0; ki < static_cast<int>(d.ks.size()); ++ki)
          for (double tau : taus) {
            const Hist h = proxy_hist(d, s, ki, tau);
            for (int e = s; e < L; ++e) consider(wave_fold(d, h, s, ki, tau, e, cost, ExitMethod::wave));
          }
      break;
    case ExitMethod::dvp: {
      const int s = std::clamp(base.dvp_layer, 1, L - 1);
      for (int ki = 0; ki < static_cast<int>(d.ks.size()); ++ki)
        for (double tau : taus) consider(wave_choice(d, s, ki, tau, L - 1, cost, ExitMethod::dvp));
      break;
    }
    case ExitMethod::calm:
      for (int m = 1; m < L; ++m)
        for (double tau : taus) consider(calm_choice(d, m, tau, cost));
      break;
    case ExitMethod::layerskip:
      for (int e = 1; e <= L; ++e) consider(layerskip_choice(d, e, cost));
      break;
    default: throw UsageError(std::string("nothing to calibrate for ") + exit_method_name(method));
  }
  best.met = best.agreement >= target;
  return best;
}

ExitChoice simulate(const LensData& d, const ExitConfig& cfg, const StepCost& cost) {
  if (d.tokens() == 0) throw InputError("no calibration tokens");
  const int L = d.n_layers;
  ExitChoice c;
  switch (cfg.method) {
    case ExitMethod::wave: c = wave_choice(d, cfg.window_start, k_index(d, cfg.proxy_k), cfg.threshold, cfg.window_end, cost, ExitMethod::wave); break;
    case ExitMethod::dvp: c = wave_choice(d, cfg.dvp_layer, k_index(d, cfg.proxy_k), cfg.threshold, L - 1, cost, ExitMethod::dvp); break;
    case ExitMethod::calm: c = calm_choice(d, cfg.min_layer, cfg.threshold, cost); break;
    case ExitMethod::layerskip: c = layerskip_choice(d, cfg.exit_layer, cost); break;
    case ExitMethod::full:
      c.mean_depth = L;
      c.flops = cost.block * L + cost.head;
      c.head_flops = cost.head;
      break;
    case ExitMethod::skipdecode: throw UsageError("skipdecode is a schedule: nothing to simulate on the lens");
  }
  c.config = cfg;
  return c;
}

}  // namespace icmlkit::decode
