#!/usr/bin/env bash
# Bi-metric nearest-neighbour search (Xu, Silwal & Indyk) on UCI digits: recall@10 against the
# exact 64-d L2 neighbours versus the D-call quota Q, for the bi-metric search and the
# retrieve-by-d-then-rerank baseline, on a Vamana graph and on a cover tree, both built with
# the proxy d = 4x4-pooled digits (4 coordinates).  The paper's main figure in miniature.
# Usage: scripts/repro.d/ann.sh BIN_DIR   (PNG in $REPRO_OUT, default BIN_DIR/../repro)
set -euo pipefail
bin=${1:-build/bin}
digits=../shared/data/vectors/digits.csv.gz
if [ ! -f "$digits" ]; then echo "repro (bi-metric): $digits is absent (scikit-learn digits); skipped"; exit 0; fi
out=${REPRO_OUT:-$bin/../repro}
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
qs=10,20,50,100,150,200,300,400,600,800,1200,1600
common=("$digits" --no-header --label-last --holdout 200 --proxy pool:4 -k 10 -Q $qs --summary-only -q)
echo "Bi-metric search on digits (1,597 items, 200 held-out queries): D = 64-d L2, d = 4x4 pooling (4-d L2)"
for idx in vamana cover-tree; do
  for mode in bimetric rerank; do
    extra=()
    # One build thread: the Vamana graph then depends on the seed only (reproducible numbers).
    [ "$idx" = vamana ] && extra=(-R 32 -L 64 --alpha 1.2 --threads 1)
    "$bin/bimetric-search" "${common[@]}" --index-type $idx "${extra[@]}" --mode $mode > "$tmp/$idx-$mode.json"
    jq -r '.results[] | "\(.Q)\t\(.recall_at_k)"' "$tmp/$idx-$mode.json" > "$tmp/$idx-$mode.tsv"
  done
done
jq -r '.distortion | "distortion D/d over \(.pairs) query-item pairs: min \(.quantiles.q0|.*1000|round/1000), median \(.quantiles.q50|.*1000|round/1000), 99% \(.quantiles.q99|.*1000|round/1000), max \(.quantiles.q100|.*1000|round/1000)"' "$tmp/vamana-bimetric.json"
printf '%-6s %-16s %-16s %-18s %-18s\n' Q "vamana bimetric" "vamana rerank" "cover-tree bimetric" "cover-tree rerank"
paste "$tmp/vamana-bimetric.tsv" "$tmp/vamana-rerank.tsv" "$tmp/cover-tree-bimetric.tsv" "$tmp/cover-tree-rerank.tsv" |
  awk -F'\t' '{printf "%-6s %-16.4f %-16.4f %-18.4f %-18.4f\n", $1, $2, $4, $6, $8}' | tee "$tmp/table.txt"
echo "command: $bin/bimetric-search ${common[*]} --index-type vamana -R 32 -L 64 --alpha 1.2 --threads 1 --mode bimetric   (and --mode rerank, --index-type cover-tree)"
awk '{print $1, $2, $3, $4, $5}' "$tmp/table.txt" > "$tmp/plot.dat"
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot <<GP
set terminal pngcairo size 800,560 noenhanced
set output "$out/bimetric_digits.png"
set title "Digits: recall@10 vs D-call quota Q (d = 4x4 pooling, D = 64-d L2)"
set xlabel "Q (D-calls per query)"
set ylabel "recall@10"
set logscale x
set key bottom right
set grid
plot "$tmp/plot.dat" using 1:2 with linespoints title "Vamana bimetric", \
     "" using 1:3 with linespoints title "Vamana rerank", \
     "" using 1:4 with linespoints title "cover tree bimetric", \
     "" using 1:5 with linespoints title "cover tree rerank"
GP
  echo "plot: $out/bimetric_digits.png"
else
  echo "plot: skipped (gnuplot not installed)"
fi
