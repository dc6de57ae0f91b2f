#!/usr/bin/env bash
# Issue 43: the data-mixing laws on the 17-domain Pile table (62 mixtures of 1B models, 25B tokens;
# ../shared/data/scaling/pile17_1B.csv), on three splits: the paper's 70/30 split and two random 30 %
# splits (--val-fraction 0.3, seeds 1 and 2).  On each split, with 5 fitting seeds each:
#  - every law with the defaults (mixlaw-fit --law all: capacity-noise's noise penalty chosen by
#    5-fold cross-validation on the training rows);
#  - capacity-noise unpenalised (--l2 0), alone and with each other remedy: the reference's
#    evaluation cap (--max-evals 174), early stopping on held-in rows (--early-stop 0.2), start
#    selection by 5-fold cross-validation (--cv-folds 5).
# Then, on the paper's split with seed 0: validation MRE per domain (unpenalised, default,
# capacity) and along the unpenalised optimiser's path (--trace).
# About 15 minutes on 2 cores.  $1 = bin directory.  Results: data/repro/mix/ (summary.md, summary.json).
set -euo pipefail
bin=${1:-build/bin}
s=../shared/data/scaling
res=${MIX_RESULTS:-data/repro/mix}
if [ ! -f "$s/pile17_1B.csv" ]; then
  echo "mix.sh: $s/pile17_1B.csv is absent (see ../shared/data/README.md); skipped"
  exit 0
fi
mkdir -p "$res"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
base=("$bin/mixlaw-fit" "$s/pile17_1B.csv" --params 195.2 --tokens 2500 --fix H=0.3 -q)
split_args() {  # SPLIT -> the flags that make it
  case $1 in
    paper) echo "--split $s/pile17_1B_split.json" ;;
    random1) echo "--val-fraction 0.3 --seed 1" ;;
    random2) echo "--val-fraction 0.3 --seed 2" ;;
  esac
}
arms=("default" "l2=0" "l2=0,max-evals=174" "l2=0,early-stop=0.2" "l2=0,cv-folds=5")
arm_args() {
  case $1 in
    default) echo "--law all" ;;
    l2=0) echo "--law capacity-noise --l2 0" ;;
    l2=0,max-evals=174) echo "--law capacity-noise --l2 0 --max-evals 174" ;;
    l2=0,early-stop=0.2) echo "--law capacity-noise --l2 0 --early-stop 0.2" ;;
    l2=0,cv-folds=5) echo "--law capacity-noise --l2 0 --cv-folds 5" ;;
  esac
}
rows=()
for split in paper random1 random2; do
  for arm in "${arms[@]}"; do
    out=$tmp/$split-$arm.json
    # shellcheck disable=SC2046
    "${base[@]}" $(split_args $split) $(arm_args "$arm") --seeds 5 -o "$out"
    rows+=("$(jq -c --arg split "$split" --arg arm "$arm" '[.laws[] | {split: $split, arm: $arm, law,
        val_mre: .seeds.val_mre, train_mre: .seeds.train_mre, fit_seconds, l2_seed0: .regularisation.l2}]' "$out")")
  done
  jq -c --arg split "$split" '{split: $split, ranking}' "$tmp/$split-default.json" > "$tmp/$split-ranking.json"
done
jq -s 'add' <(printf '%s\n' "${rows[@]}") > "$tmp/rows.json"
jq -s '.' "$tmp"/*-ranking.json > "$tmp/rankings.json"

# Per domain and along the path, paper split, seed 0.
p=(--split "$s/pile17_1B_split.json" --seeds 1 --seed 0)
"${base[@]}" "${p[@]}" --law capacity-noise --l2 0 --trace "$tmp/trace.jsonl" -o "$tmp/cn0.json"
"${base[@]}" "${p[@]}" --law capacity-noise -o "$tmp/cnd.json"
"${base[@]}" "${p[@]}" --law capacity -o "$tmp/cap.json"
jq -n --slurpfile a "$tmp/cn0.json" --slurpfile b "$tmp/cnd.json" --slurpfile c "$tmp/cap.json" '
  [$a[0].laws[0].val.per_domain | keys[] as $d | {domain: $d,
    train_rows: $a[0].laws[0].train.per_domain[$d].count, val_entries: $a[0].laws[0].val.per_domain[$d].count,
    unpenalised: $a[0].laws[0].val.per_domain[$d].mre, default: $b[0].laws[0].val.per_domain[$d].mre,
    capacity: $c[0].laws[0].val.per_domain[$d].mre,
    A_unpenalised: $a[0].laws[0].params["A[\($d)]"], a_unpenalised: $a[0].laws[0].params["a[\($d)]"],
    A_default: $b[0].laws[0].params["A[\($d)]"]}]' > "$tmp/domains.json"
jq -s '[group_by(.start)[] | {start: .[0].start, steps: length,
    best: (min_by(.val_mre) | {step, objective, val_mre}), last: (.[-1] | {step, objective, val_mre}),
    at: [.[] | select(.step == 10 or .step == 40 or .step == 80 or .step == 160 or .step == 320 or .step == 640 or .step == 1000 or .step == 3000) | {step, objective, val_mre}]}]' \
  "$tmp/trace.jsonl" > "$tmp/path.json"

jq -n --slurpfile rows "$tmp/rows.json" --slurpfile rk "$tmp/rankings.json" --slurpfile dom "$tmp/domains.json" \
  --slurpfile path "$tmp/path.json" --arg cmd "bash scripts/repro.d/mix.sh $bin" '
  {command: $cmd, data: "pile17_1B.csv (62 x 17), N = 195.2 with H = 0.3 fixed, D = 2500",
   arms: $rows[0], rankings: $rk[0], per_domain_paper_seed0: $dom[0], path_paper_seed0_unpenalised: $path[0]}' \
  > "$res/summary.json"

pc() { jq -r "$1" "$res/summary.json"; }
{
  echo "# Data-mixing laws, 17 Pile domains: validation MRE (%) over 5 seeds, mean [min, max]"
  echo
  echo "Command: \`bash scripts/repro.d/mix.sh $bin\` ($(date -u +%F), $(nproc) cores)."
  echo
  echo "| split | arm | law | val MRE mean [min, max] | train MRE mean | fit s (seed 0) |"
  echo "|---|---|---|---|---|---|"
  pc '.arms[] | "| \(.split) | \(.arm) | \(.law) | \(.val_mre.mean*100000|round/1000) [\(.val_mre.min*100000|round/1000), \(.val_mre.max*100000|round/1000)] | \(.train_mre.mean*100000|round/1000) | \(.fit_seconds*10|round/10) |"'
  echo
  echo "Ranking by mean validation MRE (default arm); \"separated\" = the worst seed beats the next law's best:"
  echo
  pc '.rankings[] | "- \(.split): " + ([.ranking[] | "\(.law) \(.val_mre*100000|round/1000)" + (if .separated_from_next == true then " <" elif .separated_from_next == false then " ~" else "" end)] | join(" "))'
  echo
  echo "l2 chosen by the default's cross-validation for the first seed: $(pc '[.arms[] | select(.arm == "default" and .law == "capacity-noise") | "\(.split) \(.l2_seed0)"] | join(", ")')"
  echo
  echo "## Per domain, paper split, seed 0: validation MRE (%)"
  echo
  echo "| domain | train rows | val entries | capacity-noise --l2 0 | capacity-noise default | capacity | A, a (l2 0) | A (default) |"
  echo "|---|---|---|---|---|---|---|---|"
  pc '.per_domain_paper_seed0[] | "| \(.domain) | \(.train_rows) | \(.val_entries) | \(.unpenalised*10000|round/100) | \(.default*10000|round/100) | \(.capacity*10000|round/100) | \(.A_unpenalised*1000|round/1000), \(.a_unpenalised*1000|round/1000) | \(.A_default*1000|round/1000) |"'
  echo
  echo "## Along the unpenalised optimiser's path, paper split, seed 0 (every start; objective, val MRE %)"
  echo
  pc '.path_paper_seed0_unpenalised[] | "- start \(.start): lowest val MRE \(.best.val_mre*100000|round/1000) at step \(.best.step) (objective \(.best.objective*10000|round/10000)); last \(.last.val_mre*100000|round/1000) at step \(.last.step) (objective \(.last.objective*10000|round/10000)); " + ([.at[] | "\(.step): \(.val_mre*100000|round/1000)"] | join(", "))'
} > "$res/summary.md"
cat "$res/summary.md"
