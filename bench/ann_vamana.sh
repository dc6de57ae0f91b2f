#!/usr/bin/env bash
# Benchmark: Vamana build seconds and queries/s at recall@10 >= 0.95 (d = D = L2) on a
# generated clustered set (default 200,000 x 64, 256 Gaussian clusters, 1,000 queries),
# bimetric-index / bimetric-search --mode proxy (the paper's two passes, and --passes 1 as
# DiskANN's library) vs diskannpy (same R, L, alpha, one pass) and hnswlib
# (M = R/2, ef_construction = L) from PyPI, on the same data and threads, in the same run.
#
# Usage: bash bench/ann_vamana.sh [BIN_DIR]      (default ./build/bin)
# Environment: ANN_N (200000), ANN_DIM (64), ANN_NQ (1000), ANN_THREADS (nproc), ANN_R (64),
#   ANN_L (100), ANN_ALPHA (1.2), ANN_VENV (build/bench-venv-ann, its own: the other
#   benches pin numpy versions diskannpy cannot use; created with pip when absent).
# The QPS figure of each system is the first point of its sweep (search list L / ef) whose
# recall@10 reaches 0.95.  Prints ONE JSON object on stdout; progress goes to stderr.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin=${1:-./build/bin}
n=${ANN_N:-200000}; dim=${ANN_DIM:-64}; nq=${ANN_NQ:-1000}; T=${ANN_THREADS:-$(nproc)}
R=${ANN_R:-64}; L=${ANN_L:-100}; alpha=${ANN_ALPHA:-1.2}
venv=${ANN_VENV:-build/bench-venv-ann}
sweep=10,12,13,14,15,16,17,18,20,25,30,40,50,60,80,100,150,200
command -v jq >/dev/null || { echo '{"skipped": "jq not found"}'; exit 0; }
/usr/bin/python3 -c 'import numpy' 2>/dev/null || { echo '{"skipped": "python3-numpy not found"}'; exit 0; }
[ -x "$bin/bimetric-index" ] || { echo "ann_vamana.sh: $bin/bimetric-index not built" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "ann bench: generating $n x $dim clustered vectors and $nq queries" >&2
/usr/bin/python3 "$here/peer/ann_peers.py" gen "$tmp" "$n" "$dim" "$nq" 7
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

echo "ann bench: bimetric-index (R=$R L=$L alpha=$alpha, $T threads)" >&2
"$bin/bimetric-index" "$tmp/base.fbin" --proxy same -R "$R" -L "$L" --alpha "$alpha" --threads "$T" -o "$tmp/idx.h5" -q > "$tmp/ours_build.json"
"$bin/bimetric-search" "$tmp/base.fbin" --queries "$tmp/queries.fbin" --proxy same --index "$tmp/idx.h5" --mode proxy \
  --search-L "$sweep" --threads "$T" --summary-only --distortion-pairs 0 -q > "$tmp/ours_search.json"
ours=$(jq -c --slurpfile b "$tmp/ours_build.json" '{passes: 2, build_seconds: $b[0].build_seconds, max_degree: $b[0].max_degree,
  sweep: [.results[] | {L: .search_L, recall_at_10: .recall_at_k, queries_per_second}]}' "$tmp/ours_search.json")
# One pass at alpha: what DiskANN's library (diskannpy) does, for the like-for-like build time.
echo "ann bench: bimetric-index --passes 1" >&2
"$bin/bimetric-index" "$tmp/base.fbin" --proxy same -R "$R" -L "$L" --alpha "$alpha" --passes 1 --threads "$T" -o "$tmp/idx1.h5" -q > "$tmp/ours1_build.json"
"$bin/bimetric-search" "$tmp/base.fbin" --queries "$tmp/queries.fbin" --proxy same --index "$tmp/idx1.h5" --mode proxy \
  --search-L "$sweep" --threads "$T" --summary-only --distortion-pairs 0 -q > "$tmp/ours1_search.json"
ours1=$(jq -c --slurpfile b "$tmp/ours1_build.json" '{passes: 1, build_seconds: $b[0].build_seconds, max_degree: $b[0].max_degree,
  sweep: [.results[] | {L: .search_L, recall_at_10: .recall_at_k, queries_per_second}]}' "$tmp/ours1_search.json")

peers_ok=1
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import diskannpy, hnswlib' 2>/dev/null; then
  echo "ann bench: creating $venv with diskannpy and hnswlib from PyPI" >&2
  { /usr/bin/python3 -m venv "$venv" && "$venv/bin/pip" install -q numpy diskannpy hnswlib; } >&2 || peers_ok=0
fi
diskann='{"skipped": "diskannpy unavailable"}'; hnsw='{"skipped": "hnswlib unavailable"}'
if [ "$peers_ok" = 1 ]; then
  echo "ann bench: diskannpy" >&2
  diskann=$("$venv/bin/python" "$here/peer/ann_peers.py" diskann "$tmp" "$R" "$L" "$alpha" "$T" "$sweep" 2>"$tmp/diskann.err" | tail -1) || diskann='{"skipped": "diskannpy failed"}'
  echo "ann bench: hnswlib" >&2
  hnsw=$("$venv/bin/python" "$here/peer/ann_peers.py" hnswlib "$tmp" $((R / 2)) "$L" "$T" "$sweep" 2>/dev/null) || hnsw='{"skipped": "hnswlib failed"}'
fi
[ -n "$diskann" ] || diskann='{"skipped": "diskannpy printed nothing"}'
[ -n "$hnsw" ] || hnsw='{"skipped": "hnswlib printed nothing"}'
jq -n --argjson ours "$ours" --argjson ours1 "$ours1" --argjson diskann "$diskann" --argjson hnsw "$hnsw" \
  --arg n "$n" --arg dim "$dim" --arg nq "$nq" --arg T "$T" --arg R "$R" --arg L "$L" --arg alpha "$alpha" \
  --arg load "$load_before" --arg load_after "$(cut -d' ' -f1-3 /proc/loadavg)" '
  def at95(s): ([s[] | select(.recall_at_10 >= 0.95)] | first) // null;
  {benchmark: "ann_vamana", data: {items: ($n|tonumber), dim: ($dim|tonumber), queries: ($nq|tonumber), kind: "256 Gaussian clusters (centres N(0, I), spread N(0, I)), seed 7"},
   threads: ($T|tonumber), R: ($R|tonumber), L: ($L|tonumber), alpha: ($alpha|tonumber),
   ours: ($ours + {at_recall_095: at95($ours.sweep)}),
   ours_passes1: ($ours1 + {at_recall_095: at95($ours1.sweep)}),
   diskannpy: (if $diskann.sweep then $diskann + {at_recall_095: at95($diskann.sweep)} else $diskann end),
   hnswlib: (if $hnsw.sweep then $hnsw + {at_recall_095: at95($hnsw.sweep)} else $hnsw end),
   machine: {loadavg_before: $load, loadavg_after: $load_after}}
  | .ratios = {
      build_seconds_diskannpy_over_ours: (if .diskannpy.build_seconds then .diskannpy.build_seconds / .ours.build_seconds else null end),
      build_seconds_diskannpy_over_ours_passes1: (if .diskannpy.build_seconds then .diskannpy.build_seconds / .ours_passes1.build_seconds else null end),
      qps_ours_over_hnswlib_at_095: (if .hnswlib.at_recall_095 and .ours.at_recall_095 then .ours.at_recall_095.queries_per_second / .hnswlib.at_recall_095.queries_per_second else null end),
      qps_ours_over_diskannpy_at_095: (if .diskannpy.at_recall_095 and .ours.at_recall_095 then .ours.at_recall_095.queries_per_second / .diskannpy.at_recall_095.queries_per_second else null end)}'
