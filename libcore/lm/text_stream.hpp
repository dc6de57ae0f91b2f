// Detokenization one token at a time for streaming output (lm-generate): whole UTF-8
// characters only, even when byte-fallback tokens split a character.
#pragma once

#include <string>
#include <vector>

#include "lm/tokenizer.hpp"

namespace icmlkit::lm {

/// Streams the text of a growing token sequence.  A byte-fallback piece ("<0xE2>") that starts
/// a multi-byte UTF-8 character is held until the character is complete, so every string
/// handed out is whole, valid UTF-8; bytes that cannot form a character come out as U+FFFD, as
/// SentencePiece decodes them.  The concatenation of every push() and finish() equals
/// Tokenizer::decode of all the tokens.  Each push() decodes the tokens so far (O(n) per token).
class TextStream {
 public:
  /// `tok` must outlive the stream.
  explicit TextStream(const Tokenizer& tok);
  /// Adds token `id` and returns the text it completes (possibly empty).  Throws InputError for
  /// an id outside the vocabulary.
  std::string push(int id);
  /// Returns the text still held (an unfinished character at the end becomes U+FFFD).
  std::string finish();
  /// The byte of a byte-fallback piece ("<0xE2>" -> 0xE2), or -1 for any other piece.
  int byte_value(int id) const;

 private:
  /// Whether the trailing byte pieces begin a character that more bytes could complete.
  bool open_character() const;
  /// The part of `text` not handed out yet.
  std::string emit(const std::string& text);

  const Tokenizer& tok_;
  std::vector<int> byte_of_;  ///< per id: byte value, or -1
  std::vector<int> ids_;
  std::string done_;  ///< text handed out so far
};

}  // namespace icmlkit::lm
