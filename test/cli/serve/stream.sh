# stream: true gives server-sent events whose texts join to the non-streamed text, a final chunk
# with finish_reason and usage, then [DONE]; a chat stream starts with the assistant role and,
# with include_usage, ends with a usage-only chunk.
set -eu
curl -sN "$URL/v1/completions" -d '{"prompt": "And God said", "max_tokens": 12, "temperature": 0, "stream": true}' > s.txt
test "$(grep -v '^$' s.txt | tail -n 1)" = 'data: [DONE]'
grep '^data: {' s.txt | sed 's/^data: //' > chunks.jsonl
tail -n 1 chunks.jsonl > last.json
jq -j '.choices[0].text' chunks.jsonl > streamed.txt
curl -s "$URL/v1/completions" -d '{"prompt": "And God said", "max_tokens": 12, "temperature": 0}' | jq -j '.choices[0].text' > whole.txt
cmp streamed.txt whole.txt
curl -sN "$URL/v1/chat/completions" -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}' > c.txt
grep '^data: {' c.txt | head -n 1 | sed 's/^data: //' > first.json
grep '^data: {' c.txt | tail -n 1 | sed 's/^data: //' | jq -e '.choices == [] and .usage.completion_tokens == 4' > /dev/null
