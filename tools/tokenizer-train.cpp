// tokenizer-train: train a SentencePiece tokenizer (BPE or unigram) on text files.
#include <fmt/core.h>

#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/run_tool.hpp"
#include "io/gzip.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/sha256.hpp"
#include "io/table.hpp"
#include "lm/tokenizer.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

using namespace icmlkit;


int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  std::string output, model_type = "bpe";
  int vocab = 1024, column = 0, chunk = 1;
  long max_lines = 0;
  double coverage = 1.0;
  cli::ToolInfo info{
      "tokenizer-train",
      "Train a SentencePiece tokenizer on text and write the serialized model (embed it in a checkpoint with\n"
      "lm-init --tokenizer).  Text is kept verbatim: identity normalisation, no whitespace folding, and byte\n"
      "fallback, so newlines and any UTF-8 survive encode -> decode.  Ids: unk 0, bos 1, eos 2.\n"
      "Lines are grouped --chunk-lines at a time into one training sentence (newlines kept inside it);\n"
      "--column N takes the N-th tab-separated field of each line (e.g. 2 for the text of kjv.tsv).",
      "  tokenizer-train ../shared/data/corpus/kjv.tsv --column 2 --chunk-lines 4 --vocab-size 2048 -o kjv.model\n"
      "  cat notes.txt | tokenizer-train - --vocab-size 500 --model-type unigram -o notes.model\n"};
  return cli::run_tool(
      argc, argv, info,
      [&](CLI::App& app) {
        app.add_option("text", inputs, "Text files (- for stdin)")->required();
        app.add_option("-o,--output", output, "Output SentencePiece model file")->required();
        app.add_option("--vocab-size", vocab, "Number of pieces")->capture_default_str()->check(cli::int_range(260, 1 << 20));
        app.add_option("--model-type", model_type, "bpe or unigram")->capture_default_str()->check(CLI::IsMember({"bpe", "unigram"}));
        app.add_option("--column", column, "Use the N-th tab-separated field (1-based; 0 = whole line)")->check(cli::int_range(0, 1000));
        app.add_option("--chunk-lines", chunk, "Lines per training sentence")->capture_default_str()->check(cli::int_range(1, 10000));
        app.add_option("--max-lines", max_lines, "Read at most this many lines (0 = all)")->check(cli::non_negative());
        app.add_option("--character-coverage", coverage, "Fraction of characters covered by pieces")->capture_default_str()->check(CLI::Range(0.9, 1.0));
      },
      [&](cli::Context& ctx) {
        std::vector<std::string> sentences;
        long lines = 0;
        for (const auto& path : inputs) {
          const std::string text = io::read_maybe_gzip(path);
          ctx.prov.add_input(path, io::sha256_hex(text));
          if (!lm::valid_utf8(text)) throw InputError("text is not valid UTF-8", path);
          std::istringstream in(text);
          std::string line, cur;
          int in_chunk = 0;
          while (std::getline(in, line) && (max_lines == 0 || lines < max_lines)) {
            ++lines;
            if (column > 0) {
              std::size_t start = 0;
              for (int c = 1; c < column && start != std::string::npos; ++c) {
                start = line.find('\t', start);
                if (start != std::string::npos) ++start;
              }
              if (start == std::string::npos)
                throw InputError(fmt::format("line has fewer than {} tab-separated fields", column),
                                 fmt::format("{}, line {}", path, lines));
              line = line.substr(start, line.find('\t', start) - start);
            }
            cur += line;
            if (++in_chunk == chunk) { sentences.push_back(cur); cur.clear(); in_chunk = 0; }
            else cur += '\n';
          }
          if (!cur.empty()) sentences.push_back(cur);
        }
        if (sentences.empty()) throw InputError("no text to train on", inputs.front());
        if (!(coverage >= 0.9 && coverage <= 1.0)) throw UsageError("must be in [0.9, 1]", "--character-coverage");
        lm::TokenizerTrainOptions opt;
        opt.vocab_size = vocab;
        opt.model_type = model_type;
        opt.character_coverage = coverage;
        opt.threads = ctx.common.threads;
        const std::string proto = lm::train_tokenizer(sentences, opt);
        io::write_text(output, proto);
        nlohmann::json meta = ctx.prov.to_json();
        meta["sentences"] = sentences.size();
        meta["vocab_size"] = vocab;
        io::write_json(output + ".meta.json", nlohmann::json{{"meta", meta}});
        log::info("{} sentences from {} lines -> {} pieces in {}", sentences.size(), lines, vocab, output);
      });
}
