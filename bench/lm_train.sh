#!/usr/bin/env bash
# Training speed (issues 5 and 24): our CPU trainer vs a PyTorch CPU training step of the same
# model, same thread count, same run.  Three parts, one JSON object:
#   demo   the demo configuration (vocab 4096, d 256, 6 layers, 8/4 heads, d_ff 688,
#          1 x 1024 tokens, AdamW) at 2 threads and at 1 thread;
#   100m   the ~100M preset (vocab 32000, d 768, 12 layers, 12/4 heads, d_ff 2048, 1 x 512),
#          tokens/s and peak resident memory (RSS of each process, MiB);
#   curve  old (--kernels reference, the v1 trainer) and new (--kernels fast) lm-train, 50 steps
#          each of the demo model's recipe on the KJV corpus (data/models/README.md, with
#          --stop-at 50): both loss curves, their largest gap and the seconds of each.
# PyTorch comes from PyPI into build/bench-venv-torch (or set BENCH_PYTHON to a python that has
# torch).  Set BENCH_TRAIN_CURVE=0 to skip the curve (about 10 minutes on 2 cores).
# Usage: bash bench/lm_train.sh build/bin [threads] [steps]
set -euo pipefail
bin=${1:-build/bin}
threads=${2:-2}
steps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
root="$here/.."
py=${BENCH_PYTHON:-}
if [ -z "$py" ]; then
  venv="$root/build/bench-venv-torch"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q torch >&2 || true
  fi
  py="$venv/bin/python"
fi
peer() {  # threads steps seq_len preset -> JSON or null
  PYTHONDONTWRITEBYTECODE=1 "$py" "$here/peer/lm_train_torch.py" "$@" 2>/dev/null || echo null
}
pair() {  # threads steps preset -> {ours, peer, speedup_vs_pytorch}
  local o p
  o=$("$bin/bench-lm-train" --threads "$1" --steps "$2" --preset "$3")
  p=$(peer "$1" "$2" 0 "$3")
  jq -n --argjson o "$o" --argjson p "$p" \
    '{ours: $o, peer: $p, speedup_vs_pytorch: (if $p == null then null else $o.tokens_per_s / $p.tokens_per_s end),
      rss_vs_pytorch: (if $p == null then null else $o.peak_rss_mib / $p.peak_rss_mib end)}'
}
demo2=$(pair "$threads" "$steps" 7m)
demo1=$(pair 1 "$steps" 7m)
big=$(pair "$threads" 2 100m)

curve=null
if [ "${BENCH_TRAIN_CURVE:-1}" != 0 ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  zcat "$root/data/corpus/kjv.tsv.gz" > "$tmp/kjv.tsv"
  "$bin/tokenizer-train" "$tmp/kjv.tsv" --column 2 --vocab-size 4096 -o "$tmp/kjv.model" -q
  run() {  # kernels -> log path
    local t0 t1
    t0=$(date +%s.%N)
    "$bin/lm-train" "$tmp/kjv.tsv" --column 2 --doc-column 1 --tokenizer "$tmp/kjv.model" --preset 7m \
      --seq-len 1024 --batch 4 --lr 1e-3 --warmup 40 --tokens 3000000 --eval-every 0 --stop-at 50 \
      --log-every 5 --threads "$threads" --kernels "$1" -o "$tmp/$1.h5" --log "$tmp/$1.jsonl" -q
    t1=$(date +%s.%N)
    echo "$t0 $t1" > "$tmp/$1.time"
  }
  run reference
  run fast
  curve=$(jq -n --slurpfile a "$tmp/reference.jsonl" --slurpfile b "$tmp/fast.jsonl" \
    --arg ta "$(cat "$tmp/reference.time")" --arg tb "$(cat "$tmp/fast.time")" '
    def losses(x): [x[] | select(.step != null) | {step, train_loss}];
    def secs(t): (t | split(" ") | map(tonumber)) as $v | $v[1] - $v[0];
    (losses($a)) as $la | (losses($b)) as $lb |
    {steps: 50, log_every: 5,
     reference: {seconds: secs($ta), tokens_per_s: ($a[] | select(.summary != null) | .summary.tokens_per_s),
                 losses: [$la[].train_loss]},
     fast: {seconds: secs($tb), tokens_per_s: ($b[] | select(.summary != null) | .summary.tokens_per_s),
            mfu: ($b[] | select(.summary != null) | .summary.mfu), losses: [$lb[].train_loss]},
     max_loss_gap: ([range(0; $la | length)] | map(($la[.].train_loss - $lb[.].train_loss) | fabs) | max)}')
fi
jq -n --argjson d2 "$demo2" --argjson d1 "$demo1" --argjson b "$big" --argjson c "$curve" \
  '{bench: "lm-train", demo: {threads_n: $d2, threads_1: $d1}, preset_100m: $b, curve: $c}'
