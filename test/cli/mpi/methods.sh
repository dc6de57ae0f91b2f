#!/usr/bin/env bash
# Every method trained through lm-train's Trainer gives one process's bits on 2 ranks (4 micro-
# batches, 6 steps): the optimizers (AdamW, Adam-mini, GaLore, FOAM, POET-X with merges, SGD),
# sparse training (static, SET, RigL with topology updates and the paired control, SMET), mixtures of experts
# (a sigmoid router with the bias update and a capacity limit; LatentMoE), LayerSkip's early-exit
# loss and a recurrent-depth model; then LoRA fine-tuning (with dropout) of a base trained here,
# whose adapter tensors must match byte for byte.  Usage: methods.sh LM_TRAIN
source "$(dirname "$0")/common.sh"
run=" --batch 2 --accum 4 --steps 6 --log-every 1 --eval-every 3"
check() {
  local name=$1; shift
  "$lm" $data $shape $run "$@" -o "$name-1.h5" --log "$name-1.jsonl" || fail "$name: one process failed"
  mpi 2 "$lm" $data $shape $run "$@" -o "$name-2.h5" --log "$name-2.jsonl" || fail "$name: 2 ranks failed"
  local a b
  a=$(state "$name-1.h5") b=$(state "$name-2.h5")
  [ ${#a} = 64 ] && [ "$a" = "$b" ] || fail "$name: 2 ranks end in state $b, one process in $a"
  [ "$(jq -c 'select(.step or .event) | del(.tokens_per_s, .mfu)' "$name-1.jsonl")" = "$(jq -c 'select(.step or .event) | del(.tokens_per_s, .mfu)' "$name-2.jsonl")" ] ||
    fail "$name: the logs differ"
  echo "$name: $a"
}
check adamw --n-layers 2
check adam-mini --n-layers 2 --optimizer adam-mini
check galore --n-layers 2 --optimizer galore --galore-rank 4 --galore-gap 3
check foam --n-layers 2 --optimizer foam --foam-level 1
check poet-x --n-layers 2 --optimizer poet-x --poet-block 8 --poet-merge-every 2
check sgd --n-layers 2 --optimizer sgd --lr 0.05
check static --n-layers 2 --sparse static --density 0.5
check set --n-layers 2 --sparse set --density 0.5 --update-every 2
check rigl --n-layers 2 --sparse rigl --density 0.5 --update-every 2 --probe-control --probe-steps 1
check smet --n-layers 2 --sparse smet --density 0.5 --update-every 2
check moe --n-layers 2 --moe standard --experts 4 --top-k 2 --d-expert 32 --router sigmoid --router-bias-update 0.001 --moe-capacity-factor 1.25
check latent-moe --n-layers 2 --moe latent --experts 4 --top-k 2 --latent 16 --d-expert 32
check exit-loss --n-layers 2 --exit-loss 0.5 --exit-every 1
check recurrent-depth --arch recurrent-depth --prelude 1 --core 1 --coda 1 --mean-recurrence 3 --backprop-depth 2
jq -se 'map(select(.event == "topology")) | length == 2' rigl-2.jsonl > /dev/null || fail "rigl: no topology update was logged"
jq -se 'map(select(.moe) | .moe.layers[0].load | length) | length == 6 and all(. == 4)' moe-2.jsonl > /dev/null || fail "moe: no router statistics were logged"
# LoRA: the adapter's tensors (the safetensors file after its JSON header) and the step records
"$lm" $data $shape --n-layers 2 --batch 2 --steps 2 -o lora-base.h5 --log /dev/null || fail "lora: the base failed"
lora="$corpus --column 2 --doc-column 1 --threads 1 -q --init lora-base.h5 --lora-rank 4 --lora-targets q,v,down --lora-dropout 0.1"
lora="$lora --seq-len 32 --batch 2 --accum 4 --steps 6 --log-every 1 --eval-every 3"
"$lm" $lora -o lora-1 --log lora-1.jsonl || fail "lora: one process failed"
mpi 2 "$lm" $lora -o lora-2 --log lora-2.jsonl || fail "lora: 2 ranks failed"
tensors() { local f=$1/adapter_model.safetensors n; n=$(od -An -t u8 -N8 "$f" | tr -d ' '); tail -c +$((9 + n)) "$f" | sha256sum | cut -c1-64; }
a=$(tensors lora-1) b=$(tensors lora-2)
[ "$a" = "$b" ] || fail "lora: 2 ranks give adapter tensors $b, one process $a"
[ "$(jq -c 'select(.step) | del(.tokens_per_s, .step_seconds)' lora-1.jsonl)" = "$(jq -c 'select(.step) | del(.tokens_per_s, .step_seconds)' lora-2.jsonl)" ] || fail "lora: the logs differ"
jq -se 'map(select(.step)) | length >= 6' lora-2.jsonl > /dev/null || fail "lora: fewer than 6 step records"
jq -se '.[-1].summary.ranks == 2' lora-2.jsonl > /dev/null || fail "lora: the summary does not name 2 ranks"
echo "lora: $a"
