#!/usr/bin/env bash
# Neural CDEs with spline, kernel and GP paths, and MV-CDE / MVC-CDE (Serov, Kuleshov & Zaytsev,
# ICML 2026): path type x model -> test accuracy, NFE per series (test forward), training
# seconds, on BasicMotions and JapaneseVowels at drop rates 0 / 0.3 / 0.5 (same seed, one run
# each).  Usage: bash scripts/repro.d/cde.sh BIN_DIR [DATA_DIR]   (QUICK=1: drop rate 0 only)
set -euo pipefail
bin=${1:-build/bin}
data=${2:-../shared/data/timeseries}
if [ ! -f "$data/BasicMotions_TRAIN.ts" ]; then echo "repro cde: $data is absent (UEA archive via sktime); skipped"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
drops="0 0.3 0.5"
[ "${QUICK:-0}" = 1 ] && drops="0"
echo "Neural CDE classifiers (hidden 16, f width 32 for cde / 16 per head, Adam lr 0.01, dopri5 rtol = atol = 1e-3, seed default)"
echo "BasicMotions: 30 epochs, batch 8; JapaneseVowels: 10 epochs, batch 16.  NFE: mean forward evaluations per test series."
{
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' dataset drop model path test_acc nfe train_s
for ds in BasicMotions JapaneseVowels; do
  if [ $ds = BasicMotions ]; then common="--epochs 30 --batch-size 8"; bw=2; ls=3; heads=1,2,4
  else common="--epochs 10 --batch-size 16"; bw=1; ls=2; heads=0.5,1,2; fi
  for drop in $drops; do
    while read -r model path extra; do
      args="$data/${ds}_TRAIN.ts --model $model --path $path $extra --hidden 16 --width 32 --lr 0.01 --rtol 1e-3 --atol 1e-3 --drop-rate $drop $common -q -o $tmp/m.h5"
      tr=$("$bin/cde-train" $args)
      ev=$("$bin/cde-eval" "$tmp/m.h5" "$data/${ds}_TEST.ts" --drop-rate "$drop" -q)
      printf '%s\t%s\t%s\t%s\t%.3f\t%.1f\t%.1f\n' "$ds" "$drop" "$model" "$path" "$(jq .accuracy <<<"$ev")" "$(jq .nfe <<<"$ev")" "$(jq .train_seconds <<<"$tr")"
    done <<EOT
cde cubic
cde linear
cde kernel --bandwidth $bw
cde gp --length-scale $ls --noise 0.1
mv-cde kernel --bandwidths $heads
mv-cde gp --bandwidths $heads --noise 0.1
mvc-cde gp --bandwidths $heads --noise 0.1
EOT
  done
done
} | column -t -s $'\t'
echo "commands: $bin/cde-train $data/<ds>_TRAIN.ts --model <m> --path <p> [--bandwidth|--length-scale|--bandwidths] --hidden 16 --width 32 --lr 0.01 --rtol 1e-3 --atol 1e-3 --drop-rate <r> --epochs <e> --batch-size <b> -o m.h5"
echo "          $bin/cde-eval m.h5 $data/<ds>_TEST.ts --drop-rate <r>"
