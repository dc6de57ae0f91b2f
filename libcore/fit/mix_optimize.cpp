#include "fit/mix_optimize.hpp"

#include <fmt/core.h>

#include <cmath>
#include <limits>

#include "cli/run_tool.hpp"
#include "io/table.hpp"
#include "num/simplex.hpp"
#include "util/error.hpp"

namespace icmlkit::fit {

FittedMixLaw load_fitted_mixlaw(const nlohmann::json& j, const std::string& law_name, const std::string& where) {
  if (!j.is_object() || !j.contains("laws") || !j["laws"].is_array() || j["laws"].empty() || !j.contains("domains") ||
      !j["domains"].is_array())
    throw InputError("not a mixlaw-fit result: expected \"domains\" and a non-empty \"laws\" array", where);
  const nlohmann::json* pick = nullptr;
  for (const auto& l : j["laws"]) {
    if (!l.is_object() || !l.contains("law") || !l["law"].is_string()) throw InputError("a law entry has no \"law\" name", where);
    const std::string n = l["law"];
    if ((!law_name.empty() && n == law_name) || (law_name.empty() && (j["laws"].size() == 1 || n == "capacity-noise")))
      pick = &l;
  }
  if (!pick) {
    std::string have;
    for (const auto& l : j["laws"]) have += (have.empty() ? "" : ", ") + l["law"].get<std::string>();
    throw InputError(law_name.empty() ? fmt::format("several laws ({}); choose one with --law", have)
                                      : fmt::format("law '{}' is not in the file (it has: {})", law_name, have),
                     where);
  }
  FittedMixLaw f;
  const std::string picked = (*pick)["law"].get<std::string>();
  const auto known = mixlaw_names();
  if (std::find(known.begin(), known.end(), picked) == known.end())
    throw InputError(fmt::format("unknown law '{}' in the file", picked), where);
  f.law = make_mixlaw(picked);
  for (const auto& d : j["domains"]) {
    if (!d.is_string()) throw InputError("\"domains\" must be strings", where);
    if (std::find(f.domains.begin(), f.domains.end(), d.get<std::string>()) != f.domains.end())
      throw InputError(fmt::format("domain '{}' is listed twice", d.get<std::string>()), where);
    f.domains.push_back(d);
  }
  if (f.domains.size() < 2) throw InputError("a mixing law needs at least 2 domains", where);
  f.scored.assign(f.domains.size(), true);
  if (j.contains("scored_domains") && j["scored_domains"].is_array()) {
    f.scored.assign(f.domains.size(), false);
    for (const auto& d : j["scored_domains"]) {
      const auto it = d.is_string() ? std::find(f.domains.begin(), f.domains.end(), d.get<std::string>()) : f.domains.end();
      if (it == f.domains.end()) throw InputError("\"scored_domains\" names a domain not in \"domains\"", where);
      f.scored[static_cast<std::size_t>(it - f.domains.begin())] = true;
    }
  }
  const auto names = f.law->param_names(f.domains);
  if (!pick->contains("params") || !(*pick)["params"].is_object()) throw InputError("a law entry has no \"params\"", where);
  const auto& pj = (*pick)["params"];
  f.params.resize(static_cast<Eigen::Index>(names.size()));
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!pj.contains(names[i]) || !pj[names[i]].is_number() || !std::isfinite(pj[names[i]].get<double>()))
      throw InputError(fmt::format("missing or non-finite parameter '{}'", names[i]), where);
    f.params[static_cast<Eigen::Index>(i)] = pj[names[i]].get<double>();
  }
  // The parameters must lie within the law's bounds (strict positivity is checked where the
  // law is evaluated, since it depends on N).
  Eigen::VectorXd lo, hi;
  f.law->bounds(static_cast<int>(f.domains.size()), lo, hi);
  for (Eigen::Index i = 0; i < f.params.size(); ++i)
    if (f.params[i] < lo[i] || f.params[i] > hi[i])
      throw InputError(fmt::format("parameter '{}' = {} is outside its bounds [{}, {}]", names[static_cast<std::size_t>(i)],
                                   f.params[i], lo[i], hi[i]), where);
  return f;
}

Eigen::ArrayXd objective_weights(const FittedMixLaw& f, const std::string& text, const std::string& flag) {
  const Eigen::Index K = static_cast<Eigen::Index>(f.domains.size());
  int n_scored = 0;
  for (bool b : f.scored) n_scored += b;
  Eigen::ArrayXd v = parse_domain_values(text, f.domains, 1.0 / n_scored, flag);
  const Eigen::ArrayXd defaults = parse_domain_values("", f.domains, 1.0 / n_scored, flag);
  for (Eigen::Index i = 0; i < K; ++i) {
    if (!f.scored[static_cast<std::size_t>(i)]) {
      if (v[i] != defaults[i] && text.find(f.domains[static_cast<std::size_t>(i)] + "=") != std::string::npos)
        throw UsageError(fmt::format("domain '{}' had no observed losses in the fit, so it cannot be weighted",
                                     f.domains[static_cast<std::size_t>(i)]), flag);
      v[i] = 0;
    }
    if (v[i] < 0) throw UsageError(fmt::format("weight of '{}' is negative", f.domains[static_cast<std::size_t>(i)]), flag);
  }
  if (!(v.sum() > 0)) throw UsageError("the domain weights are all zero", flag);
  return v;
}

Eigen::ArrayXd parse_domain_values(const std::string& text, const std::vector<std::string>& domains, double fallback,
                                   const std::string& flag) {
  Eigen::ArrayXd v = Eigen::ArrayXd::Constant(static_cast<Eigen::Index>(domains.size()), fallback);
  if (text.empty()) return v;
  if (text.find('=') == std::string::npos) {
    const auto x = io::parse_double(text);
    if (!x || !std::isfinite(*x)) throw UsageError(fmt::format("'{}' is not a number", text), flag);
    return Eigen::ArrayXd::Constant(static_cast<Eigen::Index>(domains.size()), *x);
  }
  for (const auto& [k, val] : cli::parse_assignments(text, flag)) {
    const auto it = std::find(domains.begin(), domains.end(), k);
    if (it == domains.end()) {
      std::string known;
      for (const auto& d : domains) known += (known.empty() ? "" : ", ") + d;
      throw UsageError(fmt::format("unknown domain '{}' (domains: {})", k, known), flag);
    }
    const auto x = io::parse_double(val);
    if (!x || !std::isfinite(*x)) throw UsageError(fmt::format("'{}' is not a number", val), flag + " " + k);
    v[it - domains.begin()] = *x;
  }
  return v;
}

MixOptimum optimize_mixture(const MixLaw& law, const Eigen::VectorXd& params, double N, double D,
                            const Eigen::ArrayXd& v, const MixOptimizeOptions& opt) {
  const Eigen::Index K = v.size();
  std::vector<Eigen::ArrayXd> starts;
  starts.push_back(Eigen::ArrayXd::Constant(K, 1.0 / static_cast<double>(K)));
  for (Eigen::Index i = 0; i < K; ++i) {
    Eigen::ArrayXd c = Eigen::ArrayXd::Constant(K, 0.1 / static_cast<double>(K));
    c[i] += 0.9;
    starts.push_back(c);
  }
  auto value = [&](const Eigen::ArrayXd& h, Eigen::ArrayXd* g) {
    try {
      return law.weighted_loss_grad(params.data(), h, N, D, v, g);
    } catch (const std::invalid_argument& e) {
      throw InputError(fmt::format("the law cannot be evaluated at N = {}: {}", N, e.what()));
    }
  };
  {
    Eigen::ArrayXd g;
    const double f0 = value(starts.front(), &g);
    if (!std::isfinite(f0) || !g.allFinite())
      throw InputError(fmt::format("the fitted parameters give no finite loss at N = {}, D = {} (outside the law's domain?)", N, D));
  }
  MixOptimum best;
  best.objective = std::numeric_limits<double>::infinity();
  for (const auto& s : starts) {
    Eigen::ArrayXd h = num::project_bounded_simplex(s, opt.lower, opt.upper), g(K);
    double f = value(h, &g), step = 1.0;
    int it = 0;
    for (; it < opt.max_iterations; ++it) {
      // Armijo backtracking along the projection arc.
      Eigen::ArrayXd hn;
      double fn = 0;
      bool moved = false;
      for (int bt = 0; bt < 60; ++bt) {
        hn = num::project_bounded_simplex(h - step * g, opt.lower, opt.upper);
        fn = value(hn, nullptr);
        if (fn <= f + 1e-4 * (g * (hn - h)).sum()) { moved = true; break; }
        step *= 0.5;
      }
      if (!moved) break;
      const double change = (hn - h).abs().maxCoeff();
      h = hn;
      f = value(h, &g);
      step = std::min(step * 2.0, 1e6);
      if (change < opt.tolerance) break;
    }
    best.iterations += it;
    ++best.starts;
    if (std::isfinite(f) && f < best.objective) {
      best.objective = f;
      best.h = h;
    }
  }
  if (best.h.size() == 0) throw RuntimeError("no start of the mixture optimisation reached a finite objective");
  return best;
}

}  // namespace icmlkit::fit
