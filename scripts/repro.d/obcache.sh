#!/usr/bin/env bash
# OBCache on the demo model (issue 27): generation from an evicted KV cache, method x budget, 64
# repeated-passage prompts from the held-out KJV chapters (lm-train's split), means with bootstrap
# 95 % intervals, and each +obcVK method's paired difference to its base: first prefill-only
# eviction (the paper's protocol), then eviction while decoding (--evict decode), then the cost of
# scoring a 1,024-token prompt with a 32-row window.
# $1 = bin directory.  REPRO_QUICK=1: 8 prompts.  OBC_MODEL=path: another model (same tokenizer
# family; the prompt shape fits n_ctx 1024).
set -euo pipefail
bin=${1:-build/bin}
model=${OBC_MODEL:-data/models/kjv7m.h5}
corpus=data/corpus/kjv.tsv.gz
prompts=64
[ "${REPRO_QUICK:-0}" = 1 ] && prompts=8
ci() { echo "\(.$1.mean*1000|round/1000) [\(.$1.lo*1000|round/1000), \(.$1.hi*1000|round/1000)]"; }
table() {
  jq -r "[\"method\",\"budget\",\"slots\",\"agreement [95% CI]\",\"output error [95% CI]\",\"full-match\",\"perplexity\",\"recall\",\"peak slots\",\"score ms\"],
    (.results[] | [.method, .budget, .slots, \"$(ci next_token_agreement)\", \"$(ci output_error)\",
      (.full_match_tokens.mean*100|round/100), (.perplexity.mean*100|round/100), (.recall_tokens.mean*100|round/100),
      .peak_slots, (.score_seconds_per_prompt*1e5|round/100)]) | @tsv" | column -t -s $'\t'
}
paired() {
  jq -r "[\"method\",\"base\",\"budget\",\"agreement diff [95% CI]\",\"output error diff [95% CI]\",\"NLL diff [95% CI]\",\"recall diff [95% CI]\"],
    (.paired[] | [.method, .base, .budget, \"$(ci next_token_agreement)\", \"$(ci output_error)\", \"$(ci nll)\", \"$(ci recall_tokens)\"]) | @tsv" |
    column -t -s $'\t'
}
for mode in prefill decode; do
  echo
  echo "OBCache (Gu et al.) vs the heuristics it generalises, --evict $mode, model $model"
  cmd="$bin/kv-eval $model $corpus --column 2 --doc-column 1 --val-every 20 --prompts $prompts --evict $mode -q"
  out=$($cmd)
  jq -r '"prompt: \(.prompt_tokens) tokens (passage 48 + filler 400 + cue 8 + BOS); full-cache recall \(.full_cache.recall_tokens.mean) of 24, perplexity \(.full_cache.perplexity.mean*100|round/100)"' <<<"$out"
  table <<<"$out"
  echo "paired differences, OBCache minus its base (a claim only where the interval excludes 0)"
  paired <<<"$out"
  echo "command: $cmd"
done
echo
echo "scoring cost: a 1,024-token prompt (Genesis 1-4), 32-row window, seconds (one run)"
prompt=$(mktemp)
trap 'rm -f "$prompt"' EXIT
zcat "$corpus" | awk -F'\t' '$1 ~ /^Ge[1-4]:/ {print $2}' >"$prompt"
cmd="$bin/obcache-score $model --prompt-file $prompt --prompt-tokens 1024 --num-recent 32 --budget 0.1 --methods h2o,h2o+obcV,h2o+obcK,h2o+obcVK -q"
out=$($cmd)
jq -r '.prefill_seconds as $p | "prefill \($p*1000|round/1000) s; " + ([.score_seconds | to_entries[] | "\(.key) \(.value*1000|round/1000) s (\(.value / $p * 1000 | round / 10) % of the prefill)"] | join(", "))' <<<"$out"
echo "command: $cmd"
