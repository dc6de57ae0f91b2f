#!/usr/bin/env bash
# The number of array tasks a template needs, from its inputs (environment, as the templates):
# sweep: the grid's cells; bootstrap: TASKS; plora: the schedule's workers; index: SHARDS.  Exits 2
# when an input the template needs is not set.
# Usage: array_size.sh sweep|bootstrap|plora|index
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/common.sh"
[ $# -ge 1 ] || { echo "usage: array_size.sh sweep|bootstrap|plora|index" >&2; exit 2; }
count() { [[ ${!1} =~ ^[1-9][0-9]*$ ]] || { echo "array_size.sh: $1 = '${!1}' is not a positive count" >&2; exit 2; }; echo "${!1}"; }
# every input of the template is checked here, before anything is submitted
case $1 in
  sweep) need GRID OUT
         cells=$("$bin/lm-sweep" "$GRID" -o "$OUT" --dry-run --measure-steps 0 -q | sed -n 's/^total: \([0-9]*\) cells.*/\1/p')
         [ -n "$cells" ] || { echo "array_size.sh: lm-sweep --dry-run did not count the cells of $GRID" >&2; exit 1; }
         echo "$cells" ;;
  bootstrap) need TABLE K TASKS OUT; count K > /dev/null; count TASKS ;;
  plora) need SPACE MODEL SCHEDULE OUT; jq -e '.workers | numbers' "$SCHEDULE" || { echo "array_size.sh: $SCHEDULE has no workers count" >&2; exit 2; } ;;
  index) need ITEMS SHARDS OUT; count SHARDS ;;
  *) echo "array_size.sh: unknown template '$1' (sweep, bootstrap, plora, index)" >&2; exit 2 ;;
esac
