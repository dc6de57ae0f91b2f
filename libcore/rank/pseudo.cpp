#include "rank/pseudo.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <omp.h>

#include "util/error.hpp"
#include "util/threads.hpp"

namespace icmlkit::rank {

PseudoMallows::PseudoMallows(Eigen::MatrixXd logw, Perm order) : logw_(std::move(logw)), order_(std::move(order)) {
  if (logw_.rows() != logw_.cols() || logw_.rows() != static_cast<Eigen::Index>(order_.size()))
    throw InputError("Pseudo-Mallows: the weight matrix must be [n, n] for an order of n items");
  if (!is_permutation(order_)) throw InputError("Pseudo-Mallows: the variational order is not a permutation of the items");
  w_.resize(logw_.rows(), logw_.cols());
  row_max_.resize(static_cast<std::size_t>(logw_.rows()));
  for (Eigen::Index i = 0; i < logw_.rows(); ++i) {
    row_max_[static_cast<std::size_t>(i)] = logw_.row(i).maxCoeff();
    w_.row(i) = (logw_.row(i).array() - row_max_[static_cast<std::size_t>(i)]).exp();
  }
}

namespace {
// Below this total the remaining precomputed weights may have lost their relative precision
// (or all underflowed): redo the step in log space.
constexpr double tiny_total = 1e-250;
}  // namespace

// One factor step of one draw: item `item` over the m free ranks fr[0..m).  Fills the work space
// (p[v]: weight of rank fr[v]; c[v]: running sum of p within its block of four entries; bs[j]:
// running sum of the block totals), draws the entry by inverse CDF with the uniform `u01`, and
// returns its index in fr; `tot` receives the total weight and `shift` the log of the weights'
// unit (the row maximum, or the free maximum after the log-space fallback).
[[gnu::always_inline]] inline int PseudoMallows::factor_step(int item, int m, const int* fr, double* p, double* bs, double* c, double u01, double& tot,
                               double& shift) const {
  const int n = this->n();
  const double* wrow = w_.data() + static_cast<std::ptrdiff_t>(item) * n;
  // All sums are formed before the uniform is used, so the draw itself is a few comparisons
  // that do not wait on one another (no chain of subtractions, no data-dependent loop exit).
  const int full = m / 4;
  double run = 0;
  int t = 0;
  for (int j = 0; j < full; ++j, t += 4) {
    const double x0 = p[t] = wrow[fr[t]], x1 = p[t + 1] = wrow[fr[t + 1]];
    const double x2 = p[t + 2] = wrow[fr[t + 2]], x3 = p[t + 3] = wrow[fr[t + 3]];
    const double s01 = x0 + x1;
    c[t] = x0;
    c[t + 1] = s01;
    c[t + 2] = s01 + x2;
    run += s01 + (x2 + x3);
    bs[j] = run;
  }
  int nb = full;
  if (t < m) {
    double b = 0;
    for (; t < m; ++t) c[t] = (b += (p[t] = wrow[fr[t]]));
    run += b;
    bs[nb++] = run;
  }
  tot = run;
  shift = row_max_[static_cast<std::size_t>(item)];
  if (!(tot > tiny_total)) {
    double mx = -std::numeric_limits<double>::infinity();
    for (int v = 0; v < m; ++v) mx = std::max(mx, logw_(item, fr[v]));
    tot = 0;
    for (int j = 0; j < nb; ++j) {
      double b = 0;
      for (int v = 4 * j; v < std::min(m, 4 * j + 4); ++v) c[v] = (b += (p[v] = std::exp(logw_(item, fr[v]) - mx)));
      bs[j] = (tot += b);
    }
    shift = mx;
  }
  // Inverse CDF: the block j is the number of block running sums at or below u, the entry in it
  // the number of its running sums at or below what is left of u.
  const double u = u01 * tot;
  int j = 0;
  for (int b = 0; b < nb; ++b) j += (u >= bs[b]);
  if (j < nb) {
    const int lo = 4 * j, last = std::min(m, lo + 4) - 1;
    const double left = u - (j > 0 ? bs[j - 1] : 0.0);
    int k = 0;
    for (int v = lo; v < last; ++v) k += (left >= c[v]);
    if (p[lo + k] > 0) return lo + k;
  }
  // Rounding at a boundary (u at or past the total, or on a zero weight): the last positive weight.
  int pick = m - 1;
  while (pick > 0 && p[pick] == 0) --pick;
  return pick;
}

template <int L>
void PseudoMallows::sample_lanes(Rng& rng, const int* const* order, int* const* out, int* const* fr, double* const* work,
                                 double* marg, double* logq) const {
  const int n = this->n();
  const std::size_t nb_max = static_cast<std::size_t>(n + 3) / 4;
  // log q = sum_k [log w(item_k, pick_k) - log tot_k]: the first term is read from logw_ (minus the
  // shift of the weights used), the second accumulated as a product of the totals, folded into a
  // logarithm only when it leaves [1e-30, 1e30] (tot is in (1e-250, n], so the product never
  // under- or overflows): about one logarithm per draw instead of n.
  double lq[L], prod[L];
  for (int l = 0; l < L; ++l) {
    for (int t = 0; t < n; ++t) fr[l][t] = t;
    lq[l] = 0;
    prod[l] = 1;
  }
  // The L draws advance factor by factor together: each factor's pick depends on the previous
  // one's (through the free ranks), and the other lanes' independent steps fill that wait.
  for (int k = 0, m = n; k < n; ++k, --m) {
    for (int l = 0; l < L; ++l) {
      double* p = work[l];
      double* bs = p + n;
      double* c = bs + nb_max;
      const int item = order[l][k];
      double tot, shift;
      const int pick = factor_step(item, m, fr[l], p, bs, c, rng.uniform(), tot, shift);
      if (marg) {
        double* mrow = marg + static_cast<std::ptrdiff_t>(item) * n;
        const double inv = 1.0 / tot;
        for (int v = 0; v < m; ++v) mrow[fr[l][v]] += p[v] * inv;
      }
      const int r = fr[l][pick];
      lq[l] += logw_(item, r) - shift;
      prod[l] *= tot;
      if (prod[l] < 1e-30 || prod[l] > 1e30) {
        lq[l] -= std::log(prod[l]);
        prod[l] = 1;
      }
      out[l][item] = r;
      fr[l][pick] = fr[l][m - 1];
    }
  }
  for (int l = 0; l < L; ++l) logq[l] = lq[l] - std::log(prod[l]);
}

template void PseudoMallows::sample_lanes<1>(Rng&, const int* const*, int* const*, int* const*, double* const*, double*,
                                              double*) const;
template void PseudoMallows::sample_lanes<2>(Rng&, const int* const*, int* const*, int* const*, double* const*, double*,
                                              double*) const;

double PseudoMallows::sample_into(Rng& rng, int* out, int* fr, double* p, double* marg) const {
  return sample_into(rng, order_.data(), out, fr, p, marg);
}

double PseudoMallows::sample_into(Rng& rng, const int* order, int* out, int* fr, double* p, double* marg) const {
  double lq = 0;
  sample_lanes<1>(rng, &order, &out, &fr, &p, marg, &lq);
  return lq;
}

Perm PseudoMallows::sample(Rng& rng, double* logq) const {
  Perm r(static_cast<std::size_t>(n()));
  std::vector<int> fr(static_cast<std::size_t>(n()));
  std::vector<double> p(work_size(n()));
  const double lq = sample_into(rng, r.data(), fr.data(), p.data());
  if (logq) *logq = lq;
  return r;
}

namespace {
// Draws are made in blocks of this many, block b from its own stream derive_seed(seed, b).
constexpr int draw_block = 256;
static_assert(draw_block % 2 == 0, "draws go in pairs from each block's first draw, so a pair's draws are s even and s + 1");

// Threads for `count` draws of n items in `blocks` blocks: below ~1e7 proposal steps (a few ms) a
// parallel region costs more than it saves, and far more CPU time when the cores are
// oversubscribed (threads spin at the barrier).
int draw_threads(int count, int n, int blocks, int threads) {
  const bool small = static_cast<double>(count) * n * n < 1e7;
  return small ? 1 : std::max(1, std::min(threads > 0 ? threads : icmlkit::threads(), blocks));
}

// Runs `body` (which holds an orphaned `omp for` over the draw blocks) on `nt` threads; with one
// thread directly, where the `omp for` runs serially, without opening a parallel region.
template <class Body>
void run_draw_team(int nt, Body& body) {
  if (nt == 1) {
    body();
    return;
  }
#pragma omp parallel num_threads(nt)
  body();
}

// Work space of one thread's draws, taken two at a time (PseudoMallows::sample_lanes).
struct LaneSpace {
  std::vector<int> fr, obuf;
  std::vector<double> work;
  int* frs[2];
  double* works[2];
  explicit LaneSpace(int n)
      : fr(2 * static_cast<std::size_t>(n)), obuf(2 * static_cast<std::size_t>(n)), work(2 * PseudoMallows::work_size(n)) {
    frs[0] = fr.data();
    frs[1] = fr.data() + n;
    works[0] = work.data();
    works[1] = work.data() + PseudoMallows::work_size(n);
  }
};

// Draws lo..hi-1 of a block from `rng`: in pairs, and the odd last one alone.  `make_order(rng,
// buf)` gives a draw's item order (it may fill `buf` [n]), `out(s)` the rank buffer [n] of draw s,
// and `done(s, log_q)` is called for each draw once it is complete.  Marginals go to `marg`.
template <class MakeOrder, class Out, class Done>
void draw_range(const PseudoMallows& q, Rng& rng, int lo, int hi, LaneSpace& ls, double* marg, MakeOrder& make_order,
                Out out, Done done) {
  const int n = q.n();
  int s = lo;
  for (; s + 1 < hi; s += 2) {
    const int* orders[2];
    orders[0] = make_order(rng, ls.obuf.data());
    orders[1] = make_order(rng, ls.obuf.data() + n);
    int* outs[2] = {out(s), out(s + 1)};
    double lq[2];
    q.sample_lanes<2>(rng, orders, outs, ls.frs, ls.works, marg, lq);
    done(s, lq[0]);
    done(s + 1, lq[1]);
  }
  if (s < hi) {
    const int* order = make_order(rng, ls.obuf.data());
    done(s, q.sample_into(rng, order, out(s), ls.frs[0], ls.works[0], marg));
  }
}

// Draws `count` samples in blocks of 256 (block b seeded with derive_seed(seed, b)); `make_order(rng,
// buf)` returns the item order of the next draw (it may fill `buf` [n] and use `rng`).
template <class MakeOrder>
PseudoDraws draw_blocks(const PseudoMallows& q, int count, std::uint64_t seed, int threads, MakeOrder make_order) {
  if (count < 1) throw UsageError("Pseudo-Mallows: the number of draws must be >= 1");
  const int n = q.n();
  constexpr int block = draw_block;
  const int blocks = (count + block - 1) / block;
  PseudoDraws d;
  d.rho.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(n));
  d.log_q.resize(static_cast<std::size_t>(count));
  const int nt = draw_threads(count, n, blocks, threads);
  std::vector<std::vector<double>> marg(static_cast<std::size_t>(nt), std::vector<double>(static_cast<std::size_t>(n) * static_cast<std::size_t>(n), 0.0));
  auto body = [&] {
    const int tid = omp_get_thread_num();
    LaneSpace ls(n);
    double* acc = marg[static_cast<std::size_t>(tid)].data();
#pragma omp for schedule(static)
    for (int b = 0; b < blocks; ++b) {
      Rng rng(derive_seed(seed, static_cast<std::uint64_t>(b)));
      draw_range(q, rng, b * block, std::min(count, (b + 1) * block), ls, acc, make_order,
                 [&](int s) { return d.rho.data() + static_cast<std::ptrdiff_t>(s) * n; },
                 [&](int s, double lq) { d.log_q[static_cast<std::size_t>(s)] = lq; });
    }
  };
  run_draw_team(nt, body);
  // Row-major accumulators [item][rank] summed in thread order (deterministic for a fixed nt).
  d.marginals = Eigen::MatrixXd::Zero(n, n);
  for (const auto& a : marg)
    for (int i = 0; i < n; ++i)
      for (int r = 0; r < n; ++r) d.marginals(i, r) += a[static_cast<std::size_t>(i) * static_cast<std::size_t>(n) + static_cast<std::size_t>(r)];
  d.marginals /= static_cast<double>(count);
  return d;
}

// The V order of the consensus `c` (items by mean rank) into `out` [n]: for odd n the middle item
// first, then pair k = 0, 1, ... (k = 0 nearest the middle), the worse item first when
// worse_first(k) is true.
template <class WorseFirst>
void fill_v_order(const int* c, std::size_t n, int* out, WorseFirst worse_first) {
  std::size_t at = 0;
  if (n % 2 == 1) out[at++] = c[n / 2];
  const std::size_t pairs = n / 2;
  for (std::size_t k = 0; k < pairs; ++k) {
    const std::size_t lo = pairs - 1 - k, hi = n - 1 - lo;
    const bool flip = worse_first(k);
    out[at++] = c[flip ? hi : lo];
    out[at++] = c[flip ? lo : hi];
  }
}
}  // namespace

PseudoDraws draw_pseudo(const PseudoMallows& q, int count, std::uint64_t seed, int threads) {
  const int* order = q.order().data();
  return draw_blocks(q, count, seed, threads, [order](Rng&, int*) { return order; });
}

PseudoDraws draw_pseudo_v_mixture(const PseudoMallows& q, const Perm& consensus, int count, std::uint64_t seed, int threads) {
  if (static_cast<int>(consensus.size()) != q.n() || !is_permutation(consensus))
    throw InputError("Pseudo-Mallows V mixture: the consensus must be a permutation of q's items");
  const int* c = consensus.data();
  const std::size_t n = consensus.size();
  return draw_blocks(q, count, seed, threads, [c, n](Rng& rng, int* buf) {
    // The orientation coins come from the bits of one 64-bit number per 64 pairs.
    fill_v_order(c, n, buf, [&rng, bits = std::uint64_t{0}, left = 0](std::size_t) mutable {
      if (left == 0) {
        bits = rng.bits();
        left = 64;
      }
      const bool worse_first = bits & 1;
      bits >>= 1;
      --left;
      return worse_first;
    });
    return static_cast<const int*>(buf);
  });
}

double PseudoMallows::log_q(const Perm& r) const {
  const int n = this->n();
  std::vector<char> used(static_cast<std::size_t>(n), 0);
  double lq = 0;
  for (int k = 0; k < n; ++k) {
    const int item = order_[static_cast<std::size_t>(k)];
    double mx = -std::numeric_limits<double>::infinity();
    for (int s = 0; s < n; ++s)
      if (!used[static_cast<std::size_t>(s)]) mx = std::max(mx, logw_(item, s));
    double tot = 0;
    for (int s = 0; s < n; ++s)
      if (!used[static_cast<std::size_t>(s)]) tot += std::exp(logw_(item, s) - mx);
    const int rr = r[static_cast<std::size_t>(item)];
    lq += logw_(item, rr) - mx - std::log(tot);
    used[static_cast<std::size_t>(rr)] = 1;
  }
  return lq;
}

double PseudoMallows::log_target(const Perm& r) const {
  double s = 0;
  for (int i = 0; i < n(); ++i) s += logw_(i, r[static_cast<std::size_t>(i)]);
  return s;
}

namespace {
// Mean and its standard error from the sum and the sum of squares of `samples` values.
KlEstimate mean_and_se(double s1, double s2, int samples) {
  const double mean = s1 / samples;
  const double var = std::max(0.0, s2 / samples - mean * mean);
  return {mean, std::sqrt(var / samples)};
}
}  // namespace

KlEstimate neg_elbo(const PseudoMallows& q, int samples, Rng& rng) {
  const int n = q.n();
  std::vector<int> r(static_cast<std::size_t>(n)), fr(static_cast<std::size_t>(n));
  std::vector<double> p(PseudoMallows::work_size(n));
  double s1 = 0, s2 = 0;
  for (int s = 0; s < samples; ++s) {
    const double lq = q.sample_into(rng, r.data(), fr.data(), p.data());
    const double v = lq - q.log_target(r);
    s1 += v;
    s2 += v * v;
  }
  return mean_and_se(s1, s2, samples);
}

KlEstimate neg_elbo(const PseudoMallows& q, int samples, std::uint64_t seed, int threads) {
  // The draws of draw_pseudo(q, samples, seed): the same blocks and block seeds, but neither the
  // draws nor the marginals are kept.  Per-block sums added in block order (thread-independent).
  if (samples < 1) throw UsageError("Pseudo-Mallows: the number of draws must be >= 1");
  const int n = q.n();
  const int blocks = (samples + draw_block - 1) / draw_block;
  std::vector<double> b1(static_cast<std::size_t>(blocks)), b2(static_cast<std::size_t>(blocks));
  const int nt = draw_threads(samples, n, blocks, threads);
  const int* order = q.order().data();
  auto fixed_order = [order](Rng&, int*) { return order; };
  auto body = [&] {
    LaneSpace ls(n);
    std::vector<int> r(2 * static_cast<std::size_t>(n));  // the ranks of a pair of draws
#pragma omp for schedule(static)
    for (int b = 0; b < blocks; ++b) {
      Rng rng(derive_seed(seed, static_cast<std::uint64_t>(b)));
      double s1 = 0, s2 = 0;
      draw_range(q, rng, b * draw_block, std::min(samples, (b + 1) * draw_block), ls, nullptr, fixed_order,
                 [&](int s) { return r.data() + (s % 2) * n; },
                 [&](int s, double lq) {
                   const int* rs = r.data() + (s % 2) * n;
                   double lt = 0;
                   for (int i = 0; i < n; ++i) lt += q.log_weight(i, rs[i]);
                   const double v = lq - lt;
                   s1 += v;
                   s2 += v * v;
                 });
      b1[static_cast<std::size_t>(b)] = s1;
      b2[static_cast<std::size_t>(b)] = s2;
    }
  };
  run_draw_team(nt, body);
  double s1 = 0, s2 = 0;
  for (int b = 0; b < blocks; ++b) {
    s1 += b1[static_cast<std::size_t>(b)];
    s2 += b2[static_cast<std::size_t>(b)];
  }
  return mean_and_se(s1, s2, samples);
}

KlEstimate neg_elbo(const PseudoMallows& q, const PseudoDraws& d) {
  const int n = q.n();
  const int samples = static_cast<int>(d.log_q.size());
  double s1 = 0, s2 = 0;
  Perm r(static_cast<std::size_t>(n));
  for (int s = 0; s < samples; ++s) {
    std::copy_n(d.rho.begin() + static_cast<std::ptrdiff_t>(s) * n, n, r.begin());
    const double v = d.log_q[static_cast<std::size_t>(s)] - q.log_target(r);
    s1 += v;
    s2 += v * v;
  }
  return mean_and_se(s1, s2, samples);
}

ReweightedMarginals reweight_draws(const PseudoMallows& q, const PseudoDraws& d) {
  const int n = q.n();
  const auto count = d.log_q.size();
  if (count == 0) throw UsageError("Pseudo-Mallows reweighting: no draws");
  std::vector<double> lw(count);
  double mx = -std::numeric_limits<double>::infinity();
  for (std::size_t s = 0; s < count; ++s) {
    const int* r = d.rho.data() + static_cast<std::ptrdiff_t>(s) * n;
    double lt = 0;
    for (int i = 0; i < n; ++i) lt += q.log_weight(i, r[i]);
    lw[s] = lt - d.log_q[s];
    mx = std::max(mx, lw[s]);
  }
  double s1 = 0, s2 = 0;
  for (double& w : lw) {
    w = std::exp(w - mx);
    s1 += w;
    s2 += w * w;
  }
  ReweightedMarginals out;
  out.marginals = Eigen::MatrixXd::Zero(n, n);
  for (std::size_t s = 0; s < count; ++s) {
    const int* r = d.rho.data() + static_cast<std::ptrdiff_t>(s) * n;
    const double w = lw[s] / s1;
    for (int i = 0; i < n; ++i) out.marginals(i, r[i]) += w;
    out.max_weight = std::max(out.max_weight, w);
  }
  out.ess = s1 * s1 / s2;
  return out;
}

namespace {
Perm order_by(const RankMatrix& ranks, bool variance) {
  const int n = static_cast<int>(ranks.cols());
  std::vector<double> key(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    double s = 0, s2 = 0;
    int c = 0;
    for (Eigen::Index j = 0; j < ranks.rows(); ++j)
      if (ranks(j, i) != missing_rank) {
        s += ranks(j, i);
        s2 += static_cast<double>(ranks(j, i)) * ranks(j, i);
        ++c;
      }
    const double mean = c ? s / c : (n - 1) / 2.0;
    key[static_cast<std::size_t>(i)] = variance ? (c ? s2 / c - mean * mean : 1e300) : mean;
  }
  Perm o(static_cast<std::size_t>(n));
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int a, int b) { return key[static_cast<std::size_t>(a)] < key[static_cast<std::size_t>(b)]; });
  return o;
}
}  // namespace

Perm mean_rank_order(const RankMatrix& ranks) { return order_by(ranks, false); }

Perm ends_inward_order(const RankMatrix& ranks) {
  const Perm by_mean = order_by(ranks, false);
  Perm o;
  o.reserve(by_mean.size());
  for (std::size_t lo = 0, hi = by_mean.size(); lo < hi;) {
    o.push_back(by_mean[lo++]);
    if (lo < hi) o.push_back(by_mean[--hi]);
  }
  return o;
}
Perm middle_out_order(const RankMatrix& ranks) {
  Perm o = ends_inward_order(ranks);
  std::reverse(o.begin(), o.end());
  return o;
}

Perm variance_order(const RankMatrix& ranks) { return order_by(ranks, true); }

Perm v_order(const RankMatrix& ranks, const std::vector<char>& worse_first) {
  // c: items by mean observed rank (= column sum for complete data), ties by item index.
  const Perm by_mean = order_by(ranks, false);
  Perm o(by_mean.size());
  fill_v_order(by_mean.data(), by_mean.size(), o.data(), [&](std::size_t k) { return k < worse_first.size() && worse_first[k]; });
  return o;
}

Perm v_order(const RankMatrix& ranks, Rng& rng) {
  std::vector<char> w(static_cast<std::size_t>(ranks.cols()) / 2);
  for (auto& b : w) b = rng.uniform() < 0.5;
  return v_order(ranks, w);
}

Perm v_order_search(const Eigen::MatrixXd& logw, const RankMatrix& ranks, std::vector<char> worse_first, int samples,
                    std::uint64_t seed, double* best_value, int threads) {
  const std::size_t pairs = static_cast<std::size_t>(ranks.cols()) / 2;
  worse_first.resize(pairs, 0);
  auto score = [&](const std::vector<char>& w) { return neg_elbo(PseudoMallows(logw, v_order(ranks, w)), samples, seed, threads).value; };
  double bv = score(worse_first);
  for (std::size_t k = 0; k < pairs; ++k) {
    worse_first[k] = !worse_first[k];
    const double v = score(worse_first);
    if (v < bv)
      bv = v;
    else
      worse_first[k] = !worse_first[k];
  }
  if (best_value) *best_value = bv;
  return v_order(ranks, worse_first);
}

Perm search_order(const Eigen::MatrixXd& logw, Perm start, int iterations, int samples, std::uint64_t seed, double* best_value) {
  auto score = [&](const Perm& o) {
    Rng rng(derive_seed(seed, 77));  // common random numbers for every candidate
    return neg_elbo(PseudoMallows(logw, o), samples, rng).value;
  };
  Perm best = std::move(start);
  double bv = score(best);
  Rng prop(derive_seed(seed, 78));
  const auto n = static_cast<std::uint64_t>(best.size());
  for (int it = 0; it < iterations && n > 1; ++it) {
    Perm cand = best;
    const auto a = prop.below(n);
    auto b = prop.below(n - 1);
    if (b >= a) ++b;
    std::swap(cand[a], cand[b]);
    const double v = score(cand);
    if (v < bv) {
      bv = v;
      best = std::move(cand);
    }
  }
  if (best_value) *best_value = bv;
  return best;
}

}  // namespace icmlkit::rank
