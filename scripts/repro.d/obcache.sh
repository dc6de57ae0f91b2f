#!/usr/bin/env bash
# OBCache on the demo model (issue 27): generation from a prompt cache evicted after the prefill,
# method x budget, 64 repeated-passage prompts from the held-out KJV chapters (lm-train's split),
# means with bootstrap 95 % intervals, and each +obcVK method's paired difference to its base.
# $1 = bin directory.  REPRO_QUICK=1: 8 prompts.
set -euo pipefail
bin=${1:-build/bin}
model=data/models/kjv7m.h5
corpus=data/corpus/kjv.tsv.gz
prompts=64
[ "${REPRO_QUICK:-0}" = 1 ] && prompts=8
echo
echo "OBCache (Gu et al.) vs the heuristics it generalises, prefill-only eviction, demo model kjv7m"
cmd="$bin/kv-eval $model $corpus --column 2 --doc-column 1 --val-every 20 --prompts $prompts -q"
out=$($cmd)
jq -r '"prompt: \(.prompt_tokens) tokens (passage 48 + filler 400 + cue 8 + BOS); full-cache recall \(.full_cache.recall_tokens.mean) of 24, perplexity \(.full_cache.perplexity.mean*100|round/100)"' <<<"$out"
jq -r '["method","budget","slots","agreement [95% CI]","full-match tokens","perplexity","recall","score ms"],
  (.results[] | [.method, .budget, .slots,
    "\(.next_token_agreement.mean*1000|round/1000) [\(.next_token_agreement.lo*1000|round/1000), \(.next_token_agreement.hi*1000|round/1000)]",
    (.full_match_tokens.mean*100|round/100), (.perplexity.mean*100|round/100), (.recall_tokens.mean*100|round/100),
    (.score_seconds_per_prompt*1e5|round/100)]) | @tsv' <<<"$out" | column -t -s $'\t'
echo
echo "paired differences, OBCache minus its base (next-token agreement; a claim only where the interval excludes 0)"
jq -r '["method","base","budget","agreement diff [95% CI]","NLL diff [95% CI]"],
  (.paired[] | [.method, .base, .budget,
    "\(.next_token_agreement.mean*1000|round/1000) [\(.next_token_agreement.lo*1000|round/1000), \(.next_token_agreement.hi*1000|round/1000)]",
    "\(.nll.mean*1000|round/1000) [\(.nll.lo*1000|round/1000), \(.nll.hi*1000|round/1000)]"]) | @tsv' <<<"$out" | column -t -s $'\t'
echo "command: $cmd"
