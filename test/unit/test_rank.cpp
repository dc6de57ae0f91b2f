// rank/: distances, partition functions, exact subset DP, leap-and-shift MCMC, Pseudo-Mallows.
// Every expected value comes from brute force over all permutations, a breadth-first search over
// the distance's defining moves, a published BayesMallows value, or a numerical integral.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <unistd.h>

#include "rank/distance.hpp"
#include "rank/exact.hpp"
#include "rank/mcmc.hpp"
#include "rank/partition.hpp"
#include "rank/pseudo.hpp"
#include "rank/ranking.hpp"
#include "rank/summary.hpp"
#include "util/error.hpp"

using namespace icmlkit;
using namespace icmlkit::rank;

namespace {

std::vector<Perm> all_perms(int n) {
  Perm p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  std::vector<Perm> out;
  do out.push_back(p);
  while (std::next_permutation(p.begin(), p.end()));
  return out;
}

Perm identity(int n) {
  Perm p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

Perm random_perm(int n, Rng& rng) {
  Perm p = identity(n);
  for (int k = n - 1; k > 0; --k) std::swap(p[static_cast<std::size_t>(k)], p[rng.below(static_cast<std::uint64_t>(k) + 1)]);
  return p;
}

// Graph distance from the identity ranking under a move set, by breadth-first search over S_n.
std::map<Perm, int> bfs(int n, const std::function<std::vector<Perm>(const Perm&)>& moves) {
  std::map<Perm, int> dist;
  std::deque<Perm> q;
  dist[identity(n)] = 0;
  q.push_back(identity(n));
  while (!q.empty()) {
    const Perm p = q.front();
    q.pop_front();
    for (const auto& nb : moves(p))
      if (!dist.count(nb)) {
        dist[nb] = dist[p] + 1;
        q.push_back(nb);
      }
  }
  return dist;
}

// log sum over all permutations of exp(-(alpha/n) d(sigma, id)).
double brute_log_z(int n, double alpha, Metric m) {
  double s = 0;
  const Perm id = identity(n);
  for (const auto& p : all_perms(n)) s += std::exp(-alpha / n * distance(p, id, m));
  return std::log(s);
}

RankMatrix random_ranks(int N, int n, std::uint64_t seed) {
  Rng rng(seed);
  RankMatrix R(N, n);
  for (int j = 0; j < N; ++j) {
    // Noisy copies of the identity: a few random adjacent swaps.
    Perm p = identity(n);
    for (int k = 0; k < 2; ++k) {
      const auto a = rng.below(static_cast<std::uint64_t>(n - 1));
      std::swap(p[a], p[a + 1]);
    }
    for (int i = 0; i < n; ++i) R(j, i) = p[static_cast<std::size_t>(i)];
  }
  return R;
}

// Exact posterior marginals of rho over S_n: weight(rho) given by `logw`.
Eigen::MatrixXd brute_marginals(int n, const std::function<double(const Perm&)>& logw) {
  Eigen::MatrixXd p = Eigen::MatrixXd::Zero(n, n);
  double tot = 0;
  for (const auto& r : all_perms(n)) {
    const double w = std::exp(logw(r));
    tot += w;
    for (int i = 0; i < n; ++i) p(i, r[static_cast<std::size_t>(i)]) += w;
  }
  return p / tot;
}

// Exact rho marginals when assessor j's complete ranking is latent, restricted to the rankings c
// with allowed(j, c): p(rho) ∝ prod_j sum_{allowed c} exp(-(alpha/n) d_footrule(c, rho)).
Eigen::MatrixXd latent_marginals(int n, int assessors, double alpha, const std::function<bool(int, const Perm&)>& allowed) {
  const auto perms = all_perms(n);
  return brute_marginals(n, [&](const Perm& rho) {
    double lw = 0;
    for (int j = 0; j < assessors; ++j) {
      double s = 0;
      for (const auto& c : perms)
        if (allowed(j, c)) s += std::exp(-alpha / n * distance(c, rho, Metric::footrule));
      lw += std::log(s);
    }
    return lw;
  });
}

// Sampler settings with alpha fixed, 200,000 iterations.
McmcOptions fixed_alpha(double alpha) {
  McmcOptions o;
  o.fix_alpha = true;
  o.alpha_init = alpha;
  o.iterations = 200000;
  o.burnin = 1000;
  return o;
}

}  // namespace

TEST_CASE("rank: distances equal their defining move counts on all of S_6") {
  // Truth: Kendall = fewest adjacent transpositions, Cayley = fewest transpositions, Ulam = fewest
  // remove-and-reinsert moves (breadth-first search over the 720 rankings).  Footrule, Spearman
  // and Hamming are checked against their sums written out here.
  const int n = 6;
  // Transpositions of two items; Kendall allows only items at adjacent ranks.
  auto transpositions = [&](bool adjacent) {
    return [&, adjacent](const Perm& p) {
      std::vector<Perm> out;
      for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j) {
          if (adjacent && std::abs(p[static_cast<std::size_t>(i)] - p[static_cast<std::size_t>(j)]) != 1) continue;
          Perm q = p;
          std::swap(q[static_cast<std::size_t>(i)], q[static_cast<std::size_t>(j)]);
          out.push_back(q);
        }
      return out;
    };
  };
  auto kendall = bfs(n, transpositions(true));
  auto cayley = bfs(n, transpositions(false));
  auto ulam = bfs(n, [&](const Perm& p) {
    std::vector<Perm> out;
    Perm o = inverse(p);
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        if (a == b) continue;
        Perm q = o;
        const int item = q[static_cast<std::size_t>(a)];
        q.erase(q.begin() + a);
        q.insert(q.begin() + b, item);
        out.push_back(inverse(q));
      }
    return out;
  });
  const Perm id = identity(n);
  for (const auto& p : all_perms(n)) {
    CHECK(distance(p, id, Metric::kendall) == kendall.at(p));
    CHECK(distance(p, id, Metric::cayley) == cayley.at(p));
    CHECK(distance(p, id, Metric::ulam) == ulam.at(p));
    double f = 0, s = 0, h = 0;
    for (int i = 0; i < n; ++i) {
      const int d = p[static_cast<std::size_t>(i)] - i;
      f += std::abs(d);
      s += d * d;
      h += d != 0;
    }
    CHECK(distance(p, id, Metric::footrule) == f);
    CHECK(distance(p, id, Metric::spearman) == s);
    CHECK(distance(p, id, Metric::hamming) == h);
  }
}

TEST_CASE("rank: every distance is right-invariant and symmetric") {
  // d(r1, r2) = d(r1 o tau, r2 o tau) (relabelling items) = d(r2, r1): the property that makes
  // Z_n(alpha) independent of rho.  Random pairs at n = 9.
  Rng rng(5);
  for (int m = 0; m < 6; ++m)
    for (int t = 0; t < 50; ++t) {
      const Perm a = random_perm(9, rng), b = random_perm(9, rng), tau = random_perm(9, rng);
      Perm at(9), bt(9);
      for (int i = 0; i < 9; ++i) {
        at[static_cast<std::size_t>(i)] = a[static_cast<std::size_t>(tau[static_cast<std::size_t>(i)])];
        bt[static_cast<std::size_t>(i)] = b[static_cast<std::size_t>(tau[static_cast<std::size_t>(i)])];
      }
      const auto mm = static_cast<Metric>(m);
      CHECK(distance(a, b, mm) == distance(at, bt, mm));
      CHECK(distance(a, b, mm) == distance(b, a, mm));
    }
}

TEST_CASE("rank: log Z equals full enumeration for n <= 8, every distance") {
  // Truth: sum over all n! permutations (distances verified above).  Tolerance 1e-10 relative
  // (double rounding of sums of at most 40320 terms).
  for (int n = 1; n <= 8; ++n)
    for (int m = 0; m < 6; ++m)
      for (double alpha : {0.0, 0.5, 3.0, 12.0}) {
        const auto mm = static_cast<Metric>(m);
        CAPTURE(n);
        CAPTURE(m);
        CAPTURE(alpha);
        CHECK(log_z(n, alpha, mm) == doctest::Approx(brute_log_z(n, alpha, mm)).epsilon(1e-10));
      }
}

TEST_CASE("rank: log Z at n = 10, alpha = 3 equals the BayesMallows values") {
  // Published in BayesMallows' tests (shared/data/README.md); 14 digits given.
  CHECK(log_z(10, 3.0, Metric::kendall) == doctest::Approx(9.69641008390133).epsilon(1e-12));
  CHECK(log_z(10, 3.0, Metric::cayley) == doctest::Approx(13.0481794289176).epsilon(1e-12));
  CHECK(log_z(10, 3.0, Metric::hamming) == doctest::Approx(12.4542713806513).epsilon(1e-12));
  // And the other three against enumeration of all 10! = 3,628,800 permutations would take
  // seconds; n = 9 enumeration checks them at the next size up instead.
  for (auto m : {Metric::footrule, Metric::spearman, Metric::ulam})
    CHECK(log_z(9, 3.0, m) == doctest::Approx(brute_log_z(9, 3.0, m)).epsilon(1e-10));
}

TEST_CASE("rank: exact footrule, Spearman and Ulam counts match enumeration") {
  // Truth: the distance histogram over all n! permutations, n <= 8; and sum = n! exactly at the
  // largest sizes (20! fits 64 bits; 34! needs the 128-bit counts).
  for (int n = 1; n <= 8; ++n) {
    std::vector<double> f(static_cast<std::size_t>(n * n / 2 + 1), 0), s(static_cast<std::size_t>((n * n * n - n) / 3 + 1), 0),
        u(static_cast<std::size_t>(n), 0);
    const Perm id = identity(n);
    for (const auto& p : all_perms(n)) {
      f[static_cast<std::size_t>(distance(p, id, Metric::footrule))] += 1;
      s[static_cast<std::size_t>(distance(p, id, Metric::spearman))] += 1;
      u[static_cast<std::size_t>(distance(p, id, Metric::ulam))] += 1;
    }
    const auto fc = footrule_counts(n);
    const auto sc = spearman_counts(n);
    const auto uc = ulam_log_counts(n);
    for (std::size_t k = 0; k < fc.size(); ++k) CHECK(static_cast<double>(fc[k]) == f[2 * k]);
    for (std::size_t k = 0; k < sc.size(); ++k) CHECK(static_cast<double>(sc[k]) == s[2 * k]);
    for (std::size_t k = 0; k < uc.size(); ++k) CHECK(std::exp(uc[k]) == doctest::Approx(u[k]).epsilon(1e-10));
  }
  unsigned __int128 fact = 1;
  for (int k = 2; k <= 34; ++k) fact *= static_cast<unsigned __int128>(k);
  const auto c34 = footrule_counts(34);
  unsigned __int128 sum = 0;
  for (auto v : c34) sum += v;
  CHECK(sum == fact);
  std::uint64_t f12 = 1, s12 = 0;
  for (int k = 2; k <= 12; ++k) f12 *= static_cast<std::uint64_t>(k);
  for (auto v : spearman_counts(12)) s12 += v;
  CHECK(s12 == f12);
  CHECK_THROWS_AS(footrule_counts(35), InputError);
  CHECK_THROWS_AS(spearman_counts(13), InputError);
}

TEST_CASE("rank: log Z from the counts agrees with the weighted recursions beyond enumeration") {
  // Two independent exact routes: counts N(d) (integers) vs the weighted footrule recursion and
  // the Spearman subset-DP permanent.  Tolerance 1e-11 relative.
  for (double alpha : {0.7, 3.0, 20.0}) {
    const int n = 12;
    double zf = 0, zs = 0;
    const auto fc = footrule_counts(n);
    for (std::size_t k = 0; k < fc.size(); ++k) zf += static_cast<double>(fc[k]) * std::exp(-alpha / n * 2.0 * static_cast<double>(k));
    const auto sc = spearman_counts(n);
    for (std::size_t k = 0; k < sc.size(); ++k) zs += static_cast<double>(sc[k]) * std::exp(-alpha / n * 2.0 * static_cast<double>(k));
    CHECK(log_z(n, alpha, Metric::footrule) == doctest::Approx(std::log(zf)).epsilon(1e-11));
    CHECK(log_z(n, alpha, Metric::spearman) == doctest::Approx(std::log(zs)).epsilon(1e-11));
  }
  // Footrule at n = 30 from the 128-bit counts (log-sum in long double) vs the recursion.
  const auto fc = footrule_counts(30);
  long double z = 0;
  for (std::size_t k = 0; k < fc.size(); ++k) z += static_cast<long double>(fc[k]) * std::exp(-3.0L / 30 * 2 * static_cast<long double>(k));
  CHECK(log_z(30, 3.0, Metric::footrule) == doctest::Approx(static_cast<double>(std::log(z))).epsilon(1e-12));
}

TEST_CASE("rank: importance-sampling log Z is within its error of the exact value") {
  // Truth: exact log Z (n = 10 and 15).  Bound: 5 standard errors + 1e-3 (delta-method se).
  // The se and ESS bounds only guard against a degenerate proposal: se < 0.1 means a weight
  // variance below 200 mean^2 at 20,000 draws, i.e. an ESS above ~100 (the se itself is random).
  Rng rng(11);
  for (auto m : {Metric::footrule, Metric::spearman, Metric::ulam, Metric::kendall})
    for (int n : {10, 15}) {
      const auto e = log_z_importance(n, 3.0, m, 20000, rng);
      CAPTURE(n);
      CHECK(std::abs(e.value - log_z(n, 3.0, m)) < 5 * e.se + 1e-3);
      CHECK(e.se < 0.1);
      CHECK(e.ess > 100);
    }
}

TEST_CASE("rank: PartitionFunction interpolates within 1e-4 and names its method") {
  PartitionFunction pf(16, Metric::spearman);
  CHECK(pf.method() == "subset DP");
  for (double a : {0.5, 2.0, 7.3}) CHECK(std::abs(pf(a) - log_z(16, a, Metric::spearman)) < 1e-4);
  PartitionFunction pk(30, Metric::kendall);
  CHECK(pk.method() == "closed form");
  CHECK(pk(2.5) == log_z(30, 2.5, Metric::kendall));
  CHECK(PartitionFunction(60, Metric::ulam).method() == "importance sampling");
}

TEST_CASE("rank: subset DP gives the exact normaliser, marginals and draws") {
  // Truth: enumeration of the 720 rankings of n = 6 under random log weights.
  Rng rng(3);
  const int n = 6;
  Eigen::MatrixXd lw(n, n);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r) lw(i, r) = 2 * rng.normal();
  const SubsetPosterior sp(lw);
  double z = 0;
  for (const auto& p : all_perms(n)) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += lw(i, p[static_cast<std::size_t>(i)]);
    z += std::exp(s);
  }
  CHECK(sp.log_normaliser() == doctest::Approx(std::log(z)).epsilon(1e-12));
  const auto exact = brute_marginals(n, [&](const Perm& p) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += lw(i, p[static_cast<std::size_t>(i)]);
    return s;
  });
  CHECK(max_marginal_tv(sp.marginals(), exact) < 1e-12);
  // 40,000 exact draws: each marginal within 5 binomial sd (<= 0.0025) of the truth.
  std::vector<int> draws;
  Rng r2(4);
  for (int s = 0; s < 40000; ++s) {
    const Perm p = sp.sample(r2);
    draws.insert(draws.end(), p.begin(), p.end());
  }
  CHECK((marginals_from_draws(draws, n) - exact).cwiseAbs().maxCoeff() < 5 * 0.5 / std::sqrt(40000.0));
  CHECK(std::exp(sp.log_prob(identity(n))) > 0);
}

TEST_CASE("rank: subset DP survives log weights spanning thousands of nats") {
  // Truth: log-sum-exp over the 720 rankings of n = 6 and the argmax's marginals (= 1 when one
  // ranking dominates).  Weights ~ N(0, 1000^2), the scale of sushi's 5,000 assessors, where any
  // fixed rescaling of exp(L) under/overflows.
  Rng rng(8);
  const int n = 6;
  Eigen::MatrixXd lw(n, n);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r) lw(i, r) = 1000 * rng.normal() - 3000;
  double mx = -1e300;
  std::vector<double> v;
  Perm best;
  for (const auto& p : all_perms(n)) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += lw(i, p[static_cast<std::size_t>(i)]);
    v.push_back(s);
    if (s > mx) { mx = s; best = p; }
  }
  double acc = 0;
  for (double x : v) acc += std::exp(x - mx);
  const SubsetPosterior sp(lw);
  CHECK(sp.log_normaliser() == doctest::Approx(mx + std::log(acc)).epsilon(1e-12));
  const auto m = sp.marginals();
  CHECK(m.allFinite());
  for (int i = 0; i < n; ++i) CHECK(m(i, best[static_cast<std::size_t>(i)]) == doctest::Approx(1.0).epsilon(1e-9));
}

TEST_CASE("rank: leap-and-shift keeps a permutation and is reversible with the stated ratio") {
  // The returned log ratio must make the proposal satisfy detailed balance for the uniform
  // target: over 400,000 proposals from every start in S_4, the empirical transition matrix T
  // obeys T(a->b) exp(ratio(a->b)) = T(b->a) within 4 sd.
  const int n = 4;
  const auto perms = all_perms(n);
  std::map<Perm, int> idx;
  for (std::size_t k = 0; k < perms.size(); ++k) idx[perms[k]] = static_cast<int>(k);
  const int P = static_cast<int>(perms.size());
  Eigen::MatrixXd T = Eigen::MatrixXd::Zero(P, P), R = Eigen::MatrixXd::Zero(P, P);
  Rng rng(9);
  const int per = 20000;
  Perm out;
  for (int a = 0; a < P; ++a)
    for (int s = 0; s < per; ++s) {
      const double lr = leap_and_shift(perms[static_cast<std::size_t>(a)], 2, rng, out);
      REQUIRE(is_permutation(out));
      const int b = idx.at(out);
      T(a, b) += 1.0 / per;
      R(a, b) = lr;
    }
  for (int a = 0; a < P; ++a)
    for (int b = 0; b < P; ++b) {
      if (T(a, b) == 0) {
        CHECK(T(b, a) == 0);
        continue;
      }
      const double lhs = T(a, b) * std::exp(R(a, b));
      const double sd = std::sqrt(std::max(T(a, b), T(b, a)) / per) * 2;
      CHECK(std::abs(lhs - T(b, a)) < 4 * sd + 1e-9);
    }
}

TEST_CASE("rank: item-wise log weights sum to the Mallows log likelihood of every ranking") {
  // Truth: sum_i L(i, r_i) = -(alpha/n) sum_j d(R_j, r), with d the whole-ranking distance, for
  // every r of n = 7 items; fewer and more assessors than items, each item-wise metric.
  const int n = 7;
  const double alpha = 1.7;
  for (const int N : {3, 40}) {
    const RankMatrix R = random_ranks(N, n, 30 + static_cast<std::uint64_t>(N));
    for (const Metric m : {Metric::footrule, Metric::spearman, Metric::hamming}) {
      CAPTURE(N);
      CAPTURE(metric_name(m));
      const Eigen::MatrixXd lw = itemwise_log_weights(R, alpha, m);
      double worst = 0;
      for (const Perm& r : all_perms(n)) {
        double lhs = 0, d = 0;
        for (int i = 0; i < n; ++i) lhs += lw(i, r[static_cast<std::size_t>(i)]);
        for (Eigen::Index j = 0; j < R.rows(); ++j) {
          Perm rj(static_cast<std::size_t>(n));
          for (int i = 0; i < n; ++i) rj[static_cast<std::size_t>(i)] = R(j, i);
          d += distance(rj, r, m);
        }
        worst = std::max(worst, std::abs(lhs + alpha / n * d));
      }
      CHECK(worst < 1e-9);
    }
  }
}

TEST_CASE("rank: MCMC with fixed alpha converges to the exact posterior (footrule, L = 2)") {
  // Truth: subset-DP marginals.  Tolerance: max TV 0.03 after 200,000 iterations of a well-mixing
  // chain on n = 6 (Monte Carlo error ~0.005).
  const RankMatrix R = random_ranks(5, 6, 21);
  MallowsData d;
  d.n_items = 6;
  d.ranks = R;
  McmcOptions o;
  o.fix_alpha = true;
  o.alpha_init = 2.0;
  o.iterations = 200000;
  o.burnin = 1000;
  o.leap_size = 2;
  o.chains = 2;
  const auto res = run_mcmc(d, o);
  std::vector<int> all;
  for (const auto& c : res.chains) all.insert(all.end(), c.rho.begin(), c.rho.end());
  const SubsetPosterior sp(itemwise_log_weights(R, 2.0, Metric::footrule));
  CHECK(max_marginal_tv(marginals_from_draws(all, 6), sp.marginals()) < 0.03);
}

TEST_CASE("rank: MCMC with a non-item-wise distance matches enumeration (Kendall, Ulam)") {
  const RankMatrix R = random_ranks(4, 5, 22);
  for (auto m : {Metric::kendall, Metric::ulam}) {
    MallowsData d;
    d.n_items = 5;
    d.ranks = R;
    McmcOptions o;
    o.metric = m;
    o.fix_alpha = true;
    o.alpha_init = 3.0;
    o.iterations = 150000;
    o.burnin = 1000;
    const auto res = run_mcmc(d, o);
    const auto exact = brute_marginals(5, [&](const Perm& p) {
      double s = 0;
      for (int j = 0; j < 4; ++j) s += distance(&R(j, 0), p.data(), 5, m);
      return -3.0 / 5 * s;
    });
    CHECK(max_marginal_tv(marginals_from_draws(res.chains[0].rho, 5), exact) < 0.03);
  }
}

TEST_CASE("rank: MCMC posterior mean of alpha matches numerical integration") {
  // Truth: p(alpha | R) ∝ exp(-lambda alpha) sum_rho exp(-(alpha/n) D(rho)) / Z(alpha)^N on a fine
  // grid (trapezoid, 20,000 points to alpha = 40), n = 4, N = 6, footrule.  Tolerance 3% of the
  // mean (MCMC error of 4 x 60,000 correlated draws ~1%).
  const int n = 4, N = 6;
  const RankMatrix R = random_ranks(N, n, 23);
  const double lambda = 0.1;
  double num = 0, den = 0;
  for (int g = 1; g <= 20000; ++g) {
    const double a = 40.0 * g / 20000;
    double s = 0;
    for (const auto& p : all_perms(n)) {
      double D = 0;
      for (int j = 0; j < N; ++j) D += distance(&R(j, 0), p.data(), n, Metric::footrule);
      s += std::exp(-a / n * D);
    }
    const double w = std::exp(-lambda * a - N * log_z(n, a, Metric::footrule)) * s;
    num += a * w;
    den += w;
  }
  MallowsData d;
  d.n_items = n;
  d.ranks = R;
  McmcOptions o;
  o.lambda = lambda;
  o.iterations = 62000;
  o.burnin = 2000;
  o.alpha_prop_sd = 0.5;
  o.chains = 4;
  const auto res = run_mcmc(d, o);
  double m = 0;
  std::vector<std::vector<double>> ch;
  for (const auto& c : res.chains) {
    m += std::accumulate(c.alpha.begin(), c.alpha.end(), 0.0) / static_cast<double>(c.alpha.size()) / 4;
    ch.push_back(c.alpha);
  }
  CHECK(m == doctest::Approx(num / den).epsilon(0.03));
  CHECK(rhat(ch) < 1.05);
}

TEST_CASE("rank: augmentation of missing ranks targets the exact partial-data posterior") {
  // Truth: p(rho | R_obs) ∝ prod_j sum over completions of R_j of exp(-(alpha/n) d(R_j, rho))
  // (fixed alpha, so Z cancels), by enumeration at n = 5.  One row has exactly one missing rank.
  const int n = 5;
  RankMatrix R = random_ranks(4, n, 24);
  R(0, 1) = missing_rank;
  R(0, 3) = missing_rank;
  R(1, 4) = missing_rank;  // exactly one missing: its rank is determined
  R(2, 0) = missing_rank;
  R(2, 2) = missing_rank;
  R(2, 4) = missing_rank;
  const double alpha = 2.5;
  const auto perms = all_perms(n);
  auto compatible = [&](int j, const Perm& c) -> bool {
    for (int i = 0; i < n; ++i)
      if (R(j, i) != missing_rank && R(j, i) != c[static_cast<std::size_t>(i)]) return false;
    return true;
  };
  const auto exact = latent_marginals(n, 4, alpha, compatible);
  MallowsData d;
  d.n_items = n;
  d.ranks = R;
  const McmcOptions o = fixed_alpha(alpha);
  const auto res = run_mcmc(d, o);
  CHECK(max_marginal_tv(marginals_from_draws(res.chains[0].rho, n), exact) < 0.03);
}

TEST_CASE("rank: pairwise augmentation targets the exact posterior, and cycles need an error model") {
  // Truth: p(rho | prefs) ∝ prod_j sum over rankings R_j consistent with j's preferences of
  // exp(-(alpha/n) d(R_j, rho)), by enumeration at n = 5.
  const int n = 5;
  std::vector<std::vector<Preference>> prefs = {{{0, 1}, {1, 2}, {3, 4}}, {{0, 2}, {4, 3}}, {{1, 0}, {2, 3}, {2, 4}}};
  const double alpha = 2.0;
  const auto perms = all_perms(n);
  auto consistent = [&](const std::vector<Preference>& pj, const Perm& c) {
    for (const auto& p : pj)
      if (c[static_cast<std::size_t>(p.top)] > c[static_cast<std::size_t>(p.bottom)]) return false;
    return true;
  };
  const auto exact = latent_marginals(n, 3, alpha, [&](int j, const Perm& c) { return consistent(prefs[static_cast<std::size_t>(j)], c); });
  MallowsData d;
  d.n_items = n;
  d.prefs = prefs;
  const McmcOptions o = fixed_alpha(alpha);
  const auto res = run_mcmc(d, o);
  CHECK(max_marginal_tv(marginals_from_draws(res.chains[0].rho, n), exact) < 0.03);
  d.prefs.push_back({{0, 1}, {1, 2}, {2, 0}});
  CHECK_THROWS_WITH_AS(run_mcmc(d, o), doctest::Contains("choose an error model"), InputError);
}

TEST_CASE("rank: Bernoulli error model matches numerical integration over theta") {
  // Truth: p(rho, theta | prefs) ∝ TruncBeta(1,1)[0,0.5](theta) prod_j sum_{R_j} exp(-(alpha/n)
  // d(R_j, rho)) theta^g (1-theta)^(m-g) / Z^N, integrated over theta on 2,000 midpoints,
  // n = 4, inconsistent preferences.  Tolerances: TV 0.03, E[theta] within 0.01.
  const int n = 4;
  std::vector<std::vector<Preference>> prefs = {{{0, 1}, {1, 2}, {2, 0}, {0, 3}}, {{0, 1}, {1, 3}, {3, 0}}, {{0, 2}, {1, 3}}};
  const double alpha = 2.0;
  const auto perms = all_perms(n);
  Eigen::MatrixXd marg = Eigen::MatrixXd::Zero(n, n);
  double tot = 0, theta_mean = 0;
  for (int g = 0; g < 2000; ++g) {
    const double th = 0.5 * (g + 0.5) / 2000;
    for (const auto& rho : perms) {
      double w = 1;
      for (const auto& pj : prefs) {
        double s = 0;
        for (const auto& c : perms) {
          int bad = 0;
          for (const auto& p : pj) bad += c[static_cast<std::size_t>(p.top)] > c[static_cast<std::size_t>(p.bottom)];
          s += std::exp(-alpha / n * distance(c, rho, Metric::footrule)) * std::pow(th, bad) * std::pow(1 - th, static_cast<double>(pj.size()) - bad);
        }
        w *= s;
      }
      tot += w;
      theta_mean += th * w;
      for (int i = 0; i < n; ++i) marg(i, rho[static_cast<std::size_t>(i)]) += w;
    }
  }
  marg /= tot;
  theta_mean /= tot;
  MallowsData d;
  d.n_items = n;
  d.prefs = prefs;
  McmcOptions o;
  o.fix_alpha = true;
  o.alpha_init = alpha;
  o.error_model = ErrorModel::bernoulli;
  o.iterations = 200000;
  o.burnin = 2000;
  o.aug_moves = 2;
  const auto res = run_mcmc(d, o);
  CHECK(max_marginal_tv(marginals_from_draws(res.chains[0].rho, n), marg) < 0.03);
  const auto& t = res.chains[0].theta;
  CHECK(std::abs(std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size()) - theta_mean) < 0.01);
}

TEST_CASE("rank: R-hat is near 1 for agreeing chains and large for disagreeing ones") {
  // Truth: iid N(0,1) chains have R-hat -> 1 (within 0.01 at 4 x 5000 draws); chains centred at
  // 0 and 3 give R-hat well above 1.5.
  Rng rng(1);
  std::vector<std::vector<double>> same(4, std::vector<double>(5000)), diff = same;
  for (int c = 0; c < 4; ++c)
    for (int t = 0; t < 5000; ++t) {
      same[static_cast<std::size_t>(c)][static_cast<std::size_t>(t)] = rng.normal();
      diff[static_cast<std::size_t>(c)][static_cast<std::size_t>(t)] = rng.normal() + 3.0 * (c % 2);
    }
  CHECK(rhat(same) < 1.01);
  CHECK(rhat(diff) > 1.5);
  CHECK(std::isnan(rhat({same[0]})));
}

TEST_CASE("rank: Pseudo-Mallows q is a normalised distribution with exact log q") {
  // Truth: summing exp(log q) over all 720 rankings gives 1 (1e-12); empirical frequencies of
  // 100,000 draws match exp(log q) (5 binomial sd); the log q returned with a draw equals log_q.
  const int n = 6;
  const RankMatrix R = random_ranks(5, n, 30);
  const Eigen::MatrixXd lw = itemwise_log_weights(R, 3.0, Metric::footrule);
  Rng rng(31);
  const PseudoMallows q(lw, random_perm(n, rng));
  double s = 0;
  std::map<Perm, double> prob;
  for (const auto& p : all_perms(n)) s += (prob[p] = std::exp(q.log_q(p)));
  CHECK(s == doctest::Approx(1.0).epsilon(1e-12));
  std::map<Perm, int> count;
  const int S = 100000;
  for (int k = 0; k < S; ++k) {
    double lq;
    const Perm p = q.sample(rng, &lq);
    if (k < 100) CHECK(lq == doctest::Approx(q.log_q(p)).epsilon(1e-12));
    ++count[p];
  }
  for (const auto& [p, c] : count) CHECK(std::abs(c / static_cast<double>(S) - prob[p]) < 5 * std::sqrt(prob[p] / S) + 1e-4);
}

// The textbook sequential draw from q_V, written independently of PseudoMallows::sample_into:
// factor k puts item order[k] on a free rank with probability exp(L(i, r) - lse over the free ranks),
// computed in log space from scratch, and picks it by inverse CDF over the free ranks listed as
// sample_into lists them (0..n-1, a taken entry replaced by the last one).  Returns log q (the sum
// of the picked log probabilities) and the ranks in `out`.
double reference_draw(const Eigen::MatrixXd& lw, const Perm& order, Rng& rng, Perm& out) {
  const int n = static_cast<int>(order.size());
  std::vector<int> fr(static_cast<std::size_t>(n));
  std::iota(fr.begin(), fr.end(), 0);
  out.assign(static_cast<std::size_t>(n), -1);
  double lq = 0;
  for (int k = 0, m = n; k < n; ++k, --m) {
    const int item = order[static_cast<std::size_t>(k)];
    double mx = -1e300;
    for (int t = 0; t < m; ++t) mx = std::max(mx, lw(item, fr[static_cast<std::size_t>(t)]));
    double lse = 0;
    for (int t = 0; t < m; ++t) lse += std::exp(lw(item, fr[static_cast<std::size_t>(t)]) - mx);
    lse = mx + std::log(lse);
    const double u = rng.uniform();
    int pick = m - 1;
    double cum = 0;
    for (int t = 0; t < m; ++t) {
      cum += std::exp(lw(item, fr[static_cast<std::size_t>(t)]) - lse);
      if (u < cum) {
        pick = t;
        break;
      }
    }
    const int r = fr[static_cast<std::size_t>(pick)];
    lq += lw(item, r) - lse;
    out[static_cast<std::size_t>(item)] = r;
    fr[static_cast<std::size_t>(pick)] = fr[static_cast<std::size_t>(m - 1)];
  }
  return lq;
}

TEST_CASE("rank: Pseudo-Mallows fast draws equal the textbook sequential draws") {
  // Truth: reference_draw above (log-space probabilities recomputed at every step, plain
  // cumulative sum) fed the same uniform stream.  The fast path (precomputed weights, running-sum
  // scan, log q from a product of totals) must pick the same rank at every step of every draw
  // (it can differ only when a uniform falls within ~1e-15 of a CDF boundary: with these fixed
  // seeds it does not), and its log q must agree to 1e-12 relative.  Sizes 2..13 cover every
  // remainder of the blocks of four; the last case has log weights spanning thousands of nats,
  // where the precomputed weights underflow and the log-space fallback runs.  The draws'
  // frequencies then match the exact q, exp(log_q) summed over all rankings (n = 5, 5 sd).
  for (int n : {2, 3, 4, 5, 7, 9, 13}) {
    for (double scale : {3.0, 4000.0}) {
      const RankMatrix R = random_ranks(4, n, 40 + static_cast<std::uint64_t>(n));
      Eigen::MatrixXd lw = itemwise_log_weights(R, 3.0, Metric::footrule);
      if (scale > 100) {
        Rng wr(41);
        for (int i = 0; i < n; ++i)
          for (int r = 0; r < n; ++r) lw(i, r) = scale * wr.normal();
      }
      Rng orng(42);
      const Perm order = random_perm(n, orng);
      const PseudoMallows q(lw, order);
      Rng a(43), b(43);
      std::vector<int> out(static_cast<std::size_t>(n)), fr(static_cast<std::size_t>(n)), other(static_cast<std::size_t>(n));
      std::vector<double> w(PseudoMallows::work_size(n));
      int same = 0, draws = 2000;
      double worst = 0;
      for (int s = 0; s < draws; ++s) {
        // Every other draw with a fresh item order (the sequential importance-sampling and V-mixture use).
        const Perm o = s % 2 ? random_perm(n, orng) : order;
        std::copy(o.begin(), o.end(), other.begin());
        const double lf = q.sample_into(a, other.data(), out.data(), fr.data(), w.data());
        Perm ref;
        const double lr = reference_draw(lw, o, b, ref);
        same += std::equal(out.begin(), out.end(), ref.begin());
        worst = std::max(worst, std::abs(lf - lr) / std::max(1.0, std::abs(lr)));
      }
      INFO("n = " << n << ", scale = " << scale);
      CHECK(same == draws);
      CHECK(worst < 1e-12);
    }
  }
  const int n = 5;
  const Eigen::MatrixXd lw = itemwise_log_weights(random_ranks(6, n, 44), 4.0, Metric::footrule);
  const PseudoMallows q(lw, Perm{2, 0, 4, 1, 3});
  std::map<Perm, double> prob;
  for (const auto& p : all_perms(n)) prob[p] = std::exp(q.log_q(p));
  const PseudoDraws d = draw_pseudo(q, 60000, 45, 1);
  std::map<Perm, int> count;
  for (int s = 0; s < 60000; ++s) ++count[Perm(d.rho.begin() + s * n, d.rho.begin() + (s + 1) * n)];
  // 5 sd of the binomial count, plus 4 draws for the rankings of tiny probability, whose counts
  // are Poisson (expected 0.03 draws: P(5 or more) ~ 1e-10); the draws come two at a time here
  // (PseudoMallows::sample_lanes), one at a time above.
  for (const auto& [p, pr] : prob) {
    const double expected = 60000 * pr;
    CHECK(std::abs(count[p] - expected) < 5 * std::sqrt(expected * (1 - pr)) + 4);
  }
}

TEST_CASE("rank: the streaming KL estimate sees the same draws as draw_pseudo") {
  // Truth: neg_elbo over the kept draws of draw_pseudo (log q - log p~ recomputed from the ranks)
  // equals the streaming neg_elbo with the same seed, which draws without keeping them: same
  // blocks, same pairs of lanes, an odd count (the last draw alone), several blocks and threads.
  const int n = 7;
  const PseudoMallows q(itemwise_log_weights(random_ranks(5, n, 46), 2.5, Metric::footrule), Perm{3, 0, 6, 2, 5, 1, 4});
  for (const int threads : {1, 2}) {
    const PseudoDraws d = draw_pseudo(q, 1001, 47, threads);
    const KlEstimate kept = neg_elbo(q, d), streamed = neg_elbo(q, 1001, 47, threads);
    CHECK(streamed.value == doctest::Approx(kept.value).epsilon(1e-12));
    CHECK(streamed.se == doctest::Approx(kept.se).epsilon(1e-9));
  }
}

TEST_CASE("rank: importance reweighting of Pseudo-Mallows draws recovers the exact posterior marginals") {
  // Truth: p's marginals from the subset DP (n = 6).  The self-normalised estimate from 200,000
  // draws of q must be within 6 sd of them, sd = sqrt(p (1 - p) / ESS) (the usual Kish
  // approximation of the SNIS error), while q's own marginals are farther than that from p's
  // in some cell with p > 0.01 (else the check could not fail).  With all log weights equal, q = p = uniform:
  // every weight is 1 / draws, ESS = draws exactly (to rounding).
  const int n = 6;
  const RankMatrix R = random_ranks(5, n, 46);
  const Eigen::MatrixXd lw = itemwise_log_weights(R, 6.0, Metric::footrule);
  const SubsetPosterior sp(lw);
  const Eigen::MatrixXd pm = sp.marginals();
  const PseudoMallows q(lw, Perm{5, 4, 3, 2, 1, 0});
  const int S = 200000;
  const PseudoDraws d = draw_pseudo(q, S, 47, 1);
  const ReweightedMarginals rw = reweight_draws(q, d);
  CHECK(rw.ess > 1000);
  CHECK(rw.ess <= S);
  CHECK(rw.marginals.rowwise().sum().isOnes(1e-9));  // 200,000 rounded terms: error ~ 2e-11
  double worst = 0, q_off = 0;
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r) {
      const double sd = std::sqrt(pm(i, r) * (1 - pm(i, r)) / rw.ess) + 1e-12;
      worst = std::max(worst, std::abs(rw.marginals(i, r) - pm(i, r)) / sd);
      if (pm(i, r) > 0.01) q_off = std::max(q_off, std::abs(d.marginals(i, r) - pm(i, r)) / sd);
    }
  CHECK(worst < 6);
  CHECK(q_off > 6);
  const Eigen::MatrixXd flat = Eigen::MatrixXd::Constant(n, n, -1.0);
  const PseudoMallows u(flat, identity(n));
  const ReweightedMarginals ru = reweight_draws(u, draw_pseudo(u, 5000, 48, 1));
  CHECK(ru.ess == doctest::Approx(5000).epsilon(1e-9));
  CHECK(ru.max_weight == doctest::Approx(1.0 / 5000).epsilon(1e-9));
  CHECK_THROWS_AS(reweight_draws(u, PseudoDraws{}), UsageError);
}

TEST_CASE("rank: Pseudo-Mallows KL estimate plus log Z equals the exact KL") {
  // Truth: KL(q || p) = sum_rho q (log q - log p) by enumeration at n = 7 with p from the subset
  // DP.  Tolerance 5 standard errors of the 20,000-draw estimate.
  const int n = 7;
  const RankMatrix R = random_ranks(6, n, 32);
  const Eigen::MatrixXd lw = itemwise_log_weights(R, 4.0, Metric::spearman);
  const SubsetPosterior sp(lw);
  Rng rng(33);
  for (int rep = 0; rep < 3; ++rep) {
    const PseudoMallows q(lw, random_perm(n, rng));
    double kl = 0;
    for (const auto& p : all_perms(n)) {
      const double lq = q.log_q(p);
      kl += std::exp(lq) * (lq - sp.log_prob(p));
    }
    CHECK(kl >= 0);
    const auto e = neg_elbo(q, 20000, rng);
    CHECK(std::abs(e.value + sp.log_normaliser() - kl) < 5 * e.se + 1e-9);
  }
}

// N assessors drawn exactly from the footrule Mallows model with rho0 = identity and scale
// alpha0 (the subset DP samples p(r) ∝ exp(-(alpha0/n) sum_i |r_i - i|) exactly), as the
// Pseudo-Mallows authors simulate their data (BayesMallows sample_mallows, rho0 = 1:n).
RankMatrix mallows_ranks(int N, int n, double alpha0, std::uint64_t seed) {
  Eigen::MatrixXd lw(n, n);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r) lw(i, r) = -(alpha0 / n) * std::abs(i - r);
  const SubsetPosterior mallows(lw);
  Rng rng(seed);
  RankMatrix R(N, n);
  for (int j = 0; j < N; ++j) {
    const Perm p = mallows.sample(rng);
    for (int i = 0; i < n; ++i) R(j, i) = p[static_cast<std::size_t>(i)];
  }
  return R;
}

TEST_CASE("rank: the V order goes from the middle of the consensus outwards") {
  // Truth: the definition read in the authors' code (GenerateVOrdering): c = ranks of the column
  // sums; the middle item first (odd n), then the pairs at distance 1, 2, ... from the middle.
  // Columns: item i has every assessor's rank c[i].
  const std::vector<int> c = {3, 0, 4, 1, 2};  // item 1 is the consensus top, item 2 the bottom
  RankMatrix R(2, 5);
  for (int j = 0; j < 2; ++j)
    for (int i = 0; i < 5; ++i) R(j, i) = c[static_cast<std::size_t>(i)];
  // c-positions: 0 -> item 1, 1 -> item 3, 2 -> item 4, 3 -> item 0, 4 -> item 2.
  CHECK(v_order(R) == Perm{4, 3, 0, 1, 2});
  CHECK(v_order(R, {1, 0}) == Perm{4, 0, 3, 1, 2});
  CHECK(v_order(R, {0, 1}) == Perm{4, 3, 0, 2, 1});
  RankMatrix E(1, 4);
  E << 2, 3, 1, 0;  // c-positions 0..3 -> items 3, 2, 0, 1; even n: the middle pair first
  CHECK(v_order(E) == Perm{2, 0, 3, 1});
  Rng rng(3);
  for (int k = 0; k < 20; ++k) {
    const Perm o = v_order(R, rng);
    CHECK(o[0] == 4);
    CHECK(((o[1] == 3 && o[2] == 0) || (o[1] == 0 && o[2] == 3)));
  }
}

TEST_CASE("rank: V order attains the least exact KL over all orders on Mallows data (the paper's conjecture)") {
  // Truth: exact KL(q_V || p) = sum over all 720 rankings of q (log q - log p), with p from the
  // subset DP, for every one of the 720 orders V at n = 6; data drawn exactly from the footrule
  // Mallows model (N = 20, alpha0 = 2, the posterior at alpha = alpha0), the setting of the
  // authors' empirical study.  Checked: (1) the best of the 2^3 V orders is the global minimum
  // over all orders (the conjecture, here exactly; tolerance 1e-9 for rounding in sums of 720
  // terms); (2) every V order beats the mean KL of a uniformly random order; (3) the reversed
  // form (ends-inward: top and bottom first) does not, so the check can fail.  Not asserted:
  // with weak data (N = 10, alpha0 = 1) the V orders sit near the median of all orders.
  const int n = 6;
  const auto perms = all_perms(n);
  for (std::uint64_t seed : {1, 2, 3}) {
    const RankMatrix R = mallows_ranks(20, n, 2.0, seed);
    const Eigen::MatrixXd lw = itemwise_log_weights(R, 2.0, Metric::footrule);
    const SubsetPosterior sp(lw);
    std::vector<double> lp;
    for (const auto& p : perms) lp.push_back(sp.log_prob(p));
    auto kl = [&](const Perm& o) {
      const PseudoMallows q(lw, o);
      double s = 0;
      for (std::size_t k = 0; k < perms.size(); ++k) {
        const double l = q.log_q(perms[k]);
        s += std::exp(l) * (l - lp[k]);
      }
      return s;
    };
    double all_min = 1e300, all_mean = 0;
    for (const auto& o : perms) {
      const double v = kl(o);
      all_min = std::min(all_min, v);
      all_mean += v / static_cast<double>(perms.size());
    }
    double v_min = 1e300;
    for (int mask = 0; mask < 8; ++mask) {
      const double v = kl(v_order(R, {static_cast<char>(mask & 1), static_cast<char>((mask >> 1) & 1), static_cast<char>((mask >> 2) & 1)}));
      v_min = std::min(v_min, v);
      CHECK(v < all_mean);
    }
    CAPTURE(seed);
    CHECK(v_min <= all_min + 1e-9);
    CHECK(kl(ends_inward_order(R)) > all_mean);
  }
}

TEST_CASE("rank: V-order search and parallel draws: thread-independent, exact marginals") {
  // Truth: q's exact marginals by summing exp(log q) over all 5040 rankings (n = 7).  The
  // Rao-Blackwellised estimate from 20,000 draws must lie within 5 sd of the plain frequency
  // estimate, sqrt(p (1 - p) / S), of them (conditioning never increases the variance, so this
  // bounds its sd).  Draws with 1 and 2 threads are bit-identical (per-block seeds); each
  // returned log q equals log_q; the searched V order is no worse than its start (same seed).
  const int n = 7;
  const RankMatrix R = mallows_ranks(15, n, 2.0, 4);
  const Eigen::MatrixXd lw = itemwise_log_weights(R, 2.0, Metric::spearman);
  double best = 0;
  const Perm o = v_order_search(lw, R, {}, 2000, 5, &best, 1);
  CHECK(is_permutation(o));
  CHECK(best <= neg_elbo(PseudoMallows(lw, v_order(R)), 2000, std::uint64_t{5}, 1).value + 1e-12);
  const PseudoMallows q(lw, o);
  Eigen::MatrixXd exact = Eigen::MatrixXd::Zero(n, n);
  for (const auto& p : all_perms(n)) {
    const double pr = std::exp(q.log_q(p));
    for (int i = 0; i < n; ++i) exact(i, p[static_cast<std::size_t>(i)]) += pr;
  }
  const int S = 20000;
  const PseudoDraws d1 = draw_pseudo(q, S, 11, 1);
  {
    // 250,000 draws x 49 > 1e7 proposal steps: large enough for draw_pseudo to go parallel.
    const PseudoDraws b1 = draw_pseudo(q, 250000, 12, 1), b2 = draw_pseudo(q, 250000, 12, 2);
    CHECK(b1.rho == b2.rho);
    CHECK(b1.log_q == b2.log_q);
    // The marginals differ only by summation order over threads: 250,000 terms <= 1 each, so
    // rounding is below 250,000 x 2^-53 ~ 3e-11 of the mean.
    CHECK((b1.marginals - b2.marginals).cwiseAbs().maxCoeff() < 1e-10);
  }
  for (int s = 0; s < 50; ++s) {
    const Perm p(d1.rho.begin() + s * n, d1.rho.begin() + (s + 1) * n);
    CHECK(d1.log_q[static_cast<std::size_t>(s)] == doctest::Approx(q.log_q(p)).epsilon(1e-12));
  }
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r)
      CHECK(std::abs(d1.marginals(i, r) - exact(i, r)) < 5 * std::sqrt(exact(i, r) * (1 - exact(i, r)) / S) + 1e-9);
  CHECK(d1.marginals.rowwise().sum().isOnes(1e-12));
}

TEST_CASE("rank: simulate_mallows draws the Mallows model exactly") {
  // Truth: p(R) = exp(-(alpha/n) d(R, rho0)) / Z by enumeration of the 120 rankings of n = 5 (Z
  // summed directly), for footrule and Hamming with a non-identity rho0.  60,000 draws: every
  // ranking's frequency within 5 binomial sd of its probability.
  const int n = 5;
  const Perm rho0 = {2, 0, 4, 1, 3};
  for (Metric m : {Metric::footrule, Metric::hamming}) {
    const double alpha = 4.0;
    std::map<Perm, double> prob;
    double z = 0;
    for (const auto& p : all_perms(n)) z += (prob[p] = std::exp(-alpha / n * distance(p, rho0, m)));
    Rng rng(71);
    const int S = 60000;
    const RankMatrix R = simulate_mallows(rho0, alpha, S, m, rng);
    REQUIRE(R.rows() == S);
    std::map<Perm, int> count;
    for (int j = 0; j < S; ++j) ++count[Perm(R.row(j).data(), R.row(j).data() + n)];
    CHECK(count.size() <= prob.size());
    for (const auto& [p, w] : prob) {
      const double pr = w / z, f = count.count(p) ? count[p] / static_cast<double>(S) : 0.0;
      CHECK(std::abs(f - pr) < 5 * std::sqrt(pr * (1 - pr) / S) + 1e-9);
    }
  }
  Rng rng(1);
  CHECK_THROWS_AS(simulate_mallows(rho0, 1.0, 3, Metric::kendall, rng), InputError);
  CHECK_THROWS_AS(simulate_mallows({0, 0, 1}, 1.0, 3, Metric::footrule, rng), InputError);
}

TEST_CASE("rank: the authors' V-mixture sampler draws from the uniform mixture of the V orders") {
  // Truth: q_mix(r) = (1/4) sum over the 4 V orders of n = 5 (2 pairs) of exp(log q_V(r)), with
  // log q_V by PseudoMallows::log_q (itself checked against enumeration above); its marginals
  // and KL(q_mix || p) by enumeration of the 120 rankings, p from the subset DP.  150,000 draws:
  // frequencies and Rao-Blackwellised marginals within 5 binomial sd; the first draw's log q is
  // that of the V order made by the block's first coin flips; the components' mean KL bounds
  // KL(q_mix || p) from above (convexity), and a single V order's marginals differ from q_mix's
  // by more than the tolerance (so the check can fail).
  const int n = 5;
  const RankMatrix R = mallows_ranks(10, n, 1.5, 9);
  const Eigen::MatrixXd lw = itemwise_log_weights(R, 1.5, Metric::footrule);
  const SubsetPosterior sp(lw);
  std::vector<PseudoMallows> comps;
  for (int mask = 0; mask < 4; ++mask) comps.emplace_back(lw, v_order(R, {static_cast<char>(mask & 1), static_cast<char>(mask >> 1)}));
  std::map<Perm, double> mix;
  Eigen::MatrixXd mix_marg = Eigen::MatrixXd::Zero(n, n), one_marg = Eigen::MatrixXd::Zero(n, n);
  double kl_mix = 0, kl_mean = 0;
  for (const auto& p : all_perms(n)) {
    double s = 0;
    for (const auto& q : comps) {
      const double lq = q.log_q(p);
      s += std::exp(lq) / 4;
      kl_mean += std::exp(lq) * (lq - sp.log_prob(p)) / 4;
    }
    mix[p] = s;
    kl_mix += s * (std::log(s) - sp.log_prob(p));
    for (int i = 0; i < n; ++i) {
      mix_marg(i, p[static_cast<std::size_t>(i)]) += s;
      one_marg(i, p[static_cast<std::size_t>(i)]) += std::exp(comps[0].log_q(p));
    }
  }
  const int S = 150000;
  const PseudoDraws d = draw_pseudo_v_mixture(comps[0], mean_rank_order(R), S, 13, 1);
  std::map<Perm, int> count;
  for (int s = 0; s < S; ++s) ++count[Perm(d.rho.begin() + s * n, d.rho.begin() + (s + 1) * n)];
  for (const auto& [p, pr] : mix) {
    const double f = count.count(p) ? count[p] / static_cast<double>(S) : 0.0;
    CHECK(std::abs(f - pr) < 5 * std::sqrt(pr * (1 - pr) / S) + 1e-9);
  }
  double worst = 0;
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < n; ++r) {
      const double pr = mix_marg(i, r), sd = std::sqrt(pr * (1 - pr) / S);
      CHECK(std::abs(d.marginals(i, r) - pr) < 5 * sd + 1e-9);
      worst = std::max(worst, std::abs(one_marg(i, r) - pr) / (sd + 1e-12));
    }
  CHECK(worst > 10);
  Rng first(derive_seed(13, 0));
  const Perm o0 = v_order(R, first);
  const Perm r0(d.rho.begin(), d.rho.begin() + n);
  CHECK(d.log_q[0] == doctest::Approx(PseudoMallows(lw, o0).log_q(r0)).epsilon(1e-12));
  const KlEstimate ub = neg_elbo(comps[0], d);
  CHECK(kl_mix <= kl_mean + 1e-12);
  CHECK(std::abs(ub.value + sp.log_normaliser() - kl_mean) < 5 * ub.se);
  CHECK_THROWS_AS(draw_pseudo_v_mixture(comps[0], Perm{0, 1, 2}, 10, 1, 1), InputError);
}

TEST_CASE("rank: mean and max marginal total variation") {
  // Hand computation: item 0 differs by TV 0.5, item 1 by 0: max 0.5, mean 0.25.
  Eigen::MatrixXd a(2, 2), b(2, 2);
  a << 1, 0, 0, 1;
  b << 0.5, 0.5, 0, 1;
  CHECK(max_marginal_tv(a, b) == doctest::Approx(0.5));
  CHECK(mean_marginal_tv(a, b) == doctest::Approx(0.25));
}

TEST_CASE("rank: order search never worsens its objective, and mean-rank order puts top items first") {
  const int n = 8;
  const RankMatrix R = random_ranks(6, n, 40);
  const Eigen::MatrixXd lw = itemwise_log_weights(R, 3.0, Metric::footrule);
  const Perm start = mean_rank_order(R);
  // The data are noisy copies of the identity: the mean-rank order is close to 0, 1, 2, ...
  CHECK(start[0] <= 1);
  const Perm ei = ends_inward_order(R), mo = middle_out_order(R);
  CHECK(ei[0] == start[0]);
  CHECK(ei[1] == start[static_cast<std::size_t>(n - 1)]);
  CHECK(mo[static_cast<std::size_t>(n - 1)] == start[0]);
  Rng crn(derive_seed(5, 77));
  const double v0 = neg_elbo(PseudoMallows(lw, start), 2000, crn).value;
  double best;
  const Perm o = search_order(lw, start, 30, 2000, 5, &best);
  CHECK(is_permutation(o));
  CHECK(best <= v0 + 1e-12);
}

TEST_CASE("rank: CP and MAP consensus, scalar summary") {
  // Hand-made marginals: item 2 surely first, items 0/1 share ranks 1-2.
  Eigen::MatrixXd m(3, 3);
  m << 0, 0.6, 0.4, 0, 0.4, 0.6, 1, 0, 0;
  std::vector<double> cum;
  CHECK(cp_consensus(m, &cum) == Perm{2, 0, 1});
  CHECK(cum[1] == doctest::Approx(0.6));
  std::vector<int> draws = {0, 1, 2, 0, 1, 2, 2, 1, 0};
  double f;
  CHECK(map_consensus(draws, 3, &f) == Perm{0, 1, 2});
  CHECK(f == doctest::Approx(2.0 / 3));
  // Against a std::map count of 5,000 draws from a few hundred distinct rankings of 6 items (many
  // ties in the top count): the most frequent draw, the lexicographically first of equally
  // frequent ones (the map's iteration order), its share, and the ordering is its inverse.
  Rng rng(49);
  std::vector<Perm> pool;
  for (int k = 0; k < 300; ++k) pool.push_back(random_perm(6, rng));
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<int> dr;
    std::map<Perm, int> count;
    for (int s = 0; s < 5000; ++s) {
      const Perm& p = pool[rng.below(rep == 2 ? 5 : 300)];
      dr.insert(dr.end(), p.begin(), p.end());
      ++count[p];
    }
    auto best = count.begin();
    for (auto it = count.begin(); it != count.end(); ++it)
      if (it->second > best->second) best = it;
    double fr = 0;
    CHECK(map_consensus(dr, 6, &fr) == inverse(best->first));
    CHECK(fr == best->second / 5000.0);
    CHECK(distinct_draws(dr, 6) == count.size());  // the map's key count is the truth
  }
  const auto s = scalar_summary({1, 2, 3, 4, 5});
  CHECK(s["mean"].get<double>() == 3);
  CHECK(s["median"].get<double>() == 3);
}

TEST_CASE("rank: reading rankings and preferences") {
  const std::string dir = "rank_test_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const auto ok = write("ok.csv", "1,2,3\n3,NA,1\n2,3,1\n");
  auto d = read_rank_csv(ok, MissingPolicy::augment);
  CHECK(d.ranks.rows() == 3);
  CHECK(d.ranks(1, 1) == missing_rank);
  CHECK(d.has_missing());
  CHECK(read_rank_csv(ok, MissingPolicy::omit).ranks.rows() == 2);
  auto where_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const InputError& e) {
      return e.where();
    }
    return std::string("no error");
  };
  CHECK(where_of([&] { read_rank_csv(ok, MissingPolicy::fail); }).find("line 2") != std::string::npos);
  CHECK(where_of([&] { read_rank_csv(write("tie.csv", "1,2,3\n1,1,3\n"), MissingPolicy::fail); }).find("line 2") != std::string::npos);
  CHECK_THROWS_WITH_AS(read_rank_csv(write("tie2.csv", "1,1,3\n"), MissingPolicy::fail), doctest::Contains("ties"), InputError);
  CHECK_THROWS_WITH_AS(read_rank_csv(write("range.csv", "1,2,4\n"), MissingPolicy::fail), doctest::Contains("out of range"), InputError);
  CHECK_THROWS_WITH_AS(read_rank_csv(write("empty.csv", ""), MissingPolicy::fail), doctest::Contains("empty"), InputError);
  const auto fm = fill_missing(d.ranks);
  CHECK(is_permutation(Perm(fm.row(1).data(), fm.row(1).data() + 3)));
  const auto pw = read_pairwise_csv(write("p.csv", "assessor,bottom_item,top_item\n1,2,1\n1,3,2\n2,1,3\n"), 0);
  CHECK(pw.n_items == 3);
  CHECK(pw.by_assessor.size() == 2);
  CHECK(consistent_ranking(3, pw.by_assessor[0]) == Perm{0, 1, 2});
  CHECK(consistent_ranking(3, {{0, 1}, {1, 2}, {2, 0}}).empty());
  CHECK_THROWS_AS(read_pairwise_csv(write("p2.csv", "assessor,bottom_item,top_item\n1,2,2\n"), 0), InputError);
  const auto ip = implied_preferences(d.ranks);
  // 3,NA,1: item 3 over item 1, and the missing item 2 (rank 2 is the only free one) between them.
  CHECK(ip.by_assessor[1].size() == 3);
  std::filesystem::remove_all(dir);
}
