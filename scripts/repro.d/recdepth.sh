#!/usr/bin/env bash
# Issue 36 (recdepth-sample; "Efficient Parallel Samplers for Recurrent-Depth Models and Their
# Connection to Diffusion Language Models", Geiping, Yang, Su, arXiv 2510.14961): the
# diffusion-forcing sampler against autoregressive decoding at full recurrence, on the shipped
# recurrent-depth KJV model data/models/kjv-recdepth.h5 (1 prelude, 2 core, 1 coda sandwich blocks,
# d 128, trained at mean recurrence 16; data/models/README.md).
#   1. held-out loss against the test-time recurrence r (lm-eval --recurrence r on the held-out
#      chapters): what makes the sampler's trade-off real;
#   2. prompts: the first $RD_WORDS (12) words of the first verse of $RD_PROMPTS (16) held-out chapters
#      (every 20th chapter, lm-train's split), $RD_TOKENS (64) new tokens each, greedy;
#   3. baselines: ar at r = 16 (the training mean), ar at r = 4 and 8 (against ar at 16: what a
#      lower fixed recurrence buys), and ar-adaptive (Huginn's per-token KL exit) at KL thresholds
#      1e-1, 1e-2, 1e-3, 1e-4;
#   4. diffusion forcing over inner recurrence {1, 2, 4, 8} x exit threshold {0.01, 0.03, 0.1, 0.2} x
#      headway {1, 2}, noise 0.5 and EMA 0.1 (the reference's defaults), capped at r = 16 per token,
#      and inner 4, headway 1 without noise and EMA (-plain) at each exit threshold;
#   every run with --compare-ar (speedup over ar and token agreement with ar, each run timing its
#   own ar so both see the same machine load) and --score (the model's perplexity of the
#   generated text at full recurrence);
#   5. the fastest diffusion-forcing setting (any, and with the reference's noise and EMA) and
#      the fastest ar-adaptive setting with agreement >= 0.9, again with sampler seeds 2 and 3.
# Results: $RD_RESULTS (default data/repro/recdepth): loss_vs_r.csv, sweep.csv, seeds.csv, a
# gnuplot speed/quality picture recdepth.png and the loss curve loss_vs_r.png.  Cost: about 15 CPU-minutes; REPRO_QUICK=1 is a
# rehearsal (2 prompts, 12 tokens, a small grid).  $1 = bin directory.
set -euo pipefail
bin=${1:-build/bin}
model=${RD_MODEL:-data/models/kjv-recdepth.h5}
corpus=data/corpus/kjv.tsv.gz
out=${RD_OUT:-build/repro-recdepth}
res=${RD_RESULTS:-data/repro/recdepth}
nprompts=${RD_PROMPTS:-16} ntok=${RD_TOKENS:-64} words=${RD_WORDS:-12}
inners="1 2 4 8" exits="0.01 0.03 0.1 0.2" headways="1 2" kls="1e-1 1e-2 1e-3 1e-4" rs="1 2 4 8 12 16 24 32" evaltok=16384
if [ "${REPRO_QUICK:-0}" = 1 ]; then
  nprompts=2 ntok=12 inners="2 4" exits="0.03" headways="1" kls="1e-3" rs="1 4 16" evaltok=1024 res=$out/results
fi
r=16
mkdir -p "$out" "$res"
[ -f "$model" ] || { echo "recdepth.sh: $model missing (see data/models/README.md)" >&2; exit 1; }
# Runs already in $out are reused only when made with these settings and this model and binary.
stamp="$(sha256sum "$model" "$bin/recdepth-sample" | cut -c1-16 | tr '\n' ' ') $nprompts $ntok $words"
if [ "$(cat "$out/settings.stamp" 2>/dev/null)" != "$stamp" ]; then rm -f "$out"/*.json; echo "$stamp" >"$out/settings.stamp"; fi

# 1. held-out loss against the test-time recurrence
echo "recurrence,val_loss,val_perplexity,tokens" >"$res/loss_vs_r.csv"
for rr in $rs; do
  "$bin/lm-eval" "$model" "$corpus" --column 2 --doc-column 1 --val-every 20 --split val --seq-len 128 \
    --max-tokens "$evaltok" --recurrence "$rr" -o "$out/eval-r$rr.json" -q
  jq -r --arg r "$rr" '[($r | tonumber), .loss, .perplexity, .tokens] | @csv' "$out/eval-r$rr.json" >>"$res/loss_vs_r.csv"
done
echo "held-out loss against test-time recurrence r ($evaltok tokens):"
column -s, -t "$res/loss_vs_r.csv"

# 2. held-out prompts
zcat "$corpus" | awk -F'\t' -v n="$nprompts" -v w="$words" '
  { split($1, k, ":"); if (k[1] != last) { last = k[1]; doc++; if (doc % 20 == 0 && got < n) { m = split($2, t, " ");
      s = t[1]; for (i = 2; i <= w && i <= m; i++) s = s " " t[i]; print s; got++ } } }' >"$out/prompts.txt"

# 3-4. one run: $1 name, the rest recdepth-sample flags
run() {
  local name=$1; shift
  [ -f "$out/$name.json" ] || "$bin/recdepth-sample" "$model" --prompts "$out/prompts.txt" -n "$ntok" --ignore-eos \
    --recurrence "${RUN_R:-$r}" --compare-ar --score -q -o "$out/$name.json" "$@"
}
row() {  # name, seed: one CSV row of a run's totals (its settings from its own summary)
  jq -r --arg n "$1" --arg s "$2" '
    .totals as $t | .settings as $c | [$n, .method, $c.recurrence, $c.inner_recurrence, $c.exit_threshold, $c.headway, $c.kl_threshold, ($s | tonumber),
      $t.speedup_over_ar, $t.agreement_with_ar, $t.tokens_per_s, ($t.decode_tokens / $t.ar_generation_seconds),
      $t.forwards_per_token, $t.core_iterations_per_token, $t.mean_recurrence_per_token, $t.score.perplexity] | @csv' "$out/$1.json"
}
header="name,method,recurrence,inner_recurrence,exit_threshold,headway,kl_threshold,seed,speedup_over_ar,agreement_with_ar,tokens_per_s,ar_tokens_per_s,forwards_per_token,core_iterations_per_token,recurrence_per_token,perplexity_at_r16"
echo "$header" >"$res/sweep.csv"
run ar --method ar
row ar 1 >>"$res/sweep.csv"
for rr in 4 8; do  # ar at a lower recurrence against ar at r: what lowering r alone buys
  RUN_R=$rr run "ar-r$rr" --method ar --ar-recurrence "$r"
  row "ar-r$rr" 1 >>"$res/sweep.csv"
done
for k in $kls; do
  run "adaptive-kl$k" --method ar-adaptive --kl-threshold "$k"
  row "adaptive-kl$k" 1 >>"$res/sweep.csv"
done
for i in $inners; do for e in $exits; do for h in $headways; do
  n="df-i$i-e$e-h$h"
  run "$n" --method diffusion-forcing --inner-recurrence "$i" --exit-threshold "$e" --headway "$h"
  row "$n" 1 >>"$res/sweep.csv"
done; done; done
for e in $exits; do  # without the state noise and the embedding EMA (the reference's two stabilisers)
  n="df-i4-e$e-h1-plain"
  run "$n" --method diffusion-forcing --inner-recurrence 4 --exit-threshold "$e" --headway 1 --state-noise 0 --ema 0
  row "$n" 1 >>"$res/sweep.csv"
done
echo
echo "sweep (speedup and agreement against ar at r = $r on the same prompts; perplexity scored at r = $r):"
column -s, -t "$res/sweep.csv"

# 5. the fastest diffusion-forcing and the fastest ar-adaptive setting with agreement >= 0.9, again
#    with sampler seeds 2 and 3 (other initial states and state noise): the comparison's spread
echo "$header" >"$res/seeds.csv"
# groups: any diffusion-forcing setting, those with the reference's noise and EMA, ar-adaptive
for g in diffusion-forcing diffusion-forcing-reference ar-adaptive; do
  m=${g%-reference}
  best=$(awk -F, -v m="\"$m\"" -v ref="$([ "$g" != "$m" ] && echo 1 || echo 0)" \
    'NR > 1 && $2 == m && !(ref && $1 ~ /plain/) && $10 >= 0.9 && $9 > b { b = $9; n = $1 } END { gsub(/"/, "", n); print n }' "$res/sweep.csv")
  if [ -z "$best" ]; then echo "no $g setting reached agreement 0.9"; continue; fi
  grep -q "^\"$best-s2\"," "$res/seeds.csv" && continue  # the same setting as a group before
  flags=$(jq -r '.settings | if .inner_recurrence then "--inner-recurrence \(.inner_recurrence) --exit-threshold \(.exit_threshold) --headway \(.headway) --state-noise \(.state_noise) --ema \(.ema)" else "--kl-threshold \(.kl_threshold)" end' "$out/$best.json")
  grep "^\"$best\"," "$res/sweep.csv" >>"$res/seeds.csv"
  for s in 2 3; do
    # shellcheck disable=SC2086
    run "$best-s$s" --method "$m" $flags --seed "$s"
    row "$best-s$s" "$s" >>"$res/seeds.csv"
  done
done
echo
echo "the fastest settings with agreement >= 0.9, seeds 1 (the sweep), 2 and 3:"
column -s, -t "$res/seeds.csv"

# the speed/quality picture
if command -v gnuplot >/dev/null 2>&1; then
  awk -F, 'NR > 1 { gsub(/"/, ""); print $2, $9, $10, $1 }' "$res/sweep.csv" >"$out/points.dat"
  gnuplot <<EOF 2>/dev/null && echo "picture: $res/recdepth.png"
set terminal pngcairo size 900,600
set output "$res/recdepth.png"
set xlabel "speedup over ar (r = $r)"
set ylabel "token agreement with ar"
set key bottom right
set grid
plot "< grep '^diffusion-forcing' $out/points.dat" using 2:3 with points pt 7 title "diffusion forcing", \
     "< grep '^ar-adaptive' $out/points.dat" using 2:3 with points pt 5 title "ar-adaptive (KL exit)", \
     "< grep '^ar ' $out/points.dat" using 2:3 with points pt 9 ps 2 title "ar at r = 16, 8, 4"
set output "$res/loss_vs_r.png"
set xlabel "test-time recurrence r"
set ylabel "held-out loss (nats/token)"
set logscale x 2
set datafile separator ","
plot "$res/loss_vs_r.csv" every ::1 using 1:2 with linespoints pt 7 title "kjv-recdepth (trained at mean r = 16)"
EOF
fi
echo "command (one run): $bin/recdepth-sample $model --prompts prompts.txt -n $ntok --ignore-eos --recurrence $r --compare-ar --score --method diffusion-forcing --inner-recurrence 4 --exit-threshold 0.03 --headway 1 -o run.json"
