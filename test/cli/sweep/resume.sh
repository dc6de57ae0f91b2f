#!/usr/bin/env bash
# A sweep killed (SIGTERM) while its second cell trains: its lm-train has exited when the sweep
# has (lm-sweep waits for its children), and the rerun keeps the finished cell as it
# is, resumes the killed cell from its checkpoint (lm-train --resume), and ends with one row per
# cell; the resumed cell's loss equals an uninterrupted run's bit for bit.
# Usage: resume.sh LM_SWEEP GRID
set -u
sweep=$1 grid=$2
"$sweep" "$grid" -o run/ -t 1 --checkpoint-every 20 -q &
pid=$!
log=run/cells/b.prop.D96000.E2.s1/train.jsonl
for _ in $(seq 1 600); do
  if [ -f "$log" ] && [ "$(grep -c '"step"' "$log")" -ge 6 ]; then break; fi
  sleep 0.05
done
# this sweep's own children (a pattern over all processes would also match another test's cells)
kids=$(pgrep -P $pid)
[ -n "$kids" ] || { echo "the sweep runs no lm-train at the kill"; exit 1; }
kill -TERM $pid
wait $pid
rc=$?
[ $rc = 143 ] || { echo "the killed sweep exited $rc, not 143"; exit 1; }
[ -f run/cells/a.prop.D1024.Enat.s1/result.json ] || { echo "the first cell has no result"; exit 1; }
[ ! -f run/cells/b.prop.D96000.E2.s1/result.json ] || { echo "the killed cell has a result"; exit 1; }
for k in $kids; do kill -0 "$k" 2> /dev/null && { echo "lm-train (pid $k) outlived the sweep"; exit 1; }; done
first=$(sha256sum run/cells/a.prop.D1024.Enat.s1/result.json)
"$sweep" "$grid" -o run/ -t 1 --checkpoint-every 20 -q || { echo "the rerun failed"; exit 1; }
[ "$first" = "$(sha256sum run/cells/a.prop.D1024.Enat.s1/result.json)" ] || { echo "the finished cell was run again"; exit 1; }
[ "$(grep -c '"meta"' "$log")" = 2 ] || { echo "the killed cell did not resume (one meta line per start expected)"; exit 1; }
[ "$(tail -n +2 run/table.csv | wc -l)" = 2 ] || { echo "the table does not have one row per cell"; exit 1; }
[ "$(cut -d, -f2 run/table.csv | sort | uniq -d)" = "" ] || { echo "duplicate rows"; exit 1; }
"$sweep" "$grid" -o straight/ -t 1 --cell 1 -q || exit 1
a=$(jq .loss run/cells/b.prop.D96000.E2.s1/result.json) b=$(jq .loss straight/cells/b.prop.D96000.E2.s1/result.json)
[ "$a" = "$b" ] || { echo "resumed loss $a differs from the uninterrupted run's $b"; exit 1; }
echo "resumed: $a"
