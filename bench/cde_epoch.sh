#!/usr/bin/env bash
# Benchmark: seconds per training epoch and NFE of the cubic neural CDE on BasicMotions,
# cde-train against torchcde (PyPI, CPU, float64, dopri5 with backprop through the solver,
# adjoint=False) with the same threads and hyperparameters (hidden 16, f width 32, batch 8,
# Adam lr 0.01, rtol = atol = 1e-3, 3 epochs), measured in the same run; then cde-train's
# cubic, kernel and GP paths trained 30 epochs: test accuracy and NFE per series.
#
# Usage: bash bench/cde_epoch.sh [BIN_DIR] [DATA_DIR]   (defaults build/bin, ../shared/data/timeseries)
# Environment: THREADS (default 1), CDE_BENCH_VENV (default build/bench-venv-torch; created with
# pip install torch torchcde when absent).
# NFE: torchdiffeq solves a batch as one system, so the peer's NFE is per batch; cde-train solves
# each series with its own steps, so its NFE is per series.
# Prints ONE JSON object on stdout; progress goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin=${1:-./build/bin}
data=${2:-../shared/data/timeseries}
threads=${THREADS:-1}
venv=${CDE_BENCH_VENV:-build/bench-venv-torch}
if ! command -v jq >/dev/null; then echo '{"skipped": "jq not found"}'; exit 0; fi
if [ ! -f "$data/BasicMotions_TRAIN.ts" ]; then echo '{"skipped": "'"$data"' absent"}'; exit 0; fi
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torchcde' 2>/dev/null; then
  echo "cde bench: installing torch + torchcde into $venv (PyPI)" >&2
  { python3 -m venv "$venv" && "$venv/bin/pip" install -q torch torchcde; } >&2 || { echo '{"skipped": "could not install torch/torchcde"}'; exit 0; }
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
hp="--hidden 16 --width 32 --batch-size 8 --lr 0.01 --rtol 1e-3 --atol 1e-3"
echo "cde bench: cde-train cubic, 3 epochs, $threads thread(s)" >&2
"$bin/cde-train" "$data/BasicMotions_TRAIN.ts" --path cubic $hp --epochs 3 --threads "$threads" -q -o $tmp/c.h5 --log $tmp/c.jsonl > $tmp/c.json
ours_spe=$(tail -n +2 $tmp/c.jsonl | jq -s 'map(.seconds) | add / length')
ours_nfe=$(tail -n +2 $tmp/c.jsonl | jq -s 'map(.nfe) | add / length')
echo "cde bench: torchcde cubic, 3 epochs" >&2
peer=$("$venv/bin/python" "$here/peer/cde_torchcde.py" "$data/BasicMotions_TRAIN.ts" "$data/BasicMotions_TEST.ts" $hp --epochs 3 --threads "$threads")
paths='[]'
for p in "cubic" "kernel --bandwidth 2" "gp --length-scale 3 --noise 0.1"; do
  echo "cde bench: cde-train $p, 30 epochs" >&2
  tr=$("$bin/cde-train" "$data/BasicMotions_TRAIN.ts" --path $p $hp --epochs 30 --threads "$threads" -q -o $tmp/p.h5)
  ev=$("$bin/cde-eval" $tmp/p.h5 "$data/BasicMotions_TEST.ts" --threads "$threads" -q)
  paths=$(jq -c --arg p "$p" --argjson tr "$tr" --argjson ev "$ev" '. + [{path: $p, test_accuracy: $ev.accuracy, test_nfe_per_series: $ev.nfe, train_nfe_per_series: $tr.nfe, seconds_per_epoch: $tr.seconds_per_epoch}]' <<<"$paths")
done
jq -n --argjson spe "$ours_spe" --argjson nfe "$ours_nfe" --argjson peer "$peer" --argjson paths "$paths" --arg threads "$threads" '{
  benchmark: "cde_epoch", data: "BasicMotions (40 train / 40 test, 6 channels x 100)", threads: ($threads|tonumber),
  ours: {seconds_per_epoch: $spe, nfe_per_series: $nfe},
  peer: $peer,
  speedup_per_epoch: ($peer.seconds_per_epoch / $spe),
  paths_30_epochs: $paths}'
