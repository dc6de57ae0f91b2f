#include "lm/text_stream.hpp"

#include <algorithm>
#include <cstdlib>

#include "util/error.hpp"

namespace icmlkit::lm {

TextStream::TextStream(const Tokenizer& tok) : tok_(tok) {
  const std::vector<Piece> pieces = tok.pieces();
  byte_of_.assign(pieces.size(), -1);
  for (std::size_t id = 0; id < pieces.size(); ++id) {
    const std::string& p = pieces[id].text;  // "<0xE2>"
    if (pieces[id].type == Piece::byte && p.size() == 6 && p.compare(0, 3, "<0x") == 0 && p[5] == '>')
      byte_of_[id] = static_cast<int>(std::strtol(p.substr(3, 2).c_str(), nullptr, 16));
  }
}

int TextStream::byte_value(int id) const {
  return id >= 0 && id < static_cast<int>(byte_of_.size()) ? byte_of_[id] : -1;
}

bool TextStream::open_character() const {
  // Walk back over at most 3 continuation bytes (10xxxxxx) to the byte before them.
  int cont = 0;
  for (auto it = ids_.rbegin(); it != ids_.rend(); ++it) {
    const int b = byte_value(*it);
    if (b < 0) return false;
    if ((b & 0xc0) == 0x80) {
      if (++cont > 3) return false;
      continue;
    }
    const int need = (b & 0xe0) == 0xc0 ? 2 : (b & 0xf0) == 0xe0 ? 3 : (b & 0xf8) == 0xf0 ? 4 : 1;
    return cont + 1 < need;
  }
  return false;
}

std::string TextStream::emit() {
  // Decoding from a boundary already handed out (not from the first token) keeps the work per
  // token bounded.  SentencePiece treats the window's first piece as the start of a text (its
  // leading space is dropped) both in done_ and in `text`, so the difference is exact.
  const std::string text = tok_.decode(std::vector<int>(ids_.begin() + static_cast<std::ptrdiff_t>(anchor_), ids_.end()));
  std::size_t common = 0;
  if (text.compare(0, done_.size(), done_) == 0) {
    common = done_.size();
  } else {  // not expected (the decode of a longer sequence extends the shorter one's): never
            // repeat part of a character, restart at the last character boundary both share
    while (common < std::min(text.size(), done_.size()) && text[common] == done_[common]) ++common;
    while (common > 0 && (static_cast<unsigned char>(text[common]) & 0xc0) == 0x80) --common;
  }
  std::string out = text.substr(common);
  // The next window starts where this call's tokens began, re-decoded so that its first piece is
  // treated as a text start exactly as the next window will treat it.  Those tokens must yield
  // some text: SentencePiece drops the leading space of the first piece that yields text (control
  // pieces such as <s> yield none), so a window opening on text-less pieces would move that
  // drop onto a later piece.  Otherwise the window keeps its start.
  std::string next = tok_.decode(std::vector<int>(ids_.begin() + static_cast<std::ptrdiff_t>(read_), ids_.end()));
  if (!next.empty()) {
    anchor_ = read_;
    done_ = std::move(next);
  } else {
    done_ = text;
  }
  read_ = ids_.size();
  return out;
}

std::string TextStream::push(int id) {
  if (id < 0 || id >= static_cast<int>(byte_of_.size()))
    throw InputError("token id " + std::to_string(id) + " is outside the vocabulary");
  ids_.push_back(id);
  if (open_character()) return {};
  return emit();
}

std::string TextStream::finish() { return emit(); }

}  // namespace icmlkit::lm
