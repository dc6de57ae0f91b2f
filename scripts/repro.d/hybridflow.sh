#!/usr/bin/env bash
# Issue 39 (HybridFlow, arXiv 2512.22137): the paper's comparison in miniature, on the 45 plans of
# data/hybridflow (made here, not the paper's: the reference ships none) and their edge/cloud
# profiles (recorded live: lm-serve kjv7m as the edge, kjv16l as the cloud, see data/hybridflow/README.md).
#  1. Router: hybridflow-train-router (the reference's loss, inference meta vector, 256-d kjv7m
#     embeddings from lm-serve /v1/embeddings) on the profiles of 30 tasks, evaluated on the other 15
#     at equal cloud share against every fixed Difficulty threshold and random routing, 3 seeds.
#  2. Simulated, the paper's model pair (reference speed table: llama-3.2-3b edge, gpt-4.1 cloud,
#     planner at llama-3.2-3b speed; tokens from the recorded profiles): latency, cost and cloud
#     share per policy (edge, cloud, threshold, random at the router's share, router), DAG vs chain.
#  3. Live on this machine: two lm-serve processes (kjv7m edge, kjv16l cloud) and the recorded plans:
#     latency and tokens per policy, DAG vs chain (the models write KJV English: accuracy is ~0 and
#     is not the point; the latencies and tokens are real).
# Cost: about 7 minutes on 2 cores.  REPRO_QUICK=1: 9 tasks, 1 seed.  Results: data/repro/hybridflow/.
# $1 = bin directory.
set -euo pipefail
bin=${1:-build/bin}
data=data/hybridflow
out=${HF_OUT:-build/repro-hybridflow}
res=${HF_RESULTS:-data/repro/hybridflow}
seeds="1 2 3" limit=45
if [ "${REPRO_QUICK:-0}" = 1 ]; then seeds=1 limit=9 res=$out/results; fi
mkdir -p "$out" "$res"

# ---- servers: the edge (kjv7m) and the cloud (kjv16l), also the embedding endpoint ----
start_server() {  # $1 model, $2 name -> URL on stdout
  "$bin/lm-serve" "$1" --port 0 --slots 4 --model-name "$2" > "$out/$2.out" 2> "$out/$2.err" &
  echo $! > "$out/$2.pid"
  for _ in $(seq 1 600); do [ -s "$out/$2.out" ] && break; sleep 0.05; done
  echo "$(jq -r .listening "$out/$2.out")/v1"
}
edge=$(start_server data/models/kjv7m.h5 kjv7m)
cloud=$(start_server data/models/kjv16l.h5 kjv16l)
trap 'kill $(cat "$out"/*.pid) 2> /dev/null || true' EXIT

# ---- 1. router: train on 30 tasks' profiles, evaluate on the other 15 ----
jq -c 'select((.task_id[2:] | tonumber) % 3 != 0)' $data/profiles.jsonl > "$out/train.jsonl"
jq -c 'select((.task_id[2:] | tonumber) % 3 == 0)' $data/profiles.jsonl > "$out/heldout.jsonl"
for s in $seeds; do
  "$bin/hybridflow-train-router" "$out/train.jsonl" --embed "$edge" -o "$out/router-s$s.safetensors" --seed "$s" \
    --evaluate "$out/heldout.jsonl" --random-draws 1000 -q > "$out/router-s$s.json"
done
jq -s '{seeds: length, rows: [range(0; .[0].evaluation.rows | length) as $i | .[0].evaluation.rows[$i]
        + {router_utility: [.[].evaluation.rows[$i].router_utility], router_beats_draws: [.[].evaluation.rows[$i].router_beats_draws]}]}' \
  "$out"/router-s*.json > "$res/router_equal_share.json"
router=$out/router-s1.safetensors

# ---- 2. simulated: the paper's model pair ----
sim=(--plans $data/plans.jsonl --profiles $data/profiles.jsonl --simulate --edge-model llama-3.2-3b --cloud-model gpt-4.1
     --planner-model llama-3.2-3b --router "$router" --embed "$edge" --limit "$limit" -q)
"$bin/hybridflow-run" $data/tasks.jsonl "${sim[@]}" --policy router -o "$out/sim-router.jsonl" --summary "$out/sim-router.json"
share=$(jq .policies.router.cloud_share "$out/sim-router.json")
for sched in dag chain; do
  "$bin/hybridflow-run" $data/tasks.jsonl "${sim[@]}" --policy edge,cloud,threshold,random,router --cloud-share "$share" \
    --schedule $sched -o "$out/sim-$sched.jsonl" --summary "$res/sim_$sched.json"
done

# ---- 3. live: lm-serve edge and cloud, recorded plans ----
live=(--plans $data/plans.jsonl --edge "$edge" --edge-model kjv7m --cloud "$cloud" --cloud-model kjv16l --embed "$edge"
      --router "$router" --executor-max-tokens 64 --stop $'\n' --limit "$limit" --seed 39 -q)
for sched in dag chain; do
  "$bin/hybridflow-run" $data/tasks.jsonl "${live[@]}" --policy edge,cloud,threshold,random,router --cloud-share "$share" \
    --schedule $sched -o "$out/live-$sched.jsonl" --summary "$res/live_$sched.json"
done

# ---- table ----
row() {  # $1 label, $2 summary json, $3 policy
  jq -r --arg l "$1" --arg p "$3" '.policies[$p] | "| \($l) | \($p) | \(.mean_makespan_s * 1000 | round / 1000) | \(.mean_tokens | round) | \(.mean_cost_usd * 1e6 | round / 1e6) | \(.cloud_share * 1000 | round / 1000) | \(.failed_tasks) |"' "$2"
}
{
  echo "| run | policy | mean makespan s | mean tokens | mean cost USD | cloud share | failed |"
  echo "|---|---|---|---|---|---|---|"
  for kind in sim live; do
    for sched in dag chain; do
      for p in edge cloud threshold random router; do row "$kind $sched" "$res/${kind}_$sched.json" $p; done
    done
  done
} | tee "$res/table.md"
# DAG below chain on every multi-branch plan (simulated, threshold policy): count of violations
jq -s --slurpfile c "$out/sim-chain.jsonl" '[range(0; length) as $i | .[$i] as $d | $c[$i] as $k
  | select($d.policy == "threshold" and $d.dag.max_width >= 2) | ($d.makespan_s < $k.makespan_s)] | {multi_branch: length, dag_faster: map(select(.)) | length}' \
  "$out/sim-dag.jsonl" | tee "$res/dag_vs_chain.json"
jq -c '.rows[] | select(.rule == "share" or .threshold == 4 or .threshold == 5) | {rule, threshold, share, router_utility, threshold_utility, random_expected, oracle_utility}' "$res/router_equal_share.json"
