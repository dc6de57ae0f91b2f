#!/usr/bin/env bash
# WAVE and its baselines on the deep demo model (issue 28): calibration on one half of the held-out
# KJV chapters (two seeds of the split), greedy decoding of prompts from the other half with each
# method x setting, measured against the full model in the same run: decode speedup, blocks per
# token, head FLOPs overhead per token, agreement (position-wise token accuracy and ROUGE-L), and
# --lossless (WAVE drafts, the full model verifies).  Draws speedup against ROUGE-L per method
# (gnuplot) into $WAVE_PLOT (default wave.png in a temporary directory; printed).
# Then the same for the model continued with LayerSkip's early-exit loss (kjv16l-exit.h5): the
# lossless (self-speculative) runs, with and without the verifier's reuse of the drafts' blocks.
# $1 = bin directory.  REPRO_QUICK=1: one seed, 4 prompts, 64 new tokens.  WAVE_MODEL=path: another
# model; WAVE_EXIT_MODEL=path: another exit-loss model; WAVE_PART=main|exit: only one of the two.
set -euo pipefail
bin=${1:-build/bin}
model=${WAVE_MODEL:-data/models/kjv16l.h5}
exit_model=${WAVE_EXIT_MODEL:-data/models/kjv16l-exit.h5}
part=${WAVE_PART:-all}
corpus="data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --val-every 20"
seeds="1 2" prompts=8 lengths="128 512"
if [ "${REPRO_QUICK:-0}" = 1 ]; then seeds=1 prompts=4 lengths=64; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
plot=${WAVE_PLOT:-build/repro/wave.png}
mkdir -p "$(dirname "$plot")"
echo
echo "WAVE (Kim, Lee & Kim) vs CALM, DVP, SkipDecode, LayerSkip's fixed exit; model $model"
calibrate() {  # calibrate MODEL PREFIX: $work/PREFIX$seed.json per seed, one summary line each
  for seed in $seeds; do
    $bin/wave-calibrate "$1" $corpus --seed "$seed" -q -o "$work/$2$seed.json"
    L=$(jq .n_layers "$work/$2$seed.json")
    jq -r --arg s "$seed" '"calibration seed \($s): \(.tokens) tokens; depth agreement " + ([.depth_agreement[] | . * 100 | round / 100] | map(tostring) | join(" ")) +
      "; wave window [\(.wave.window_start), \(.wave.window_end)], K \(.wave.proxy_k), threshold \(.wave.threshold) (simulated agreement \(.wave.agreement * 1000 | round / 1000), \(.wave.mean_depth * 100 | round / 100) blocks); calm from \(.calm.min_layer) at \(.calm.threshold); dvp K \(.dvp.proxy_k) at \(.dvp.threshold); layerskip exit \(.layerskip.exit_layer)"' "$work/$2$seed.json"
  done
}
table() {  # table ROWS: the rows as an aligned table
  printf 'method\tnew tokens\tseed\tspeedup\tblocks/token\thead overhead MFLOP/token\ttoken accuracy\tROUGE-L\tacceptance\tperplexity change (defined)\n' | cat - "$1" | column -t -s $'\t'
}
run() {  # run NAME N SEED FLAGS...: one summary line as TSV (perplexity with the shortest length only)
  local name=$1 n=$2 seed=$3 ppl=0
  shift 3
  [ "$n" = "${lengths%% *}" ] && ppl=64
  $bin/wave-generate "$cur_model" --calibration "$work/$cur_cal$seed.json" --eval-corpus $corpus --prompts "$prompts" --prompt-tokens 64 -n "$n" \
    --perplexity-tokens $ppl --no-steps -q "$@" | tail -1 | jq -r --arg name "$name" --arg n "$n" --arg seed "$seed" \
    '.summary | [$name, $n, $seed, (.speedup * 100 | round / 100), (.mean_depth * 100 | round / 100),
      (.head_overhead_flops_per_token / 1e6 * 100 | round / 100), (.token_accuracy * 1000 | round / 1000), (.rouge_l * 1000 | round / 1000),
      (if .lossless then (.lossless.acceptance_rate * 100 | round / 100) else "-" end),
      (if .perplexity.change then "\(.perplexity.change * 1000 | round / 10) % (\(.perplexity.defined_fraction * 100 | round) %)" else "-" end)] | @tsv'
}
rows=$work/rows.tsv
if [ "$part" != exit ]; then
cur_model=$model cur_cal=cal
calibrate "$model" cal
half=$((L / 2)) quarter=$((L / 4)) three=$((3 * L / 4))
for n in $lengths; do
  for seed in $seeds; do
    {
      run "wave (calibrated)" "$n" "$seed" --method wave
      for t in 0.3 0.5 0.7 0.9; do run "wave tau=$t" "$n" "$seed" --method wave --threshold $t; done
      run "calm (calibrated)" "$n" "$seed" --method calm
      for t in 0.3 0.5 0.7 0.9; do run "calm tau=$t" "$n" "$seed" --method calm --threshold $t; done
      run "dvp (calibrated)" "$n" "$seed" --method dvp
      for t in 0.3 0.5 0.7 0.9; do run "dvp tau=$t" "$n" "$seed" --method dvp --threshold $t; done
      for lo in $quarter $half $three; do run "skipdecode $lo-$L" "$n" "$seed" --method skipdecode --skip-min "$lo" --skip-max "$L"; done
      for e in $(printf '%s\n' $half $three $((L - 2)) | sort -nu); do run "layerskip E=$e" "$n" "$seed" --method layerskip --exit-layer "$e"; done
      run "wave --lossless" "$n" "$seed" --method wave --lossless --draft 4
      run "layerskip E=$three --lossless" "$n" "$seed" --method layerskip --exit-layer "$three" --lossless --draft 4
    } >>"$rows"
  done
done
echo
table "$rows"
# Speedup against ROUGE-L, one series per method family.
awk -F'\t' '{split($1, a, " "); print a[1] (index($1, "lossless") ? "-lossless" : "") "\t" $8 "\t" $4}' "$rows" | sort -k1,1 -s >"$work/pts.tsv"
data=$(awk -F'\t' 'BEGIN {prev = ""} { if ($1 != prev && prev != "") printf "\n\n"; print $2 " " $3; prev = $1 }' "$work/pts.tsv")
names=$(cut -f1 "$work/pts.tsv" | uniq | tr '\n' ' ')
printf '%s\n' "$data" >"$work/pts.dat"
{
  echo "set terminal pngcairo size 900,600 noenhanced"
  echo "set output '$plot'"
  echo "set title 'early exit on $(basename "$model"): speedup over the full model vs ROUGE-L against it'"
  echo "set xlabel 'ROUGE-L vs full'; set ylabel 'decode speedup'; set grid; set key outside right"
  printf 'plot '
  i=0
  for nm in $names; do
    [ $i -gt 0 ] && printf ', '
    printf "'%s' index %d using 1:2 with points pt %d ps 1.5 title '%s'" "$work/pts.dat" "$i" $((i + 5)) "$nm"
    i=$((i + 1))
  done
  echo
} >"$work/plot.gp"
if command -v gnuplot >/dev/null && gnuplot "$work/plot.gp" 2>/dev/null; then echo "picture: $plot"; fi
fi
if [ "$part" != main ]; then
  echo
  echo "The model continued with LayerSkip's early-exit loss: $exit_model (lossless: the output is the full model's)"
  cur_model=$exit_model cur_cal=xcal
  calibrate "$exit_model" xcal
  xrows=$work/xrows.tsv
  e8=$((L / 2))
  for n in $lengths; do
    for seed in $seeds; do
      {
        run "wave (calibrated)" "$n" "$seed" --method wave
        run "wave --lossless --draft 4" "$n" "$seed" --method wave --lossless --draft 4
        run "wave --lossless --draft 6" "$n" "$seed" --method wave --lossless --draft 6
        run "wave --lossless --draft 6 --no-draft-reuse" "$n" "$seed" --method wave --lossless --draft 6 --no-draft-reuse
        run "layerskip E=$e8 --lossless --draft 4" "$n" "$seed" --method layerskip --exit-layer "$e8" --lossless --draft 4
      } >>"$xrows"
    done
  done
  echo
  table "$xrows"
fi
echo "commands: wave-calibrate $model $corpus --seed S -o cal.json; wave-generate $model --calibration cal.json --eval-corpus $corpus --prompts $prompts --prompt-tokens 64 -n N --method M [flags]"
