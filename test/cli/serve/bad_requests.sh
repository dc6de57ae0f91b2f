# Bad requests each get a JSON error with the right status, and the server keeps serving.
# The server runs with --api-key k3y --max-body 16384.
set -eu
code() { curl -s -o r.json -w '%{http_code}' -H 'Authorization: Bearer k3y' -H 'Content-Type: application/json' "$@"; }
err() { jq -e "$1" r.json > /dev/null || { echo "r.json: $(cat r.json)" >&2; exit 1; }; }
test "$(code "$URL/v1/completions" -d '{bad')" = 400; err '.error.type == "invalid_request_error" and (.error.message | startswith("malformed JSON"))'
test "$(code "$URL/v1/completions" -d '{"prompt": "x", "foo": 1}')" = 400; err '.error.param == "foo"'
test "$(code "$URL/v1/completions" -d '{"prompt": 7}')" = 400; err '.error.param == "prompt"'
test "$(code "$URL/v1/completions" -d '[1, 2]')" = 400
test "$(code "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": -1}')" = 400
test "$(code "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": "many"}')" = 400
test "$(code "$URL/v1/completions" -d '{"prompt": "x", "n": 2}')" = 400
test "$(code "$URL/v1/completions" -d '{"prompt": "x", "temperature": 3}')" = 400; err '.error.param == "temperature"'
test "$(code "$URL/v1/completions" -d '{"prompt": ""}')" = 400
test "$(code "$URL/v1/chat/completions" -d '{"messages": [{"role": "robot", "content": "x"}]}')" = 400
test "$(code "$URL/v1/embeddings" -d '{"input": []}')" = 400
long=$(printf "And %.0s" $(seq 1 2100))
test "$(code "$URL/v1/completions" -d "{\"prompt\": \"$long\"}")" = 400; err '.error.message | contains("context")'
big=$(head -c 20000 /dev/zero | tr "\\0" a)
test "$(code "$URL/v1/completions" -d "{\"prompt\": \"$big\"}")" = 413; err '.error.message | contains("max-body")'
test "$(code "$URL/v1/nothing")" = 404; err '.error.message | contains("no such endpoint")'
test "$(curl -s -o r.json -w '%{http_code}' "$URL/v1/models")" = 401; err '.error.message | contains("API key")'
test "$(code "$URL/v1/completions" -d '{"prompt": "And", "max_tokens": 2}')" = 200; err '.usage.completion_tokens == 2'
test "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200
# bytes that are not UTF-8, and a number out of range: 400, not a server error
test "$(printf '{"prompt": "In the \xff\xfe beginning"}' | curl -s -o r.json -w '%{http_code}' -H 'Authorization: Bearer k3y' -H 'Content-Type: application/json' --data-binary @- "$URL/v1/completions")" = 400
err '.error.message | startswith("malformed JSON")'
test "$(code "$URL/v1/completions" -d '{"prompt": "x", "max_tokens": 1e400}')" = 400
test "$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: bearer k3y' "$URL/v1/models")" = 200
