# hybridflow-run TASKS PLANS: the simulated makespan of every plan under the DAG schedule is at
# most its chain schedule's, and below it wherever the plan has a level with two or more steps.
set -e
"$1" "$2" --plans "$3" --simulate --policy threshold --edge-model llama-3.2-3b --cloud-model gpt-4.1 -o dag.jsonl -q > /dev/null
"$1" "$2" --plans "$3" --simulate --policy threshold --edge-model llama-3.2-3b --cloud-model gpt-4.1 --schedule chain -o chain.jsonl -q > /dev/null
jq -s -e --slurpfile c chain.jsonl '[range(0; length) as $i | .[$i] as $d | $c[$i] as $k
  | ($d.id == $k.id) and ($d.makespan_s <= $k.makespan_s + 1e-9)
  and (if $d.dag.max_width >= 2 then $d.makespan_s < $k.makespan_s - 1e-9 else true end)] | all and length == 45' dag.jsonl > /dev/null
jq -s -e '[.[] | select(.dag.max_width >= 2)] | length >= 30' dag.jsonl > /dev/null
