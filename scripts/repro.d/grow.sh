#!/usr/bin/env bash
# Issue 32 (moe-grow; "Beyond Sunk Costs", arXiv 2510.08008): growth of a converged MoE against
# training the grown shape from scratch at equal extra compute.
#   base      vocab 2048, d 64, 4 layers, 4/2 heads, every FFN a standard MoE of 8 experts of width
#             128, top-2 (softmax, normalised, load-balancing alpha 0.01): 248,320 active
#             non-embedding weights, so F_c = 20 tokens per active weight = 4.97M tokens; trained for
#             $GROW_BASE_STEPS steps (default 3000) of 16 x 128 tokens (6.1M tokens = 1.24 F_c; the
#             claim is made past 1 F_c), checkpoints kept at steps 750 and 1500 (0.31 and 0.62 F_c).
#   depth     8 layers: interpose (l1 l1' ...) vs stack (l1..l4 l1..l4) vs scratch-deep (random init);
#   width     16 experts, top-4: noisy copies alpha 0, 0.01, 0.1 vs random new experts vs scratch-wide;
#   sunk      interposition from the step-750 and step-1500 checkpoints (and the final one, above);
#   continue  the base itself trained on at the same extra FLOPs as the deep arms (1.68 x the steps).
# Every arm after growth trains $GROW_STEPS steps (default 800: 1.64M tokens = 0.33 F_c) with the
# same recipe (lr 2e-3, 50 warmup steps, cosine to 0.1x, AdamW 0.9/0.95, wd 0.1), two seeds each
# (the base of seed s grows with growth seed s).
# -> held-out loss and top-1 accuracy (lm-eval on every held-out chapter) per arm and seed, their
#    means, the paper's relative gain (grown accuracy / scratch accuracy - 1 at equal extra compute,
#    as its 10.66 % is defined), and a gnuplot of the held-out curves.
# Cost: about 1.8 CPU-hours (an hour on 2 cores); REPRO_QUICK=1 gives a rehearsal (60 + 40 steps,
# one seed), GROW_SEEDS2=0 skips the second seeds.  Runs go $GROW_JOBS at a time (default 2); results
# are kept in $GROW_OUT (default build/repro-grow) and a run already there is not run again.
# $1 = bin directory.
set -euo pipefail
bin=${1:-build/bin}
corpus=data/corpus/kjv.tsv.gz
split=(--column 2 --doc-column 1 --val-every 20)
out=${GROW_OUT:-build/repro-grow}
base_steps=${GROW_BASE_STEPS:-3000}
steps=${GROW_STEPS:-800}
seeds2=1
if [ "${REPRO_QUICK:-0}" = 1 ]; then base_steps=${GROW_BASE_STEPS:-60} steps=${GROW_STEPS:-40} seeds2=0; fi
seeds2=${GROW_SEEDS2:-$seeds2}
jobs=${GROW_JOBS:-2}
threads=$(( $(nproc) / jobs ))
[ "$threads" -ge 1 ] || threads=1
mkdir -p "$out"
sunk1=$(( base_steps / 4 )) sunk2=$(( base_steps / 2 ))
cont_steps=$(( steps * 168 / 100 ))  # the deep model's FLOP per token is 1.68x the base's
shape=(--d-model 64 --n-heads 4 --n-kv-heads 2 --d-ff 128 --n-ctx 128 --moe standard --d-expert 128)
recipe=(--batch 16 --seq-len 128 --lr 2e-3 --warmup 50 --eval-every 100 --eval-tokens 32768)
active=248320 fc=$(( 20 * 248320 ))
[ -f "$out/t.model" ] || "$bin/tokenizer-train" "$corpus" --column 2 --chunk-lines 4 --vocab-size 2048 -o "$out/t.model" -q

evaluate() {  # $1 = tag: held-out loss and top-1 of $out/$tag.h5
  "$bin/lm-eval" "$out/$1.h5" "$corpus" "${split[@]}" --split val --threads "$threads" -q >"$out/$1.eval.json.tmp" &&
    mv "$out/$1.eval.json.tmp" "$out/$1.eval.json"
}

# The base of seed s: one run, stopped at the sunk-cost steps to keep those checkpoints (a resumed
# run is bit for bit the uninterrupted one).
run_base() {
  local s=$1 tag="base-s$1"
  [ -f "$out/$tag.eval.json" ] && return 0
  local common=("$corpus" "${split[@]}" --tokenizer "$out/t.model" "${shape[@]}" --n-layers 4 --experts 8 --top-k 2 --seed "$s"
                --batch 16 --seq-len 128 --steps "$base_steps" --warmup $(( base_steps / 20 )) --lr 3e-3 --eval-every 250
                --eval-tokens 32768 --threads "$threads" -o "$out/$tag.h5" --log "$out/$tag.jsonl" -q)
  rm -f "$out/$tag.h5" "$out/$tag.jsonl"
  "$bin/lm-train" "${common[@]}" --stop-at "$sunk1" 2>"$out/$tag.err" && cp "$out/$tag.h5" "$out/$tag-at$sunk1.h5" &&
    "$bin/lm-train" "${common[@]}" --resume --stop-at "$sunk2" 2>>"$out/$tag.err" && cp "$out/$tag.h5" "$out/$tag-at$sunk2.h5" &&
    "$bin/lm-train" "${common[@]}" --resume 2>>"$out/$tag.err" && evaluate "$tag" ||
    { echo "repro grow: $tag failed: $(tail -1 "$out/$tag.err")" >&2; return 0; }
}

# arm | what to start from (grow FROM flags, scratch FLAGS, or continue) | training steps
arms() {
  cat <<ARMS
interpose|grow final --depth interpose|$steps
stack|grow final --depth stack|$steps
scratch-deep|scratch --n-layers 8 --experts 8 --top-k 2|$steps
noisy-a0|grow final --width noisy --alpha 0|$steps
noisy-a0.01|grow final --width noisy --alpha 0.01|$steps
noisy-a0.1|grow final --width noisy --alpha 0.1|$steps
random|grow final --width random|$steps
scratch-wide|scratch --n-layers 4 --experts 16 --top-k 4|$steps
interpose-at$sunk1|grow at$sunk1 --depth interpose|$steps
interpose-at$sunk2|grow at$sunk2 --depth interpose|$steps
continue|continue|$cont_steps
ARMS
}
field() { arms | awk -F'|' -v n="$1" -v f="$2" '$1 == n { print $f }'; }

run_arm() {
  local name=$1 s=$2 tag="$1-s$2"
  [ -f "$out/$tag.eval.json" ] && return 0
  [ -f "$out/base-s$s.eval.json" ] || { echo "repro grow: $tag needs base-s$s" >&2; return 0; }
  local how n start
  how=$(field "$name" 2) n=$(field "$name" 3)
  read -r -a h <<<"$how"
  rm -f "$out/$tag.h5" "$out/$tag.jsonl"
  case ${h[0]} in
    grow)
      [ "${h[1]}" = final ] && start="$out/base-s$s.h5" || start="$out/base-s$s-${h[1]}.h5"
      "$bin/moe-grow" "$start" "${h[@]:2}" --seed "$s" -o "$out/$tag.init.h5" -q 2>"$out/$tag.err" || { echo "repro grow: $tag: $(tail -1 "$out/$tag.err")" >&2; return 0; }
      set -- --init "$out/$tag.init.h5" ;;
    scratch) set -- --tokenizer "$out/t.model" "${shape[@]}" "${h[@]:1}" ;;
    continue) set -- --init "$out/base-s$s.h5" ;;
  esac
  if "$bin/lm-train" "$corpus" "${split[@]}" "$@" --seed "$s" "${recipe[@]}" --steps "$n" --threads "$threads" \
      -o "$out/$tag.h5" --log "$out/$tag.jsonl" -q 2>>"$out/$tag.err"; then
    evaluate "$tag"
  else
    echo "repro grow: $tag failed: $(tail -1 "$out/$tag.err")" >&2
  fi
}
export -f run_base run_arm evaluate field arms
export bin corpus out base_steps steps threads sunk1 sunk2 cont_steps
split_str="${split[*]}" shape_str="${shape[*]}" recipe_str="${recipe[*]}"
export split_str shape_str recipe_str
seeds="1"
[ "$seeds2" = 1 ] && seeds="1 2"
prelude='split=($split_str); shape=($shape_str); recipe=($recipe_str)'
for s in $seeds; do echo "$s"; done | xargs -P "$jobs" -L 1 bash -c "$prelude; run_base \"\$0\""
{ for s in $seeds; do arms | cut -d'|' -f1 | sed "s/\$/ $s/"; done; } | xargs -P "$jobs" -L 1 bash -c "$prelude; run_arm \"\$0\" \"\$1\""

# ---- the table ----
names="base $(arms | cut -d'|' -f1 | tr '\n' ' ')"
echo "MoE growth: base d 64, 4 layers, 8 experts top-2 ($active active non-embedding weights, F_c = $fc tokens),"
echo "  $base_steps base steps, then $steps steps (continue: $cont_steps) of 16 x 128 tokens per arm"
printf '%-18s %-4s %-10s %-10s %-10s %-9s %-9s %s\n' arm seed sunk_F_c extra_F_c extra_tflop val_loss top1 weights/active
for s in 1 2; do
  for n in $names; do
    tag="$n-s$s"
    [ -f "$out/$tag.eval.json" ] || continue
    summ=$(grep '"summary"' "$out/$tag.jsonl" | tail -1)
    case $n in
      base) sunk=0 ;;
      *-at*) sunk=${n##*-at} ;;
      scratch-*) sunk=0 ;;
      *) sunk=$base_steps ;;
    esac
    # tokens and FLOPs after growth (the base row: its own run); the log's model FLOP per token x tokens
    meta=$(grep -m1 '"meta"' "$out/$tag.jsonl")
    jq -n --argjson s "$summ" --argjson m "$meta" --slurpfile e "$out/$tag.eval.json" --arg n "$n" --arg seed "$s" --argjson sunk "$sunk" --argjson fc "$fc" '
      [$n, $seed, ($sunk * 2048 / $fc * 100 | round / 100), ($s.summary.tokens / $fc * 100 | round / 100),
       ($s.summary.model_gflop_per_token * $s.summary.tokens / 1e3 * 100 | round / 100),
       ($e[0].loss * 10000 | round / 10000), ($e[0].top1_accuracy * 10000 | round / 10000), "\($s.summary.n_params) / \($m.meta.n_active_params)"] | @tsv' -r |
      awk -F'\t' '{ printf "%-18s %-4s %-10s %-10s %-10s %-9s %-9s %s\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
  done
done
# means over the seeds that both ran, and the gains in the paper's relative form
echo
echo "mean over seeds: arm, seeds, val_loss, top1; gain = top1 / top1(scratch of that shape) - 1 (the paper's 10.66% form)"
mean() {  # $1 = arm -> "n loss top1"
  local f
  f=$(ls "$out/$1"-s[12].eval.json 2>/dev/null) || true
  [ -n "$f" ] || { echo "0 nan nan"; return; }
  # shellcheck disable=SC2086
  jq -s -r '[length, (map(.loss) | add / length), (map(.top1_accuracy) | add / length)] | @tsv' $f
}
for n in $names; do
  read -r k l a <<<"$(mean "$n")"
  case $n in
    interpose|stack|interpose-at*|continue) ref=scratch-deep ;;
    noisy-*|random) ref=scratch-wide ;;
    *) ref="" ;;
  esac
  gain=""
  if [ -n "$ref" ]; then
    read -r _ _ ra <<<"$(mean "$ref")"
    gain=$(awk -v a="$a" -v r="$ra" 'BEGIN { if (r > 0) printf "%+.2f%% vs %s", 100 * (a / r - 1), "'"$ref"'" }')
  fi
  printf '%-18s %-2s %-8.4f %-8.4f %s\n' "$n" "$k" "$l" "$a" "$gain"
done

# ---- held-out curves after growth (seed 1) ----
plot=${GROW_PLOT:-$out/grow.png}
{
  echo "set terminal pngcairo size 1000,640"
  echo "set output '$plot'"
  echo "set xlabel 'training steps after growth (16 x 128 tokens each)'"
  echo "set ylabel 'held-out loss (nats per token, 32768 tokens)'"
  echo "set title 'MoE growth from a converged base (1.24 F_c), seed 1'"
  echo "set key top right"
  echo "set grid"
  printf 'plot '
  sep=""
  for n in interpose stack scratch-deep noisy-a0.01 random scratch-wide interpose-at$sunk1 continue; do
    [ -f "$out/$n-s1.jsonl" ] || continue
    jq -r 'select(.val_loss != null and .step != null) | "\(.step) \(.val_loss)"' "$out/$n-s1.jsonl" >"$out/$n-s1.curve"
    printf "%s'%s' using 1:2 with lines lw 2 title '%s'" "$sep" "$out/$n-s1.curve" "$n"
    sep=", "
  done
  echo
} >"$out/grow.gp"
if command -v gnuplot >/dev/null && gnuplot "$out/grow.gp" 2>/dev/null; then echo "picture: $plot"; fi
echo "command (one arm): $bin/moe-grow base-s1.h5 --depth interpose --seed 1 -o g.h5 && $bin/lm-train $corpus ${split[*]} --init g.h5 --seed 1 ${recipe[*]} --steps $steps -o arm.h5 --log arm.jsonl"
