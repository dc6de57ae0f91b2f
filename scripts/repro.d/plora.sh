#!/usr/bin/env bash
# Issue 33 (PLoRA): a 16-configuration LoRA search (data/plora/space16.json: rank 4, 8, 16, 32 x lr
# 1e-4, 3e-4, 1e-3, 3e-3, q/v adapters, 200 steps of 1 x 256 tokens) fine-tuning the demo model
# kjv7m on four short KJV books, run five ways on this CPU, each twice:
#   sequential  plora-train --pack none: every job alone, one after another (lm-train --lora x 16);
#   packed      plora-train --pack all: the 16 jobs in one group (no memory limit);
#   max-pack, lpt, plan   plora-plan's schedules at --memory 280MB (at most 4 jobs at once) on the
#               throughput table profiled here (plora-plan --profile), executed by plora-train;
# plus the plan with successive halving (eta 2, rungs 50 and 100 steps).
# -> measured makespan and tokens/s of each arm and run, its peak RSS against the 280 MB limit, the
#    planner's predicted makespan, and each configuration's final validation loss (which must be
#    the same, bit for bit, whichever way the search ran); the planner's makespans on the modelled
#    A100 table (data/plora/gpu_table_a100.json) for 1 and 3 workers; bench-plora's single / packed /
#    wide tokens/s (where packing's gain on a CPU comes from); schedule plots.
# Cost: about 25 CPU-minutes on 2 cores.  REPRO_QUICK=1: 20 steps per job, one run per arm.
# Results in $PLORA_OUT (default build/repro-plora); table.txt there.  $1 = bin directory.
set -euo pipefail
bin=${1:-build/bin}
out=${PLORA_OUT:-build/repro-plora}
mem=280MB
reps=2
space=data/plora/space16.json
mkdir -p "$out"
if [ "${REPRO_QUICK:-0}" = 1 ]; then
  reps=1
  jq '.defaults.steps = 20 | .base = "../../data/models/kjv7m.h5" | .data.path = "../../data/corpus/kjv.tsv.gz"' "$space" > "$out/space.json"
  # the quick space lives in $out: its relative paths are rewritten for build/repro-plora
  space="$out/space.json"
  sed -i "s|\"\.\./\.\./data/|\"$(pwd)/data/|g" "$space"
fi
model=data/models/kjv7m.h5
halving="$out/space-halving.json"
jq --argjson s "$(jq '.defaults.steps' "$space")" \
  '. + {early_stop: {eta: 2, rungs: [($s / 4 | floor), ($s / 2 | floor)]}}' "$space" > "$halving"
sed -i "s|\"\.\./models/|\"$(pwd)/data/models/|; s|\"\.\./corpus/|\"$(pwd)/data/corpus/|" "$halving"

# ---- plans ----
"$bin/plora-plan" "$space" --model "$model" --memory "$mem" --profile --save-throughput "$out/cpu_table.json" \
  -o "$out/plan-plan.json" --plot "$out/plan-cpu.png" -q
for m in max-pack lpt; do
  "$bin/plora-plan" "$space" --model "$model" --memory "$mem" --throughput "$out/cpu_table.json" --method "$m" -o "$out/plan-$m.json" -q
done
"$bin/plora-plan" "$halving" --model "$model" --memory "$mem" --throughput "$out/cpu_table.json" -o "$out/plan-halving.json" -q
for w in 1 3; do
  "$bin/plora-plan" "$space" --model "$model" --memory "$mem" --workers "$w" --throughput data/plora/gpu_table_a100.json \
    -o "$out/gpu-w$w.json" --plot "$out/gpu-w$w.png" -q
done

# ---- runs ----
run() {  # arm rep -> $out/run-<arm>-r<rep>/summary.json
  local arm=$1 rep=$2 dir="$out/run-$1-r$2" sp=$space
  [ -f "$dir/summary.json" ] && return 0
  rm -rf "$dir"
  local how=()
  case $arm in
    sequential) how=(--pack none) ;;
    packed) how=(--pack all) ;;
    halving) how=(--schedule "$out/plan-halving.json"); sp=$halving ;;
    *) how=(--schedule "$out/plan-$arm.json") ;;
  esac
  "$bin/plora-train" "$sp" --model "$model" "${how[@]}" -o "$dir" --threads 2 -q
}
arms=(sequential packed max-pack lpt plan halving)
for rep in $(seq 1 "$reps"); do
  for arm in "${arms[@]}"; do run "$arm" "$rep"; done
done
bench=$("$bin/bench-plora" --jobs 8 --rank 8 --batch 1 --steps 5 --targets q,v)
bench2=$("$bin/bench-plora" --jobs 8 --rank 8 --batch 1 --steps 5 --targets q,v)

# ---- table ----
{
  echo "PLoRA on this CPU: space16 (16 LoRA jobs on kjv7m, $(jq '.defaults.steps' "$space") steps of 1 x 256 tokens each), memory limit $mem for the planned arms"
  echo
  printf '%-11s %-16s %-14s %-16s %-22s %-12s\n' arm makespan_s tokens_per_s predicted_s peak_rss_MB max_jobs
  for arm in "${arms[@]}"; do
    ms="" tp="" rss=""
    for rep in $(seq 1 "$reps"); do
      s="$out/run-$arm-r$rep/summary.json"
      ms="$ms$(jq -r '.makespan_s | . * 10 | round / 10' "$s") "
      tp="$tp$(jq -r '.tokens_per_s | round' "$s") "
      rss="$rss$(jq -r '.peak_rss_bytes / 1e6 | round' "$s") "
    done
    case $arm in
      sequential) pred=$(jq -r '.methods.sequential.makespan_s | round' "$out/plan-plan.json"); mj=1 ;;
      packed) pred="-"; mj=16 ;;
      halving) pred=$(jq -r '.methods.plan.makespan_s | round' "$out/plan-halving.json"); mj=$(jq -r '.methods.plan.max_concurrent_jobs' "$out/plan-halving.json") ;;
      *) pred=$(jq -r --arg m "$arm" '.methods[$m].makespan_s | round' "$out/plan-plan.json"); mj=$(jq -r --arg m "$arm" '.methods[$m].max_concurrent_jobs' "$out/plan-plan.json") ;;
    esac
    printf '%-11s %-16s %-14s %-16s %-22s %-12s\n' "$arm" "$ms" "$tp" "$pred" "$rss" "$mj"
  done
  echo
  echo "final validation loss per configuration (identical across the five full-length arms and both runs: $(
    jq -s '[.[] | [.jobs | sort_by(.name)[] | .val_loss]] | (map(tostring) | unique | length) == 1' \
      "$out"/run-{sequential,packed,max-pack,lpt,plan}-r*/summary.json))"
  jq -r '.jobs[] | "  \(.name) rank \(.rank) lr \(.lr): \(.val_loss * 10000 | round / 10000)"' "$out/run-sequential-r1/summary.json"
  echo "  best: $(jq -r .best_job "$out/run-sequential-r1/summary.json") (sequential), $(jq -r .best_job "$out/run-plan-r1/summary.json") (plan), $(jq -r .best_job "$out/run-halving-r1/summary.json") (halving; stopped early: $(jq '[.jobs[] | select(.stopped_early)] | length' "$out/run-halving-r1/summary.json") of 16)"
  echo
  echo "planner with the modelled A100 step times (Llama-3-8B, data/plora/gpu_table_a100.json) under the same memory model and limit (4 jobs at once):"
  for w in 1 3; do
    jq -r --arg w "$w" '"  \($w) worker(s): " + ([.methods | to_entries[] | "\(.key) \(.value.makespan_s * 10 | round / 10) s"] | join(", "))' "$out/gpu-w$w.json"
  done
  echo
  echo "where packing gains on this CPU (bench-plora, 8 rank-8 q/v jobs of 1 x 256 tokens; two runs):"
  for b in "$bench" "$bench2"; do
    jq -r '"  single \(.single.tokens_per_s | round) tok/s, packed \(.packed.tokens_per_s | round), wide (one job of batch 8) \(.wide.tokens_per_s | round): packed/wide \(.packed_over_wide * 1000 | round / 1000), packed/sequential \(.packed_over_sequential * 1000 | round / 1000)"' <<<"$b"
  done
} | tee "$out/table.txt"
