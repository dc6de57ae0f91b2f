#include "lm/tokenizer.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

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

Tokenizer::Tokenizer(const std::string& model_bytes, const std::string& where)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  const auto st = sp_->LoadFromSerializedProto(model_bytes);
  if (!st.ok()) throw InputError("invalid SentencePiece model: " + std::string(st.message()), where);
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
  if (!st.ok()) throw InputError("tokenizer training failed: " + std::string(st.message()));
  return proto;
}

}  // namespace icmlkit::lm
