// lm-sweep's data: quality buckets made from a corpus (or read from files), the shared
// tokenizer, the held-out validation set of each bucket, and each cell's training corpus
// (a recipe's mixture with InfoLaw's unique tokens and repetition, Liu et al. ICML 2026).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sweep/grid.hpp"
#include "util/rng.hpp"

namespace icmlkit::sweep {

/// What a degradation did to some text.
struct DegradeStats {
  std::int64_t words = 0;     ///< words seen
  std::int64_t replaced = 0;  ///< words replaced by a random vocabulary word
};

/// Degrades one unit of text as bucket `b` says: its whitespace-separated words shuffled
/// (b.shuffle), then each replaced with probability b.replace by a word drawn uniformly from
/// `vocab` (the source's word types).  Words are rejoined with single spaces; text with no
/// word comes back unchanged.  Deterministic given `rng`.  Adds to `stats` when given.
std::string degrade(const std::string& unit, const BucketSpec& b, const std::vector<std::string>& vocab, Rng& rng,
                    DegradeStats* stats = nullptr);

/// One bucket's training units, in the fixed order cells draw their unique units from.
struct BucketData {
  std::string name;
  std::vector<std::string> units;
  std::vector<std::int64_t> tokens;  ///< tokens of each unit, its BOS included (as lm-train packs it)
  std::int64_t total_tokens = 0;     ///< T_d
};

/// The prepared data folder of a sweep (OUT/data).
struct PreparedData {
  std::string dir;
  std::vector<BucketData> buckets;
  std::vector<std::string> val_paths;  ///< per bucket: JSON Lines of held-out documents ({"text"})
  std::string tokenizer_path;          ///< SentencePiece model shared by every cell
  int vocab_size = 0;
  std::size_t validation = 0;          ///< index of the bucket whose held-out loss is `loss`
  nlohmann::json manifest;             ///< what each bucket is, how it was made, sizes, hashes
  /// T = sum_d T_d, the source size S of InfoLaw (tokens).
  std::int64_t source_tokens() const;
  /// s_d = T_d / T, InfoLaw's bucket shares.
  std::vector<double> shares() const;
};

/// Makes the data folder `dir` for grid `g` (buckets, validation sets, tokenizer,
/// manifest.json), or loads it when a manifest with the same data spec is there.  Throws
/// InputError when `dir` holds data made from another spec, when a corpus cannot be read, or
/// when a bucket or validation set comes out empty.
PreparedData prepare_data(const Grid& g, const std::string& dir);

/// The unique tokens and repetition of one cell, as realised in whole units.
struct CellPlan {
  double source_fraction = 1;              ///< c: each bucket's pool is capped at c T_d
  double source_tokens = 0;                ///< c T, the S InfoLaw sees for this cell
  std::vector<double> weights;             ///< w_d
  std::vector<std::int64_t> unique_units;  ///< units of bucket d drawn (a prefix of its order)
  std::vector<std::int64_t> unique;        ///< M_d: tokens of the distinct units that occur in the corpus
  std::vector<std::int64_t> consumed;      ///< K_d: tokens of bucket d in the cell's corpus
  std::int64_t unique_total = 0;           ///< U = sum M_d
  std::int64_t tokens_total = 0;           ///< sum K_d (about D; whole units)
  double epochs() const { return unique_total > 0 ? double(tokens_total) / double(unique_total) : 0; }
};

/// Plans cell `c` of recipe weights `w` at D = c.tokens: K_d = w_d D and M_d = min(K_d, x T_d)
/// where x = 1 without requested epochs, else x solves sum_d min(K_d, x T_d) = D / epochs
/// (bisection).  Throws InputError naming the cell when it is impossible: more epochs than the
/// tokens allow (D / epochs below one training window of `seq_len` + 1 tokens) or fewer epochs
/// than the buckets allow (D / epochs more unique tokens than the recipe can draw).
CellPlan plan_cell(const PreparedData& data, const Cell& c, const std::vector<double>& w, int seq_len);

/// Writes the cell's training corpus as JSON Lines ({"text"} per unit) to `path`: each
/// bucket's plan.unique_units units repeated in passes (each pass in a fresh order) until
/// plan.consumed[d] tokens, then every unit instance shuffled together, all seeded by c.seed.
void write_cell_corpus(const PreparedData& data, const Cell& c, const CellPlan& plan, const std::string& path);

}  // namespace icmlkit::sweep
