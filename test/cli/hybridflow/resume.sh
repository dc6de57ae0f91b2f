# hybridflow-run ARGS...: a run of the first task, then --resume over both tasks keeps the first
# record and adds the second; a torn last line (a killed run) is dropped before resuming.
set -e
set -- "${@//\$URL/$URL}"
"$@" --limit 1 -o out.jsonl -q > /dev/null
first=$(sed -n 1p out.jsonl)
printf '{"id": "t2", "policy": "thr' >> out.jsonl
"$@" --resume -o out.jsonl -q > /dev/null
test "$(wc -l < out.jsonl)" = 2
test "$(sed -n 1p out.jsonl)" = "$first"
jq -e -s '[.[].id] == ["t1", "t2"]' out.jsonl > /dev/null
"$@" --resume -o out.jsonl -q > /dev/null   # nothing left to do
test "$(wc -l < out.jsonl)" = 2
