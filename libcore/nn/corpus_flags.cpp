#include "nn/corpus_flags.hpp"

#include "cli/run_tool.hpp"

namespace icmlkit::nn {

void add_corpus_flags(CLI::App& app, CorpusOptions& opt) {
  app.add_option("--format", opt.format, "Corpus format: auto (by extension), text, tsv or jsonl")
      ->capture_default_str()->check(CLI::IsMember({"auto", "text", "tsv", "jsonl"}));
  app.add_option("--column", opt.column, "TSV: 1-based text column (0 = the last)")->check(cli::int_range(0, 1000));
  app.add_option("--doc-column", opt.doc_column,
                 "TSV: 1-based key column; consecutive rows with the same key up to its first ':' form one "
                 "document (kjv.tsv: 1 = chapters)")->check(cli::int_range(0, 1000));
  app.add_option("--field", opt.field, "JSONL: the text field")->capture_default_str();
  app.add_option("--doc-field", opt.doc_field, "JSONL: key field grouping consecutive records into documents");
  app.add_option("--val-every", opt.val_every, "Every N-th document is validation (0 = none)")
      ->capture_default_str()->check(cli::int_range(0, 1 << 30));
}

}  // namespace icmlkit::nn
