// The corpus flags shared by lm-train and lm-eval (--format, --column, --doc-column, --field,
// --doc-field, --val-every).
#pragma once

#include <CLI/CLI.hpp>

#include "nn/corpus.hpp"

namespace icmlkit::nn {

/// Adds the corpus-reading flags to `app`, writing into `opt`.
void add_corpus_flags(CLI::App& app, CorpusOptions& opt);

}  // namespace icmlkit::nn
