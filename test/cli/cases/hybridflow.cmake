# ---- hybridflow-run (issue 39): HybridFlow's edge-cloud routing over a DAG (arXiv 2512.22137) ----
# Live cases run against hybridflow-fake-openai (a scripted OpenAI server that can fail on
# purpose); simulated cases replay data/hybridflow's 45 recorded plans with the reference's latency model.
set(HF $<TARGET_FILE:hybridflow-run>)
set(HF_FX ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/hybridflow)
set(HF_DATA ${PROJECT_SOURCE_DIR}/data/hybridflow)
set(HF_SESSION bash ${CMAKE_CURRENT_SOURCE_DIR}/hybridflow_session.sh $<TARGET_FILE:hybridflow-fake-openai> --plan ${HF_FX}/plan.xml)
set(HF_LIVE ${HF} ${HF_FX}/tasks.jsonl --edge \$URL --cloud \$URL --policy threshold --retry-delay 0.05)
string(REPLACE ";" " " HF_LIVE_S "${HF_LIVE}")

# The plan streams in 16-byte chunks 60 ms apart: steps start while it is still arriving, no step
# starts before the steps it relies on have finished, and the record carries the DAG's metrics.
cli_case(hybridflow-run/live-streamed-plan --rc 0 --file out.jsonl
  --file-jq out.jsonl ".steps[0].start_s < .planner.latency_s and .steps[1].start_s < .planner.latency_s"
  --file-jq out.jsonl ". as $r | [.steps[] | . as $s | ($s.Rely | split(\",\") | map(select(. != \"\") | tonumber)) as $d | [$r.steps[] | select(.ID as $i | $d | index($i)) | .finish_s <= $s.start_s + 1e-9] | all] | all"
  --file-jq out.jsonl ".dag.levels == 3 and .dag.compression == 0.75 and .dag.reduced_edges == [[1,2],[1,3],[2,4],[3,4]]"
  --file-jq out.jsonl "[.steps[].route] == [\"edge\", \"cloud\", \"edge\", \"edge\"] and .aggregation.route == \"edge\" and .failed_steps == 0 and .total_tokens > 0"
  -- ${HF_SESSION} --chunk-ms 60 -- -c "${HF} ${HF_FX}/tasks.jsonl --planner \$URL --edge \$URL --cloud \$URL --policy threshold --limit 1 -o out.jsonl -q")
# A subtask whose endpoint always answers 500: tried --attempts times, recorded as failed with the
# server's message, and the steps relying on it still run (as the reference); exit 0.
cli_case(hybridflow-run/fault-500-recorded --rc 1 --tool hybridflow-run --stderr "^hybridflow-run: error: [12] of 2 task runs had failures" --file out.jsonl
  --file-jq out.jsonl "select(.id == \"t1\") | .failed_steps == 1 and (.steps[] | select(.ID == 3) | .attempts == 2 and (.error | test(\"HTTP 500: injected failure\")) and .Result == \"\")"
  --file-jq out.jsonl "select(.id == \"t2\") | .steps[] | select(.ID == 4) | .error == null and .Result != \"\""
  -- ${HF_SESSION} --fault 500 --fault-match "Part B" -- -c "${HF_LIVE_S} --plans ${HF_FX}/plans.jsonl --attempts 2 -o out.jsonl -q")
# A transient failure: the retry succeeds.
cli_case(hybridflow-run/fault-500-retried --rc 0 --file out.jsonl
  --file-jq out.jsonl "select(.id == \"t1\") | .failed_steps == 0 and (.steps[] | select(.ID == 3) | .attempts == 2)"
  -- ${HF_SESSION} --fault 500 --fault-match "Part B" --fault-times 1 -- -c "${HF_LIVE_S} --plans ${HF_FX}/plans.jsonl -o out.jsonl -q")
# A hanging endpoint: the call ends at --timeout, recorded as failed, no hang.
cli_case(hybridflow-run/fault-timeout --rc 1 --tool hybridflow-run --stderr "^hybridflow-run: error: 1 of 1 task runs had failures" --file out.jsonl
  --file-jq out.jsonl "select(.id == \"t1\") | .failed_steps == 1 and (.steps[] | select(.ID == 2) | (.error | test(\"timed out|closed\")) and .latency_s < 4)"
  -- ${HF_SESSION} --fault hang --fault-match "Part A" -- -c "${HF_LIVE_S} --plans ${HF_FX}/plans.jsonl --attempts 1 --timeout 1 --limit 1 -o out.jsonl -q")
# A stream that closes before [DONE].
cli_case(hybridflow-run/fault-closed-mid-stream --rc 1 --tool hybridflow-run --stderr "^hybridflow-run: error: 1 of 1 task runs had failures" --file out.jsonl
  --file-jq out.jsonl "select(.id == \"t1\") | .failed_steps == 1 and (.steps[] | select(.ID == 2) | .error | test(\"closed mid-stream|closed\"))"
  -- ${HF_SESSION} --fault close --fault-match "Part A" -- -c "${HF_LIVE_S} --plans ${HF_FX}/plans.jsonl --attempts 2 --limit 1 -o out.jsonl -q")
# A planner reply without steps: retried, then the task is recorded as failed and the run goes on.
cli_case(hybridflow-run/fault-malformed-plan --rc 1 --tool hybridflow-run --stderr "^hybridflow-run: error: [12] of 2 task runs had failures" --file out.jsonl
  --file-jq out.jsonl "select(.id == \"t1\") | (.error | test(\"no <Step\")) and (.steps | length) == 0"
  --file-jq out.jsonl "select(.id == \"t2\") | .error == null and (.steps | length) == 4"
  -- ${HF_SESSION} --fault malformed --fault-times 2 -- -c "${HF} ${HF_FX}/tasks.jsonl --planner \$URL --edge \$URL --cloud \$URL --policy edge --attempts 2 --retry-delay 0.05 -o out.jsonl -q")
# Records are written as tasks finish; --resume keeps them and skips their tasks.
cli_case(hybridflow-run/resume --rc 0
  -- ${HF_SESSION} -- ${CMAKE_CURRENT_SOURCE_DIR}/hybridflow/resume.sh ${HF_LIVE} --plans ${HF_FX}/plans.jsonl)
# The utility router live: a router trained on the router fixture (4-d embeddings, the fake
# server's dimension) routes the same way twice with one seed; steps 1 and 4 (the newest) are forced
# to the cloud; the router's values are recorded.
cli_case(hybridflow-run/router-seeded --rc 0
  -- ${HF_SESSION} -- ${CMAKE_CURRENT_SOURCE_DIR}/hybridflow/router_seeded.sh ${HF} ${HF_FX}/tasks.jsonl ${HF_FX}/plans.jsonl
     $<TARGET_FILE:hybridflow-train-router> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/hybridflow_router)
# Simulated on the 45 recorded plans: DAG execution beats the chain on every multi-branch plan.
cli_case(hybridflow-run/simulate-dag-below-chain --rc 0
  -- bash ${CMAKE_CURRENT_SOURCE_DIR}/hybridflow/dag_vs_chain.sh ${HF} ${HF_DATA}/tasks.jsonl ${HF_DATA}/plans.jsonl)
# Simulated policies on the paper's model pair (reference speed table): edge-only is fastest and
# free, cloud-only the most costly; the summary has one entry per policy.
cli_case(hybridflow-run/simulate-policies --rc 0 --file s.jsonl
  --jq ".policies.edge.total_cost_usd == 0 and .policies.cloud.total_cost_usd > .policies.threshold.total_cost_usd and .policies.cloud.cloud_share == 1"
  --jq ".policies.edge.mean_makespan_s < .policies.cloud.mean_makespan_s and .policies.random.tasks == 45"
  -- ${HF} ${HF_DATA}/tasks.jsonl --plans ${HF_DATA}/plans.jsonl --simulate --policy edge,cloud,threshold,random --edge-model llama-3.2-3b --cloud-model gpt-4.1 -o s.jsonl)

# ---- bad input: one line, exit 1 (data) or 2 (usage), no output ----
cli_case(hybridflow-run/missing-plan --rc 1 --stderr "^hybridflow-run: error: no recorded plan for task 't1'" --no-file out.jsonl
  -- ${HF} ${HF_FX}/tasks.jsonl --plans ${HF_DATA}/plans.jsonl --simulate --policy edge -o out.jsonl)
cli_case(hybridflow-run/bad-tasks-line --rc 1 --tool hybridflow-run --stderr "^hybridflow-run: error: malformed JSON \\(.*, line 2\\)"
  -- bash -c "printf '{\"id\": 1, \"problem\": \"x\"}\\n{oops\\n' > t.jsonl && ${HF} t.jsonl --plans ${HF_FX}/plans.jsonl --simulate --policy edge")
cli_case(hybridflow-run/unknown-policy --rc 2 --stderr "--policy"
  -- ${HF} ${HF_FX}/tasks.jsonl --plans ${HF_FX}/plans.jsonl --simulate --policy fastest)
cli_case(hybridflow-run/router-needs-weights --rc 2 --stderr "needs --router"
  -- ${HF} ${HF_FX}/tasks.jsonl --plans ${HF_FX}/plans.jsonl --simulate --policy router)
cli_case(hybridflow-run/bad-url --rc 2 --stderr "--edge"
  -- ${HF} ${HF_FX}/tasks.jsonl --plans ${HF_FX}/plans.jsonl --edge localhost:8080 --cloud http://127.0.0.1:1/v1 --policy edge)
cli_case(hybridflow-run/simulate-needs-plans --rc 2 --stderr "--plans"
  -- ${HF} ${HF_FX}/tasks.jsonl --simulate --policy edge)
cli_case(hybridflow-run/unreachable-endpoint --rc 1 --stderr "cannot connect .*stopped at task t1" --no-file out.jsonl
  -- ${HF} ${HF_FX}/tasks.jsonl --plans ${HF_FX}/plans.jsonl --edge http://127.0.0.1:9/v1 --cloud http://127.0.0.1:9/v1 --policy edge -o out.jsonl -q)
# A refused request (HTTP 4xx: here 404, no such server path) is not retried.
cli_case(hybridflow-run/refused-not-retried --rc 1 --tool hybridflow-run --stderr "2 of 2 task runs had failures" --file out.jsonl
  --file-jq out.jsonl "select(.id == \"t1\") | [.steps[] | .attempts == 1 and (.error | test(\"HTTP 404\"))] | all"
  -- ${HF_SESSION} -- -c "${HF} ${HF_FX}/tasks.jsonl --plans ${HF_FX}/plans.jsonl --edge \${URL%/v1}/nothere --cloud \${URL%/v1}/nothere --policy edge -o out.jsonl -q")
