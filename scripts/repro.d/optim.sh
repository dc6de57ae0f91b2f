#!/usr/bin/env bash
# Issue 29 (FOAM / POET-X): the papers' small-model columns in miniature.  One Llama-style model
# (vocab 4096, d_model 256, 6 layers, 8/4 heads, d_ff 768: POET-X blocks of 64 and 128 divide every
# matrix) trained on KJV chapters (every 20th held out) for 1.5M tokens per arm (batch 16 x 256,
# 10% warmup, cosine to 0.1x), from the same initial weights and data order:
#   AdamW at lr 5e-4 / 1e-3 / 2e-3 (betas 0.9/0.95, decay 0.1: the trainer's defaults),
#   Adam-mini (lr 1e-3, the AdamW setting), GaLore (its 60M recipe: lr 1e-2, scale 0.25, gap 200,
#   rank d/4 = 64, betas 0.9/0.999, no decay), FOAM at l = 1, 2, 4 (its scripts: lr 1e-2, scale
#   0.25, betas 0.9/0.999 since the scripts' beta2 is never passed), FOAM's recipe at l = 0 (no
#   folding: Adam with the matrices' step scaled 0.25 and the embedding and head at 1e-2, the control
#   that separates folding from the recipe), POET-X at b = 64, 128 (its
#   recipe: lr 1e-3, poet_lr 5e-4, poet_scale 0.5, merge every 200, clip 0.1 with the ramp, eps
#   1e-6, no decay) -> held-out loss and perplexity (lm-eval on all held-out chapters), optimizer
#   state, trained and frozen bytes (from the buffers), tokens/s, and the validation curves
#   (gnuplot, $OPTIM_PLOT, default optim.png in the work directory).  Then a second seed (new
#   initial weights and data order) for the closest pairs: FOAM l = 2 and the best AdamW, and the
#   arm nearest the best AdamW.  Targets checked: FOAM l = 2 within 1% of AdamW's held-out loss;
#   FOAM's state 2mn/2^l floats on folded matrices (the whole-model saving the formula predicts);
#   POET-X's memory per matrix as the paper's mn + 3/2 (m + n)(b - 1) floats: W0's mn frozen,
#   (m + n)(b - 1)/2 trained Q entries and twice that in Adam moments (each printed apart), against
#   AdamW's 3mn (weights and two moments).
# Cost: an arm takes about 15 CPU-minutes on this machine (AdamW-like) and 25 (POET-X): about 4
# CPU-hours for the 14 runs, 2 hours on 2 cores; REPRO_QUICK=1 gives a 200k-token rehearsal,
# OPTIM_SEEDS2=0 skips the second seeds.
# Arms run $OPTIM_JOBS at a time (default 2), each on nproc / jobs threads; results are kept in
# $OPTIM_OUT (default build/repro-optim) and an arm already there is not run again.
# $1 = bin directory.  OPTIM_TOKENS=N: another budget (REPRO_QUICK=1: 200k tokens, one seed).
set -euo pipefail
bin=${1:-build/bin}
corpus=data/corpus/kjv.tsv.gz
split=(--column 2 --doc-column 1 --val-every 20)
out=${OPTIM_OUT:-build/repro-optim}
tokens=${OPTIM_TOKENS:-1500000}
seeds2=1
if [ "${REPRO_QUICK:-0}" = 1 ]; then tokens=${OPTIM_TOKENS:-200000} seeds2=0; fi
seeds2=${OPTIM_SEEDS2:-$seeds2}  # OPTIM_SEEDS2=0: no second seeds
jobs=${OPTIM_JOBS:-2}
threads=$(( $(nproc) / jobs ))
[ "$threads" -ge 1 ] || threads=1
plot=${OPTIM_PLOT:-$out/optim.png}
mkdir -p "$out"
steps=$(( tokens / (16 * 256) ))
warmup=$(( steps / 10 ))
t_start=$(date +%s)

[ -f "$out/t.model" ] || "$bin/tokenizer-train" "$corpus" --column 2 --chunk-lines 4 --vocab-size 4096 -o "$out/t.model" -q
init() {  # the initial weights of a seed
  [ -f "$out/init-s$1.h5" ] || "$bin/lm-init" --tokenizer "$out/t.model" --d-model 256 --n-layers 6 --n-heads 8 --n-kv-heads 4 \
    --d-ff 768 --n-ctx 256 --seed "$1" -o "$out/init-s$1.h5" -q
}

# name | lm-train flags (the recipe)
arms() {
  cat <<'EOF'
adamw-5e-4|--lr 5e-4
adamw-1e-3|--lr 1e-3
adamw-2e-3|--lr 2e-3
adam-mini|--optimizer adam-mini --lr 1e-3
galore|--optimizer galore --lr 1e-2 --galore-rank 64 --galore-gap 200 --galore-scale 0.25 --beta2 0.999 --weight-decay 0
foam-l0|--optimizer foam --foam-level 0 --foam-scale 0.25 --lr 1e-2 --beta2 0.999 --weight-decay 0
foam-l1|--optimizer foam --foam-level 1 --foam-scale 0.25 --lr 1e-2 --beta2 0.999 --weight-decay 0
foam-l2|--optimizer foam --foam-level 2 --foam-scale 0.25 --lr 1e-2 --beta2 0.999 --weight-decay 0
foam-l4|--optimizer foam --foam-level 4 --foam-scale 0.25 --lr 1e-2 --beta2 0.999 --weight-decay 0
poet-x-b64|--optimizer poet-x --poet-block 64 --lr 1e-3 --poet-lr 5e-4 --beta2 0.999 --adam-eps 1e-6 --weight-decay 0 --clip 0.1
poet-x-b128|--optimizer poet-x --poet-block 128 --lr 1e-3 --poet-lr 5e-4 --beta2 0.999 --adam-eps 1e-6 --weight-decay 0 --clip 0.1
EOF
}
flags_of() { arms | awk -F'|' -v n="$1" '$1 == n { print $2 }'; }

# One arm at one seed: train (log kept), then lm-eval on every held-out chapter.
run_arm() {
  local name=$1 seed=$2 tag="$1-s$2"
  [ -f "$out/$tag.eval.json" ] && return 0
  rm -f "$out/$tag.h5" "$out/$tag.best.h5"
  # shellcheck disable=SC2046
  if "$bin/lm-train" "$corpus" "${split[@]}" --init "$out/init-s$seed.h5" --seed "$seed" --batch 16 --seq-len 256 \
      --steps "$steps" --warmup "$warmup" --eval-every 50 --eval-tokens 32768 --threads "$threads" $(flags_of "$name") \
      -o "$out/$tag.h5" --log "$out/$tag.jsonl" -q 2>"$out/$tag.err"; then
    "$bin/lm-eval" "$out/$tag.h5" "$corpus" "${split[@]}" --split val --threads "$threads" -q >"$out/$tag.eval.json.tmp" &&
      mv "$out/$tag.eval.json.tmp" "$out/$tag.eval.json"
  else
    echo "repro optim: $tag failed: $(tail -1 "$out/$tag.err")" >&2
  fi
}
export -f run_arm flags_of arms
export bin corpus out steps warmup threads
split_str="${split[*]}"
export split_str

queue() {  # run "name seed" lines, $jobs at a time
  xargs -P "$jobs" -L 1 bash -c 'split=($split_str); run_arm "$0" "$1"'
}
val() { [ -f "$out/$1-s$2.eval.json" ] && jq .loss "$out/$1-s$2.eval.json" || echo null; }
# The AdamW sweep first, then the target pair's second seed early (FOAM l = 2 and the best AdamW),
# POET-X, the other arms, and last the second seed of the arm nearest the best AdamW.
init 1
printf '%s 1\n' adamw-5e-4 adamw-1e-3 adamw-2e-3 | queue
best_adamw=$(for n in adamw-5e-4 adamw-1e-3 adamw-2e-3; do echo "$n $(val "$n" 1)"; done | grep -v null | sort -k2 -g | head -1 | cut -d' ' -f1)
second=()
if [ "$seeds2" = 1 ] && [ -n "$best_adamw" ]; then init 2; second=("$best_adamw 2" "foam-l2 2"); fi
{
  echo "foam-l2 1"
  echo "poet-x-b64 1"
  [ ${#second[@]} -gt 0 ] && printf '%s\n' "${second[@]}"
  for n in poet-x-b128 adam-mini galore foam-l1 foam-l4 foam-l0; do echo "$n 1"; done
} | queue
nearest=$(for n in $(arms | cut -d'|' -f1 | grep -v '^adamw'); do
  v=$(val "$n" 1); [ "$v" = null ] && continue
  echo "$n $(jq -n --argjson a "$v" --argjson b "$(val "$best_adamw" 1)" '($a - $b) | fabs')"; done | sort -k2 -g | head -1 | cut -d' ' -f1)
if [ "$seeds2" = 1 ] && [ -n "$nearest" ]; then echo "$nearest 2" | queue; fi
t_end=$(date +%s)

# ---- the table ----
row() {  # name seed
  local tag="$1-s$2" s
  [ -f "$out/$tag.eval.json" ] || { printf '%-13s %-4s %s\n' "$1" "$2" "failed or not run"; return; }
  s=$(grep '"summary"' "$out/$tag.jsonl" | tail -1)
  printf '%-13s %-4s %-9.4f %-9.2f %-12s %-12s %-12s %-9.0f %s\n' "$1" "$2" "$(jq .loss "$out/$tag.eval.json")" \
    "$(jq .perplexity "$out/$tag.eval.json")" "$(jq .summary.optimizer_state_bytes <<<"$s")" "$(jq .summary.trainable_bytes <<<"$s")" \
    "$(jq .summary.frozen_bytes <<<"$s")" "$(jq .summary.tokens_per_s <<<"$s")" "$(jq '.summary.seconds / 60 | . * 10 | round / 10' <<<"$s")"
}
echo "FOAM / POET-X in miniature: vocab 4096, d 256, 6 layers, 8/4 heads, d_ff 768, $tokens KJV tokens per arm ($steps steps of 16 x 256)"
printf '%-13s %-4s %-9s %-9s %-12s %-12s %-12s %-9s %s\n' arm seed val_loss val_ppl state_bytes train_bytes frozen_bytes tok/s minutes
for n in $(arms | cut -d'|' -f1); do row "$n" 1; done
for f in "$out"/*-s2.eval.json; do [ -e "$f" ] || continue; n=$(basename "$f" -s2.eval.json); row "$n" 2; done
a1=$(val "$best_adamw" 1) f1=$(val foam-l2 1)
if [ "$a1" != null ] && [ "$f1" != null ]; then
  echo "best AdamW: $best_adamw; FOAM l=2 vs it: $(jq -n --argjson a "$a1" --argjson f "$f1" '(($f - $a) / $a * 1e4 | round) / 100')% (seed 1, target within 1%)"
  a2=$(val "$best_adamw" 2) f2=$(val foam-l2 2)
  [ "$a2" != null ] && [ "$f2" != null ] &&
    echo "                 seed 2: $(jq -n --argjson a "$a2" --argjson f "$f2" '(($f - $a) / $a * 1e4 | round) / 100')%"
fi
# FOAM's state from its formula: 2 m ceil(n / 2^l) on folded matrices, Adam's 2 x size elsewhere;
# POET-X's trained entries (m + n)(b - 1)/2 per matrix, two moments each, W0 frozen.
other=$(( 4096 * 256 * 2 + 256 * 13 ))  # embedding, head, norms
for l in 1 2 4; do
  c256=$(( (256 + (1 << l) - 1) >> l )) c768=$(( (768 + (1 << l) - 1) >> l ))
  want=$(( 4 * (2 * other + 6 * 2 * (256 * c256 * 2 + 128 * c256 * 2 + 768 * c256 * 2 + 256 * c768)) ))
  got=$(grep '"summary"' "$out/foam-l$l-s1.jsonl" 2>/dev/null | jq .summary.optimizer_state_bytes || echo null)
  echo "FOAM l=$l state: $got bytes measured, $want by 2mn/2^l (+ Adam on embedding, head, norms)"
done
adamw_state=$(( 2 * 4 * (other + 6 * (256 * 256 * 2 + 128 * 256 * 2 + 768 * 256 * 3)) ))
echo "AdamW state: $adamw_state bytes; FOAM l=2 saves $(jq -n --argjson a "$adamw_state" --argjson f "$(grep '"summary"' "$out/foam-l2-s1.jsonl" 2>/dev/null | jq .summary.optimizer_state_bytes || echo 0)" '((1 - $f / $a) * 1000 | round) / 10')% of it"
for b in 64 128; do
  q=$(( 6 * (512 + 384 + 384 + 512 + 1024 + 1024 + 1024) * (b - 1) / 2 ))
  echo "POET-X b=$b: trained $(( 4 * (q + other) )) bytes (Q $(( 4 * q )) + embedding/head/norms), state $(( 8 * (q + other) )), frozen W0 $(( 4 * 6 * (256 * 256 * 2 + 128 * 256 * 2 + 768 * 256 * 3) )) by the formula; measured: $(grep '"summary"' "$out/poet-x-b$b-s1.jsonl" 2>/dev/null | jq -c '.summary | [.trainable_bytes, .optimizer_state_bytes, .frozen_bytes]' || echo n/a)"
done
echo "wall time: $(( (t_end - t_start) / 60 )) min on $(nproc) cores ($jobs arms at a time, $threads threads each)"

# ---- validation curves ----
{
  echo "set terminal pngcairo size 1000,640"
  echo "set output '$plot'"
  echo "set xlabel 'training tokens (M)'"
  echo "set ylabel 'validation loss (nats, 32768 held-out tokens)'"
  echo "set key top right"
  echo "set yrange [*:7]"
  printf 'plot '
  sep=""
  for n in $(arms | cut -d'|' -f1); do
    [ -f "$out/$n-s1.jsonl" ] || continue
    jq -r 'select(.val_loss != null and .step != null) | "\(.tokens / 1e6) \(.val_loss)"' "$out/$n-s1.jsonl" >"$out/$n-s1.val.dat"
    printf "%s'%s' using 1:2 with linespoints title '%s'" "$sep" "$out/$n-s1.val.dat" "$n"
    sep=", "
  done
  echo
} >"$out/optim.gp"
if command -v gnuplot >/dev/null && gnuplot "$out/optim.gp" 2>/dev/null; then echo "picture: $plot"; fi
echo "command (one arm): $bin/lm-train $corpus ${split[*]} --init init-s1.h5 --seed 1 --batch 16 --seq-len 256 --steps $steps --warmup $warmup --eval-every 50 --eval-tokens 32768 <arm flags> -o arm.h5 --log arm.jsonl"
