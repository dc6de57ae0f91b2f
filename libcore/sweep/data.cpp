#include "sweep/data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/tokenizer.hpp"
#include "nn/corpus.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace icmlkit::sweep {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> w;
  std::istringstream in(s);
  std::string x;
  while (in >> x) w.push_back(std::move(x));
  return w;
}

// Splits documents into sampling units: each non-blank line, or each whole document.
std::vector<std::string> to_units(const std::vector<std::string>& docs, const std::string& unit) {
  std::vector<std::string> out;
  for (const auto& d : docs) {
    if (unit == "document") {
      if (d.find_first_not_of(" \t\r\n") != std::string::npos) out.push_back(d);
      continue;
    }
    std::size_t pos = 0;
    while (pos <= d.size()) {
      const auto end = std::min(d.find('\n', pos), d.size());
      std::string line = d.substr(pos, end - pos);
      if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(std::move(line));
      pos = end + 1;
    }
  }
  return out;
}

nn::CorpusOptions corpus_options(const nlohmann::json& j) {
  nn::CorpusOptions o;
  if (j.contains("format")) o.format = j["format"].get<std::string>();
  if (j.contains("column")) o.column = j["column"].get<int>();
  if (j.contains("doc_column")) o.doc_column = j["doc_column"].get<int>();
  if (j.contains("field")) o.field = j["field"].get<std::string>();
  if (j.contains("doc_field")) o.doc_field = j["doc_field"].get<std::string>();
  if (j.contains("val_every")) o.val_every = j["val_every"].get<int>();
  return o;
}

void write_jsonl_texts(const std::string& path, const std::vector<std::string>& texts,
                       const std::vector<std::int64_t>* tokens = nullptr) {
  io::AtomicFile f(path);
  {
    std::ofstream out(f.temp_path(), std::ios::binary);
    for (std::size_t i = 0; i < texts.size(); ++i) {
      nlohmann::json j{{"text", texts[i]}};
      if (tokens) j["tokens"] = (*tokens)[i];
      out << j.dump() << '\n';
    }
    out.flush();
    if (!out) throw RuntimeError(fmt::format("cannot write {}", path));
  }
  f.commit();
}

std::int64_t count_tokens(const lm::Tokenizer& tok, const std::string& text, const std::string& where) {
  return static_cast<std::int64_t>(tok.encode(text, where).size()) + 1;  // + BOS
}

// Bucket d's first m_d units repeated in passes (each pass shuffles the previous pass's order,
// seeded by the cell's seed, bucket and pass) until round(w_d D) tokens are reached; `visit` gets
// every instance, bucket by bucket.  Memory O(units): plans of any size cost no instance list.
template <class Visit>
void for_each_instance(const PreparedData& data, const Cell& c, const std::vector<std::int64_t>& units,
                       const std::vector<double>& w, Visit&& visit) {
  for (std::size_t d = 0; d < data.buckets.size(); ++d) {
    const std::int64_t m = units[d];
    if (m == 0) continue;
    const auto& b = data.buckets[d];
    const auto K = static_cast<std::int64_t>(std::llround(w[d] * static_cast<double>(c.tokens)));
    std::vector<std::uint32_t> pass(static_cast<std::size_t>(m));
    std::iota(pass.begin(), pass.end(), 0u);
    std::int64_t tok = 0;
    for (std::uint64_t k = 0; tok < K; ++k) {
      Rng rng(derive_seed(derive_seed(c.seed, d + 1), k));
      for (std::size_t i = pass.size() - 1; i > 0; --i) std::swap(pass[i], pass[rng.below(i + 1)]);
      for (auto u : pass) {
        if (tok >= K) break;
        visit(static_cast<std::uint32_t>(d), u);
        tok += b.tokens[u];
      }
    }
  }
}

}  // namespace

std::string degrade(const std::string& unit, const BucketSpec& b, const std::vector<std::string>& vocab, Rng& rng,
                    DegradeStats* stats) {
  if (!b.shuffle && !(b.replace > 0)) {
    if (stats) stats->words += static_cast<std::int64_t>(split_words(unit).size());
    return unit;
  }
  auto words = split_words(unit);
  if (words.empty()) return unit;
  if (b.shuffle)
    for (std::size_t i = words.size() - 1; i > 0; --i) std::swap(words[i], words[rng.below(i + 1)]);
  std::int64_t replaced = 0;
  if (b.replace > 0 && !vocab.empty())
    for (auto& w : words)
      if (rng.uniform() < b.replace) {
        w = vocab[rng.below(vocab.size())];
        ++replaced;
      }
  if (stats) {
    stats->words += static_cast<std::int64_t>(words.size());
    stats->replaced += replaced;
  }
  std::string out;
  for (std::size_t i = 0; i < words.size(); ++i) out += (i ? " " : "") + words[i];
  return out;
}

std::int64_t PreparedData::source_tokens() const {
  std::int64_t t = 0;
  for (const auto& b : buckets) t += b.total_tokens;
  return t;
}

std::vector<double> PreparedData::shares() const {
  const double t = static_cast<double>(source_tokens());
  std::vector<double> s;
  for (const auto& b : buckets) s.push_back(static_cast<double>(b.total_tokens) / t);
  return s;
}

PreparedData prepare_data(const Grid& g, const std::string& dir) {
  PreparedData p;
  p.dir = dir;
  const std::string sha = data_spec_sha256(g);
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  const std::size_t nb = g.data.buckets.size();
  for (std::size_t i = 0; i < nb; ++i)
    if (g.data.buckets[i].name == g.data.validation) p.validation = i;
  p.tokenizer_path = (fs::path(dir) / "tokenizer.model").string();
  auto bucket_path = [&](std::size_t i) { return (fs::path(dir) / fmt::format("bucket-{}.jsonl", i)).string(); };
  auto val_path = [&](std::size_t i) { return (fs::path(dir) / fmt::format("val-{}.jsonl", i)).string(); };

  if (fs::exists(manifest_path)) {
    p.manifest = io::read_json(manifest_path);
    if (p.manifest.value("data_sha256", "") != sha)
      throw InputError(fmt::format("{} was made from another data section (its data_sha256 differs from this grid's); "
                                   "give another output folder", manifest_path));
    const lm::Tokenizer tok(io::read_file(p.tokenizer_path), p.tokenizer_path);
    p.vocab_size = tok.vocab_size();
    for (std::size_t i = 0; i < nb; ++i) {
      BucketData b;
      b.name = g.data.buckets[i].name;
      io::for_each_jsonl(bucket_path(i), [&](const nlohmann::json& j, const std::string&) {
        b.units.push_back(j.at("text").get<std::string>());
        b.tokens.push_back(j.at("tokens").get<std::int64_t>());
        b.total_tokens += b.tokens.back();
      });
      p.buckets.push_back(std::move(b));
      p.val_paths.push_back(val_path(i));
    }
    return p;
  }
  fs::create_directories(dir);

  // Documents of each bucket (training units, held-out documents).
  std::vector<std::vector<std::string>> train_units(nb), val_docs(nb);
  std::vector<DegradeStats> train_stats(nb), val_stats(nb);
  nlohmann::json source_json = nullptr;
  const bool any_made = std::any_of(g.data.buckets.begin(), g.data.buckets.end(), [](const BucketSpec& b) { return !b.is_file(); });
  if (any_made) {
    const nn::Documents docs = nn::read_corpus(g.data.source, corpus_options(g.data.source_corpus));
    if (docs.train.empty()) throw InputError("the source has no training documents", g.data.source);
    if (docs.val.empty()) throw InputError("the source has no held-out documents (set val_every)", g.data.source);
    source_json = {{"path", g.data.source}, {"sha256", docs.sha256}, {"corpus", g.data.source_corpus},
                   {"train_documents", docs.train.size()}, {"val_documents", docs.val.size()}};
    std::set<std::string> types;
    for (const auto& d : docs.train)
      for (auto& w : split_words(d)) types.insert(std::move(w));
    const std::vector<std::string> vocab(types.begin(), types.end());
    // Assign the training documents to the made buckets by characters, in a seeded order.
    std::vector<std::size_t> order(docs.train.size());
    std::iota(order.begin(), order.end(), 0);
    Rng rng(derive_seed(g.data.seed, 1));
    for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    double total_chars = 0;
    for (const auto& d : docs.train) total_chars += static_cast<double>(d.size());
    std::vector<std::size_t> made;
    for (std::size_t i = 0; i < nb; ++i)
      if (!g.data.buckets[i].is_file()) made.push_back(i);
    std::vector<std::vector<std::string>> assigned(nb);
    double cum_share = 0, chars = 0;
    std::size_t k = 0;
    cum_share = g.data.buckets[made[0]].share;
    for (std::size_t idx : order) {
      while (k + 1 < made.size() && chars >= cum_share * total_chars) cum_share += g.data.buckets[made[++k]].share;
      assigned[made[k]].push_back(docs.train[idx]);
      chars += static_cast<double>(docs.train[idx].size());
    }
    for (std::size_t i : made) {
      const auto& spec = g.data.buckets[i];
      Rng dr(derive_seed(g.data.seed, 100 + i));
      for (const auto& u : to_units(assigned[i], g.data.unit)) train_units[i].push_back(degrade(u, spec, vocab, dr, &train_stats[i]));
      Rng vr(derive_seed(g.data.seed, 1000 + i));
      for (const auto& d : docs.val) {
        // Held-out documents are degraded unit by unit as training units are (lines keep their breaks).
        std::string out;
        for (const auto& u : to_units({d}, g.data.unit)) out += (out.empty() ? "" : "\n") + degrade(u, spec, vocab, vr, &val_stats[i]);
        val_docs[i].push_back(out);
      }
      if (train_units[i].empty())
        throw InputError(fmt::format("bucket '{}' got no training text: its share {} of the source's {} training documents is too small",
                                     spec.name, spec.share, docs.train.size()), g.data.source);
    }
  }
  nlohmann::json file_sha = nlohmann::json::object();
  for (std::size_t i = 0; i < nb; ++i) {
    const auto& spec = g.data.buckets[i];
    if (!spec.is_file()) continue;
    const nn::Documents docs = nn::read_corpus(spec.path, corpus_options(spec.corpus));
    file_sha[spec.name] = docs.sha256;
    train_units[i] = to_units(docs.train, g.data.unit);
    val_docs[i] = docs.val;
    if (train_units[i].empty()) throw InputError(fmt::format("bucket '{}' has no training text", spec.name), spec.path);
    if (val_docs[i].empty())
      throw InputError(fmt::format("bucket '{}' has no held-out documents (set its val_every)", spec.name), spec.path);
  }

  // The shared tokenizer.
  std::string tok_bytes;
  nlohmann::json tok_json;
  if (!g.data.tokenizer.empty()) {
    tok_bytes = io::read_file(g.data.tokenizer);
    tok_json = {{"from", g.data.tokenizer}};
  } else {
    std::vector<std::string> sentences;
    for (const auto& u : train_units) sentences.insert(sentences.end(), u.begin(), u.end());
    lm::TokenizerTrainOptions to;
    to.vocab_size = g.data.vocab_size;
    log::info("training a {}-piece BPE tokenizer on {} units of every bucket", to.vocab_size, sentences.size());
    tok_bytes = lm::train_tokenizer(sentences, to);
    tok_json = {{"trained_on", "every bucket's training units"}, {"model_type", "bpe"}};
  }
  const lm::Tokenizer tok(tok_bytes, p.tokenizer_path);
  p.vocab_size = tok.vocab_size();
  tok_json["vocab_size"] = p.vocab_size;
  tok_json["sha256"] = io::sha256_hex(tok_bytes);

  // Each bucket's units in a fixed seeded order, with token counts.
  nlohmann::json buckets_json = nlohmann::json::array();
  for (std::size_t i = 0; i < nb; ++i) {
    BucketData b;
    b.name = g.data.buckets[i].name;
    auto& units = train_units[i];
    Rng rng(derive_seed(g.data.seed, 10000 + i));
    for (std::size_t k = units.size() - 1; k > 0; --k) std::swap(units[k], units[rng.below(k + 1)]);
    for (const auto& u : units) {
      b.tokens.push_back(count_tokens(tok, u, b.name));
      b.total_tokens += b.tokens.back();
    }
    b.units = std::move(units);
    std::int64_t val_tokens = 0;
    for (const auto& d : val_docs[i]) val_tokens += count_tokens(tok, d, b.name);
    write_jsonl_texts(bucket_path(i), b.units, &b.tokens);
    write_jsonl_texts(val_path(i), val_docs[i]);
    const auto& spec = g.data.buckets[i];
    nlohmann::json bj{{"name", b.name},
                      {"kind", spec.is_file() ? "file" : "made"},
                      {"units", b.units.size()},
                      {"tokens", b.total_tokens},
                      {"val_documents", val_docs[i].size()},
                      {"val_tokens", val_tokens},
                      {"train_file", fs::path(bucket_path(i)).filename().string()},
                      {"val_file", fs::path(val_path(i)).filename().string()},
                      {"sha256", io::sha256_file(bucket_path(i))}};
    if (spec.is_file()) {
      bj["path"] = spec.path;
      bj["source_sha256"] = file_sha[spec.name];
      bj["made"] = "the file's training documents as they are";
    } else {
      bj["source_share"] = spec.share;
      bj["replace"] = spec.replace;
      bj["shuffle"] = spec.shuffle;
      const auto& st = train_stats[i];
      bj["words"] = st.words;
      bj["replaced_words"] = st.replaced;
      bj["replaced_share"] = st.words > 0 ? double(st.replaced) / double(st.words) : 0.0;
      bj["made"] = spec.shuffle || spec.replace > 0
                       ? fmt::format("source documents (share {}), each {}{}{}", spec.share,
                                     spec.shuffle ? "unit's words shuffled" : "",
                                     spec.shuffle && spec.replace > 0 ? ", then " : "",
                                     spec.replace > 0 ? fmt::format("word replaced with probability {} by a uniform draw from "
                                                                    "the source's word types", spec.replace)
                                                      : "")
                       : fmt::format("source documents (share {}), clean", spec.share);
    }
    buckets_json.push_back(bj);
    p.buckets.push_back(std::move(b));
    p.val_paths.push_back(val_path(i));
  }
  io::write_text(p.tokenizer_path, tok_bytes);
  const auto shares = p.shares();
  for (std::size_t i = 0; i < nb; ++i) buckets_json[i]["share"] = shares[i];
  p.manifest = {{"data_sha256", sha},
                {"source", source_json},
                {"unit", g.data.unit},
                {"seed", g.data.seed},
                {"tokenizer", tok_json},
                {"buckets", buckets_json},
                {"source_tokens", p.source_tokens()},
                {"shares", shares},
                {"validation", g.data.validation},
                {"val_tokens", g.data.val_tokens}};
  io::write_json(manifest_path, p.manifest);  // last: its presence marks the folder complete
  return p;
}

CellPlan plan_cell(const PreparedData& data, const Cell& c, const std::vector<double>& w, int seq_len) {
  const std::size_t nb = data.buckets.size();
  CellPlan p;
  p.weights = w;
  const double D = static_cast<double>(c.tokens);
  auto unique_at = [&](double x) {
    double u = 0;
    for (std::size_t d = 0; d < nb; ++d) u += std::min(w[d] * D, x * static_cast<double>(data.buckets[d].total_tokens));
    return u;
  };
  double x = 1;
  if (c.epochs) {
    const double target = D / *c.epochs;
    if (target < seq_len + 1)
      throw InputError(fmt::format("cell {}: {} epochs of {} tokens leave {:.0f} unique tokens, less than one training window "
                                   "({} tokens): more epochs than the tokens allow", c.id, *c.epochs, c.tokens, target, seq_len + 1));
    const double most = unique_at(1);
    if (target > most * (1 + 1e-9))
      throw InputError(fmt::format("cell {}: recipe '{}' can draw at most {:.0f} unique tokens from the buckets, so {} tokens "
                                   "repeat them at least {:.3g} times; {} epochs are too few", c.id, c.recipe, most, c.tokens,
                                   D / most, *c.epochs));
    double lo = 0, hi = 1;
    for (int it = 0; it < 200; ++it) {
      const double mid = 0.5 * (lo + hi);
      (unique_at(mid) < target ? lo : hi) = mid;
    }
    x = hi;
  }
  p.source_fraction = x;
  p.source_tokens = x * static_cast<double>(data.source_tokens());
  p.unique_units.assign(nb, 0);
  p.unique.assign(nb, 0);
  p.consumed.assign(nb, 0);
  for (std::size_t d = 0; d < nb; ++d) {
    if (!(w[d] > 0)) continue;
    const auto& b = data.buckets[d];
    const double K = w[d] * D;
    const double M = std::min(K, x * static_cast<double>(b.total_tokens));
    std::int64_t m = 0, tok = 0;
    while (m < static_cast<std::int64_t>(b.units.size()) && (m == 0 || static_cast<double>(tok) < M)) tok += b.tokens[m++];
    (void)tok;
    p.unique_units[d] = m;
  }
  // Realised counts: a unit drawn but not reached by the tokens (K_d below its pool) is not unique data of the cell.
  std::vector<std::vector<bool>> seen(nb);
  for (std::size_t d = 0; d < nb; ++d) seen[d].assign(static_cast<std::size_t>(p.unique_units[d]), false);
  for_each_instance(data, c, p.unique_units, w, [&](std::uint32_t bucket, std::uint32_t unit) {
    const auto t = data.buckets[bucket].tokens[unit];
    p.consumed[bucket] += t;
    if (!seen[bucket][unit]) {
      seen[bucket][unit] = true;
      p.unique[bucket] += t;
    }
  });
  for (std::size_t d = 0; d < nb; ++d) {
    p.unique_total += p.unique[d];
    p.tokens_total += p.consumed[d];
  }
  return p;
}

void write_cell_corpus(const PreparedData& data, const Cell& c, const CellPlan& plan, const std::string& path) {
  struct Instance {
    std::uint32_t bucket, unit;
  };
  std::vector<Instance> all;
  for_each_instance(data, c, plan.unique_units, plan.weights,
                    [&](std::uint32_t bucket, std::uint32_t unit) { all.push_back({bucket, unit}); });
  Rng rng(derive_seed(c.seed, 0));
  for (std::size_t i = all.size() - 1; i > 0; --i) std::swap(all[i], all[rng.below(i + 1)]);
  io::AtomicFile f(path);
  {
    std::ofstream out(f.temp_path(), std::ios::binary);
    for (const auto& x : all) out << nlohmann::json{{"text", data.buckets[x.bucket].units[x.unit]}}.dump() << '\n';
    out.flush();
    if (!out) throw RuntimeError(fmt::format("cannot write {}", path));
  }
  f.commit();
}

}  // namespace icmlkit::sweep
