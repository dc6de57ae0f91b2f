#!/usr/bin/env bash
# The 2-D EBM reward-tuning check over several seeds (kept out of CMake strings, whose ';'
# splits arguments; scripts/repro.d/smc.sh uses it too).
#   smc_ebm_margin.sh SMC_OPTIMIZE "SEEDS" [EXTRA ARGS...]
# For each seed: smc-optimize --problem ebm-reward --method sosmc, then --method impdiff, with
# the extra arguments (each seed trains its own base model).  Prints one JSON object:
#   {"runs": [{seed, sosmc, impdiff, margin, optimum, base}], "margin_mean", "margin_sd"
#    (sample sd; 0 for one seed), "sosmc_wins"}
# where sosmc/impdiff are the final mean rewards, margin = sosmc - impdiff, optimum the mean
# reward of pi* ~ pi_0 exp(R / beta), base pi_0's mass in the reward region.
set -euo pipefail
smc="$1"
seeds="$2"
shift 2
rows=""
for seed in $seeds; do
  s="$("$smc" --problem ebm-reward --method sosmc --seed "$seed" -q "$@")"
  i="$("$smc" --problem ebm-reward --method impdiff --seed "$seed" -q "$@")"
  row="$(jq -cn --argjson seed "$seed" --argjson s "$s" --argjson i "$i" \
    '{seed: $seed, sosmc: $s.mean_reward, impdiff: $i.mean_reward, margin: ($s.mean_reward - $i.mean_reward),
      optimum: $s.optimal_reward, base: $s.reference_mean_reward}')"
  echo "$row" >&2
  rows+="$row"$'\n'
done
printf '%s' "$rows" | jq -s -c 'length as $n | (map(.margin) | add / $n) as $m
  | {runs: ., margin_mean: $m,
     margin_sd: (if $n > 1 then (map((.margin - $m) * (.margin - $m)) | add / ($n - 1) | sqrt) else 0 end),
     sosmc_wins: (map(select(.margin > 0)) | length)}'
