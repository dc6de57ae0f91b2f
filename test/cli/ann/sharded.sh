#!/usr/bin/env bash
# bimetric-index --shards (issue 42, DiskANN's sharded build) on digits with d = D, one thread:
# the array tasks' parts merged (in any order) give the in-process sharded build's graph bit for
# bit; every item sits in 2 shards; the merged index's recall@10 at L = 10, 16 and 24 is within
# 0.01 of the single build's; and a control without overlap (each item in one shard: S
# disconnected graphs) misses it, so the comparison can fail.  Usage: sharded.sh BIX BSR DIGITS
set -u
bix=$1 bsr=$2 digits=$3
fail() { echo "$*"; exit 1; }
data="$digits --no-header --label-last --holdout 200 --proxy same --threads 1 -q"
build="-R 16 -L 32"
"$bix" $data $build -o single.h5 > /dev/null || fail "the single build failed"
"$bix" $data $build --shards 4 -o sharded.h5 > sharded.json || fail "the sharded build failed"
for i in 0 1 2 3; do
  "$bix" $data $build --shards 4 --array-task $i/4 -o part-$i.h5 > part-$i.json || fail "array task $i failed"
done
"$bix" $data $build --shards 4 --parts part-3.h5 part-1.h5 part-0.h5 part-2.h5 -o merged.h5 > /dev/null || fail "the merge failed"
graph() { h5dump -d /index/neighbors "$1" | tail -n +2; }
[ "$(graph sharded.h5)" = "$(graph merged.h5)" ] || fail "the merged parts differ from the in-process sharded build"
[ "$(graph sharded.h5)" != "$(graph single.h5)" ] || fail "the sharded graph is the single build's: nothing was sharded"
jq -e '([.sharded.shards[].items] | add) == 2 * 1597 and (.sharded.shards | length) == 4' sharded.json > /dev/null ||
  fail "the shards do not hold every item twice"
jq -se 'map(.peak_rss_bytes > 0 and .working_bytes > 0) | all' part-*.json > /dev/null || fail "a part does not report its memory"
recall() { "$bsr" $data --index "$1" --mode proxy --search-L 10,16,24 -k 10 --summary-only | jq -c '[.results[].recall_at_k]'; }
want=$(recall single.h5) got=$(recall merged.h5)
jq -ne --argjson a "$want" --argjson b "$got" '[range(3)] | map(($a[.] - $b[.]) | fabs <= 0.01) | all' > /dev/null ||
  fail "recall@10 at L = 10, 16, 24: single $want, merged $got (more than 0.01 apart)"
"$bix" $data $build --shards 4 --shard-overlap 1 -o apart.h5 > /dev/null || fail "the control failed"
apart=$(recall apart.h5)
jq -ne --argjson a "$want" --argjson b "$apart" '($a[0] - $b[0]) > 0.01' > /dev/null ||
  fail "the control without overlap reaches recall $apart, as the single build's $want: the comparison proves nothing"
echo "recall@10 single $want, merged $got, no overlap $apart"
