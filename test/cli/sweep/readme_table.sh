#!/usr/bin/env bash
# README "Scaling laws on real runs": each law's held-out mean absolute error (recipes, largest model,
# largest D) as the shipped summary has it, rounded to 3 decimals.  Usage: readme_table.sh SUMMARY README
set -euo pipefail
summary=$1 readme=$2
section=$(sed -n '/^### Scaling laws on real runs/,/^Seed sd/p' "$readme")
n=0
while IFS=$'\t' read -r law recipe params tokens; do
  row=$(grep -E "^\| ($law|capacity-noise mixing law) \|" <<< "$section" | grep -F "$([ "$law" = capacity-noise ] && echo mixing || echo "$law")" | head -1)
  for v in $recipe $params $tokens; do
    f=$(printf '%.3f' "$v")
    grep -qF -- "$f" <<< "$row" || { echo "README's $law row lacks $f: $row"; exit 1; }
  done
  n=$((n + 1))
done < <(jq -r '[.errors[] | select(.law == "infolaw" or .law == "chinchilla" or .law == "data-constrained" or .law == "capacity-noise")]
  | group_by(.law) | .[] | [(.[0].law | if . == "infolaw" then "InfoLaw" elif . == "chinchilla" then "Chinchilla" else . end),
    (map(select(.set == "heldout-recipe"))[0].mae), (map(select(.set == "heldout-params"))[0].mae),
    (map(select(.set == "heldout-tokens"))[0].mae)] | @tsv' "$summary")
[ $n = 4 ] || { echo "expected 4 laws in $summary, got $n"; exit 1; }
echo "4 rows match"
