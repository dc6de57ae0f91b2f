#!/usr/bin/env bash
# Issue 5 (training core): a short seeded CPU training run on the King James Bible — whole
# chapters packed to the context, every 20th chapter held out — and the held-out validation
# loss / perplexity before and after.  A few minutes on 2 cores.  Gets the bin directory as $1.
set -euo pipefail
bin=${1:-build/bin}
kjv=../shared/data/corpus/kjv.tsv
if [ ! -f "$kjv" ]; then echo "repro nn: $kjv is absent (Debian bible-kjv-text); skipped"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
split=(--column 2 --doc-column 1 --val-every 20)
"$bin/tokenizer-train" "$kjv" --column 2 --chunk-lines 4 --vocab-size 1024 -o "$tmp/t.model" -q
"$bin/lm-init" --tokenizer "$tmp/t.model" --preset tiny --n-ctx 128 -o "$tmp/init.h5" -q
before=$("$bin/lm-eval" "$tmp/init.h5" "$kjv" "${split[@]}" --split val -q)
"$bin/lm-train" "$kjv" "${split[@]}" --init "$tmp/init.h5" --batch 8 --lr 3e-3 --steps 300 --eval-every 100 \
  -o "$tmp/m.h5" --log "$tmp/log.jsonl" -q
after=$("$bin/lm-eval" "$tmp/m.h5" "$kjv" "${split[@]}" --split val -q)
printf '%-52s %-12s %-12s\n' "KJV held-out chapters (59), tiny model, ctx 128" "loss" "perplexity"
printf '%-52s %-12.4f %-12.2f\n' "random init (lm-init --preset tiny)" "$(jq .loss <<<"$before")" "$(jq .perplexity <<<"$before")"
printf '%-52s %-12.4f %-12.2f\n' "after 300 AdamW steps of 8 x 128 tokens" "$(jq .loss <<<"$after")" "$(jq .perplexity <<<"$after")"
echo "commands: $bin/lm-train $kjv ${split[*]} --init init.h5 --batch 8 --lr 3e-3 --steps 300 --eval-every 100 -o m.h5"
echo "          $bin/lm-eval m.h5 $kjv ${split[*]} --split val"
