#include "lm/tokenizer.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <unordered_map>

#include "util/error.hpp"

namespace icmlkit::lm {

bool valid_utf8(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) { ++i; continue; }
    int len;
    unsigned cp;
    if ((c & 0xe0) == 0xc0) { len = 2; cp = c & 0x1f; }
    else if ((c & 0xf0) == 0xe0) { len = 3; cp = c & 0x0f; }
    else if ((c & 0xf8) == 0xf0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

namespace {
// SentencePiece's status text without its source location and failed condition
// ("./src/x.cc(580) [cond] Message. ..." -> "Message. ..."), and with our flag spellings.
std::string sentencepiece_message(std::string m) {
  if (m.rfind("./src/", 0) == 0 || m.rfind("src/", 0) == 0) {
    // The condition may hold brackets of its own: skip to the "] " that closes the first "[".
    int depth = 0;
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (m[i] == '[') ++depth;
      if (m[i] == ']' && --depth == 0) {
        m = m.substr(std::min(m.size(), i + 2));
        break;
      }
    }
  }
  for (const auto& [theirs, ours] : {std::pair<std::string, std::string>{"--character_coverage", "--character-coverage"},
                                     {"vocab_size", "--vocab-size"}}) {
    for (std::size_t at = m.find(theirs); at != std::string::npos; at = m.find(theirs, at + ours.size())) m.replace(at, theirs.size(), ours);
  }
  return m.find_first_not_of(" .") == std::string::npos ? "not in SentencePiece's format" : m;
}
}  // namespace

Tokenizer::Tokenizer(const std::string& model_bytes, const std::string& where)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto st = sp_->LoadFromSerializedProto(model_bytes);
  if (!st.ok()) throw InputError("invalid SentencePiece model: " + sentencepiece_message(std::string(st.message())), where);
}

Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

int Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int Tokenizer::bos_id() const { return sp_->bos_id(); }
int Tokenizer::eos_id() const { return sp_->eos_id(); }
int Tokenizer::unk_id() const { return sp_->unk_id(); }

std::vector<int> Tokenizer::encode(std::string_view text, const std::string& where) const {
  if (!valid_utf8(text)) throw InputError("text is not valid UTF-8", where);
  std::vector<int> ids;
  const auto st = sp_->Encode(text, &ids);
  if (!st.ok()) throw InputError("tokenization failed: " + std::string(st.message()), where);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int>& ids) const {
  const int n = vocab_size();
  for (int id : ids)
    if (id < 0 || id >= n) throw InputError("token id " + std::to_string(id) + " is outside the vocabulary");
  std::string out;
  const auto st = sp_->Decode(ids, &out);
  if (!st.ok()) throw InputError("detokenization failed: " + std::string(st.message()));
  return out;
}

std::string Tokenizer::piece(int id) const {
  if (id < 0 || id >= vocab_size()) throw InputError("token id " + std::to_string(id) + " is outside the vocabulary");
  return sp_->IdToPiece(id);
}

namespace {

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& v_;
  std::size_t i_ = 0;
};

}  // namespace

std::string train_tokenizer(const std::vector<std::string>& sentences, const TokenizerTrainOptions& opt) {
  if (sentences.empty()) throw InputError("no training text");
  std::unordered_map<std::string, std::string> kw = {
      {"model_type", opt.model_type},
      {"vocab_size", std::to_string(opt.vocab_size)},
      {"character_coverage", std::to_string(opt.character_coverage)},
      {"num_threads", std::to_string(std::max(1, opt.threads))},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", "65536"},
      {"unk_id", "0"}, {"bos_id", "1"}, {"eos_id", "2"}, {"pad_id", "-1"},
      {"minloglevel", "2"},
  };
  VectorIterator it(sentences);
  std::string proto;
  const auto st = sentencepiece::SentencePieceTrainer::Train(kw, &it, &proto);
  if (!st.ok()) throw InputError("tokenizer training failed: " + sentencepiece_message(std::string(st.message())));
  return proto;
}

}  // namespace icmlkit::lm

namespace icmlkit::lm {

std::vector<Piece> Tokenizer::pieces() const {
  std::vector<Piece> out(vocab_size());
  for (int i = 0; i < vocab_size(); ++i) {
    Piece& p = out[i];
    p.text = sp_->IdToPiece(i);
    p.score = sp_->GetScore(i);
    p.type = sp_->IsUnknown(i) ? Piece::unknown
             : sp_->IsControl(i) ? Piece::control
             : sp_->IsUnused(i)  ? Piece::unused
             : sp_->IsByte(i)    ? Piece::byte
                                 : Piece::normal;
  }
  return out;
}

namespace {

// Minimal protobuf wire-format writer (varint, fixed32, length-delimited) for ModelProto.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) { out.push_back(static_cast<char>((v & 0x7f) | 0x80)); v >>= 7; }
  out.push_back(static_cast<char>(v));
}
void put_tag(std::string& out, int field, int wire) { put_varint(out, (std::uint64_t(field) << 3) | wire); }
void put_bytes(std::string& out, int field, const std::string& b) {
  put_tag(out, field, 2);
  put_varint(out, b.size());
  out += b;
}
void put_int(std::string& out, int field, std::int64_t v) {
  put_tag(out, field, 0);
  put_varint(out, static_cast<std::uint64_t>(v));  // negative ints: 10-byte two's complement, as protobuf
}
void put_float(std::string& out, int field, float f) {
  put_tag(out, field, 5);
  char b[4];
  std::memcpy(b, &f, 4);
  out.append(b, 4);
}

}  // namespace

std::string build_spm_model(const std::vector<Piece>& pieces, bool add_dummy_prefix, int bos_id, int eos_id,
                            const std::string& where) {
  int unk = -1, bytes = 0;
  std::unordered_map<std::string, int> seen;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    if (p.text.empty()) throw InputError("empty vocabulary piece at id " + std::to_string(i), where);
    if (!valid_utf8(p.text)) throw InputError("vocabulary piece " + std::to_string(i) + " is not valid UTF-8", where);
    if (!seen.emplace(p.text, static_cast<int>(i)).second)
      throw InputError("duplicate vocabulary piece '" + p.text + "' at ids " + std::to_string(seen[p.text]) + " and " + std::to_string(i), where);
    if (p.type < Piece::normal || p.type > Piece::byte) throw InputError("unknown token type " + std::to_string(p.type) + " at id " + std::to_string(i), where);
    if (p.type == Piece::unknown) {
      if (unk >= 0) throw InputError("more than one unknown piece", where);
      unk = static_cast<int>(i);
    }
    if (p.type == Piece::byte) ++bytes;
  }
  if (unk < 0) throw InputError("the vocabulary has no unknown piece", where);
  std::string model;
  for (const Piece& p : pieces) {
    std::string sp;
    put_bytes(sp, 1, p.text);
    put_float(sp, 2, p.score);
    put_int(sp, 3, p.type);
    put_bytes(model, 1, sp);
  }
  std::string trainer;
  put_int(trainer, 3, 2);  // model_type = BPE
  put_int(trainer, 4, static_cast<std::int64_t>(pieces.size()));
  put_int(trainer, 35, bytes == 256 ? 1 : 0);  // byte_fallback
  put_int(trainer, 40, unk);
  put_int(trainer, 41, bos_id);
  put_int(trainer, 42, eos_id);
  put_int(trainer, 43, -1);
  put_bytes(trainer, 45, pieces[unk].text);
  if (bos_id >= 0 && std::size_t(bos_id) < pieces.size()) put_bytes(trainer, 46, pieces[bos_id].text);
  if (eos_id >= 0 && std::size_t(eos_id) < pieces.size()) put_bytes(trainer, 47, pieces[eos_id].text);
  put_bytes(model, 2, trainer);
  std::string norm;
  put_bytes(norm, 1, "identity");
  put_int(norm, 3, add_dummy_prefix ? 1 : 0);
  put_int(norm, 4, 0);  // remove_extra_whitespaces
  put_int(norm, 5, 1);  // escape_whitespaces
  put_bytes(model, 3, norm);
  Tokenizer check(model, where);  // SentencePiece's own validation of the result
  return model;
}

}  // namespace icmlkit::lm
