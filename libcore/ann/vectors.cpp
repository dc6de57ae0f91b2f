#include "ann/vectors.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fmt/core.h>
#include <fstream>

#include "ann/h5matrix.hpp"
#include "io/atomic_file.hpp"
#include "io/gzip.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace icmlkit::ann {
namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// Whole file as bytes; .gz files are inflated (every member, CRC and length checked).
std::string read_bytes(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw unreadable_file(path);
  return io::read_maybe_gzip(path);
}

void check_finite(const Vectors& v, const std::string& label) {
  for (std::size_t i = 0; i < v.n; ++i)
    for (std::size_t k = 0; k < v.dim; ++k)
      if (!std::isfinite(v.row(i)[k]))
        throw InputError(fmt::format("non-finite value {} in coordinate {}", v.row(i)[k], k + 1), fmt::format("{}, vector {}", label, i + 1));
}

Vectors from_h5(const io::h5::Handle& f, const std::string& name, const std::string& label) {
  Shape2 s;
  Vectors v;
  const std::vector<float> values = h5_read_floats(f, name, label, s);
  v.data.assign(values.begin(), values.end());
  v.n = s.rows;
  v.dim = s.cols;
  return v;
}

VectorFile read_h5(const std::string& path) {
  std::string file = path, dataset;
  if (const auto colon = path.find(".h5:"); colon != std::string::npos) {
    file = path.substr(0, colon + 3);
    dataset = path.substr(colon + 4);
  } else if (const auto c2 = path.find(".hdf5:"); c2 != std::string::npos) {
    file = path.substr(0, c2 + 5);
    dataset = path.substr(c2 + 6);
  }
  VectorFile out;
  auto f = io::h5::open_file(file);
  out.sha256 = io::sha256_file(file);
  if (!dataset.empty()) {
    out.items = from_h5(f, dataset, file + ":" + dataset);
  } else {
    if (!h5_exists(f, "train")) throw InputError("no /train dataset (ann-benchmarks layout)", file);
    out.items = from_h5(f, "train", file + ":/train");
    if (h5_exists(f, "test")) {
      out.queries = from_h5(f, "test", file + ":/test");
      if (out.queries.n > 0 && out.queries.dim != out.items.dim)
        throw InputError(fmt::format("/test has {} coordinates, /train has {}", out.queries.dim, out.items.dim), file);
    }
    io::h5::read_attr(f, "distance", out.distance);
    if (h5_exists(f, "neighbors")) {
      Shape2 s;
      const std::vector<std::int64_t> ids = h5_read_ints(f, "neighbors", file + ":/neighbors", s);
      if (s.rows != out.queries.n)
        throw InputError(fmt::format("/neighbors has {} rows for {} /test queries", s.rows, out.queries.n), file);
      out.neighbors.resize(s.rows);
      for (std::size_t q = 0; q < s.rows; ++q) {
        out.neighbors[q].assign(ids.begin() + std::ptrdiff_t(q * s.cols), ids.begin() + std::ptrdiff_t((q + 1) * s.cols));
        for (const std::int64_t id : out.neighbors[q])
          if (id < 0 || static_cast<std::size_t>(id) >= out.items.n)
            throw InputError(fmt::format("/neighbors row {} names item {} of {}", q + 1, id, out.items.n), file);
      }
    }
  }
  return out;
}

VectorFile read_fvecs(const std::string& path, const std::string& bytes) {
  VectorFile out;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < 4) throw InputError("truncated dimension header", fmt::format("{}, vector {}", path, out.items.n + 1));
    std::int32_t d = 0;
    std::memcpy(&d, bytes.data() + pos, 4);
    pos += 4;
    if (d <= 0 || (out.items.n > 0 && static_cast<std::size_t>(d) != out.items.dim))
      throw InputError(fmt::format("bad dimension {}", d), fmt::format("{}, vector {}", path, out.items.n + 1));
    if (bytes.size() - pos < 4 * static_cast<std::size_t>(d))
      throw InputError("truncated vector", fmt::format("{}, vector {}", path, out.items.n + 1));
    out.items.dim = static_cast<std::size_t>(d);
    const std::size_t at = out.items.data.size();
    out.items.data.resize(at + out.items.dim);
    std::memcpy(out.items.data.data() + at, bytes.data() + pos, 4 * out.items.dim);
    pos += 4 * out.items.dim;
    ++out.items.n;
  }
  return out;
}

VectorFile read_fbin(const std::string& path, const std::string& bytes) {
  VectorFile out;
  if (bytes.size() < 8) throw InputError("truncated header (want uint32 n, uint32 dim)", path);
  std::uint32_t n = 0, d = 0;
  std::memcpy(&n, bytes.data(), 4);
  std::memcpy(&d, bytes.data() + 4, 4);
  if (d == 0) throw InputError("dimension 0", path);
  const std::uint64_t want = 8 + 4ull * n * d;
  if (bytes.size() != want) throw InputError(fmt::format("size {} bytes, header says {} x {} needs {}", bytes.size(), n, d, want), path);
  out.items.n = n;
  out.items.dim = d;
  out.items.data.resize(static_cast<std::size_t>(n) * d);
  if (n > 0) std::memcpy(out.items.data.data(), bytes.data() + 8, 4ull * n * d);
  return out;
}

VectorFile read_csv(const std::string& path, const std::string& bytes, const VectorReadOptions& opt) {
  io::TableReadOptions ro;
  ro.header = !opt.no_header;
  ro.skip_lines = opt.skip_lines;
  std::string label = path;
  if (ends_with(path, ".tsv") || ends_with(path, ".tsv.gz")) ro.delimiter = '\t';
  else ro.delimiter = ',';
  const io::Table t = io::Table::parse_csv(bytes, label, ro);
  if (ro.header && std::all_of(t.names().begin(), t.names().end(), [](const std::string& c) { return io::parse_double(c).has_value(); }))
    log::warn("{}: the header row is all numbers ({}, ...); it was read as column names, not as a vector: if it is data, "
              "pass --no-header", path, t.names().front());
  std::size_t cols = t.cols();
  if (opt.label_last) {
    if (cols < 2) throw InputError("--label-last needs at least two columns", path);
    --cols;
  }
  VectorFile out;
  out.items.n = t.rows();
  out.items.dim = cols;
  out.items.data.resize(out.items.n * cols);
  for (std::size_t c = 0; c < cols; ++c) {
    const auto v = t.numbers(t.names()[c]);
    for (std::size_t r = 0; r < v.size(); ++r) out.items.data[r * cols + c] = static_cast<float>(v[r]);
  }
  return out;
}

}  // namespace

Metric metric_of_distance(const std::string& distance, const std::string& where) {
  if (distance == "angular" || distance == "cosine") return Metric::cosine;
  if (distance == "euclidean" || distance == "l2") return Metric::l2;
  if (distance == "dot" || distance == "ip" || distance == "inner_product") return Metric::ip;
  throw InputError(fmt::format("the file's distance '{}' is not one this toolkit searches (angular, euclidean, dot)", distance), where);
}

VectorFile read_vectors(const std::string& path, const VectorReadOptions& opt) {
  VectorFile out;
  const bool h5 = ends_with(path, ".h5") || ends_with(path, ".hdf5") || path.find(".h5:") != std::string::npos ||
                  path.find(".hdf5:") != std::string::npos;
  if (h5) {
    out = read_h5(path);
  } else {
    const std::string bytes = read_bytes(path);
    if (bytes.empty()) throw InputError("empty file", path);
    if (ends_with(path, ".fvecs")) out = read_fvecs(path, bytes);
    else if (ends_with(path, ".fbin")) out = read_fbin(path, bytes);
    else out = read_csv(path, bytes, opt);
    out.sha256 = io::sha256_hex(bytes);
  }
  if (out.items.n == 0 || out.items.dim == 0) throw InputError("no vectors", path);
  check_finite(out.items, path);
  check_finite(out.queries, path + " (test)");
  return out;
}

void write_fbin(const std::string& path, const Vectors& v) {
  io::AtomicFile af(path);
  {
    std::ofstream f(af.temp_path(), std::ios::binary);
    const std::uint32_t n = static_cast<std::uint32_t>(v.n), d = static_cast<std::uint32_t>(v.dim);
    f.write(reinterpret_cast<const char*>(&n), 4);
    f.write(reinterpret_cast<const char*>(&d), 4);
    f.write(reinterpret_cast<const char*>(v.data.data()), static_cast<std::streamsize>(4 * v.data.size()));
    if (!f) throw RuntimeError("cannot write file", path);
  }
  af.commit();
}

ProxyTransform::ProxyTransform(const std::string& spec, const Vectors& items, const std::string& flag) : spec_(spec), dim_(items.dim) {
  const auto colon = spec.find(':');
  kind_ = spec.substr(0, colon);
  if (kind_ == "same") {
    if (colon != std::string::npos) throw UsageError("'same' takes no parameter", flag);
    return;
  }
  if (kind_ != "pca" && kind_ != "pool" && kind_ != "pool1d" && kind_ != "quantize")
    throw UsageError(fmt::format("unknown proxy '{}' (pca:K, pool:F, pool1d:F, quantize:B, same)", spec), flag);
  const auto p = colon == std::string::npos ? std::nullopt : io::parse_double(spec.substr(colon + 1));
  if (!p || *p < 1 || *p != std::floor(*p) || *p > 1e6) throw UsageError(fmt::format("'{}' needs a positive integer parameter", kind_), flag);
  param_ = static_cast<int>(*p);
  const std::size_t P = static_cast<std::size_t>(param_);
  if (kind_ == "pca") {
    if (P > items.dim) throw UsageError(fmt::format("pca:{} asks for more components than the {} coordinates", P, items.dim), flag);
    Eigen::MatrixXd X(items.n, items.dim);
    for (std::size_t i = 0; i < items.n; ++i)
      for (std::size_t k = 0; k < items.dim; ++k) X(i, k) = items.row(i)[k];
    const Eigen::RowVectorXd mu = X.colwise().mean();
    X.rowwise() -= mu;
    const Eigen::MatrixXd cov = X.transpose() * X / std::max<double>(1.0, static_cast<double>(items.n) - 1.0);
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(cov);
    mean_.assign(mu.data(), mu.data() + items.dim);
    components_.resize(P * items.dim);
    for (std::size_t c = 0; c < P; ++c) {  // eigenvalues ascending: take from the end
      const Eigen::VectorXd e = es.eigenvectors().col(static_cast<Eigen::Index>(items.dim - 1 - c));
      for (std::size_t k = 0; k < items.dim; ++k) components_[c * items.dim + k] = e[static_cast<Eigen::Index>(k)];
    }
  } else if (kind_ == "pool") {
    const auto s = static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(items.dim))));
    if (s * s != items.dim || s % P != 0)
      throw UsageError(fmt::format("pool:{} needs a square image whose side is divisible by {} (dimension {})", P, P, items.dim), flag);
  } else if (kind_ == "pool1d") {
    if (items.dim % P != 0) throw UsageError(fmt::format("pool1d:{} needs a dimension divisible by {} (dimension {})", P, P, items.dim), flag);
  } else {
    if (P > 16) throw UsageError("quantize:B takes 1..16 bits", flag);
    const auto [mn, mx] = std::minmax_element(items.data.begin(), items.data.end());
    lo_ = *mn;
    const double levels = std::ldexp(1.0, param_) - 1.0;
    step_ = (*mx > *mn) ? (*mx - *mn) / levels : 1.0;
  }
}

Vectors ProxyTransform::apply(const Vectors& x) const {
  if (kind_ == "same" || x.n == 0) return x;
  Vectors out;
  out.n = x.n;
  const std::size_t P = static_cast<std::size_t>(param_);
  if (kind_ == "pca") out.dim = P;
  else if (kind_ == "pool") out.dim = x.dim / (P * P);
  else if (kind_ == "pool1d") out.dim = x.dim / P;
  else out.dim = x.dim;
  out.data.assign(out.n * out.dim, 0.0f);
  const std::size_t s = static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(x.dim))));
  for (std::size_t i = 0; i < x.n; ++i) {
    const float* a = x.row(i);
    float* b = out.row(i);
    if (kind_ == "pca") {
      for (std::size_t c = 0; c < P; ++c) {
        double acc = 0;
        for (std::size_t k = 0; k < x.dim; ++k) acc += (a[k] - mean_[k]) * components_[c * x.dim + k];
        b[c] = static_cast<float>(acc);
      }
    } else if (kind_ == "pool") {
      const std::size_t so = s / P;
      for (std::size_t r = 0; r < s; ++r)
        for (std::size_t c = 0; c < s; ++c) b[(r / P) * so + c / P] += a[r * s + c] / static_cast<float>(P * P);
    } else if (kind_ == "pool1d") {
      for (std::size_t k = 0; k < x.dim; ++k) b[k / P] += a[k] / static_cast<float>(P);
    } else {
      const double top = std::ldexp(1.0, param_) - 1.0;
      for (std::size_t k = 0; k < x.dim; ++k) {
        const double level = std::clamp(std::round((a[k] - lo_) / step_), 0.0, top);
        b[k] = static_cast<float>(lo_ + level * step_);
      }
    }
  }
  return out;
}

}  // namespace icmlkit::ann
