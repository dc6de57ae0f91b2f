#!/usr/bin/env bash
# Ranks started with different configurations are refused before any step, the rank named, in one
# error line from rank 0 and exit 2, no checkpoint written: another learning rate, another split of
# the corpus (the same file, --val-every 7: another training stream), and --accum below the rank
# count.  A failure on rank 1 alone (its corpus path missing) ends the job with exit 1, rank 1
# named in one error line.  Usage: mismatch.sh LM_TRAIN
source "$(dirname "$0")/common.sh"
expect() {  # expect NAME PATTERN -- mpirun arguments
  local name=$1 pattern=$2; shift 3
  OMPI_ALLOW_RUN_AS_ROOT=1 mpirun --oversubscribe --bind-to none "$@" 2> "$name.err"
  local rc=$?
  [ $rc = 2 ] || { cat "$name.err"; fail "$name: exit $rc, not 2"; }
  [ "$(grep -c 'lm-train: error:' "$name.err")" = 1 ] || { cat "$name.err"; fail "$name: not exactly one error line"; }
  grep 'lm-train: error:' "$name.err" | grep -qF -- "$pattern" || { cat "$name.err"; fail "$name: the error does not say '$pattern'"; }
  [ ! -e "$name.h5" ] || fail "$name: a checkpoint was written"
}
expect lr "rank 1 of 2 was started with other training options (flags) than rank 0" -- \
  -np 1 "$lm" $tiny --steps 4 -o lr.h5 : -np 1 "$lm" $tiny --steps 4 --lr 2e-3 -o lr.h5
expect split "rank 2 of 3 was started with other corpus or split (the training stream) than rank 0" -- \
  -np 2 "$lm" $tiny --steps 4 -o split.h5 : -np 1 "$lm" $tiny --steps 4 --val-every 7 -o split.h5
expect accum "--accum 1 gives each step 1 micro-batch for 2 ranks" -- -np 2 "$lm" $data $shape --n-layers 2 --batch 2 --accum 1 --steps 4 -o accum.h5
OMPI_ALLOW_RUN_AS_ROOT=1 mpirun --oversubscribe --bind-to none -np 1 "$lm" $tiny --steps 4 -o lost.h5 : \
  -np 1 "$lm" ${tiny/$corpus/missing.tsv} --steps 4 -o lost.h5 2> lost.err
rc=$?
[ $rc = 1 ] || { cat lost.err; fail "a corpus missing on rank 1: exit $rc, not 1"; }
[ "$(grep -c 'lm-train: error:' lost.err)" = 1 ] && grep 'lm-train: error:' lost.err | grep -q "rank 1: .*missing.tsv" ||
  { cat lost.err; fail "a corpus missing on rank 1: not one error line naming rank 1 and the file"; }
[ ! -e lost.h5 ] || fail "a corpus missing on rank 1: a checkpoint was written"
echo "refused: other flags, another corpus split, too few micro-batches; a rank's missing corpus ends the job"
