#!/usr/bin/env bash
# Issue 6 (FAFO): method x KV policy x budget on the shipped KJV demo model, prompts of 64 / 256
# / 512 tokens from held-out chapters, 128 new tokens, greedy; every run is compared with AR on
# the same prompt (speedup, identical_to_ar).  Plus c(k) of the engine, which explains the CPU
# figures.  Then (issue 37) FAFO's adaptive schedule, the default: KJV prompts and out-of-domain
# prose (the GPL-3 text every Debian system ships), on the quiet machine and with one core busy,
# three runs each (the first measures the pass costs into a fresh cache, the others read it).
# Gets the bin directory as $1.  About 12 minutes on 2 cores.
set -euo pipefail
bin=${1:-build/bin}
model=data/models/kjv7m.h5
kjv=data/corpus/kjv.tsv.gz
if [ ! -f "$model" ]; then echo "repro decode: $model is absent; skipped"; exit 0; fi
load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
cores=$(nproc 2>/dev/null || echo 1)
if awk -v l="$load" -v c="$cores" 'BEGIN {exit !(l > 0.5 * c)}'; then
  echo "repro decode: warning: load average $load on $cores cores; step times, speedups and c(k) need a quiet machine" >&2
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Held-out chapters (lm-train --val-every 20 holds out chapters 20, 40, ...): Genesis 20 and 40.
zcat "$kjv" | awk -F'\t' '$1 ~ /^Ge20:/ || $1 ~ /^Ge40:/ {print $2}' > "$tmp/prompt.txt"
head -n 3 <(zcat "$kjv" | awk -F'\t' '$1 ~ /^Exo20:/ {print $2}') > "$tmp/calib.txt"
"$bin/fafo-generate" "$model" --calibration "$tmp/calib.txt" --search-skip-set "$tmp/skip.json" --calibration-tokens 32 -q
W=(--window 5 --ngram 4 --guesses 5)
configs=(
  "ar|--method ar"
  "prompt-lookup|--method prompt-lookup"
  "self-spec|--method self-spec --skip-set $tmp/skip.json"
  "lookahead W5 N4 G5|--method lookahead ${W[*]}"
  "fafo adaptive (default)|--method fafo --pass-cost-cache $tmp/pc.json"
  "fafo streaming 32|--method fafo --schedule fixed ${W[*]} --kv-policy streaming --kv-budget 32"
  "fafo streaming 128|--method fafo --schedule fixed ${W[*]} --kv-policy streaming --kv-budget 128"
  "fafo h2o 32|--method fafo --schedule fixed ${W[*]} --kv-policy h2o --kv-budget 32"
  "fafo h2o 128|--method fafo --schedule fixed ${W[*]} --kv-policy h2o --kv-budget 128"
  "fafo tova 32|--method fafo --schedule fixed ${W[*]} --kv-policy tova --kv-budget 32"
  "fafo snapkv 64|--method fafo --schedule fixed ${W[*]} --kv-policy snapkv --kv-budget 64"
)
printf '%-7s %-22s %9s %9s %9s %9s %8s %10s %6s\n' prompt method acc/step tok/s step_ms draft_ms speedup identical rep3
for n in 64 256 512; do
  for c in "${configs[@]}"; do
    name=${c%%|*}
    args=${c#*|}
    # shellcheck disable=SC2086
    "$bin/fafo-generate" "$model" --prompt-file "$tmp/prompt.txt" --prompt-tokens $n -n 128 --ignore-eos $args \
      --compare ar -o "$tmp/r.jsonl" --no-text -q
    jq -r --arg n "$n" --arg m "$name" 'select(.summary) | .summary |
      [$n, $m, (.mean_accepted_per_step*100|round/100), (.decode_tokens_per_s|round),
       (.mean_step_seconds*1e5|round/100), (.time_split_cpu_s.drafting_attention / .decode_steps * 1e5 | round/100),
       (.speedup*100|round/100), .identical_to_ar, (.repeated_trigram_rate*100|round/100)] | @tsv' "$tmp/r.jsonl" |
      awk -F'\t' '{printf "%-7s %-22s %9s %9s %9s %9s %8s %10s %6s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9}'
  done
done
echo "(acc/step: mean accepted tokens per decode step; step_ms: wall time per step; draft_ms: attention CPU"
echo " time of the drafting rows per step; speedup: decode tokens/s over AR's in the same run; rep3: share of"
echo " generated tokens completing a trigram seen before)"
if [ -x "$bin/bench-lm-engine" ]; then
  echo "c(k) of the engine (k-row forward pass time over a 1-row one; the demo model's shape, random weights):"
  "$bin/bench-lm-engine" --threads 2 --quick | jq -c 'select(.model | test("7m")) | .c_k' || true
fi
echo "command: $bin/fafo-generate $model --prompt-file prompt.txt --prompt-tokens N -n 128 --ignore-eos --method fafo --schedule fixed ${W[*]} --kv-policy h2o --kv-budget 32 --compare ar -o r.jsonl"

# ---- adaptive FAFO (issue 37): never slower than AR? ----------------------------------------
head -c 20000 /usr/share/common-licenses/GPL-3 2>/dev/null | tr -s ' \n' ' ' > "$tmp/prose.txt" || true
[ -s "$tmp/prose.txt" ] || zcat "$kjv" | awk -F'\t' '$1 ~ /^Ps119:/ {print $2}' > "$tmp/prose.txt"
echo
echo "adaptive FAFO (the default) vs AR, 128 new tokens; runs 1-3 (run 1 measures the pass costs into a fresh cache)"
printf '%-7s %-6s %-6s %9s %9s %9s %8s %10s %9s %6s %s\n' load prompt tokens acc/step tok/s ar_tok/s speedup identical la_share cal_ms shapes
adaptive_rows() {  # $1 = load label
  for p in kjv:64 kjv:256 kjv:512 prose:256; do
    src=${p%%:*}; n=${p##*:}
    f=$tmp/prompt.txt; [ "$src" = prose ] && f=$tmp/prose.txt
    rm -f "$tmp/pca.json"
    for run in 1 2 3; do
      "$bin/fafo-generate" "$model" --prompt-file "$f" --prompt-tokens "$n" -n 128 --ignore-eos --method fafo \
        --pass-cost-cache "$tmp/pca.json" --compare ar -o "$tmp/a.jsonl" --no-text -q
      jq -r --arg l "$1" --arg s "$src" --arg n "$n" 'select(.summary) | .summary |
        [$l, $s, $n, (.mean_accepted_per_step*100|round/100), (.decode_tokens_per_s|round), (.compare.decode_tokens_per_s|round),
         (.speedup*100|round/100), .identical_to_ar, (.accepted_draft_sources.lookahead_share*100|round/100),
         (.adaptive.calibration_s*1e4|round/10), ([.adaptive.arms[] | select(.steps > 0) | "\(.name):\(.steps)"] | join(","))] | @tsv' "$tmp/a.jsonl" |
        awk -F'\t' '{printf "%-7s %-6s %-6s %9s %9s %9s %8s %10s %9s %6s %s\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11}'
    done
  done
}
adaptive_rows quiet
# One core busy with another process (a shell loop), as on a shared machine.
( while :; do :; done ) &
busy=$!
trap 'kill $busy 2>/dev/null; rm -rf "$tmp"' EXIT
adaptive_rows loaded
kill $busy 2>/dev/null || true
echo "(shapes: steps per shape, ar/prompt = AR steps and AR + prompt-match drafts; la_share: share of accepted"
echo " drafts proposed by the lookahead rows' n-grams; cal_ms: the pass-cost measurement, 0.x when read from the cache)"
echo "command: $bin/fafo-generate $model --prompt-file prompt.txt --prompt-tokens N -n 128 --ignore-eos --compare ar -o r.jsonl"
