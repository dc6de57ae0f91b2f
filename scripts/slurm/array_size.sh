#!/usr/bin/env bash
# The number of array tasks a template needs, from its inputs (environment, as the templates):
# sweep: the grid's cells; bootstrap: TASKS; plora: the schedule's workers; index: SHARDS.
# Usage: array_size.sh sweep|bootstrap|plora|index
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/common.sh"
case ${1:?usage: array_size.sh sweep|bootstrap|plora|index} in
  sweep) need GRID OUT
         cells=$("$bin/lm-sweep" "$GRID" -o "$OUT" --dry-run --measure-steps 0 -q | sed -n 's/^total: \([0-9]*\) cells.*/\1/p')
         [ -n "$cells" ] || { echo "array_size.sh: lm-sweep --dry-run did not count the cells of $GRID" >&2; exit 1; }
         echo "$cells" ;;
  bootstrap) need TASKS; echo "$TASKS" ;;
  plora) need SCHEDULE; jq .workers "$SCHEDULE" ;;
  index) need SHARDS; echo "$SHARDS" ;;
  *) echo "array_size.sh: unknown template '$1' (sweep, bootstrap, plora, index)" >&2; exit 2 ;;
esac
