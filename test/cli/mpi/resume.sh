#!/usr/bin/env bash
# A run stopped on 2 ranks (--stop-at 3) and resumed on 3 ranks, then on 1, ends bitwise where one
# uninterrupted process does: the rank count is not part of the arithmetic.  Usage: resume.sh LM_TRAIN
source "$(dirname "$0")/common.sh"
"$lm" $tiny --steps 8 -o straight.h5 --log straight.jsonl || fail "the uninterrupted run failed"
mpi 2 "$lm" $tiny --steps 8 --stop-at 3 -o run.h5 --log run.jsonl || fail "2 ranks failed"
mpi 3 "$lm" $tiny --steps 8 --stop-at 6 --resume -o run.h5 --log run.jsonl || fail "the resume on 3 ranks failed"
"$lm" $tiny --steps 8 --resume -o run.h5 --log run.jsonl || fail "the resume on 1 rank failed"
[ "$(state run.h5)" = "$(state straight.h5)" ] || fail "resumed on 3 then 1 ranks: $(state run.h5), uninterrupted: $(state straight.h5)"
[ "$(jq -s '[.[] | select(.meta) | .meta.ranks // 1]' run.jsonl | jq -c .)" = "[2,3,1]" ] || fail "the log does not record 2, 3, 1 ranks"
echo "2 -> 3 -> 1 ranks: $(state run.h5)"
