#!/usr/bin/env bash
# Rank 1 killed (SIGKILL) while the job trains: mpirun ends the whole job with a non-zero status and
# names rank 1; the last checkpoint is intact (its state checksum verifies on resume), and resuming it
# on one process ends bitwise where an uninterrupted run does.  Usage: dead_rank.sh LM_TRAIN
source "$(dirname "$0")/common.sh"
run=dead-$$  # a name no other case's lm-train runs under (pgrep below)
mpi 2 "$lm" $tiny --steps 60 --checkpoint-every 5 -o $run.h5 --log run.jsonl 2> err.txt &
job=$!
for _ in $(seq 1 600); do [ -f $run.h5 ] && break; sleep 0.02; done
[ -f $run.h5 ] || fail "no checkpoint appeared"
victim=""
for p in $(pgrep -f "lm-train .*$run\.h5"); do
  tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && victim=$p
done
[ -n "$victim" ] || fail "rank 1's process was not found"
kill -KILL "$victim"
wait $job
rc=$?
[ $rc != 0 ] || fail "the job exited 0 after rank 1 died"
grep -q "rank 1" err.txt || { cat err.txt; fail "the job's error output does not name rank 1"; }
pgrep -f "lm-train .*$run\.h5" > /dev/null && fail "a rank outlived the job"
ls $run.h5.* .$run.h5* 2> /dev/null && fail "a temporary checkpoint was left"
done_steps=$(jq -s '[.[] | select(.step) | .step] | max' run.jsonl)
[ "$done_steps" -lt 60 ] || fail "the job finished before rank 1 was killed"
"$lm" $tiny --steps 60 --resume -o $run.h5 --log run.jsonl || fail "the checkpoint left by the failed job does not resume"
"$lm" $tiny --steps 60 -o straight.h5 --log straight.jsonl || fail "the uninterrupted run failed"
[ "$(state $run.h5)" = "$(state straight.h5)" ] || fail "resumed after the failure: $(state $run.h5), uninterrupted: $(state straight.h5)"
echo "killed rank 1 after step $done_steps (exit $rc); resumed to the uninterrupted state"
