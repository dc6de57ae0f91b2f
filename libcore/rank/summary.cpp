#include "rank/summary.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "io/atomic_file.hpp"
#include "io/gnuplot.hpp"
#include "io/hdf5.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

namespace icmlkit::rank {

Eigen::MatrixXd marginals_from_draws(const std::vector<int>& draws, int n) {
  Eigen::MatrixXd p = Eigen::MatrixXd::Zero(n, n);
  const std::size_t S = draws.size() / static_cast<std::size_t>(n);
  for (std::size_t s = 0; s < S; ++s)
    for (int i = 0; i < n; ++i) p(i, draws[s * static_cast<std::size_t>(n) + static_cast<std::size_t>(i)]) += 1;
  if (S) p /= static_cast<double>(S);
  return p;
}

Perm cp_consensus(const Eigen::MatrixXd& marginals, std::vector<double>* cumprob) {
  const int n = static_cast<int>(marginals.rows());
  Eigen::MatrixXd cum = marginals;
  for (int r = 1; r < n; ++r) cum.col(r) += cum.col(r - 1);
  std::vector<char> used(static_cast<std::size_t>(n), 0);
  Perm order(static_cast<std::size_t>(n));
  if (cumprob) cumprob->assign(static_cast<std::size_t>(n), 0.0);
  for (int r = 0; r < n; ++r) {
    int best = -1;
    for (int i = 0; i < n; ++i)
      if (!used[static_cast<std::size_t>(i)] && (best < 0 || cum(i, r) > cum(best, r))) best = i;
    used[static_cast<std::size_t>(best)] = 1;
    order[static_cast<std::size_t>(r)] = best;
    if (cumprob) (*cumprob)[static_cast<std::size_t>(r)] = cum(best, r);
  }
  return order;
}

namespace {
// Sorts the draw indices by the draws' contents (lexicographic) and calls run(first, length)
// for each run of equal draws, in lexicographic order: no allocation per draw.
template <class Run>
void for_each_distinct_draw(const std::vector<int>& draws, int n, const Run& run) {
  const std::size_t S = draws.size() / static_cast<std::size_t>(n);
  const int* base = draws.data();
  auto row = [&](std::size_t s) { return base + s * static_cast<std::size_t>(n); };
  std::vector<std::size_t> idx(S);
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    return std::lexicographical_compare(row(a), row(a) + n, row(b), row(b) + n);
  });
  for (std::size_t i = 0; i < S;) {
    std::size_t j = i + 1;
    while (j < S && std::equal(row(idx[i]), row(idx[i]) + n, row(idx[j]))) ++j;
    run(row(idx[i]), j - i);
    i = j;
  }
}
}  // namespace

Perm map_consensus(const std::vector<int>& draws, int n, double* freq) {
  // The longest run of equal draws, the lexicographically first among equally long runs.
  const std::size_t S = draws.size() / static_cast<std::size_t>(n);
  if (S == 0) {
    if (freq) *freq = 0.0;
    return {};
  }
  const int* best = nullptr;
  std::size_t best_len = 0;
  for_each_distinct_draw(draws, n, [&](const int* first, std::size_t len) {
    if (len > best_len) best = first, best_len = len;
  });
  if (freq) *freq = static_cast<double>(best_len) / static_cast<double>(S);
  return inverse(Perm(best, best + n));
}

std::size_t distinct_draws(const std::vector<int>& draws, int n) {
  std::size_t count = 0;
  for_each_distinct_draw(draws, n, [&](const int*, std::size_t) { ++count; });
  return count;
}

nlohmann::json scalar_summary(const std::vector<double>& x) {
  if (x.empty()) return nullptr;
  std::vector<double> s = x;
  std::sort(s.begin(), s.end());
  const double mean = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  double v = 0;
  for (double a : s) v += (a - mean) * (a - mean);
  auto q = [&](double p) {
    const double h = p * static_cast<double>(s.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(h));
    const auto hi = std::min(lo + 1, s.size() - 1);
    return s[lo] + (h - static_cast<double>(lo)) * (s[hi] - s[lo]);
  };
  return {{"mean", mean}, {"sd", s.size() > 1 ? std::sqrt(v / static_cast<double>(s.size() - 1)) : 0.0},
          {"q025", q(0.025)}, {"median", q(0.5)}, {"q975", q(0.975)}, {"draws", s.size()}};
}

double max_marginal_tv(const Eigen::MatrixXd& p, const Eigen::MatrixXd& q) {
  return 0.5 * (p - q).cwiseAbs().rowwise().sum().maxCoeff();
}

double mean_marginal_tv(const Eigen::MatrixXd& p, const Eigen::MatrixXd& q) {
  return 0.5 * (p - q).cwiseAbs().rowwise().sum().mean();
}

namespace {
std::string extension(const std::string& path) { return std::filesystem::path(path).extension().string(); }

void write_int_matrix(const io::h5::Handle& loc, const std::string& name, const std::vector<int>& v, hsize_t rows, hsize_t cols) {
  io::h5::Handle ds = io::h5::create_dataset(loc, name, H5T_STD_I32LE, {rows, cols});
  if (rows * cols > 0 && H5Dwrite(ds.get(), H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw RuntimeError("cannot write HDF5 dataset", name);
}

void write_double_matrix(const io::h5::Handle& loc, const std::string& name, const Eigen::MatrixXd& m) {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rm = m;
  io::h5::Handle ds = io::h5::create_dataset(loc, name, H5T_IEEE_F64LE, {static_cast<hsize_t>(m.rows()), static_cast<hsize_t>(m.cols())});
  if (H5Dwrite(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, rm.data()) < 0)
    throw RuntimeError("cannot write HDF5 dataset", name);
}
}  // namespace

void write_marginals(const std::string& path, const Eigen::MatrixXd& marginals, const io::Provenance& prov) {
  const std::string ext = extension(path);
  const int n = static_cast<int>(marginals.rows());
  if (ext == ".csv") {
    io::Table t;
    std::vector<double> item, rank, prob;
    for (int i = 0; i < n; ++i)
      for (int r = 0; r < n; ++r) {
        item.push_back(i + 1);
        rank.push_back(r + 1);
        prob.push_back(marginals(i, r));
      }
    t.set_column("item", item);
    t.set_column("rank", rank);
    t.set_column("probability", prob);
    t.write(path, &prov);
  } else if (ext == ".h5" || ext == ".hdf5") {
    io::AtomicFile af(path);
    {
      io::h5::Handle f = io::h5::create_file(af.temp_path().string());
      write_double_matrix(f, "marginals", marginals);
      io::h5::write_provenance(f, prov);
      io::h5::close_file(f, path);
    }
    af.commit();
  } else {
    throw UsageError("marginals are written as .csv or .h5", "--marginals " + path);
  }
}

void write_draws_h5(const std::string& path, const std::vector<int>& rho, int n, const std::vector<double>& alpha,
                    const std::vector<int>& chain, const std::vector<double>& theta, const Eigen::MatrixXd& marginals,
                    const io::Provenance& prov) {
  const std::string ext = extension(path);
  if (ext != ".h5" && ext != ".hdf5") throw UsageError("posterior draws are written as HDF5 (.h5)", "--samples " + path);
  io::AtomicFile af(path);
  {
    io::h5::Handle f = io::h5::create_file(af.temp_path().string());
    std::vector<int> one(rho.size());
    for (std::size_t k = 0; k < rho.size(); ++k) one[k] = rho[k] + 1;
    const hsize_t S = rho.size() / static_cast<std::size_t>(n);
    write_int_matrix(f, "rho", one, S, static_cast<hsize_t>(n));
    io::h5::write_doubles(f, "alpha", alpha);
    write_int_matrix(f, "chain", chain, S, 1);
    if (!theta.empty()) io::h5::write_doubles(f, "theta", theta);
    write_double_matrix(f, "marginals", marginals);
    io::h5::write_provenance(f, prov);
    io::h5::close_file(f, path);
  }
  af.commit();
}

void write_heatmap(const std::string& png, const Eigen::MatrixXd& marginals, const Perm& consensus_order,
                   const std::string& title) {
  if (extension(png) != ".png") throw UsageError("the heat map is a .png", "--heatmap " + png);
  io::require_gnuplot("--heatmap");
  const int n = static_cast<int>(marginals.rows());
  std::string data;
  for (int k = 0; k < n; ++k) {
    for (int r = 0; r < n; ++r) data += fmt::format("{}{:.17g}", r ? " " : "", marginals(consensus_order[static_cast<std::size_t>(k)], r));
    data += "\n";
  }
  io::gnuplot_png(
      png, data,
      [&](const std::string& dat) {
        std::string g = fmt::format(
            "set title {}\nset xlabel 'rank'\nset ylabel 'item (CP consensus order)'\nset yrange [{}.5:0.5]\nset xrange [0.5:{}.5]\n"
            "set cblabel 'P(rho_i = r)'\nset palette defined (0 'white', 1 'dark-blue')\nset ytics (",
            io::gnuplot_quote(title), n, n);
        for (int k = 0; k < n; ++k) g += fmt::format("{}'{}' {}", k ? ", " : "", consensus_order[static_cast<std::size_t>(k)] + 1, k + 1);
        return g + ")\nplot " + dat + " matrix using ($1+1):($2+1):3 with image notitle";
      },
      800, 700);
}

std::vector<int> one_based(const Perm& p) {
  std::vector<int> v(p.size());
  for (std::size_t k = 0; k < p.size(); ++k) v[k] = p[k] + 1;
  return v;
}

}  // namespace icmlkit::rank

namespace icmlkit::rank {

void check_draw_outputs(const DrawOutputs& out) {
  auto ext = [](const std::string& p) { return std::filesystem::path(p).extension().string(); };
  if (!out.samples.empty() && ext(out.samples) != ".h5" && ext(out.samples) != ".hdf5")
    throw UsageError("posterior draws are written as HDF5 (.h5)", "--samples " + out.samples);
  if (!out.marginals.empty() && ext(out.marginals) != ".csv" && ext(out.marginals) != ".h5" && ext(out.marginals) != ".hdf5")
    throw UsageError("marginals are written as .csv or .h5", "--marginals " + out.marginals);
  if (!out.heatmap.empty() && ext(out.heatmap) != ".png") throw UsageError("the heat map is a .png", "--heatmap " + out.heatmap);
  if (!out.heatmap.empty()) io::require_gnuplot("--heatmap");
}

nlohmann::json consensus_json(const Eigen::MatrixXd& marginals, const std::vector<int>& draws, int n) {
  std::vector<double> cum;
  const Perm cp = cp_consensus(marginals, &cum);
  nlohmann::json cpj = nlohmann::json::array();
  for (int r = 0; r < n; ++r)
    cpj.push_back({{"rank", r + 1}, {"item", cp[static_cast<std::size_t>(r)] + 1}, {"cumprob", cum[static_cast<std::size_t>(r)]}});
  double freq = 0;
  const Perm map = map_consensus(draws, n, &freq);
  return {{"cp_consensus", cpj}, {"map_consensus", {{"ordering", one_based(map)}, {"frequency", freq}}}};
}

void write_draw_outputs(const DrawOutputs& out, const std::vector<int>& draws, int n, const std::vector<double>& alpha,
                        const std::vector<int>& chain, const std::vector<double>& theta, const Eigen::MatrixXd& marginals,
                        const io::Provenance& prov, const std::string& title) {
  // The heat map first: gnuplot is the step most likely to fail, and then nothing is written.
  if (!out.heatmap.empty()) write_heatmap(out.heatmap, marginals, cp_consensus(marginals), title);
  if (!out.samples.empty()) write_draws_h5(out.samples, draws, n, alpha, chain, theta, marginals, prov);
  if (!out.marginals.empty()) write_marginals(out.marginals, marginals, prov);
}

}  // namespace icmlkit::rank
