#include "nn/corpus.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>

#include "io/gzip.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "util/error.hpp"
#include "util/rng.hpp"

namespace icmlkit::nn {

namespace {

std::string detect_format(const std::string& path, const std::string& format) {
  if (format != "auto") return format;
  std::filesystem::path p(path);
  if (p.extension() == ".gz") p = p.stem();  // kjv.tsv.gz reads as kjv.tsv
  const std::string ext = p.extension().string();
  if (ext == ".tsv") return "tsv";
  if (ext == ".jsonl" || ext == ".json") return "jsonl";
  return "text";
}

/// Field i (0-based) of a tab-separated line, or npos-marked failure.
bool tsv_field(const std::string& line, int i, std::string& out) {
  std::size_t start = 0;
  for (int c = 0; c < i; ++c) {
    start = line.find('\t', start);
    if (start == std::string::npos) return false;
    ++start;
  }
  out = line.substr(start, line.find('\t', start) - start);
  return true;
}

int tsv_fields(const std::string& line) {
  return 1 + static_cast<int>(std::count(line.begin(), line.end(), '\t'));
}

/// Accumulates rows into documents keyed by consecutive equal keys.
struct DocBuilder {
  std::vector<std::string> docs, keys;
  std::string key;
  bool open = false;
  void add(const std::string& text, const std::string* k) {
    if (open && k && *k == key) {
      docs.back() += '\n';
      docs.back() += text;
      return;
    }
    docs.push_back(text);
    keys.push_back(k ? *k : std::string());
    if (k) key = *k;
    open = k != nullptr;
  }
};

}  // namespace

Documents read_corpus(const std::string& path, const CorpusOptions& opt) {
  // gzip input is decompressed (CRC and length checked); the hash is of the text itself, so
  // kjv.tsv and kjv.tsv.gz are the same corpus for --resume.
  const std::string bytes = io::read_maybe_gzip(path);
  Documents out;
  out.sha256 = io::sha256_hex(bytes);
  if (!lm::valid_utf8(bytes)) throw InputError("corpus is not valid UTF-8", path);
  const std::string format = detect_format(path, opt.format);
  DocBuilder b;
  std::size_t start = 0, kept = 0;
  long lineno = 0;
  std::string para;
  while (start < bytes.size()) {
    std::size_t end = bytes.find('\n', start);
    if (end == std::string::npos) end = bytes.size();
    std::string line = bytes.substr(start, end - start);
    start = end + 1;
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = fmt::format("{}, line {}", path, lineno);
    if (format == "text") {
      if (line.empty()) {
        if (!para.empty()) b.add(para, nullptr);
        para.clear();
      } else {
        if (!para.empty()) para += '\n';
        para += line;
      }
      continue;
    }
    if (line.empty()) continue;
    if (format == "tsv") {
      if (opt.filter_column > 0) {  // the row filter: the key column's prefix
        std::string key;
        if (!tsv_field(line, opt.filter_column - 1, key))
          throw InputError(fmt::format("line has fewer than {} tab-separated fields", opt.filter_column), where);
        if (std::none_of(opt.filter_prefixes.begin(), opt.filter_prefixes.end(),
                         [&](const std::string& p) { return key.compare(0, p.size(), p) == 0; }))
          continue;
        ++kept;
      }
      const int nf = tsv_fields(line);
      const int col = opt.column > 0 ? opt.column - 1 : nf - 1;
      std::string text, key;
      if (!tsv_field(line, col, text))
        throw InputError(fmt::format("line has fewer than {} tab-separated fields", col + 1), where);
      if (opt.doc_column > 0) {
        if (!tsv_field(line, opt.doc_column - 1, key))
          throw InputError(fmt::format("line has fewer than {} tab-separated fields", opt.doc_column), where);
        key = key.substr(0, key.find(':'));
      }
      b.add(text, opt.doc_column > 0 ? &key : nullptr);
    } else if (format == "jsonl") {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const std::exception&) {
        throw InputError("malformed JSON line", where);
      }
      if (!j.is_object() || !j.contains(opt.field) || !j[opt.field].is_string())
        throw InputError(fmt::format("no string field '{}'", opt.field), where);
      std::string key;
      if (!opt.doc_field.empty()) {
        if (!j.contains(opt.doc_field)) throw InputError(fmt::format("no field '{}'", opt.doc_field), where);
        key = j[opt.doc_field].is_string() ? j[opt.doc_field].get<std::string>() : j[opt.doc_field].dump();
      }
      b.add(j[opt.field].get<std::string>(), opt.doc_field.empty() ? nullptr : &key);
    } else {
      throw UsageError("unknown corpus format '" + format + "'", "--format");
    }
  }
  if (!para.empty()) b.add(para, nullptr);
  if (format == "tsv" && opt.filter_column > 0 && kept == 0) throw InputError("the data filter keeps no row", path);
  std::size_t chars = 0;
  for (const auto& d : b.docs) chars += d.size();
  if (chars == 0) throw InputError("empty corpus: no text", path);
  for (std::size_t i = 0; i < b.docs.size(); ++i) {
    const bool val = opt.val_every > 0 && (i + 1) % std::size_t(opt.val_every) == 0;
    (val ? out.val : out.train).push_back(std::move(b.docs[i]));
    (val ? out.val_keys : out.train_keys).push_back(std::move(b.keys[i]));
  }
  return out;
}

std::vector<int> tokenize_documents(const lm::Tokenizer& tok, const std::vector<std::string>& docs, int bos_id,
                                    const std::string& where, std::vector<std::int64_t>* starts) {
  std::vector<int> s;
  if (starts) starts->clear();
  for (const auto& d : docs) {
    if (starts) starts->push_back(static_cast<std::int64_t>(s.size()));
    if (bos_id >= 0) s.push_back(bos_id);
    const auto ids = tok.encode(d, where);
    s.insert(s.end(), ids.begin(), ids.end());
  }
  return s;
}

void Windows::get(std::int64_t w, std::vector<int>& inputs, std::vector<int>& targets) const {
  const std::size_t o = std::size_t(w) * S;
  inputs.insert(inputs.end(), stream->begin() + o, stream->begin() + o + S);
  targets.insert(targets.end(), stream->begin() + o + 1, stream->begin() + o + S + 1);
}

std::int64_t DataOrder::next() {
  if (n_ <= 0) throw RuntimeError("no training windows");
  if (pos_ >= n_) {
    ++epoch_;
    pos_ = 0;
  }
  if (perm_epoch_ != epoch_) {
    perm_.resize(n_);
    std::iota(perm_.begin(), perm_.end(), std::int64_t(0));
    Rng rng(derive_seed(seed_, std::uint64_t(epoch_)));
    for (std::int64_t i = n_ - 1; i > 0; --i) std::swap(perm_[i], perm_[rng.below(std::uint64_t(i + 1))]);
    perm_epoch_ = epoch_;
  }
  return perm_[pos_++];
}

void DataOrder::set_position(std::int64_t epoch, std::int64_t pos) {
  epoch_ = epoch;
  pos_ = pos;
}

std::vector<std::string> split_documents(const Documents& docs, const std::string& split) {
  if (split == "train") return docs.train;
  if (split == "val") return docs.val;
  if (split != "all") throw UsageError("unknown split '" + split + "' (train, val or all)", "--split");
  std::vector<std::string> all = docs.train;
  all.insert(all.end(), docs.val.begin(), docs.val.end());
  return all;
}

std::string documents_sha256(const std::vector<std::string>& pool, const std::vector<int>& ids) {
  std::string all;
  for (int i : ids) {
    if (i < 0 || i >= static_cast<int>(pool.size()))
      throw InputError(fmt::format("document {} outside the split's {}", i, pool.size()));
    all += pool[std::size_t(i)];
    all.push_back('\0');
  }
  return io::sha256_hex(all);
}

}  // namespace icmlkit::nn
