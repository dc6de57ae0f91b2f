#!/usr/bin/env bash
# Checks of moe-grow that need loops (cases/moe_grow.cmake); run inside the case's work directory
# after the case made base.h5.
#   moe_grow.sh evals LM_EVAL FIXTURE NAME...   writes NAME.json, lm-eval's held-out loss of NAME.h5
#   moe_grow.sh stack GROWN BASE K N             block i of GROWN equals block i % N of BASE (K blocks)
#   moe_grow.sh meta FILE                        prints FILE's provenance meta JSON
set -euo pipefail
case $1 in
  evals)
    eval_bin=$2 fixture=$3; shift 3
    for f in "$@"; do "$eval_bin" "$f.h5" "$fixture" --column 2 --doc-column 1 --val-every 5 --split val -q > "$f.json"; done ;;
  stack)
    grown=$2 base=$3 k=$4 n=$5
    for ((i = 0; i < k; i++)); do
      for t in attn_q ffn_norm ffn_up_exps; do
        [ "$(h5dump -d blk.$i.$t.weight "$grown" | tail -n +3)" = "$(h5dump -d blk.$((i % n)).$t.weight "$base" | tail -n +3)" ] \
          || { echo "moe_grow.sh: block $i $t is not block $((i % n))'s" >&2; exit 3; }
      done
    done ;;
  meta)
    h5dump -a meta "$2" | sed -n 's/^ *(0): "\(.*\)"$/\1/p' | sed 's/\\"/"/g' ;;
esac
