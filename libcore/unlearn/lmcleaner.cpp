#include "unlearn/lmcleaner.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>

#include <Eigen/Core>
#include <fmt/format.h>

#include "util/error.hpp"
#include "util/rng.hpp"
#include "util/timer.hpp"

namespace icmlkit::unlearn {

namespace {

using Vec = Eigen::Map<Eigen::VectorXd>;
using CVec = Eigen::Map<const Eigen::VectorXd>;

Vec view(std::vector<double>& x) { return {x.data(), static_cast<Eigen::Index>(x.size())}; }
CVec view(const std::vector<double>& x) { return {x.data(), static_cast<Eigen::Index>(x.size())}; }

// Sorted, duplicate-free steps, each in [0, tau); UsageError otherwise.
std::vector<std::int64_t> checked_steps(std::vector<std::int64_t> steps, std::int64_t tau) {
  if (steps.empty()) throw UsageError("no deleted step given");
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  for (std::int64_t s : {steps.front(), steps.back()})
    if (s < 0 || s >= tau) throw UsageError(fmt::format("deleted step {} is outside the run's steps [0, {})", s, tau));
  return steps;
}

// JSON number, or null for NaN and infinities.
nlohmann::json number(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

Correction lmcleaner_correction(Run& run, std::vector<std::int64_t> deleted_steps, const LmCleanerOptions& opt) {
  const Stopwatch clock;
  const std::int64_t tau = run.end_step();
  const std::vector<std::int64_t> del = checked_steps(std::move(deleted_steps), tau);
  const auto window_end = [&](std::int64_t tz) { return opt.K < 0 ? tau - 1 : std::min(tz + opt.K, tau - 1); };
  const std::int64_t first = del.front(), last = window_end(del.back());

  const std::size_t p = run.dim();
  Correction c;
  c.v.assign(p, 0.0);
  // Active deviations by the last step of their window: deviations sharing a window end are
  // carried by the same linear maps over the same steps, so they are summed into one vector.
  std::map<std::int64_t, std::vector<double>> active;
  std::vector<double> before(p), after(p), jv(p), diff(p);
  double log_sum = 0, residual = 0;

  run.seek(first);
  std::size_t next = 0;  // the next deleted step in del
  for (std::int64_t s = first; s <= last; ++s) {
    if (next < del.size() && del[next] == s) {
      // Phase 1: the counterfactual skips step s, so the deviation grows by u[s]; the active
      // deviations pass this step unchanged.
      run.params(before);
      run.advance();
      ++c.steps_replayed;
      run.params(after);
      view(after) -= view(before);
      const std::int64_t end = window_end(s);
      DeletedStep d;
      d.step = s;
      d.k_used = end - s;
      d.truncated = d.k_used < tau - s - 1;
      d.u_norm = view(after).norm();
      c.deleted.push_back(d);
      if (d.k_used == 0) {
        view(c.v) += view(after);
      } else {
        view(active.try_emplace(end, p, 0.0).first->second) += view(after);
      }
      ++next;
    } else if (active.empty() && next < del.size()) {
      // Nothing to carry until the next deleted step (a finite window ended before it).
      run.seek(del[next]);
      s = del[next] - 1;
      continue;
    } else {
      // Phase 2: delta[s+1] = (I + J_s) delta[s] for each active deviation.
      const double eta = run.lr(s);
      for (auto& [end, v] : active) {
        const double before_norm = view(v).norm();
        run.jacobian_product(opt.mode, v, jv);
        ++c.products;
        if (opt.probe) {
          run.update_difference(v, diff);
          ++c.probes;
          residual += (view(diff) - view(jv)).norm();
        }
        // The reference's damping acts on the deviation before the product:
        // v <- v + J_s v - eta_s lambda v.
        if (opt.damping != 0) view(v) *= 1 - eta * opt.damping;
        view(v) += view(jv);
        if (before_norm > 0) {
          const double ratio = view(v).norm() / before_norm;
          c.ratios.push_back(ratio);
          log_sum += std::log(ratio);
        }
      }
      if (s < last) {
        run.advance();
        ++c.steps_replayed;
      }
    }
    // Windows ending at step s are complete: their deviations join the total.
    if (auto it = active.find(s); it != active.end()) {
      view(c.v) += view(it->second);
      active.erase(it);
    }
  }
  if (!c.ratios.empty()) {
    c.gamma_hat = std::exp(log_sum / static_cast<double>(c.ratios.size()));
    c.ratio_max = *std::max_element(c.ratios.begin(), c.ratios.end());
  }
  if (opt.probe) c.lin_residual = residual;
  c.seconds = clock.seconds();
  return c;
}

std::int64_t retrain(Run& run, std::vector<std::int64_t> deleted_steps, std::vector<double>& theta) {
  const std::int64_t tau = run.end_step();
  const std::vector<std::int64_t> del = checked_steps(std::move(deleted_steps), tau);
  run.seek(del.front());
  std::int64_t taken = 0;
  while (run.at() < tau) {
    run.advance(std::binary_search(del.begin(), del.end(), run.at()));
    ++taken;
  }
  run.params(theta);
  return taken;
}

void check_noise_options(const NoiseOptions& noise, const BoundOptions& bound) {
  if (noise.kind != "none" && noise.kind != "isotropic" && noise.kind != "subspace")
    throw UsageError("unknown noise '" + noise.kind + "' (none, isotropic or subspace)", "--noise");
  if (!(noise.epsilon > 0) || !std::isfinite(noise.epsilon))
    throw UsageError(fmt::format("epsilon must be a positive number (got {})", noise.epsilon), "--epsilon");
  if (!(noise.delta > 0 && noise.delta < 1))
    throw UsageError(fmt::format("delta must lie in (0, 1) (got {})", noise.delta), "--delta");
  if (!(noise.beta > 0 && noise.beta <= 1))
    throw UsageError(fmt::format("beta must lie in (0, 1] (got {})", noise.beta), "--beta");
  if (noise.rank < 1) throw UsageError(fmt::format("the projector rank must be >= 1 (got {})", noise.rank), "--noise-rank");
  if (!std::isnan(bound.gamma) && !(bound.gamma > 0 && bound.gamma < 1))
    throw UsageError(fmt::format("gamma must lie in (0, 1) (got {})", bound.gamma), "--gamma");
  if (!std::isnan(bound.c_lin) && !(bound.c_lin >= 0 && std::isfinite(bound.c_lin)))
    throw UsageError(fmt::format("C_lin must be a number >= 0 (got {})", bound.c_lin), "--c-lin");
}

Certificate certify(const Correction& c, const BoundOptions& bound, const NoiseOptions& noise) {
  check_noise_options(noise, bound);
  Certificate cert;
  cert.noise = noise.kind;
  const bool any_truncated =
      std::any_of(c.deleted.begin(), c.deleted.end(), [](const DeletedStep& d) { return d.truncated; });
  double u_sum = 0;
  for (const auto& d : c.deleted) u_sum += d.u_norm;

  // gamma: supplied, estimated from the walk's ratios, or irrelevant (no window truncated).
  if (!std::isnan(bound.gamma)) {
    cert.gamma = bound.gamma;
    cert.gamma_source = "supplied";
  } else if (!std::isnan(c.gamma_hat)) {
    cert.gamma = c.gamma_hat;
    cert.gamma_source = "estimated";
  } else if (!any_truncated) {
    cert.gamma = 0;
    cert.gamma_source = "unused";
  } else {
    cert.gamma = std::numeric_limits<double>::quiet_NaN();  // K = 0: nothing to estimate it from
    cert.gamma_source = "estimated";
  }
  cert.truncation_term = 0;
  for (const auto& d : c.deleted) {
    if (!d.truncated || d.u_norm == 0) continue;
    const bool finite = cert.gamma < 1;  // false for NaN too
    cert.truncation_term +=
        finite ? std::pow(cert.gamma, static_cast<double>(d.k_used)) / (1 - cert.gamma) * d.u_norm
               : std::numeric_limits<double>::infinity();
  }
  // C_lin: supplied, or the probe's summed residuals per unit of ||u||.
  if (!std::isnan(bound.c_lin)) {
    cert.c_lin = bound.c_lin;
    cert.c_lin_source = "supplied";
    cert.linearisation_term = bound.c_lin * u_sum;
  } else if (!std::isnan(c.lin_residual)) {
    cert.c_lin = u_sum > 0 ? c.lin_residual / u_sum : 0;
    cert.c_lin_source = "estimated";
    cert.linearisation_term = c.lin_residual;
  } else {
    cert.c_lin = cert.linearisation_term = std::numeric_limits<double>::quiet_NaN();
    cert.c_lin_source = "unavailable";
  }
  cert.sensitivity = cert.linearisation_term + cert.truncation_term;

  if (noise.kind == "none") {
    cert.kind = "none";
    return cert;
  }
  if (bound.substitute_norm) {
    cert.kind = "substitute";
    cert.sensitivity = view(c.v).norm();
  } else {
    if (cert.c_lin_source == "unavailable")
      throw RuntimeError("the linearisation constant cannot be estimated with the probe off: pass --c-lin");
    if (!std::isfinite(cert.sensitivity))
      throw RuntimeError(std::isnan(cert.gamma)
                             ? std::string("gamma cannot be estimated (no step was propagated) and a window is "
                                           "truncated: pass --gamma or a larger K")
                             : fmt::format("the truncation bound is infinite (gamma {:.6g} is not below 1 and a "
                                           "window is truncated): pass --gamma or a larger K",
                                           cert.gamma));
    cert.kind = cert.c_lin_source == "supplied" && (cert.gamma_source == "supplied" || !any_truncated)
                    ? "certified"
                    : "empirical";
  }
  cert.epsilon = noise.epsilon;
  cert.delta = noise.delta;
  if (noise.kind == "isotropic") {
    cert.sigma_par = cert.sigma_perp =
        cert.sensitivity / noise.epsilon * std::sqrt(2 * std::log(1.25 / noise.delta));
  } else {
    cert.rank = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(noise.rank), c.v.size()));
    cert.beta = noise.beta;
    cert.sigma_par = 2 * cert.sensitivity / noise.epsilon * std::sqrt(2 * std::log(2.5 / noise.delta));
    cert.sigma_perp = noise.beta * cert.sigma_par;
  }
  return cert;
}

nlohmann::json Certificate::to_json(const Correction& c) const {
  const bool statement = kind != "none";
  nlohmann::json deleted = nlohmann::json::array();
  for (const auto& d : c.deleted)
    deleted.push_back({{"step", d.step}, {"k_used", d.k_used}, {"truncated", d.truncated}, {"u_norm", number(d.u_norm)}});
  return {
      {"kind", kind},
      {"noise", noise},
      {"epsilon", statement ? number(epsilon) : nlohmann::json(nullptr)},
      {"delta", statement ? number(delta) : nlohmann::json(nullptr)},
      {"sensitivity", number(sensitivity)},
      {"linearisation_term", number(linearisation_term)},
      {"truncation_term", number(truncation_term)},
      {"gamma", number(gamma)},
      {"gamma_source", gamma_source},
      {"c_lin", number(c_lin)},
      {"c_lin_source", c_lin_source},
      {"sigma_par", number(sigma_par)},
      {"sigma_perp", number(sigma_perp)},
      {"rank", rank},
      {"beta", number(beta)},
      {"deleted", deleted},
      {"v_norm", number(view(c.v).norm())},
      {"gamma_hat", number(c.gamma_hat)},
      {"ratio_max", number(c.ratio_max)},
      {"n_ratios", c.ratios.size()},
      {"lin_residual", number(c.lin_residual)},
      {"products", c.products},
      {"probes", c.probes},
      {"steps_replayed", c.steps_replayed},
      {"seconds", number(c.seconds)},
  };
}

std::vector<double> public_projector(std::size_t d, int k, std::uint64_t seed) {
  if (k < 1 || static_cast<std::size_t>(k) > d)
    throw UsageError(fmt::format("the projector rank {} must lie in [1, {}]", k, d), "--noise-rank");
  const auto rows = static_cast<Eigen::Index>(d);
  std::vector<double> q(d * static_cast<std::size_t>(k));
  Eigen::Map<Eigen::MatrixXd> Q(q.data(), rows, k);
  Rng rng(seed);
  for (Eigen::Index j = 0; j < k; ++j)
    for (Eigen::Index i = 0; i < rows; ++i) Q(i, j) = rng.normal();
  for (Eigen::Index j = 0; j < k; ++j) {
    for (int pass = 0; pass < 2; ++pass)
      for (Eigen::Index i = 0; i < j; ++i) Q.col(j) -= Q.col(i).dot(Q.col(j)) * Q.col(i);
    Q.col(j) /= Q.col(j).norm();
  }
  return q;
}

NoiseDraw add_noise(std::vector<double>& theta, const Certificate& cert, const NoiseOptions& noise) {
  NoiseDraw draw;
  if (noise.kind == "none") return draw;
  const auto p = static_cast<Eigen::Index>(theta.size());
  Eigen::VectorXd z(p);
  Rng rng(noise.seed);
  for (Eigen::Index i = 0; i < p; ++i) z[i] = rng.normal();
  if (noise.kind == "isotropic") {
    z *= cert.sigma_par;
    view(theta) += z;
    draw.norm = z.norm();
    draw.rms_par = draw.rms_perp = p > 0 ? draw.norm / std::sqrt(static_cast<double>(p)) : 0;
    draw.theta_norm = view(theta).norm();
    return draw;
  }
  if (noise.kind != "subspace") throw UsageError("unknown noise '" + noise.kind + "' (none, isotropic or subspace)", "--noise");
  const int k = static_cast<int>(std::min<Eigen::Index>(noise.rank, p));
  const std::vector<double> q = public_projector(theta.size(), k, noise.public_seed);
  const Eigen::Map<const Eigen::MatrixXd> Q(q.data(), p, k);
  const Eigen::VectorXd par = Q * (Q.transpose() * z);
  const Eigen::VectorXd xi = cert.sigma_par * par + cert.sigma_perp * (z - par);
  view(theta) += xi;
  draw.norm = xi.norm();
  draw.rms_par = cert.sigma_par * par.norm() / std::sqrt(static_cast<double>(k));
  draw.rms_perp = p > k ? cert.sigma_perp * (z - par).norm() / std::sqrt(static_cast<double>(p - k)) : 0;
  draw.theta_norm = view(theta).norm();
  return draw;
}

std::pair<double, double> compose(const std::vector<double>& eps, const std::vector<double>& delta, double delta_prime) {
  if (eps.size() != delta.size())
    throw UsageError(fmt::format("{} epsilons for {} deltas", eps.size(), delta.size()));
  if (!(delta_prime > 0 && delta_prime < 1))
    throw UsageError(fmt::format("delta' must lie in (0, 1) (got {})", delta_prime));
  const double sum = std::accumulate(eps.begin(), eps.end(), 0.0);
  const double sq = std::inner_product(eps.begin(), eps.end(), eps.begin(), 0.0);
  const double dsum = std::accumulate(delta.begin(), delta.end(), 0.0);
  return {sum + std::sqrt(2 * std::log(1 / delta_prime) * sq), dsum + delta_prime};
}

double mia_auc(const std::vector<double>& member_losses, const std::vector<double>& nonmember_losses) {
  if (member_losses.empty() || nonmember_losses.empty())
    throw InputError(fmt::format("membership inference needs members and non-members (got {} and {})",
                                 member_losses.size(), nonmember_losses.size()));
  // (loss, is non-member), ascending; ranks 1.. with midranks for ties.
  std::vector<std::pair<double, bool>> all;
  all.reserve(member_losses.size() + nonmember_losses.size());
  for (double x : member_losses) all.emplace_back(x, false);
  for (double x : nonmember_losses) all.emplace_back(x, true);
  for (const auto& [x, non] : all)
    if (!std::isfinite(x)) throw InputError(fmt::format("a {}member loss is not finite ({})", non ? "non-" : "", x));
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  double rank_sum = 0;  // ranks of the non-members
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double mid = 0.5 * static_cast<double>(i + 1 + j);  // mean of ranks i+1 .. j
    for (std::size_t t = i; t < j; ++t)
      if (all[t].second) rank_sum += mid;
    i = j;
  }
  const auto n = static_cast<double>(member_losses.size()), m = static_cast<double>(nonmember_losses.size());
  // Mann-Whitney U of the non-members: pairs with the non-member's loss above the member's.
  return (rank_sum - m * (m + 1) / 2) / (n * m);
}

}  // namespace icmlkit::unlearn
