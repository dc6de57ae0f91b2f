#!/usr/bin/env bash
# Sharded Vamana builds (issue 42, DiskANN's recipe) against the single build on a generated set:
# 100,000 + 1,000 held-out 32-d vectors from 100 Gaussian clusters (awk, seeded), d = D = L2,
# R 32, L 64, one thread (graphs that depend on the seed only).  Recall@10 at search L 10..64 of
# the single build, of 4 shards merged with RobustPrune, and of the same shards truncated to the R
# nearest; build seconds; each shard's peak RSS as its own array task (run here one after another)
# against the single build's.  Prints a Markdown table.  Usage: scripts/repro.d/ann_shards.sh BIN_DIR
set -euo pipefail
bin=${1:-build/bin}
n=${SHARD_N:-100000} q=1000 dim=32 shards=${SHARD_S:-4} seed=${SHARD_SEED:-42}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk -v n=$((n + q)) -v dim=$dim -v seed=$seed 'BEGIN {
  srand(seed); pi = atan2(0, -1)
  for (c = 0; c < 100; ++c) for (k = 0; k < dim; ++k) centre[c, k] = 4 * (rand() - 0.5)
  for (i = 0; i < n; ++i) {
    c = int(rand() * 100); line = ""
    for (k = 0; k < dim; ++k) { z = sqrt(-2 * log(1 - rand())) * cos(2 * pi * rand()); line = line (k ? "," : "") sprintf("%.5f", centre[c, k] + z) }
    print line
  }
}' > "$tmp/items.csv"
data=("$tmp/items.csv" --no-header --holdout $q --proxy same --threads 1 -q)
build=(-R 32 -L 64)
sweep=10,16,24,32,48,64
/usr/bin/time -f %M -o "$tmp/single.rss" "$bin/bimetric-index" "${data[@]}" "${build[@]}" -o "$tmp/single.h5" > "$tmp/single.json"
for ((i = 0; i < shards; ++i)); do
  "$bin/bimetric-index" "${data[@]}" "${build[@]}" --shards $shards --array-task $i/$shards -o "$tmp/part-$i.h5" > "$tmp/part-$i.json"
done
parts=()
for ((i = 0; i < shards; ++i)); do parts+=("$tmp/part-$i.h5"); done
"$bin/bimetric-index" "${data[@]}" "${build[@]}" --shards $shards --parts "${parts[@]}" -o "$tmp/prune.h5" > "$tmp/prune.json"
"$bin/bimetric-index" "${data[@]}" "${build[@]}" --shards $shards --parts "${parts[@]}" --merge-cut truncate -o "$tmp/truncate.h5" > "$tmp/truncate.json"
recall() { "$bin/bimetric-search" "${data[@]}" --index "$1" --mode proxy --search-L $sweep -k 10 --summary-only --distortion-pairs 0 | jq -c '[.results[].recall_at_k]'; }
s=$(recall "$tmp/single.h5") p=$(recall "$tmp/prune.h5") t=$(recall "$tmp/truncate.h5")
echo "Sharded Vamana (DiskANN's recipe) on $n generated 32-d vectors (100 clusters, data seed $seed), $q queries, R 32, L 64, one thread"
echo
echo "| search L | single build | $shards shards, RobustPrune merge | $shards shards, truncated merge |"
echo "|---:|---:|---:|---:|"
jq -rn --argjson s "$s" --argjson p "$p" --argjson t "$t" --arg L "$sweep" '($L | split(",")) as $l |
  range($l | length) | "| \($l[.]) | \($s[.] * 10000 | round / 10000) | \($p[.] * 10000 | round / 10000) | \($t[.] * 10000 | round / 10000) |"'
echo
jq -rn --slurpfile a "$tmp/single.json" --slurpfile m "$tmp/prune.json" --slurpfile t "$tmp/truncate.json" --slurpfile p "$tmp/part-0.json" \
  --arg rss "$(cat "$tmp/single.rss")" \
  '"single build: \($a[0].build_seconds * 10 | round / 10) s, mean degree \($a[0].mean_degree * 10 | round / 10), peak RSS \(($rss | tonumber) / 1024 | round) MiB; sharded: plan \($p[0].plan_seconds * 100 | round / 100) s per task, merge \($m[0].sharded.merge_seconds * 100 | round / 100) s, mean degree \($m[0].mean_degree * 10 | round / 10) (pruned) and \($t[0].mean_degree * 10 | round / 10) (truncated)"'
jq -rs 'map("shard \(.shard): \(.items) items, \(.seconds * 10 | round / 10) s, working set \(.working_bytes / 1048576 | round) MiB, task peak RSS \(.peak_rss_bytes / 1048576 | round) MiB") | .[]' "$tmp"/part-*.json
