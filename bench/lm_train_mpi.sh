#!/usr/bin/env bash
# Data-parallel lm-train (issue 41) on this machine: tokens/s of the demo model (data/models/kjv7m.h5,
# 7M weights, 2 x 4 micro-batches of 256 tokens per step, AdamW) at 1 rank and at 2 ranks of one
# thread each (bound to a core each), the reduction's share of the training time and its bytes,
# whether both end in the same bits, and the reduction itself against MPI_Allreduce on the model's
# gradient size (bench-mpi-reduce, same run); and one process of 2 threads, the alternative on one
# machine.  One JSON object on stdout (bench/dp_scaling.sh takes it for the scaling on paper).
# Usage: bash bench/lm_train_mpi.sh build/bin [steps]
set -euo pipefail
bin=${1:-build/bin}
steps=${2:-12}
root=$(cd "$(dirname "$0")/.." && pwd)
command -v mpirun > /dev/null || { echo '{"benchmark": "lm_train_mpi", "skipped": "mpirun not found"}'; exit 0; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args="$root/data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --init $root/data/models/kjv7m.h5 --seq-len 256 --batch 2 --accum 4
      --steps $steps --eval-every 0 --eval-tokens 512 --threads 1 -q"
"$bin/lm-train" $args -o "$tmp/one.h5" --log "$tmp/one.jsonl"
mpirun -np 2 --bind-to core "$bin/lm-train" $args -o "$tmp/two.h5" --log "$tmp/two.jsonl"
# the alternative on one machine: one process, both cores as threads
"$bin/lm-train" ${args/--threads 1/--threads 2} -o "$tmp/threads.h5" --log "$tmp/threads.jsonl"
state() { h5dump -a /train/state_sha256 "$1" | sed -n 's/.*(0): "\(.*\)".*/\1/p'; }
floats=$(jq -s '.[0].meta.trainable_bytes / 4' "$tmp/one.jsonl")
reduce=$(mpirun -np 2 --bind-to core "$bin/bench-mpi-reduce" "$floats" 1048576)
jq -n --slurpfile one "$tmp/one.jsonl" --slurpfile two "$tmp/two.jsonl" --slurpfile threads "$tmp/threads.jsonl" --argjson red "$reduce" \
  --arg same "$([ "$(state "$tmp/one.h5")" = "$(state "$tmp/two.h5")" ] && echo true || echo false)" '
  ($one[-1].summary) as $a | ($two[-1].summary) as $b |
  {benchmark: "lm_train_mpi", model: "data/models/kjv7m.h5", tokens_per_step: 2048, micro_batches: 4, steps: $a.steps,
   one_rank: {tokens_per_s: $a.tokens_per_s, threads: 1},
   one_rank_two_threads: {tokens_per_s: $threads[-1].summary.tokens_per_s},
   two_ranks: {tokens_per_s: $b.tokens_per_s, threads_per_rank: 1, reduce_share: $b.reduce_share,
               reduce_seconds_per_step: ($b.reduce_seconds / $b.steps), reduce_bytes_sent_per_step: $b.reduce_bytes_sent_per_step},
   speedup: ($b.tokens_per_s / $a.tokens_per_s), efficiency: ($b.tokens_per_s / $a.tokens_per_s / 2),
   bit_identical: ($same == "true"), gradient_bytes: $a.trainable_bytes, reduction_vs_allreduce: $red}'
