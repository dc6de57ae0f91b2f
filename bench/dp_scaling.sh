#!/usr/bin/env bash
# Data-parallel scaling on paper (issue 41): the predicted efficiency of lm-train's chained,
# fixed-order gradient reduction at 8, 64 and 512 GPUs over NVLink and InfiniBand, next to a ring
# allreduce's (the unordered reduction it gives up).  The model, per optimizer step with one
# micro-batch per GPU (--accum N, weak scaling), the reduction not overlapped with the backward:
#   t_step = t_c + T_red,  efficiency = t_c / t_step
#   T_red  = T_chain + T_bcast,  each a chunk-pipelined pass along the N ranks:
#            B/BW + (N - 1) (alpha + c / BW)
#   ring allreduce (reference): 2 (N - 1)/N B/BW + 2 (N - 1) alpha
# B: the gradient's bytes (fp32); t_c: the compute of one micro-batch; c: the chunk (1 MiB, the
# reducer's default); BW, alpha: one GPU's link bandwidth (per direction) and per-message latency.
# Cases: the demo model as measured here (t_c and B from bench/lm_train_mpi.sh's JSON, given as $1,
# or the values recorded in the README), and a 1.3B Llama on H100s at an assumed 40% of the bf16
# dense peak (989 TFLOP/s), 16,384 tokens per micro-batch: t_c = 6 P T / (0.4 x 989e12).
# Usage: bash bench/dp_scaling.sh [LM_TRAIN_MPI_JSON] [--markdown]
set -euo pipefail
measured='{"gradient_bytes": 25801728, "one_rank": {"tokens_per_s": 3493}, "tokens_per_step": 2048, "micro_batches": 4}'
markdown=false
for a in "$@"; do
  case $a in
    --markdown) markdown=true ;;
    *) measured=$(cat "$a") ;;
  esac
done
jq -n --argjson m "$measured" --argjson md "$markdown" '
  def pass(n; b; bw; alpha; c): b / bw + (n - 1) * (alpha + c / bw);
  def chain(n; b; bw; alpha): 2 * pass(n; b; bw; alpha; 1048576);
  def ring(n; b; bw; alpha): 2 * (n - 1) / n * b / bw + 2 * (n - 1) * alpha;
  def links: [{name: "NVLink 4 (450 GB/s, 3 us)", bw: 450e9, alpha: 3e-6},
              {name: "InfiniBand NDR (50 GB/s, 5 us)", bw: 50e9, alpha: 5e-6}];
  ($m.tokens_per_step / ($m.micro_batches // 4)) as $mb_tokens |
  [{case: "kjv7m, measured here (one CPU core per rank)", gradient_bytes: $m.gradient_bytes,
    compute_s: ($mb_tokens / $m.one_rank.tokens_per_s), tokens_per_micro_batch: $mb_tokens},
   {case: "1.3B Llama on H100 (assumed 40% MFU)", gradient_bytes: (1.3e9 * 4),
    compute_s: (6 * 1.3e9 * 16384 / (0.4 * 989e12)), tokens_per_micro_batch: 16384}] as $cases |
  [ $cases[] as $k | links[] as $l | (8, 64, 512) as $n |
    (chain($n; $k.gradient_bytes; $l.bw; $l.alpha)) as $tc | (ring($n; $k.gradient_bytes; $l.bw; $l.alpha)) as $tr |
    {case: $k.case, link: $l.name, gpus: $n, compute_s: $k.compute_s, gradient_bytes: $k.gradient_bytes,
     bytes_per_step_per_rank: (2 * $k.gradient_bytes), reduce_s: $tc,
     efficiency: ($k.compute_s / ($k.compute_s + $tc)), allreduce_efficiency: ($k.compute_s / ($k.compute_s + $tr))} ] as $rows |
  if $md then
    ("| model | link | GPUs | compute per step (one micro-batch) | reduction per step | efficiency | ring allreduce |",
     "|---|---|---:|---:|---:|---:|---:|",
     ($rows[] | "| \(.case) | \(.link) | \(.gpus) | \(.compute_s * 1000 | round) ms | \(.reduce_s * 1000 * 10 | round / 10) ms | \(.efficiency * 100 | round)% | \(.allreduce_efficiency * 100 | round)% |"))
  else {benchmark: "dp_scaling", model: "t_step = t_c + 2 (B/BW + (N-1)(alpha + c/BW)), c = 1 MiB, no overlap", rows: $rows} end' |
  if $markdown; then jq -r '.'; else cat; fi
