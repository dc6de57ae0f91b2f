# SIGTERM while streams are running (two decoding, one queued): every stream still ends with
# its finish chunk and data: [DONE], and the server exits 0.  Runs its own server.
# Args: LM_SERVE MODEL.
set -eu
"$1" "$2" --port 0 --slots 2 > own.out 2> own.err &
pid=$!
for _ in $(seq 1 600); do [ -s own.out ] && break; sleep 0.05; done
url=$(jq -r .listening own.out)
for k in 1 2 3; do
  curl -sN "$url/v1/completions" -H 'Content-Type: application/json' -d '{"prompt": "And", "max_tokens": 300, "temperature": 0, "stream": true}' > "s$k.txt" &
done
for _ in $(seq 1 500); do curl -s "$url/health" | jq -e '.active + .queued == 3' > /dev/null && break; sleep 0.02; done
kill -TERM "$pid"
wait "$pid"
rc=$?
test "$rc" -eq 0
wait
for k in 1 2 3; do
  test "$(grep -v '^$' "s$k.txt" | tail -n 1)" = 'data: [DONE]'
  grep '^data: {' "s$k.txt" | tail -n 1 | sed 's/^data: //' | jq -e '.choices[0].finish_reason == "length" and .usage.completion_tokens == 300' > /dev/null
done
