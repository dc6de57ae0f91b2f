#!/usr/bin/env bash
# Issue 31 (LatentMoE): LatentMoE against standard MoE on KJV at matched active FLOPs, and the dense
# model of the same active FFN weights.  Llama-style models of vocab 2048, d_model 256, 4 layers,
# 8/4 heads, every block's FFN:
#   dense     SwiGLU d_ff 512;
#   moe       8 experts of width 256, top-2 (softmax router, normalised), the same active FFN weights;
#   latent    LatentMoE: l = 64 (alpha = 4), 32 experts of width 256 at the latent width, top-8
#             (l-MoE_acc: the same expert FLOPs and the same total expert weights as moe), plus W_down/W_up;
# trained for $MOE_STEPS steps (default 500) of 16 x 128 tokens (5% warmup, cosine to 0.1x, lr 2e-3,
# AdamW 0.9/0.95, wd 0.1, load-balancing alpha 0.01), two seeds each, from the same data order.
# -> held-out loss (lm-eval on every held-out chapter) against training FLOPs and against
#    parameters (total and active), and latentmoe-cost's FFN weight bytes per decode step (f32, one
#    token) and all-to-all bytes per token and layer under expert parallelism (FP4 dispatch, BF16
#    combine) for each shape.  The paper's claim: better accuracy per FLOP and per
#    parameter for LatentMoE.
# Cost: about 15-20 CPU-minutes per run, 6 runs; REPRO_QUICK=1 gives a 40-step rehearsal (one seed),
# MOE_SEEDS2=0 skips the second seeds.  Runs go $MOE_JOBS at a time (default 2); results are kept in
# $MOE_OUT (default build/repro-moe) and a run already there is not run again.  $1 = bin directory.
set -euo pipefail
bin=${1:-build/bin}
corpus=data/corpus/kjv.tsv.gz
split=(--column 2 --doc-column 1 --val-every 20)
out=${MOE_OUT:-build/repro-moe}
steps=${MOE_STEPS:-500}
seeds2=1
if [ "${REPRO_QUICK:-0}" = 1 ]; then steps=${MOE_STEPS:-40} seeds2=0; fi
seeds2=${MOE_SEEDS2:-$seeds2}
jobs=${MOE_JOBS:-2}
threads=$(( $(nproc) / jobs ))
[ "$threads" -ge 1 ] || threads=1
mkdir -p "$out"
warmup=$(( steps / 20 ))
shape=(--d-model 256 --n-layers 4 --n-heads 8 --n-kv-heads 4 --n-ctx 128)

[ -f "$out/t.model" ] || "$bin/tokenizer-train" "$corpus" --column 2 --chunk-lines 4 --vocab-size 2048 -o "$out/t.model" -q

# name | lm-train shape flags | latentmoe-cost flags (the same FFN shape)
arms() {
  cat <<'ARMS'
dense|--d-ff 512|
moe|--d-ff 512 --moe standard --experts 8 --top-k 2 --d-expert 256|--experts 8 --top-k 2 --m 256 --variants standard
latent|--d-ff 512 --moe latent --experts 32 --top-k 8 --d-expert 256 --latent 64|--experts 8 --top-k 2 --m 256 --latent 64 --variants acc
ARMS
}
field() { arms | awk -F'|' -v n="$1" -v f="$2" '$1 == n { print $f }'; }

run_arm() {
  local name=$1 seed=$2 tag="$1-s$2"
  [ -f "$out/$tag.eval.json" ] && return 0
  rm -f "$out/$tag.h5" "$out/$tag.best.h5"
  # shellcheck disable=SC2046
  if "$bin/lm-train" "$corpus" "${split[@]}" --tokenizer "$out/t.model" "${shape[@]}" $(field "$name" 2) --seed "$seed" \
      --batch 16 --seq-len 128 --steps "$steps" --warmup "$warmup" --lr 2e-3 --eval-every 50 --eval-tokens 32768 \
      --threads "$threads" -o "$out/$tag.h5" --log "$out/$tag.jsonl" -q 2>"$out/$tag.err"; then
    "$bin/lm-eval" "$out/$tag.h5" "$corpus" "${split[@]}" --split val --threads "$threads" -q >"$out/$tag.eval.json.tmp" &&
      mv "$out/$tag.eval.json.tmp" "$out/$tag.eval.json"
  else
    echo "repro moe: $tag failed: $(tail -1 "$out/$tag.err")" >&2
  fi
}
export -f run_arm field arms
export bin corpus out steps warmup threads
split_str="${split[*]}" shape_str="${shape[*]}"
export split_str shape_str
{
  for n in dense moe latent; do echo "$n 1"; done
  if [ "$seeds2" = 1 ]; then for n in dense moe latent; do echo "$n 2"; done; fi
} | xargs -P "$jobs" -L 1 bash -c 'split=($split_str); shape=($shape_str); run_arm "$0" "$1"'

# ---- the table ----
echo "LatentMoE vs standard MoE: vocab 2048, d 256, 4 layers, 8/4 heads, $steps steps of 16 x 128 tokens"
printf '%-8s %-4s %-9s %-8s %-12s %-12s %-12s %-16s %s\n' arm seed val_loss val_ppl total_params active_params train_tflop ffn_decode_bytes a2a_bytes_per_token_layer
for s in 1 2; do
  for n in dense moe latent; do
    tag="$n-s$s"
    [ -f "$out/$tag.eval.json" ] || continue
    summ=$(grep '"summary"' "$out/$tag.jsonl" | tail -1)
    meta=$(head -1 "$out/$tag.jsonl")
    # training FLOPs: the log's model FLOP per token (6 x active matrix weights + attention) x tokens
    fl=$(jq -n --argjson s "$summ" '$s.summary.model_gflop_per_token * $s.summary.tokens / 1e3 | . * 100 | round / 100')
    act=$(jq -n --argjson s "$summ" '$s.summary.n_params')
    cost=$(( 4 * 3 * 256 * 512 * 4 )) a2a="-"  # dense: every layer's FFN weights, f32
    if [ -n "$(field "$n" 3)" ]; then
      # shellcheck disable=SC2046
      c=$("$bin/latentmoe-cost" --d 256 --layers 4 --shared 0 --decode-batch 1 --tokens 1 --ep 1 --weight-bytes 4 --cost-matrices 0 $(field "$n" 3))
      cost=$(jq '.rows[0].decode_weight_bytes | round' <<<"$c")
      a2a=$(jq '.rows[0].comm_bytes | round' <<<"$c")  # per layer and token: (dispatch + combine) K' w bytes
    fi
    printf '%-8s %-4s %-9.4f %-8.2f %-12s %-12s %-12s %-16s %s\n' "$n" "$s" "$(jq .loss "$out/$tag.eval.json")" \
      "$(jq .perplexity "$out/$tag.eval.json")" "$act" "$(jq '.meta.n_active_params // .meta.n_params // "-"' <<<"$meta")" "$fl" "$cost" "$a2a"
  done
done
echo "command (one arm): $bin/lm-train $corpus ${split[*]} --tokenizer t.model ${shape[*]} <arm flags> --seed S --batch 16 --seq-len 128 --steps $steps --warmup $warmup --lr 2e-3 --eval-every 50 --eval-tokens 32768 -o arm.h5 --log arm.jsonl"
