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
/// Tokenizer::decode of all the tokens.  Each push() decodes only the tokens since the last
/// two character boundaries handed out (a short window), so streaming n tokens costs O(n).
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
  /// Tokens decoded by the next push(): those since the window's start (for tests).
  std::size_t window_tokens() const { return ids_.size() - anchor_; }

 private:
  /// Whether the trailing byte pieces begin a character that more bytes could complete.
  bool open_character() const;
  /// Decodes the window (from anchor_ to the end), hands out what follows the text already
  /// handed out from it, and moves the window up to the end.
  std::string emit();

  const Tokenizer& tok_;
  std::vector<int> byte_of_;  ///< per id: byte value, or -1
  std::vector<int> ids_;
  std::size_t anchor_ = 0;  ///< first token of the window (a boundary already handed out)
  std::size_t read_ = 0;    ///< tokens whose text has been handed out
  std::string done_;        ///< text of ids_[anchor_, read_), already handed out
};

}  // namespace icmlkit::lm
