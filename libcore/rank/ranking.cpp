#include "rank/ranking.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <map>
#include <queue>
#include <sstream>

#include "io/sha256.hpp"
#include "io/gzip.hpp"
#include "io/table.hpp"
#include "util/error.hpp"

namespace icmlkit::rank {

bool is_permutation(const Perm& r) {
  std::vector<char> seen(r.size(), 0);
  for (int v : r) {
    if (v < 0 || v >= static_cast<int>(r.size()) || seen[static_cast<std::size_t>(v)]) return false;
    seen[static_cast<std::size_t>(v)] = 1;
  }
  return true;
}

Perm inverse(const Perm& p) {
  Perm q(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) q[static_cast<std::size_t>(p[i])] = static_cast<int>(i);
  return q;
}

MissingPolicy parse_missing_policy(const std::string& s, const std::string& flag) {
  if (s == "augment") return MissingPolicy::augment;
  if (s == "fail") return MissingPolicy::fail;
  if (s == "omit") return MissingPolicy::omit;
  throw UsageError("missing-rank policy must be augment, fail or omit", flag);
}

bool RankData::has_missing() const { return (ranks.array() == missing_rank).any(); }

void check_partial_ranking(const int* r, int n, const std::string& where) {
  std::vector<int> seen(static_cast<std::size_t>(n), -1);
  for (int i = 0; i < n; ++i) {
    if (r[i] == missing_rank) continue;
    if (r[i] < 0 || r[i] >= n)
      throw InputError(fmt::format("rank {} of item {} is out of range 1..{}", r[i] + 1, i + 1, n), where);
    if (seen[static_cast<std::size_t>(r[i])] >= 0)
      throw InputError(fmt::format("not a permutation: items {} and {} share rank {} (ties are not allowed)",
                                   seen[static_cast<std::size_t>(r[i])] + 1, i + 1, r[i] + 1),
                       where);
    seen[static_cast<std::size_t>(r[i])] = i;
  }
}

namespace {

std::vector<std::string> split_line(const std::string& line, char delim) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == delim) {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r' && c != '"') {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  for (auto& s : out) {
    const auto b = s.find_first_not_of(" \t");
    const auto e = s.find_last_not_of(" \t");
    s = b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  }
  return out;
}

// Parses a cell as an integer; nullopt when it is not one.
std::optional<long long> parse_int(const std::string& s) {
  const auto v = io::parse_double(s);
  if (!v || *v != std::floor(*v) || std::abs(*v) > 1e15) return std::nullopt;
  return static_cast<long long>(*v);
}

// Whether a CSV line is the header of a pairwise file (assessor, bottom_item, top_item), and
// what to say then.
bool names_pairwise_columns(const std::string& line) {
  return line.find("bottom_item") != std::string::npos && line.find("top_item") != std::string::npos;
}
constexpr const char* pairwise_file_hint = "a file of pairwise preferences: mallows-mcmc reads it with --pairwise";

}  // namespace

RankData read_rank_csv(const std::string& path, MissingPolicy policy, bool header) {
  const std::string text = io::read_maybe_gzip(path);
  RankData d;
  d.sha256 = io::sha256_hex(text);
  const std::string name = io::is_gzip_path(path) ? path.substr(0, path.size() - 3) : path;  // x.tsv.gz is a TSV
  const char delim = (name.size() > 4 && name.substr(name.size() - 4) == ".tsv") ? '\t' : ',';
  std::istringstream in(text);
  std::string line;
  std::size_t lineno = 0;
  int n = -1;
  std::vector<std::vector<int>> rows;
  while (std::getline(in, line)) {
    ++lineno;
    if (header && lineno == 1) {
      if (names_pairwise_columns(line))
        throw InputError(pairwise_file_hint, fmt::format("{}, line 1", path));
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto cells = split_line(line, delim);
    const std::string where = fmt::format("{}, line {}", path, lineno);
    if (n < 0) n = static_cast<int>(cells.size());
    if (static_cast<int>(cells.size()) != n)
      throw InputError(fmt::format("row has {} ranks, the first row has {}", cells.size(), n), where);
    std::vector<int> r(static_cast<std::size_t>(n));
    bool missing = false;
    for (int i = 0; i < n; ++i) {
      const auto& c = cells[static_cast<std::size_t>(i)];
      if (c.empty() || c == "NA" || c == "nan" || c == "NaN" || c == "0") {
        r[static_cast<std::size_t>(i)] = missing_rank;
        missing = true;
        continue;
      }
      const auto v = parse_int(c);
      if (!v) {
        // A first line naming the pairwise columns is a pairwise file, not a header of ranks.
        const bool pairwise_header = rows.empty() && names_pairwise_columns(line);
        const std::string hint = pairwise_header ? fmt::format(" ({})", pairwise_file_hint)
                                 : rows.empty() && !header ? " (a header row? use --header)"
                                                           : "";
        throw InputError(fmt::format("rank '{}' of item {} is not an integer{}", c, i + 1, hint), where);
      }
      if (*v < 1 || *v > n) throw InputError(fmt::format("rank {} of item {} is out of range 1..{}", *v, i + 1, n), where);
      r[static_cast<std::size_t>(i)] = static_cast<int>(*v - 1);
    }
    check_partial_ranking(r.data(), n, where);
    if (missing && policy == MissingPolicy::fail)
      throw InputError("missing rank, and --missing is fail (--help lists the other policies)", where);
    if (missing && policy == MissingPolicy::omit) {
      ++d.omitted;
      continue;
    }
    if (std::count(r.begin(), r.end(), missing_rank) == n) throw InputError("row has no observed rank", where);
    rows.push_back(std::move(r));
    d.rows.push_back(lineno);
  }
  if (n < 0) throw InputError("no rankings (empty file)", path);
  if (rows.empty()) throw InputError("no complete rankings left after --missing omit", path);
  if (n < 2) throw InputError("need at least 2 items", path);
  d.ranks.resize(static_cast<Eigen::Index>(rows.size()), n);
  for (std::size_t j = 0; j < rows.size(); ++j)
    for (int i = 0; i < n; ++i) d.ranks(static_cast<Eigen::Index>(j), i) = rows[j][static_cast<std::size_t>(i)];
  return d;
}

PairwiseData read_pairwise_csv(const std::string& path, int n_items, std::string* sha256) {
  const io::Table t = io::Table::read(path);
  if (sha256) *sha256 = t.sha256();
  for (const char* c : {"assessor", "bottom_item", "top_item"})
    if (!t.has(c)) throw InputError(fmt::format("missing column '{}' (need assessor, bottom_item, top_item)", c), path);
  const auto assessor = t.texts("assessor");
  const auto bottom = t.numbers("bottom_item"), top = t.numbers("top_item");
  int nmax = 0;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    for (double v : {bottom[r], top[r]})
      if (v != std::floor(v) || v < 1)
        throw InputError(fmt::format("item {} is not a positive integer", io::format_double(v)), t.where(r));
    nmax = std::max(nmax, static_cast<int>(std::max(bottom[r], top[r])));
  }
  PairwiseData p;
  p.n_items = n_items > 0 ? n_items : nmax;
  if (p.n_items < 2) throw InputError("need at least 2 items", path);
  std::map<std::string, std::size_t> index;
  for (std::size_t r = 0; r < t.rows(); ++r) {
    if (top[r] > p.n_items || bottom[r] > p.n_items)
      throw InputError(fmt::format("item {} is out of range 1..{}", static_cast<int>(std::max(top[r], bottom[r])), p.n_items), t.where(r));
    if (top[r] == bottom[r]) throw InputError(fmt::format("item {} is compared with itself", static_cast<int>(top[r])), t.where(r));
    auto [it, fresh] = index.emplace(assessor[r], p.by_assessor.size());
    if (fresh) {
      p.by_assessor.emplace_back();
      p.assessor_labels.push_back(assessor[r]);
    }
    p.by_assessor[it->second].push_back({static_cast<int>(top[r]) - 1, static_cast<int>(bottom[r]) - 1});
  }
  return p;
}

PairwiseData implied_preferences(const RankMatrix& ranks) {
  PairwiseData p;
  p.n_items = static_cast<int>(ranks.cols());
  const int n = p.n_items;
  for (Eigen::Index j = 0; j < ranks.rows(); ++j) {
    // The missing items share the unused ranks: lo..hi bound them.
    std::vector<char> used(static_cast<std::size_t>(n), 0);
    for (int i = 0; i < n; ++i)
      if (ranks(j, i) != missing_rank) used[static_cast<std::size_t>(ranks(j, i))] = 1;
    int lo = n, hi = -1;
    for (int r = 0; r < n; ++r)
      if (!used[static_cast<std::size_t>(r)]) {
        lo = std::min(lo, r);
        hi = std::max(hi, r);
      }
    std::vector<Preference> v;
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) {
        const int ra = ranks(j, a), rb = ranks(j, b);
        if (a == b) continue;
        const bool ma = ra == missing_rank, mb = rb == missing_rank;
        if ((!ma && !mb && ra < rb) || (ma && !mb && hi < rb) || (!ma && mb && ra < lo)) v.push_back({a, b});
      }
    p.by_assessor.push_back(std::move(v));
    p.assessor_labels.push_back(std::to_string(j + 1));
  }
  return p;
}

Perm consistent_ranking(int n, const std::vector<Preference>& prefs) {
  std::vector<std::vector<int>> out(static_cast<std::size_t>(n));
  std::vector<int> indeg(static_cast<std::size_t>(n), 0);
  for (const auto& p : prefs) {
    out[static_cast<std::size_t>(p.top)].push_back(p.bottom);
    ++indeg[static_cast<std::size_t>(p.bottom)];
  }
  std::priority_queue<int, std::vector<int>, std::greater<>> ready;
  for (int i = 0; i < n; ++i)
    if (indeg[static_cast<std::size_t>(i)] == 0) ready.push(i);
  Perm r(static_cast<std::size_t>(n), -1);
  int next = 0;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    r[static_cast<std::size_t>(i)] = next++;
    for (int b : out[static_cast<std::size_t>(i)])
      if (--indeg[static_cast<std::size_t>(b)] == 0) ready.push(b);
  }
  if (next != n) return {};
  return r;
}

RankMatrix fill_missing(const RankMatrix& ranks) {
  RankMatrix out = ranks;
  const int n = static_cast<int>(ranks.cols());
  for (Eigen::Index j = 0; j < ranks.rows(); ++j) {
    std::vector<char> used(static_cast<std::size_t>(n), 0);
    for (int i = 0; i < n; ++i)
      if (ranks(j, i) != missing_rank) used[static_cast<std::size_t>(ranks(j, i))] = 1;
    int next = 0;
    for (int i = 0; i < n; ++i) {
      if (ranks(j, i) != missing_rank) continue;
      while (used[static_cast<std::size_t>(next)]) ++next;
      out(j, i) = next++;
    }
  }
  return out;
}

}  // namespace icmlkit::rank
