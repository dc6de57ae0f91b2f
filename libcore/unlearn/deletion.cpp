#include "unlearn/deletion.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "util/error.hpp"

namespace icmlkit::unlearn {

namespace {

template <class T>
void read_list(const nlohmann::json& j, const char* key, std::vector<T>& out, const std::string& where) {
  if (!j.contains(key)) return;
  try {
    out = j.at(key).get<std::vector<T>>();
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("'{}' must be a list of {}", key, std::is_same_v<T, std::string> ? "strings" : "integers"), where);
  }
}

}  // namespace

void check_request_settings(const nlohmann::json& s, const std::string& where) {
  auto number = [&](const char* key, double lo, double hi, bool lo_open, bool hi_open) {
    if (!s.contains(key)) return;
    const auto& v = s[key];
    if (!v.is_number()) throw InputError(fmt::format("'{}' must be a number", key), where);
    const double x = v.get<double>();
    const bool ok = (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi) && std::isfinite(x);
    if (!ok)
      throw InputError(fmt::format("'{}' must lie in {}{}, {}{} (got {})", key, lo_open ? "(" : "[", lo, hi, hi_open ? ")" : "]", x), where);
  };
  auto integer = [&](const char* key) {
    if (s.contains(key) && !(s[key].is_number_integer() && s[key].get<std::int64_t>() >= 0))
      throw InputError(fmt::format("'{}' must be a non-negative integer", key), where);
  };
  static const std::set<std::string> known = {"at_step", "K", "hvp", "epsilon", "delta", "noise", "rank", "beta",
                                              "gamma", "c_lin", "probe", "seed", "delta_prime"};
  for (const auto& [k, v] : s.items())
    if (!known.count(k)) throw InputError(fmt::format("unknown request field '{}'", k), where);
  integer("at_step");
  integer("rank");
  integer("seed");
  if (s.contains("K") && !(s["K"] == "inf" || (s["K"].is_number_integer() && s["K"].get<std::int64_t>() >= 0)))
    throw InputError("'K' must be a non-negative integer or \"inf\"", where);
  if (s.contains("hvp") && !(s["hvp"] == "fisher" || s["hvp"] == "ggn" || s["hvp"] == "exact"))
    throw InputError("'hvp' must be fisher, ggn or exact", where);
  if (s.contains("noise") && !(s["noise"] == "none" || s["noise"] == "isotropic" || s["noise"] == "subspace"))
    throw InputError("'noise' must be none, isotropic or subspace", where);
  if (s.contains("probe") && !s["probe"].is_boolean()) throw InputError("'probe' must be true or false", where);
  const double inf = std::numeric_limits<double>::infinity();
  number("epsilon", 0, inf, true, true);
  number("delta", 0, 1, true, true);
  number("delta_prime", 0, 1, true, true);
  number("beta", 0, 1, true, false);
  number("gamma", 0, 1, true, true);
  number("c_lin", 0, inf, false, true);
}

DeletionRequest DeletionRequest::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw InputError("a deletion request is a JSON object", where);
  DeletionRequest r;
  if (j.contains("id")) r.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();
  read_list(j, "documents", r.documents, where);
  read_list(j, "texts", r.texts, where);
  read_list(j, "windows", r.windows, where);
  read_list(j, "steps", r.steps, where);
  if (r.documents.empty() && r.texts.empty() && r.windows.empty() && r.steps.empty())
    throw InputError("the request names nothing to delete (documents, texts, windows or steps)", where);
  for (const auto& [k, v] : j.items())
    if (k != "id" && k != "documents" && k != "texts" && k != "windows" && k != "steps") r.settings[k] = v;
  check_request_settings(r.settings, where);
  return r;
}

std::vector<std::int64_t> document_windows(const TrajectoryMeta& meta, std::int64_t d) {
  const auto n = static_cast<std::int64_t>(meta.doc_starts.size());
  if (d < 0 || d >= n) throw InputError(fmt::format("document {} outside the run's {} training documents", d, n));
  const std::int64_t end = d + 1 < n ? meta.doc_starts[std::size_t(d + 1)] : meta.stream_tokens;
  return windows_touching(meta.doc_starts[std::size_t(d)], end, meta.seq_len, meta.windows);
}

ResolvedDeletion resolve_deletion(const DeletionRequest& r, const TrajectoryMeta& meta, const std::vector<StepRecord>& steps,
                                  const std::vector<std::string>& train_docs) {
  ResolvedDeletion out;
  std::set<std::int64_t> docs(r.documents.begin(), r.documents.end());
  if (!r.texts.empty()) {
    std::unordered_multimap<std::string, std::int64_t> index;  // a text repeated in the corpus names every copy
    for (std::size_t d = 0; d < train_docs.size(); ++d) index.emplace(train_docs[d], std::int64_t(d));
    for (const auto& t : r.texts) {
      const auto [lo, hi] = index.equal_range(t);
      if (lo == hi) {
        std::string head = t.substr(0, 40);
        std::replace(head.begin(), head.end(), '\n', ' ');
        throw InputError(fmt::format("the text \"{}{}\" is not a training document: it was never trained on", head,
                                     t.size() > 40 ? "..." : ""));
      }
      for (auto it = lo; it != hi; ++it) docs.insert(it->second);
    }
  }
  std::set<std::int64_t> win(r.windows.begin(), r.windows.end());
  for (const std::int64_t w : win)
    if (w < 0 || w >= meta.windows) throw InputError(fmt::format("window {} outside the run's {} windows", w, meta.windows));
  for (const std::int64_t d : docs) {
    const auto ws = document_windows(meta, d);
    win.insert(ws.begin(), ws.end());
  }
  const auto tau = static_cast<std::int64_t>(steps.size());
  const std::set<std::int64_t> batches(r.steps.begin(), r.steps.end());
  for (const std::int64_t s : batches)
    if (s < 0 || s >= tau) throw InputError(fmt::format("step {} outside the {} steps trained", s, tau));
  out.documents.assign(docs.begin(), docs.end());
  out.data_windows.assign(win.begin(), win.end());
  std::set<std::int64_t> used, queued, all = win;
  for (const auto& st : steps) {
    if (st.skipped) continue;
    const bool named = batches.count(st.step) > 0;  // a batch id deletes that step's batch (not its windows' other uses)
    const bool hit = named || std::any_of(st.windows.begin(), st.windows.end(), [&](std::int64_t w) { return win.count(w) > 0; });
    if (!hit) continue;
    out.steps.push_back(st.step);
    for (const std::int64_t w : st.windows) {
      if (named) all.insert(w);
      if (win.count(w) || named) used.insert(w);
      else if (queued.insert(w).second) out.requeue.push_back(w);
    }
  }
  out.windows.assign(all.begin(), all.end());
  for (const std::int64_t w : out.data_windows)
    if (!used.count(w)) out.untrained.push_back(w);
  return out;
}

}  // namespace icmlkit::unlearn
