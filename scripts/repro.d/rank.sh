#!/usr/bin/env bash
# Reproduce the Bayesian Mallows / Pseudo-Mallows checks (issue 8): published BayesMallows values
# and exact references, one row per check with the command that made it.  $1 = bin directory.
# "readme: KEY VALUE" lines are the README cells this script owns (scripts/readme_check.sh);
# REPRO_QUICK=1 leaves out the slow rows.
set -euo pipefail
bin=${1:-build/bin}
d=../shared/data/rankings
echo
echo "Bayesian Mallows model (BayesMallows) and Pseudo-Mallows (Liu et al., ICML 2026)"
printf '%-52s %-20s %-20s\n' "check" "ours" "reference"
logz=()
for m in kendall:9.69641008390133 cayley:13.0481794289176 hamming:12.4542713806513; do
  out=$("$bin/mallows-mcmc" --log-z 10:3 --metric "${m%%:*}")
  printf '%-52s %-20s %-20s\n' "log Z_10(3), ${m%%:*} (BayesMallows)" "$(jq .log_z <<<"$out")" "${m##*:}"
  logz+=("$(jq .log_z <<<"$out")")
done
echo "readme: rank/log-z ${logz[0]} / ${logz[1]} / ${logz[2]}"
echo "command: $bin/mallows-mcmc --log-z 10:3 --metric kendall"
# The authors' full-data regime (pseudo-mallows/fit_pseudo_mallows_full_data.R): n = 20 items, N = 20
# assessors drawn from a footrule Mallows model with rho0 = 1..n, alpha0 = 2; alpha fixed at alpha0.
sim=$(mktemp -d)
trap 'rm -rf "$sim"' EXIT
cmd="$bin/mallows-mcmc --simulate 20 --items 20 --alpha 2 --seed 2026 -o $sim/sim.csv"
$cmd
echo "command: $cmd"
cmd="$bin/pseudomallows-fit $sim/sim.csv --alpha 2 --order v-mix --exact -q"
v=$($cmd | jq -r '"\(.exact.max_tv*1000|round/1000) / \(.exact.mean_tv*1000|round/1000)"')
printf '%-52s %-20s %-20s\n' "simulated n=20 N=20: PM (v-mix) max / mean TV" "$v" "0 / 0 (exact)"
echo "readme: rank/sim-pm-tv $v"
echo "command: $cmd"
if [ "${REPRO_QUICK:-0}" != 1 ]; then
  cmd="$bin/mallows-mcmc $sim/sim.csv --fix-alpha --alpha 2 --exact --iterations 100000 --burnin 10000 -q"
  v=$($cmd | jq -r '"\(.exact.max_tv*1000|round/1000) / \(.exact.mean_tv*1000|round/1000)"')
  printf '%-52s %-20s %-20s\n' "simulated n=20 N=20: MCMC 1e5 it. max / mean TV" "$v" "0 / 0 (exact)"
  echo "readme: rank/sim-mcmc-tv $v"
  echo "command: $cmd"
fi
if [ ! -f "$d/potato_visual.csv" ]; then echo "repro: $d is absent (BayesMallows data); skipping the data checks"; exit 0; fi
cmd="$bin/mallows-mcmc $d/beach_preferences.csv --pairwise --iterations 20000 --burnin 5000 --chains 4 -q"
out=$($cmd)
printf '%-52s %-20s %-20s\n' "beach CP consensus (BayesMallows vignette)" "$(jq -c '[.cp_consensus[].item]' <<<"$out" | tr -d '[]')" "9,6,3,11,15,10,1,7,5,13,4,8,12,14,2"
echo "readme: rank/beach-cp $(jq -c '[.cp_consensus[].item]' <<<"$out" | tr -d '[]')"
echo "command: $cmd"
cmd="$bin/mallows-mcmc $d/potato_visual.csv --iterations 20000 --burnin 2000 --chains 4 -q"
out=$($cmd)
printf '%-52s %-20s %-20s\n' "potato_visual alpha posterior mean (sd)" "$(jq -r '"\(.alpha.mean*100|round/100) (\(.alpha.sd*100|round/100))"' <<<"$out")" "-"
echo "readme: rank/potato-alpha $(jq -r '"\(.alpha.mean*100|round/100) (\(.alpha.sd*100|round/100))"' <<<"$out")"
printf '%-52s %-20s %-20s\n' "potato_visual CP top 4 (true ranking: 12,13,9,10)" "$(jq -c '[.cp_consensus[:4][].item]' <<<"$out" | tr -d '[]')" "12,13,9,10"
echo "command: $cmd"
a=$(jq .alpha.mean <<<"$out")
if [ "${REPRO_QUICK:-0}" != 1 ]; then
  cmd="$bin/mallows-mcmc $d/potato_visual.csv --fix-alpha --alpha $a --exact --iterations 100000 --burnin 2000 --chains 4 -q"
  v=$($cmd | jq '.exact.max_tv*1000|round/1000')
  printf '%-52s %-20s %-20s\n' "potato MCMC marginals vs exact DP (max TV)" "$v" "0 (exact)"
  echo "readme: rank/potato-mcmc-tv $v"
  echo "command: $cmd"
fi
cmd="$bin/pseudomallows-fit $d/potato_visual.csv --alpha $a --exact -q"
printf '%-52s %-20s %-20s\n' "potato Pseudo-Mallows KL(q||p), V order (default)" "$($cmd | jq '.exact.kl*1000|round/1000')" "-"
echo "command: $cmd"
cmd="$bin/pseudomallows-fit $d/potato_visual.csv --alpha $a --exact --random-orders 30 --order search -q"
out=$($cmd)
printf '%-52s %-20s %-20s\n' "potato Pseudo-Mallows KL(q||p), searched order" "$(jq '.exact.kl*1000|round/1000' <<<"$out")" "-"
printf '%-52s %-20s %-20s\n' "potato Pseudo-Mallows KL, 30 random orders (median)" "$(jq '.random_orders.median*1000|round/1000' <<<"$out")" "-"
echo "readme: rank/potato-pm-kl $(jq '.exact.kl*1000|round/1000' <<<"$out") / $(jq '.random_orders.median*1000|round/1000' <<<"$out")"
printf '%-52s %-20s %-20s\n' "potato Pseudo-Mallows marginals vs exact (max TV)" "$(jq '.exact.max_tv*1000|round/1000' <<<"$out")" "0 (exact)"
echo "command: $cmd"
