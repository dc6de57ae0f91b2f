// Training text: plain text, TSV or JSONL read into documents, split into train/validation by
// whole documents, tokenized and packed into fixed-length windows, and a seeded data order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lm/tokenizer.hpp"

namespace icmlkit::nn {

/// How to read a corpus file.
struct CorpusOptions {
  std::string format = "auto";  ///< auto (by extension: .tsv, .jsonl/.json, else text) | text | tsv | jsonl
  int column = 0;               ///< TSV: 1-based text column (0 = the last one)
  int doc_column = 0;           ///< TSV: 1-based key column; consecutive rows with the same key
                                ///< (up to its first ':', so "Ge1:3" -> "Ge1") form one document
  std::string field = "text";   ///< JSONL: the text field
  std::string doc_field;        ///< JSONL: optional key field grouping consecutive records
  int val_every = 20;           ///< every val_every-th document (1-based) is validation; 0 = none
  /// TSV: keep only the rows whose filter_column (1-based; 0 = no filter) starts with one of
  /// filter_prefixes (plora-train's data filter: a few books of a corpus).
  int filter_column = 0;
  std::vector<std::string> filter_prefixes;
};

/// Documents of one corpus, in file order, split by whole documents.
struct Documents {
  std::vector<std::string> train, val;
  /// Each document's key (the key column / field that grouped its rows, e.g. "Ge20" for a KJV
  /// chapter; "" without one), parallel to train and val.
  std::vector<std::string> train_keys, val_keys;
  std::string sha256;  ///< of the file's bytes
};

/// Reads `path` ("-" = stdin; a .gz file is decompressed, its format taken from the name
/// without .gz).  Plain text: documents are separated by blank lines.  TSV/JSONL:
/// one row is one document unless a key column/field groups consecutive rows; rows of a
/// document are joined with '\n'.  Throws InputError (file and line named) for unreadable
/// files, invalid UTF-8, a missing column or field, malformed JSON, no text at all, or a TSV
/// row filter that keeps no row.
Documents read_corpus(const std::string& path, const CorpusOptions& opt);

/// The documents of one split: "train", "val" or "all" (train then val).  Throws UsageError for
/// another name.
std::vector<std::string> split_documents(const Documents& docs, const std::string& split);

/// SHA-256 of the documents `ids` of `pool`, each followed by a NUL: a fingerprint of a chosen
/// set of documents' text (wave-calibrate records it, wave-generate checks it).  Throws
/// InputError for an index outside `pool`.
std::string documents_sha256(const std::vector<std::string>& pool, const std::vector<int>& ids);

/// The token stream of documents in order: per document bos_id (when >= 0) then its tokens.
/// With `starts`, each document's first stream position (its bos) is stored there [docs.size()].
std::vector<int> tokenize_documents(const lm::Tokenizer& tok, const std::vector<std::string>& docs, int bos_id,
                                    const std::string& where, std::vector<std::int64_t>* starts = nullptr);

/// Non-overlapping windows over a token stream: window w has inputs stream[w·S, w·S+S) and
/// targets shifted by one.  count() = (size − 1) / S full windows.
struct Windows {
  const std::vector<int>* stream = nullptr;
  int S = 1;
  std::int64_t count() const noexcept {
    return stream && stream->size() > 1 ? std::int64_t(stream->size() - 1) / S : 0;
  }
  /// Appends window w's S inputs and S targets.
  void get(std::int64_t w, std::vector<int>& inputs, std::vector<int>& targets) const;
};

/// Seeded epoch-wise shuffled order of n items: epoch e is a Fisher-Yates permutation drawn from
/// Rng(derive_seed(seed, e)).  The position (epoch, pos) is all the state a resume needs.
class DataOrder {
 public:
  DataOrder(std::uint64_t seed, std::int64_t n) : seed_(seed), n_(n) {}
  /// The next item index.
  std::int64_t next();
  std::int64_t epoch() const noexcept { return epoch_; }
  std::int64_t pos() const noexcept { return pos_; }
  std::uint64_t seed() const noexcept { return seed_; }
  /// Restores a position saved from epoch()/pos().
  void set_position(std::int64_t epoch, std::int64_t pos);

 private:
  std::uint64_t seed_;
  std::int64_t n_, epoch_ = 0, pos_ = 0, perm_epoch_ = -1;
  std::vector<std::int64_t> perm_;
};

}  // namespace icmlkit::nn
