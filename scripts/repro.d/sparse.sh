#!/usr/bin/env bash
# Issue 30 (SMET): the paper's Fig. 1 in miniature.  One Llama-style model (vocab 2048, d_model 128,
# 6 layers, 4/2 heads, d_ff 384: 1.70M weights, 1.18M of them in the attention/MLP matrices that are
# made sparse) trained on KJV chapters (every 20th held out) for $SPARSE_STEPS steps (default 800) of
# 16 x 128 tokens (1.6M tokens; 5% warmup, cosine to 0.1x, lr 2e-3 as the reference's 130M script,
# betas 0.9/0.999 as Adam_block's, no decay), topology updated every 100 steps (p0 0.2, cosine to
# 0.005), from the same initial weights and data order:
#   at d = 0.25 the whole ladder: dense, static, SET (+ Adam with one global step count), RigL,
#   SET + local steps, + momentum warm-up (W = 100), + lr0 / d (= SMET);
#   at d = 0.5 and 0.1: SET and SMET (dense is the same run at every d);
#   a second seed (new initial weights and data order) for dense, SET and SMET at 0.25 and SMET at 0.5.
# -> held-out loss and perplexity (lm-eval on every held-out chapter), from the probe batch around
#    each topology update u: the pruning jump (loss right after prune + regrow minus right before)
#    and the optimizer spike, mean and max over the updates, two ways:
#    unpaired: the highest probe loss over u + 1 .. u + 10 minus the loss right after the update
#      (static: the same statistic at the same steps without an update, its noise floor);
#    paired (--probe-control --probe-steps 30, the dynamic arms): the trainer also trains 30 steps
#      from the state before the update on the same batches without it and rewinds, so
#      excess(k) = probe(u + k) - control(u + k) cancels the training noise; the paired spike is
#      max over k = 1 .. 30 of excess(k) - jump, with a 95% interval over the updates of both seeds;
#    optimizer-state bytes measured against d x the dense state of the sparse matrices + the index
#    overhead (an int32 index and an int32 local step per active entry), and a gnuplot of the
#    validation curves with the update steps marked.
# Targets checked: SMET's mean spike at least 3x smaller than SET's (d = 0.25); SMET's held-out loss
# at d = 0.5 within 3% of dense; the state bound.
# Cost: an arm takes about 6 CPU-minutes on this machine (7 with the paired control): about 1.7
# CPU-hours for the 15 runs, an hour on 2 cores; REPRO_QUICK=1 gives a 200-step rehearsal (one seed), SPARSE_SEEDS2=0 skips
# the second seeds.  Arms run $SPARSE_JOBS at
# a time (default 2), each on nproc / jobs threads; results are kept in $SPARSE_OUT (default
# build/repro-sparse) and an arm already there is not run again.
# $1 = bin directory.
set -euo pipefail
bin=${1:-build/bin}
corpus=data/corpus/kjv.tsv.gz
split=(--column 2 --doc-column 1 --val-every 20)
out=${SPARSE_OUT:-build/repro-sparse}
steps=${SPARSE_STEPS:-800}
seeds2=1
if [ "${REPRO_QUICK:-0}" = 1 ]; then steps=${SPARSE_STEPS:-200} seeds2=0; fi
seeds2=${SPARSE_SEEDS2:-$seeds2}  # SPARSE_SEEDS2=0: no second seeds
jobs=${SPARSE_JOBS:-2}
threads=$(( $(nproc) / jobs ))
[ "$threads" -ge 1 ] || threads=1
plot=${SPARSE_PLOT:-$out/sparse.png}
mkdir -p "$out"
warmup=$(( steps / 20 ))
t_start=$(date +%s)

[ -f "$out/t.model" ] || "$bin/tokenizer-train" "$corpus" --column 2 --chunk-lines 4 --vocab-size 2048 -o "$out/t.model" -q
init() {  # the initial weights of a seed
  [ -f "$out/init-s$1.h5" ] || "$bin/lm-init" --tokenizer "$out/t.model" --d-model 128 --n-layers 6 --n-heads 4 --n-kv-heads 2 \
    --d-ff 384 --n-ctx 128 --seed "$1" -o "$out/init-s$1.h5" -q
}

# name | lm-train flags
arms() {
  cat <<'EOF'
dense|
static-0.25|--sparse static --density 0.25
set-0.25|--sparse set --density 0.25 --probe-control --probe-steps 30
rigl-0.25|--sparse rigl --density 0.25 --probe-control --probe-steps 30
set+local-0.25|--sparse set --density 0.25 --sparse-local-steps --probe-control --probe-steps 30
set+local+warmup-0.25|--sparse set --density 0.25 --sparse-local-steps --sparse-warmup 100 --probe-control --probe-steps 30
smet-0.25|--sparse smet --density 0.25 --probe-control --probe-steps 30
set-0.5|--sparse set --density 0.5 --probe-control --probe-steps 30
smet-0.5|--sparse smet --density 0.5 --probe-control --probe-steps 30
set-0.1|--sparse set --density 0.1 --probe-control --probe-steps 30
smet-0.1|--sparse smet --density 0.1 --probe-control --probe-steps 30
EOF
}
flags_of() { arms | awk -F'|' -v n="$1" '$1 == n { print $2 }'; }

# One arm at one seed: train (log kept), then lm-eval on every held-out chapter.
run_arm() {
  local name=$1 seed=$2 tag="$1-s$2"
  [ -f "$out/$tag.eval.json" ] && return 0
  rm -f "$out/$tag.h5" "$out/$tag.best.h5"
  # shellcheck disable=SC2046
  if "$bin/lm-train" "$corpus" "${split[@]}" --init "$out/init-s$seed.h5" --seed "$seed" --batch 16 --seq-len 128 \
      --steps "$steps" --warmup "$warmup" --lr 2e-3 --beta2 0.999 --weight-decay 0 --eval-every 50 --eval-tokens 32768 \
      --threads "$threads" $(flags_of "$name") -o "$out/$tag.h5" --log "$out/$tag.jsonl" -q 2>"$out/$tag.err"; then
    "$bin/lm-eval" "$out/$tag.h5" "$corpus" "${split[@]}" --split val --threads "$threads" -q >"$out/$tag.eval.json.tmp" &&
      mv "$out/$tag.eval.json.tmp" "$out/$tag.eval.json"
  else
    echo "repro sparse: $tag failed: $(tail -1 "$out/$tag.err")" >&2
  fi
}
export -f run_arm flags_of arms
export bin corpus out steps warmup threads
split_str="${split[*]}"
export split_str
queue() { xargs -P "$jobs" -L 1 bash -c 'split=($split_str); run_arm "$0" "$1"'; }

init 1
[ "$seeds2" = 1 ] && init 2
{
  for n in dense set-0.25 smet-0.25 static-0.25 rigl-0.25 set+local-0.25 set+local+warmup-0.25 set-0.5 smet-0.5 set-0.1 smet-0.1; do
    echo "$n 1"
  done
  if [ "$seeds2" = 1 ]; then for n in dense set-0.25 smet-0.25 smet-0.5; do echo "$n 2"; done; fi
} | queue
t_end=$(date +%s)

# ---- the table ----
# spikes(log): mean and max over the updates of the pruning jump, of the optimizer spike (unpaired,
# over u + 1 .. u + 10), and of the paired spike (--probe-control, over u + 1 .. u + 30), with the mean
# excess loss at u + 30
spikes() {
  # the updates: topology lines (after = the loss right after prune + regrow); for static, the probe
  # at each would-be update (since_update 0): the same statistic without an update, the noise floor.
  # Paired (arms with --probe-control): excess(k) = probe(u + k) - control(u + k), the control trained
  # from the same state on the same batches without the update; excess(0) = the jump; the paired
  # spike = max over k = 1 .. 30 of excess(k) - excess(0).
  jq -s -r '
    [.[] | select(.event == "topology") | {step, after: .probe_after, jump: .pruning_jump}] as $t0 |
    (if ($t0 | length) > 0 then $t0 else [.[] | select(.event == "probe" and .since_update == 0) | {step, after: .probe_loss, jump: null}] end) as $t |
    [.[] | select(.event == "probe")] as $p |
    ([.[] | select(.event == "probe_control") | {key: (.step | tostring), value: .probe_loss}] | from_entries) as $c |
    [$t[] | . as $e | ($p | map(select(.step > $e.step and .step <= $e.step + 10 and .since_update > 0))) as $after |
      ($p | map(select(.step > $e.step and .step <= $e.step + 30 and .since_update > 0))) as $window |
      ($c[$e.step | tostring]) as $ctl |
      (if $ctl == null or ($window | length) == 0 then null
       else [$window[] | .probe_loss - $ctl[.since_update - 1]] end) as $x |
      {jump: $e.jump, spike: (if ($after | length) > 0 then ([$after[].probe_loss] | max) - $e.after else null end),
       pspike: (if $x == null then null else ($x | max) - $e.jump end), excess: (if $x == null then null else $x[-1] end)}] as $r |
    def r4: if . == null then "-" else . * 1e4 | round / 1e4 end;
    def mean: if length > 0 then add / length else null end;
    def mx: if length > 0 then max else null end;
    if ($r | length) == 0 then "-         -         -         -         -         -         -         0"
    else ([$r[].jump | select(. != null)]) as $j | ([$r[].spike | select(. != null)]) as $s |
         ([$r[].pspike | select(. != null)]) as $q | ([$r[].excess | select(. != null)]) as $x |
         "\($j | mean | r4)    \($j | mx | r4)    \($s | mean | r4)    \($s | mx | r4)    \($q | mean | r4)    \($q | mx | r4)    \($x | mean | r4)    \($r | length)" end' "$1"
}
# pspikes(log): the paired spike of every update, one per line (for the interval over updates and seeds)
pspikes() {
  jq -s -r '([.[] | select(.event == "probe_control") | {key: (.step | tostring), value: .probe_loss}] | from_entries) as $c |
    [.[] | select(.event == "probe")] as $p |
    .[] | select(.event == "topology" and $c[.step | tostring] != null) | . as $e |
    [$p[] | select(.step > $e.step and .step <= $e.step + 30 and .since_update > 0) | .probe_loss - $c[$e.step | tostring][.since_update - 1]] |
    max - $e.pruning_jump' "$1"
}
row() {  # name seed
  local tag="$1-s$2" s
  [ -f "$out/$tag.eval.json" ] || { printf '%-22s %-4s %s\n' "$1" "$2" "failed or not run"; return; }
  s=$(grep '"summary"' "$out/$tag.jsonl" | tail -1)
  printf '%-22s %-4s %-9.4f %-8.2f %-72s %-11s %-8s %s\n' "$1" "$2" "$(jq .loss "$out/$tag.eval.json")" \
    "$(jq .perplexity "$out/$tag.eval.json")" "$(spikes "$out/$tag.jsonl")" "$(jq .summary.optimizer_state_bytes <<<"$s")" \
    "$(jq '.summary.tokens_per_s | round' <<<"$s")" "$(jq '.summary.seconds / 60 | . * 10 | round / 10' <<<"$s")"
}
val() { [ -f "$out/$1-s$2.eval.json" ] && jq .loss "$out/$1-s$2.eval.json" || echo null; }
spike_mean() { [ -f "$out/$1-s$2.jsonl" ] && spikes "$out/$1-s$2.jsonl" | awk '{print $3}' || echo -; }
echo "SMET in miniature: vocab 2048, d 128, 6 layers, 4/2 heads, d_ff 384 (1.70M weights, 1.18M sparse), $steps steps of 16 x 128, updates every 100"
printf '%-22s %-4s %-9s %-8s %-72s %-11s %-8s %s\n' arm seed val_loss val_ppl "jump_mean jump_max  spike_mean spike_max pspike_mean pspike_max excess30_mean n" state_bytes tok/s minutes
for n in $(arms | cut -d'|' -f1); do row "$n" 1; done
for f in "$out"/*-s2.eval.json; do [ -e "$f" ] || continue; n=$(basename "$f" -s2.eval.json); row "$n" 2; done
for s in 1 2; do
  a=$(spike_mean set-0.25 $s) b=$(spike_mean smet-0.25 $s)
  [ "$a" = - ] || [ "$b" = - ] || [ -z "$a" ] || [ -z "$b" ] ||
    echo "seed $s: mean optimizer spike (unpaired) at d = 0.25: SET $a, SMET $b"
  d=$(val dense $s) m=$(val smet-0.5 $s)
  [ "$d" = null ] || [ "$m" = null ] ||
    echo "seed $s: SMET d = 0.5 vs dense held-out loss: $(jq -n --argjson a "$d" --argjson b "$m" '(($b - $a) / $a * 1e4 | round) / 100')% (target within 3%)"
done
# The paired spike over every update of both seeds: mean and a 95% interval (t over the updates),
# and SET's mean over SMET's (target: at least 3x).
paired() {  # arm -> "mean lo hi n"
  local f
  for f in "$out/$1-s1.jsonl" "$out/$1-s2.jsonl"; do [ -f "$f" ] && pspikes "$f"; done |
    awk '{ x[NR] = $1; s += $1 } END { if (NR < 2) { print "- - - " NR; exit } m = s / NR; for (i = 1; i <= NR; i++) v += (x[i] - m)^2;
      se = sqrt(v / (NR - 1) / NR); t = (NR - 1 >= 13) ? 2.16 : (NR - 1 >= 6) ? 2.45 : (NR - 1 >= 3) ? 3.18 : 12.71; printf "%.4f %.4f %.4f %d\n", m, m - t * se, m + t * se, NR }'
}
for n in set-0.25 rigl-0.25 set+local-0.25 set+local+warmup-0.25 smet-0.25 set-0.5 smet-0.5 set-0.1 smet-0.1; do
  read -r m lo hi k <<<"$(paired "$n")"
  [ "$k" -ge 2 ] 2>/dev/null && echo "paired spike $n: mean $m, 95% interval [$lo, $hi] over $k updates"
done
read -r a _ _ _ <<<"$(paired set-0.25)"; read -r b _ _ _ <<<"$(paired smet-0.25)"
[ "$a" = - ] || [ "$b" = - ] || [ -z "$a" ] || [ -z "$b" ] ||
  echo "d = 0.25: mean paired spike SET $a, SMET $b: SET / SMET = $(jq -n --argjson a "$a" --argjson b "$b" 'if $b > 0 then ($a / $b * 100 | round) / 100 else "inf (SMET <= 0)" end') (target: at least 3)"
# The state bound: the sparse matrices' dense Adam state is 8 bytes per weight; at density d the
# measured state minus the dense tensors' (embedding, head, norms: 8 bytes per weight) is compared
# with d x that + 8 bytes of index and local step per active entry.
sparse_w=$(( 6 * (128 * 128 * 2 + 64 * 128 * 2 + 3 * 128 * 384) )) other=$(( 2048 * 128 * 2 + 128 * 13 ))
for d in 0.5 0.25 0.1; do
  f="$out/smet-$d-s1.jsonl"
  [ -f "$f" ] || continue
  got=$(grep '"summary"' "$f" | jq .summary.optimizer_state_bytes) act=$(grep '"summary"' "$f" | jq .summary.sparse.active_weights)
  echo "state at d = $d: $got bytes measured; dense tensors $(( 8 * other )) + d x dense sparse-matrix state $(jq -n "$d * 8 * $sparse_w | round") + index overhead $(( 8 * act )) = $(jq -n "8 * $other + ($d * 8 * $sparse_w | round) + 8 * $act") (dense run: $(( 8 * (other + sparse_w) )))"
done
echo "wall time: $(( (t_end - t_start) / 60 )) min on $(nproc) cores ($jobs arms at a time, $threads threads each)"

# ---- validation curves, topology updates marked ----
{
  echo "set terminal pngcairo size 1000,640"
  echo "set output '$plot'"
  echo "set xlabel 'step'"
  echo "set ylabel 'validation loss (nats, 32768 held-out tokens)'"
  echo "set key top right"
  for u in $(seq 100 100 $(( steps - 1 ))); do echo "set arrow from $u, graph 0 to $u, graph 1 nohead dashtype 3 lc rgb 'gray'"; done
  printf 'plot '
  sep=""
  for n in $(arms | cut -d'|' -f1); do
    [ -f "$out/$n-s1.jsonl" ] || continue
    jq -r 'select(.val_loss != null and .step != null) | "\(.step) \(.val_loss)"' "$out/$n-s1.jsonl" >"$out/$n-s1.val.dat"
    printf "%s'%s' using 1:2 with lines title '%s'" "$sep" "$out/$n-s1.val.dat" "$n"
    sep=", "
  done
  echo
} >"$out/sparse.gp"
if command -v gnuplot >/dev/null && gnuplot "$out/sparse.gp" 2>/dev/null; then echo "picture: $plot"; fi
# ---- the paired spike: mean over the updates of excess(k) - jump, k = 0 .. 30, at d = 0.25 ----
spike_plot=${SPARSE_SPIKE_PLOT:-$out/spike.png}
{
  echo "set terminal pngcairo size 1000,640"
  echo "set output '$spike_plot'"
  echo "set xlabel 'steps after the topology update (k)'"
  echo "set title 'paired optimizer spike, d = 0.25, seed 1: mean over the 7 updates'"
  echo "set ylabel 'probe loss - no-update control - jump (nats)'"
  echo "set key top right"
  echo "set grid"
  printf 'plot '
  sep=""
  for n in set-0.25 rigl-0.25 set+local-0.25 set+local+warmup-0.25 smet-0.25; do
    f="$out/$n-s1.jsonl"
    [ -f "$f" ] && grep -q probe_control "$f" || continue
    jq -s -r '([.[] | select(.event == "probe_control") | {key: (.step | tostring), value: .probe_loss}] | from_entries) as $c |
      [.[] | select(.event == "probe")] as $p |
      [.[] | select(.event == "topology" and $c[.step | tostring] != null) | . as $e |
        [0] + [$p[] | select(.step > $e.step and .step <= $e.step + 30 and .since_update > 0) |
               .probe_loss - $c[$e.step | tostring][.since_update - 1] - $e.pruning_jump]] as $rows |
      range(0; ($rows[0] | length)) as $k | "\($k) \([$rows[] | .[$k]] | add / length)"' "$f" >"$out/$n-s1.spike.dat"
    printf "%s'%s' using 1:2 with linespoints title '%s'" "$sep" "$out/$n-s1.spike.dat" "$n"
    sep=", "
  done
  echo
} >"$out/spike.gp"
if command -v gnuplot >/dev/null && gnuplot "$out/spike.gp" 2>/dev/null; then echo "picture: $spike_plot"; fi
echo "command (one arm): $bin/lm-train $corpus ${split[*]} --init init-s1.h5 --seed 1 --batch 16 --seq-len 128 --steps $steps --warmup $warmup --lr 2e-3 --beta2 0.999 --weight-decay 0 --eval-every 50 --eval-tokens 32768 <arm flags> -o arm.h5 --log arm.jsonl"
