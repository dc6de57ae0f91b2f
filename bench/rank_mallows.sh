#!/usr/bin/env bash
# Benchmark (issue 8): time to a given marginal accuracy for the Bayesian Mallows posterior.
#   potato_visual (12 x 20), alpha fixed at 10.86 (our posterior mean): accuracy = max over items
#     of the total-variation distance between estimated and exact (subset DP) rank marginals;
#     our mallows-mcmc and the peer BayesMallows over a ladder of iteration counts (one chain,
#     10% burn-in, footrule, leap size 1, random start), and pseudomallows-fit (default order v,
#     and --order search).  Speed-up at equal accuracy = CPU seconds of the first MCMC ladder rung
#     whose max TV is at or below Pseudo-Mallows' / Pseudo-Mallows' CPU seconds, for one PM run at
#     the default 10,000 draws; potato_visual.time_to_accuracy times both over the ladders of the
#     simulated section below (PM reaches its floor within tens of draws, so that is the fair one).
#   sushi_rankings (5000 x 10), alpha fixed at 1.70: accuracy against the exact subset-DP
#     marginals (n = 10 makes them cheap, so no long MCMC run is needed as the reference);
#     mallows-mcmc ladder (one chain, random start) and pseudomallows-fit.
#   simulated (the authors' full-data regime, pseudo-mallows/fit_pseudo_mallows_full_data.R):
#     rankings drawn exactly from a footrule Mallows model with rho0 = 1..n, alpha0 = 2
#     (mallows-mcmc --simulate, seed 2026), n = 20 items, N = 20 (their script) and N = 100
#     assessors, and N = 5 (a weaker posterior), posterior at alpha = alpha0.  Accuracy = max and mean over items of the TV distance of the rank marginals
#     to the exact subset-DP marginals.  Time-to-accuracy curves: pseudomallows-fit with
#     --order v-mix (the authors' sampler: a fresh V order per draw), v (one V order, orientation
#     chosen by the estimated KL) and search, over draw counts, and v-mix-reweight (opt-in, not the
#     paper's method: v-mix draws weighted by p~/q, pseudomallows-fit --reweight, whose marginals
#     estimate p's, so it has no floor) (CPU seconds of alpha, order and
#     draws: sampling_cpu_seconds, the KL diagnostic excluded); mallows-mcmc over iteration counts
#     (one chain, 10% burn-in, random start, CPU seconds of the sampling and the marginals).  Every rung is run with
#     seeds 1-3, PM and MCMC rungs interleaved; a rung's accuracy and seconds are the medians.
#     Time to an accuracy = the first rung whose median accuracy is at or below it; the
#     PM-over-MCMC speed-up at each stated level is MCMC time / PM time (null where one never gets
#     there).  Levels: 1.1 x the floor of that PM order (its accuracy at the most draws: q's own
#     error, which more draws do not remove; max and mean TV), 1.1 x its best rung (the floor less
#     the noise of three seeds), then fixed levels max TV 0.2/0.1/0.05, mean TV 0.1/0.05/0.02.
# Times are process CPU seconds of the sampling/fit (the machines are shared; wall time is noisy).
# Peer: BayesMallows built from its public repository (ocbe-uio/BayesMallows; from a local git
# mirror, BAYESMALLOWS_GIT, when there is one, else cloned) with Debian's R into build/bench-r/lib;
# its DESCRIPTION lists 'relations' (not in Debian, CRAN unreachable here), used only for pairwise
# transitive closures, so the build drops that import.  Skipped with a reason when R or the build
# is unavailable.  Accounting: our MCMC's seconds are cpu_seconds (the chain set-up and every
# iteration, burn-in included) plus marginals_cpu_seconds (counting the kept draws into marginals),
# since Pseudo-Mallows' seconds (alpha, the order, the draws and their marginals) include its
# marginals; iterations/s against the peer use cpu_seconds alone, as the peer's cover
# compute_mallows (set-up, every iteration, building its output data frames) and not its marginals.
# Usage: bash bench/rank_mallows.sh [BIN_DIR] [DATA_DIR]    Prints ONE JSON object on stdout.
# RANK_BENCH_SECTIONS="potato sushi simulated" (the default) selects the parts to run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
bin="${1:-$root/build/bin}"
data="${2:-$root/../shared/data/rankings}"
command -v jq >/dev/null || { echo '{"skipped": "jq not found"}'; exit 0; }
[ -f "$data/potato_visual.csv" ] || { jq -cn --arg r "data not found: $data" '{skipped: $r}'; exit 0; }
[ -x "$bin/mallows-mcmc" ] || { echo "rank_mallows.sh: $bin/mallows-mcmc not built" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tv() {  # max over items of total variation between two marginal CSVs (item,rank,probability)
  paste -d, "$1" "$2" | awk -F, 'NR>1{d=$3-$6; if(d<0)d=-d; s[$1]+=d} END{m=0; for(i in s) if(s[i]>m)m=s[i]; print m/2}'
}
tv_both() {  # "MAX MEAN" over items of the total variation between two marginal CSVs
  paste -d, "$1" "$2" | awk -F, 'NR>1{d=$3-$6; if(d<0)d=-d; s[$1]+=d} END{m=0; t=0; k=0; for(i in s){if(s[i]>m)m=s[i]; t+=s[i]; k++} print m/2, t/(2*k)}'
}
ladder="50 100 200 500 1000 2000 5000 10000 20000 50000 100000"
# Time to reach an accuracy: the first ladder rung at or below it (null when never reached).
reach='def reach($c; $t): ([$c[] | select(.max_tv <= $t) | .seconds] | first) // null;'

sections=" ${RANK_BENCH_SECTIONS:-potato sushi simulated} "
potato=null; peer_status="not run (potato section not selected)"
if [[ "$sections" == *" potato "* ]]; then
# ---- peer availability ----
lib="$root/build/bench-r/lib"
peer_status="ok"
if ! command -v Rscript >/dev/null; then peer_status="Rscript not found (apt-get install r-base-core r-cran-rcpparmadillo r-cran-ggplot2 r-cran-sets r-cran-rdpack r-cran-testthat)"
elif [ ! -d "$lib/BayesMallows" ]; then
  src="$root/build/bench-r/BayesMallows"
  # Source: a local git mirror (BAYESMALLOWS_GIT, a git dir; default the session mirror
  # ../.mirror/ocbe-uio+BayesMallows/repo beside the checkout) or else a clone from GitHub.
  mirror="${BAYESMALLOWS_GIT:-$root/../.mirror/ocbe-uio+BayesMallows/repo}"
  if [ ! -d "$src" ] && [ -d "$mirror" ] && command -v git >/dev/null; then
    mkdir -p "$src" && { git --git-dir="$mirror" archive HEAD | tar -x -C "$src"; } >&2 2>/dev/null || rm -rf "$src"
  fi
  if [ ! -d "$src" ] && command -v git >/dev/null; then
    git clone -q --depth 1 https://github.com/ocbe-uio/BayesMallows "$src" >&2 2>/dev/null || true
  fi
  if [ -d "$src" ]; then
    sed -i '/relations (>= /d' "$src/DESCRIPTION"
    echo "rank_mallows.sh: building BayesMallows into $lib" >&2
    mkdir -p "$lib"
    MAKEFLAGS=-j2 R CMD INSTALL --no-docs --no-test-load -l "$lib" "$src" >&2 || true
  fi
  [ -d "$lib/BayesMallows" ] || peer_status="BayesMallows not built: place its source (relations import removed) in $src"
fi

# ---- potato_visual ----
# (Also in the time-to-accuracy curves below: "time_to_accuracy", over the same draw and iteration
# ladders as the simulated data; the single PM runs here are at the default 10,000 draws.)
pv="$data/potato_visual.csv"
alpha=10.86
# Pseudo-Mallows: the default order (v, the paper's conjectured form) and the KL-minimising search;
# best of 3 runs (CPU seconds of alpha, the order, the draws and their marginals:
# sampling_cpu_seconds, as in the simulated section; not the KL diagnostic, not the exact DP).
pm_run() {  # pm_run OUT.json MARG.csv ARGS...
  local out=$1 marg=$2 best="" s; shift 2
  for rep in 1 2 3; do
    "$bin/pseudomallows-fit" "$pv" --alpha $alpha --exact --marginals "$marg" -q "$@" > "$tmp/r.json"
    s=$(jq .sampling_cpu_seconds "$tmp/r.json")
    if [ -z "$best" ] || awk -v a="$s" -v b="$best" 'BEGIN{exit !(a < b)}'; then best=$s; cp "$tmp/r.json" "$out"; fi
  done
}
"$bin/pseudomallows-fit" "$pv" --alpha $alpha --exact --exact-marginals "$tmp/exact.csv" -q --draws 10 > /dev/null
pm_run "$tmp/pm.json" "$tmp/pm.csv"
pm_run "$tmp/pms.json" "$tmp/pms.csv" --order search
pm_run "$tmp/pmx.json" "$tmp/pmx.csv" --order v-mix
pm_s=$(jq .sampling_cpu_seconds "$tmp/pm.json"); pm_tv=$(tv "$tmp/pm.csv" "$tmp/exact.csv"); pm_kl=$(jq .exact.kl "$tmp/pm.json")
pms_s=$(jq .sampling_cpu_seconds "$tmp/pms.json"); pms_tv=$(tv "$tmp/pms.csv" "$tmp/exact.csv"); pms_kl=$(jq .exact.kl "$tmp/pms.json")
pmx_s=$(jq .sampling_cpu_seconds "$tmp/pmx.json"); pmx_tv=$(tv "$tmp/pmx.csv" "$tmp/exact.csv"); pmx_kl=$(jq .exact.kl_upper_bound "$tmp/pmx.json")
ours="[]"; peer="[]"
for it in $ladder; do
  b=$((it / 10))
  "$bin/mallows-mcmc" "$pv" --fix-alpha --alpha $alpha --iterations $it --burnin $b --marginals "$tmp/m.csv" -q --threads 1 > "$tmp/m.json"
  ours=$(jq -c --argjson it $it --argjson tv "$(tv "$tmp/m.csv" "$tmp/exact.csv")" --argjson s "$(jq '.cpu_seconds + .marginals_cpu_seconds' "$tmp/m.json")" \
    --argjson sc "$(jq .cpu_seconds "$tmp/m.json")" '. + [{iterations: $it, seconds: $s, sampling_seconds: $sc, max_tv: $tv}]' <<<"$ours")
  if [ "$peer_status" = ok ]; then
    pj=$(Rscript "$here/peer/bayesmallows_mcmc.R" "$lib" "$pv" $it $b $alpha "$tmp/p.csv" 2>/dev/null | tail -1) || { peer_status="BayesMallows run failed"; continue; }
    peer=$(jq -c --argjson it $it --argjson tv "$(tv "$tmp/p.csv" "$tmp/exact.csv")" --argjson s "$(jq .cpu_seconds <<<"$pj")" \
      '. + [{iterations: $it, seconds: $s, max_tv: $tv}]' <<<"$peer")
  fi
done
potato=$(jq -n "$reach"' {alpha: $a, pseudo_mallows: {order: "v", seconds: $pms, max_tv: $pmtv, kl: $pmkl},
  pseudo_mallows_search: {order: "search", seconds: $pss, max_tv: $pstv, kl: $pskl},
  pseudo_mallows_v_mix: {order: "v-mix", seconds: $pxs, max_tv: $pxtv, kl_upper_bound: $pxkl},
  mallows_mcmc: $ours, bayesmallows: $peer,
  mcmc_seconds_to_pm_accuracy: reach($ours; $pmtv),
  pm_speedup_at_equal_accuracy: (if reach($ours; $pmtv) then reach($ours; $pmtv) / $pms else null end),
  pm_search_speedup_at_equal_accuracy: (if reach($ours; $pstv) then reach($ours; $pstv) / $pss else null end),
  pm_v_mix_speedup_at_equal_accuracy: (if reach($ours; $pxtv) then reach($ours; $pxtv) / $pxs else null end),
  iterations_per_second: {ours: ($ours[-1].iterations / $ours[-1].sampling_seconds),
                          bayesmallows: (if ($peer | length) > 0 then $peer[-1].iterations / $peer[-1].seconds else null end)},
  seconds_to_tv_0_1: {ours: reach($ours; 0.1), bayesmallows: reach($peer; 0.1)},
  seconds_to_tv_0_05: {ours: reach($ours; 0.05), bayesmallows: reach($peer; 0.05)}}' \
  --argjson a $alpha --argjson pms "$pm_s" --argjson pmtv "$pm_tv" --argjson pmkl "$pm_kl" --argjson ours "$ours" --argjson peer "$peer" \
  --argjson pss "$pms_s" --argjson pstv "$pms_tv" --argjson pskl "$pms_kl" \
  --argjson pxs "$pmx_s" --argjson pxtv "$pmx_tv" --argjson pxkl "$pmx_kl")
potato=$(jq -c '. + {mcmc_vs_peer_iterations_per_second_ratio: (if .iterations_per_second.bayesmallows then .iterations_per_second.ours / .iterations_per_second.bayesmallows else null end)}' <<<"$potato")

# alpha estimated too (log-normal walk, Exp(0.001) prior), 20,000 iterations: CPU seconds and alpha means.
est_ours=$("$bin/mallows-mcmc" "$pv" --iterations 20000 --burnin 2000 -q --threads 1 | jq -c '{cpu_seconds, alpha_mean: .alpha.mean}')
est_peer=null
if [ "$peer_status" = ok ]; then
  est_peer=$(Rscript "$here/peer/bayesmallows_mcmc.R" "$lib" "$pv" 20000 2000 estimate "$tmp/p.csv" 2>/dev/null | tail -1 | jq -c '{cpu_seconds, alpha_mean}') || est_peer=null
fi
potato=$(jq -c --argjson o "$est_ours" --argjson p "$est_peer" '. + {alpha_estimated_20000_iterations: {ours: $o, bayesmallows: $p,
  cpu_ratio_peer_over_ours: (if $p then $p.cpu_seconds / $o.cpu_seconds else null end)}}' <<<"$potato")

fi

# ---- sushi ----
sushi="null"
if [[ "$sections" == *" sushi "* ]] && [ -f "$data/sushi_rankings.csv" ]; then
  su="$data/sushi_rankings.csv"; sa=1.70
  "$bin/pseudomallows-fit" "$su" --alpha $sa --marginals "$tmp/spm.csv" --exact --exact-marginals "$tmp/ref.csv" -q > "$tmp/spm.json"
  so="[]"
  for it in 500 2000 10000 50000; do
    "$bin/mallows-mcmc" "$su" --fix-alpha --alpha $sa --iterations $it --burnin $((it / 10)) --marginals "$tmp/s.csv" -q --threads 1 > "$tmp/s.json"
    so=$(jq -c --argjson it $it --argjson tv "$(tv "$tmp/s.csv" "$tmp/ref.csv")" --argjson s "$(jq '.cpu_seconds + .marginals_cpu_seconds' "$tmp/s.json")" '. + [{iterations: $it, seconds: $s, max_tv: $tv}]' <<<"$so")
  done
  sushi=$(jq -nc "$reach"' {alpha: $a, reference: "exact subset DP (n = 10)",
    pseudo_mallows: {seconds: $pms, max_tv: $pmtv}, mallows_mcmc: $so,
    mcmc_seconds_to_pm_accuracy: reach($so; $pmtv),
    pm_speedup_at_equal_accuracy: (if reach($so; $pmtv) then reach($so; $pmtv) / $pms else null end)}' \
    --argjson a $sa --argjson pms "$(jq .sampling_cpu_seconds "$tmp/spm.json")" --argjson pmtv "$(tv "$tmp/spm.csv" "$tmp/ref.csv")" --argjson so "$so")
fi
# ---- simulated: the authors' full-data regime ----
sim_alpha=2
pm_draws="10 30 100 300 1000 3000 10000 30000 100000"
search_draws="1000 10000 100000"
mc_iters="100 200 500 1000 1500 2000 3000 5000 10000 20000 50000 100000 200000"
sim_rows="$tmp/sim_rows.jsonl"; : > "$sim_rows"
sim_sizes="5 20 100"; [[ "$sections" == *" simulated "* ]] || sim_sizes=""
record() {  # record SIZE ALPHA METHOD ORDER PARAM SEED SECONDS MARG.csv REF.csv
  local acc; acc=$(tv_both "$8" "$9")
  jq -cn --arg size "$1" --argjson alpha "$2" --arg method "$3" --arg order "$4" --argjson param "$5" --argjson seed "$6" --argjson s "$7" \
    --argjson mx "${acc% *}" --argjson mn "${acc#* }" \
    '{size: $size, alpha: $alpha, method: $method, order: $order, param: $param, seed: $seed, seconds: $s, max_tv: $mx, mean_tv: $mn}' >> "$sim_rows"
}
# Data sets of the curves: "NAME FILE ALPHA"; potato_visual joins them when its section runs, so
# that Pseudo-Mallows is timed over its own draw ladder there too (its floor is reached with few
# draws; one run at the default 10,000 draws overstates its time to that accuracy).
curve_sets=()
for NN in $sim_sizes; do
  sim="$tmp/sim_n20_N$NN.csv"
  "$bin/mallows-mcmc" --simulate $NN --items 20 --alpha $sim_alpha --seed 2026 -o "$sim"
  curve_sets+=("n20_N$NN $sim $sim_alpha")
done
[[ "$sections" == *" potato "* ]] && curve_sets+=("potato_visual $data/potato_visual.csv 10.86")
for cs in "${curve_sets[@]}"; do
  read -r size sim sim_alpha <<<"$cs"
  "$bin/pseudomallows-fit" "$sim" --alpha $sim_alpha --exact --exact-marginals "$tmp/ref_$size.csv" -q --draws 10 > /dev/null
  pm_jobs=(); for d in $pm_draws; do pm_jobs+=("v-mix $d" "v $d" "v-mix-reweight $d"); done; for d in $search_draws; do pm_jobs+=("search $d"); done
  mc_jobs=($mc_iters)
  for seed in 1 2 3; do
    k=0
    while [ $k -lt ${#pm_jobs[@]} ] || [ $k -lt ${#mc_jobs[@]} ]; do
      if [ $k -lt ${#pm_jobs[@]} ]; then
        set -- ${pm_jobs[$k]}
        if [ "$1" = v-mix-reweight ]; then pm_args=(--order v-mix --reweight); else pm_args=(--order "$1"); fi
        "$bin/pseudomallows-fit" "$sim" --alpha $sim_alpha "${pm_args[@]}" --draws "$2" --seed $seed --threads 1 -q --marginals "$tmp/x.csv" > "$tmp/x.json"
        record "$size" $sim_alpha pseudo_mallows "$1" "$2" $seed "$(jq .sampling_cpu_seconds "$tmp/x.json")" "$tmp/x.csv" "$tmp/ref_$size.csv"
      fi
      if [ $k -lt ${#mc_jobs[@]} ]; then
        it=${mc_jobs[$k]}
        "$bin/mallows-mcmc" "$sim" --fix-alpha --alpha $sim_alpha --iterations $it --burnin $((it / 10)) --seed $seed --threads 1 -q --marginals "$tmp/x.csv" > "$tmp/x.json"
        record "$size" $sim_alpha mallows_mcmc "" "$it" $seed "$(jq '.cpu_seconds + .marginals_cpu_seconds' "$tmp/x.json")" "$tmp/x.csv" "$tmp/ref_$size.csv"
      fi
      k=$((k + 1))
    done
  done
done
curves=$(jq -sc '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def curve: group_by(.param) | map({param: .[0].param, seconds: (map(.seconds) | median),
    max_tv: (map(.max_tv) | median), mean_tv: (map(.mean_tv) | median)}) | sort_by(.param);
  def reach($c; $k; $t): ([$c[] | select(.[$k] <= $t) | .seconds] | first) // null;
  def ratio($m; $p): if $m != null and $p != null then $m / $p else null end;
  group_by(.size) | map(. as $rows | ($rows | map(select(.method == "mallows_mcmc")) | curve) as $mc |
    {size: $rows[0].size, alpha: $rows[0].alpha, mallows_mcmc: {x: "iterations (10% burn-in)", curve: $mc},
     pseudo_mallows: ([$rows[] | select(.method == "pseudo_mallows") | .order] | unique | map(. as $o |
       ($rows | map(select(.method == "pseudo_mallows" and .order == $o)) | curve) as $pc |
       ($pc | map(.max_tv) | min) as $bmx | ($pc | map(.mean_tv) | min) as $bmn |
       ($pc | last | .max_tv) as $fmx | ($pc | last | .mean_tv) as $fmn |
       {order: $o, x: "draws", curve: $pc, floor_max_tv: $fmx, floor_mean_tv: $fmn, best_max_tv: $bmx, best_mean_tv: $bmn,
        at_equal_accuracy: ([["max_tv", ($fmx * 1.1)], ["mean_tv", ($fmn * 1.1)], ["max_tv", ($bmx * 1.1)], ["mean_tv", ($bmn * 1.1)],
                             ["max_tv", 0.2], ["max_tv", 0.1], ["max_tv", 0.05],
                             ["mean_tv", 0.1], ["mean_tv", 0.05], ["mean_tv", 0.02]] | map(
          {measure: .[0], level: .[1], pm_seconds: reach($pc; .[0]; .[1]), mcmc_seconds: reach($mc; .[0]; .[1]),
           pm_speedup: ratio(reach($mc; .[0]; .[1]); reach($pc; .[0]; .[1]))}))}))})' "$sim_rows")
simulated=$(jq -c 'map(select(.size != "potato_visual"))' <<<"$curves")
[ "$potato" = null ] || potato=$(jq -c --argjson c "$curves" '. + {time_to_accuracy: ($c | map(select(.size == "potato_visual")) | first)}' <<<"$potato")

# The same comparison timed inside one process (bench-rank-warm, bench/rank_warm.cpp): thread CPU
# time in ns, one untimed run per rung, the median over 31 seeds, the least of 3 rounds.  The tools' own timings
# above include cold caches, page faults and lazy binding, tens of microseconds that dwarf PM's
# work at the few tens of draws it needs.
in_process="[]"
if [ -x "$bin/bench-rank-warm" ]; then
  for cs in "${curve_sets[@]}"; do
    read -r size sim sim_alpha <<<"$cs"
    in_process=$(jq -c --argjson w "$("$bin/bench-rank-warm" "$sim" "$sim_alpha" --name "$size")" '. + [$w]' <<<"$in_process")
  done
fi

jq -nc --argjson p "$potato" --argjson s "$sushi" --argjson sim "$simulated" --argjson ip "$in_process" --arg peer "$peer_status" --arg nproc "$(nproc)" \
  '{bench: "rank_mallows", accuracy: "max (and, simulated, mean) over items of the total-variation distance of the rank marginals", potato_visual: $p, sushi: $s, simulated_mallows: $sim, in_process: $ip, peer_status: $peer, nproc: ($nproc | tonumber)}'
