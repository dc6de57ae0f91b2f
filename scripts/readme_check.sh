#!/usr/bin/env bash
# README drift check (issue 26): the README's result tables hold numbers that repro scripts print.
# A script owns a cell by printing "readme: KEY VALUE" (VALUE exactly as the README shows it); the
# README marks the row with "<!-- readme: KEY -->".  This runs the scripts given (each with the bin
# directory, and REPRO_QUICK=1 so a script may leave out its slow rows: those print no readme line)
# and fails when a row is missing or does not show the value.
# Usage: bash scripts/readme_check.sh build/bin scripts/repro.d/rank.sh [...]
set -euo pipefail
bin=$(cd "${1:?usage: readme_check.sh BIN SCRIPT...}" && pwd)
shift
root=$(cd "$(dirname "$0")/.." && pwd)
readme=$root/README.md
fail=0 checked=0
for script in "$@"; do
  script=$(cd "$(dirname "$script")" && pwd)/$(basename "$script")
  # From the project root, as `make repro` runs them (they find ../shared/data from there).
  lines=$(cd "$root" && REPRO_QUICK=1 bash "$script" "$bin" | grep '^readme: ' || true)
  prefix=$(basename "$script" .sh)/
  printed=" "
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    key=${line#readme: }
    key=${key%% *}
    value=${line#readme: $key }
    printed+="$key "
    row=$(grep -F "<!-- readme: $key -->" "$readme" || true)
    checked=$((checked + 1))
    if [ -z "$row" ]; then
      echo "README has no row marked <!-- readme: $key --> ($script prints: $value)"
      fail=1
    elif ! grep -qF -- "| $value |" <<<"$row"; then
      echo "README row $key does not show what $script prints now: $value"
      echo "  row: $row"
      fail=1
    fi
  done <<<"$lines"
  # The script's README cells it printed no value for (slow rows in quick mode, or absent data).
  skipped=""
  for key in $(grep -o "<!-- readme: ${prefix}[^ ]* -->" "$readme" | sed 's/<!-- readme: \(.*\) -->/\1/'); do
    [[ "$printed" == *" $key "* ]] || skipped+=" $key"
  done
  [ -z "$skipped" ] || echo "readme_check: not checked by $(basename "$script") in quick mode (slow rows or absent data):$skipped"
done
echo "readme_check: $checked cells checked"
if [ "$checked" -eq 0 ]; then echo "readme_check: no cells were printed (is the data under ../shared/data?)"; exit 77; fi
exit $fail
