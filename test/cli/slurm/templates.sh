#!/usr/bin/env bash
# The job-array templates of scripts/slurm (issue 42), each run by run-local.sh (the variables
# Slurm sets, tasks one after another, then the merge), end with one process's outputs:
#   sweep      the table (every column but the seconds) of lm-sweep on the whole grid (11 cells);
#   bootstrap  infolaw-fit --bootstrap 20 in 3 tasks: the fit's JSON (meta and seconds aside);
#   plora      a 2-worker schedule of 3 LoRA jobs: every adapter byte for byte, every job's record
#              (timings aside) and the best job;
#   index      bimetric-index --shards 4 as 4 tasks: the merged graph bit for bit.
# With ICMLKIT_RUNNER=slurm (scripts/slurm/slurm_check.sh) the templates go to a real Slurm instead.
# Usage: templates.sh BIN_DIR SCRIPTS_SLURM FIXTURES DIGITS
set -u
bin=$1 slurm=$2 fx=$3 digits=$4
export ICMLKIT_BIN=$bin
fail() { echo "$*"; exit 1; }
# ICMLKIT_RUNNER=slurm (slurm-check): submit.sh to a running Slurm, and wait for the merge job.
run() {
  if [ "${ICMLKIT_RUNNER:-local}" != slurm ]; then
    # one CPU per task (not an allocation's count): the Vamana graphs compared are one thread's
    SLURM_CPUS_PER_TASK=1 bash "$slurm/run-local.sh" "$1" > "$1.out" 2>&1 || { cat "$1.out"; fail "the $1 template failed"; }
    return
  fi
  local line merge state
  # one CPU per task: a Vamana graph built on several threads depends on their schedule
  line=$(bash "$slurm/submit.sh" "$1" --chdir="$PWD" --cpus-per-task=1) || fail "submit.sh $1 failed: $line"
  echo "$line"
  merge=$(echo "$line" | sed -n 's/.*merge job \([0-9]*\).*/\1/p')
  for _ in $(seq 1 900); do
    state=$(scontrol show job "$merge" -o | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case $state in
      COMPLETED) echo "$1: merge job $merge completed"; return ;;
      FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) cat slurm-*.out 2> /dev/null | tail -20; fail "$1: merge job $merge ended $state" ;;
    esac
    scontrol show job "$merge" -o | grep -q 'Reason=DependencyNeverSatisfied' && { cat slurm-*.out | tail -20; fail "$1: an array task failed"; }
    sleep 1
  done
  fail "$1: merge job $merge did not finish in 15 minutes"
}

# sweep: one cell per task, the table by --collect
export GRID=$fx/sweep/grid-tiny.json OUT=$PWD/sweep-array
run sweep
"$bin/lm-sweep" "$GRID" -o sweep-one -t 1 -q || fail "lm-sweep in one process failed"
[ "$(tail -n +2 sweep-array/table.csv | wc -l)" = 11 ] || fail "the sweep's table does not have 11 rows"
[ "$(cut -d, -f1-23,25 sweep-one/table.csv)" = "$(cut -d, -f1-23,25 sweep-array/table.csv)" ] || fail "the sweep's tables differ"

# bootstrap: 20 resamples in 3 tasks
export TABLE=$fx/../../../data/scaling/chinchilla_synthetic.csv K=20 TASKS=3 OUT=$PWD/boot
export FIT_ARGS="--grid a=0:10:5 --grid b=0:10:5 --grid e=0:1:1 --grid alpha=0.5 --grid beta=0.5"
run bootstrap
# shellcheck disable=SC2086
"$bin/infolaw-fit" "$TABLE" $FIT_ARGS --bootstrap 20 -q -o boot-one.json || fail "infolaw-fit in one process failed"
[ "$(ls boot/bootstrap-part-*.json | wc -l)" = 3 ] || fail "not 3 bootstrap parts"
jq -e '.bootstrap.refits_ok == 20' boot/fit.json > /dev/null || fail "the merged fit does not hold 20 resamples"
[ "$(jq -S 'del(.meta, .seconds)' boot-one.json)" = "$(jq -S 'del(.meta, .seconds)' boot/fit.json)" ] || fail "the merged bootstrap differs"

# plora: a base trained here, 3 jobs on 2 workers
"$bin/lm-train" "$fx/kjv_genesis_1-20.tsv" --column 2 --doc-column 1 --val-every 5 --vocab-size 512 --d-model 32 --n-layers 2 \
  --n-heads 4 --n-kv-heads 2 --d-ff 88 --n-ctx 64 --batch 4 --lr 3e-3 --warmup 10 --threads 1 --steps 30 -o base.h5 -q > /dev/null ||
  fail "the base model failed"
cat > space.json << JSON
{"seq_len": 64, "data": {"path": "$fx/kjv_genesis_1-20.tsv", "column": 2, "doc_column": 1, "val_every": 5},
 "defaults": {"steps": 6, "warmup": 2, "alpha": 8},
 "jobs": [{"rank": 2, "targets": ["q", "v"], "lr": 1e-2}, {"rank": 4, "targets": ["k", "o"], "batch": 2, "lr": 3e-3, "dropout": 0.1},
          {"rank": 8, "targets": ["q", "k", "v", "o"], "lr": 5e-3}]}
JSON
echo '{"workers": 2, "schedule": [{"worker": 0, "groups": [{"jobs": ["j00", "j01"]}]}, {"worker": 1, "groups": [{"jobs": ["j02"]}]}]}' > sch.json
export SPACE=$PWD/space.json MODEL=$PWD/base.h5 SCHEDULE=$PWD/sch.json OUT=$PWD/plora-array
run plora
"$bin/plora-train" space.json --model base.h5 --schedule sch.json -t 1 -q -o plora-one || fail "plora-train in one process failed"
for j in j00 j01 j02; do
  cmp -s "plora-one/$j/adapter_model.safetensors" "plora-array/$j/adapter_model.safetensors" || fail "adapter $j differs"
done
records() { jq -cS '[.jobs[] | del(.start_s, .end_s, .busy_s)], .best_job, .tokens' "$1"; }
[ "$(records plora-one/summary.json)" = "$(records plora-array/summary.json)" ] || fail "the merged plora summary differs"

# index: 4 shards, one per task
export ITEMS=$digits INDEX_ARGS="--no-header --label-last --holdout 200 --proxy same -R 16 -L 32" SHARDS=4 OUT=$PWD/idx
run index
# shellcheck disable=SC2086
"$bin/bimetric-index" "$ITEMS" $INDEX_ARGS --shards 4 -t 1 -q -o idx-one.h5 > /dev/null || fail "the sharded build in one process failed"
graph() { h5dump -d /index/neighbors "$1" | tail -n +2; }
[ "$(graph idx-one.h5)" = "$(graph idx/index.h5)" ] || fail "the merged index differs"
jq -se 'length == 4 and all(.peak_rss_bytes > 0)' idx/part-*.json > /dev/null || fail "a part does not report its peak memory"

# a template that is not one
bash "$slurm/array_size.sh" nope 2> err.txt && fail "an unknown template was accepted"
grep -q "unknown template 'nope'" err.txt || fail "the unknown template's error: $(cat err.txt)"
echo "sweep, bootstrap, plora and index templates: one process's outputs"
