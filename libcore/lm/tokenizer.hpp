// SentencePiece tokenizer held as model-proto bytes (the /tokenizer/model of a checkpoint).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece { class SentencePieceProcessor; }

namespace icmlkit::lm {

/// One vocabulary entry as SentencePiece and GGUF describe it.
struct Piece {
  /// SentencePiece piece types (the numbers are GGUF's tokenizer.ggml.token_type and
  /// sentencepiece_model.proto's SentencePiece.Type).
  enum Type : int { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };
  std::string text;   ///< e.g. "▁the", "<0x0A>", "<s>"
  float score = 0.0f; ///< merge priority (BPE) or log-probability (unigram)
  int type = normal;
};

/// Encodes text to token ids and back with a SentencePiece model.  Text is taken verbatim
/// (models made by tokenizer-train use the identity normaliser and byte fallback, so newlines
/// and any UTF-8 survive encode -> decode).
class Tokenizer {
 public:
  /// Parses a serialized SentencePiece model.  Throws InputError naming `where` when invalid.
  Tokenizer(const std::string& model_bytes, const std::string& where);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  /// Number of pieces.
  int vocab_size() const;
  /// Token ids of `text` (no BOS added).  Throws InputError when `text` is not valid UTF-8.
  std::vector<int> encode(std::string_view text, const std::string& where) const;
  /// Text of `ids` (ids outside the vocabulary throw InputError).
  std::string decode(const std::vector<int>& ids) const;
  /// The piece string of one id ("<0x0A>" for a byte piece).
  std::string piece(int id) const;
  /// bos / eos / unk ids of the SentencePiece model (-1 when disabled).
  int bos_id() const;
  int eos_id() const;
  int unk_id() const;
  /// Every piece with its score and type, in id order.
  std::vector<Piece> pieces() const;

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
};

/// Builds a serialized SentencePiece BPE model from a vocabulary (the llama / SPM tokenizer
/// of GGUF files): identity normaliser, whitespace escaped as U+2581, optional dummy prefix,
/// byte fallback when all 256 byte pieces are present.  Throws InputError naming `where` when
/// the vocabulary is not usable (no unknown piece, duplicate pieces, empty piece).
std::string build_spm_model(const std::vector<Piece>& pieces, bool add_dummy_prefix, int bos_id, int eos_id,
                            const std::string& where);

/// Whether `s` is well-formed UTF-8 (no overlongs, surrogates or code points > U+10FFFF).
bool valid_utf8(std::string_view s) noexcept;

/// Options of tokenizer training (SentencePiece trainer).
struct TokenizerTrainOptions {
  int vocab_size = 1024;
  std::string model_type = "bpe";   ///< bpe | unigram
  double character_coverage = 1.0;
  int threads = 1;
  std::uint64_t seed = 0;           ///< unused by SentencePiece's trainer (deterministic)
};

/// Trains a SentencePiece model on `sentences` (one training sentence per element; newlines
/// inside are kept) with byte fallback, identity normalisation, unk=0 bos=1 eos=2, and returns
/// the serialized model.  Throws InputError when training fails (e.g. vocabulary too large).
std::string train_tokenizer(const std::vector<std::string>& sentences, const TokenizerTrainOptions& opt);

}  // namespace icmlkit::lm
