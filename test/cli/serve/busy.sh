# With one slot and no queue a second request gets 503; a client that leaves mid-stream frees
# its slot; the server keeps serving.
set -eu
curl -s "$URL/v1/completions" -d '{"prompt": "And", "max_tokens": 1000, "temperature": 0}' > long.json &
for _ in $(seq 1 100); do curl -s "$URL/health" | jq -e '.active == 1' > /dev/null && break; sleep 0.02; done
test "$(curl -s -o busy.json -w '%{http_code}' "$URL/v1/completions" -d '{"prompt": "And", "max_tokens": 2}')" = 503
jq -e '.error.type == "server_error"' busy.json > /dev/null
wait
jq -e '.usage.completion_tokens > 0' long.json > /dev/null
curl -sN --max-time 0.3 "$URL/v1/completions" -d '{"prompt": "And", "max_tokens": 1000, "stream": true}' > /dev/null || true
for _ in $(seq 1 100); do curl -s "$URL/health" > h.json; jq -e '.active == 0' h.json > /dev/null && break; sleep 0.05; done
test "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/completions" -d '{"prompt": "And", "max_tokens": 2}')" = 200
