#!/usr/bin/env bash
# 1, 2 and 3 ranks (and mpirun -np 1) end with bitwise the same weights and optimizer state, and log
# the same losses and gradient norms step by step; the v1 (reference) kernels likewise; only rank 0
# writes files (-o, the best checkpoint, --export, the log); a gradient of several chunks with
# --accum 5 (not a multiple of the ranks) on 2 ranks.  A control
# shows the comparison can fail: the same global batch in other micro-batches (3 of 4 windows) has
# other bits.  Usage: identical.sh LM_TRAIN
source "$(dirname "$0")/common.sh"
steps() { jq -c 'select(.step) | [.step, .train_loss, .grad_norm, .val_loss]' "$1"; }
"$lm" $tiny --steps 8 -o one.h5 --log one.jsonl || fail "one process failed"
mpi 1 "$lm" $tiny --steps 8 -o np1.h5 --log np1.jsonl || fail "mpirun -np 1 failed"
mpi 2 "$lm" $tiny --steps 8 -o two.h5 --log two.jsonl || fail "2 ranks failed"
mkdir -p d3  # rank 0 alone writes: the 3-rank job's folder holds its files and no other
(cd d3 && mpi 3 "$lm" $tiny --steps 8 -o three.h5 --log three.jsonl --export three-export.h5) || fail "3 ranks failed"
[ "$(ls -A d3 | tr '\n' ' ')" = "three-export.h5 three.best.h5 three.h5 three.jsonl " ] || fail "the 3-rank job wrote $(ls -A d3 | tr '\n' ' ')"
mv d3/three.h5 d3/three.jsonl .
want=$(state one.h5)
[ ${#want} = 64 ] || fail "no state hash in one.h5"
for f in np1 two three; do
  [ "$(state $f.h5)" = "$want" ] || fail "$f.h5: state $(state $f.h5) differs from one process's $want"
  [ "$(steps $f.jsonl)" = "$(steps one.jsonl)" ] || fail "$f.jsonl: the logged steps differ from one process's"
done
[ "$(jq -s '.[-1].summary.ranks' three.jsonl)" = 3 ] || fail "the summary does not say 3 ranks"
jq -es '.[-1].summary | .reduce_share > 0 and .reduce_share < 1 and .reduce_bytes_sent_per_step > 0' three.jsonl > /dev/null ||
  fail "the summary lacks the reduction's share and bytes"
[ "$(jq -s '.[0].meta.ranks' two.jsonl)" = 2 ] || fail "the meta line does not say 2 ranks"
# a gradient of 2 chunks (390k floats) in 5 micro-batches on 2 ranks: the chain wraps around with
# several messages in flight
wide="$data --d-model 128 --n-heads 4 --n-kv-heads 2 --d-ff 256 --n-ctx 32 --n-layers 2 --batch 1 --accum 5 --steps 3 --eval-every 0"
"$lm" $wide -o wide1.h5 || fail "the wide model, one process, failed"
mpi 2 "$lm" $wide -o wide2.h5 || fail "the wide model, 2 ranks, failed"
[ "$(state wide1.h5)" = "$(state wide2.h5)" ] || fail "the wide model (2 chunks, accum 5): 2 ranks differ from one process"
other=${tiny/--batch 2 --accum 6/--batch 4 --accum 3}
"$lm" $other --steps 8 -o other.h5 || fail "the control failed"
[ "$(state other.h5)" != "$want" ] || fail "the control (3 micro-batches of 4) has the same bits: the comparison proves nothing"
"$lm" $tiny --kernels reference --steps 3 -o ref1.h5 || fail "reference kernels, one process, failed"
mpi 2 "$lm" $tiny --kernels reference --steps 3 -o ref2.h5 || fail "reference kernels, 2 ranks, failed"
[ "$(state ref1.h5)" = "$(state ref2.h5)" ] || fail "reference kernels: 2 ranks differ from one process"
echo "1, 2, 3 ranks: $want"
