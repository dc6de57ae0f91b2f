# A greedy completion is lm-generate's text for the same prompt; chat wraps the messages in the
# template; /v1/models names the model.  Args: LM_GENERATE MODEL.
set -eu
gen=$1 model=$2
curl -s "$URL/v1/completions" -d '{"prompt": "In the beginning God", "max_tokens": 16, "temperature": 0}' > a.json
# the completion continues the prompt: its first word keeps its space (lm-generate prints none)
jq -e '.choices[0].text | startswith(" of")' a.json > /dev/null
jq -j '(.choices[0].text | ltrimstr(" ")) + "\n"' a.json > a.txt
"$gen" "$model" --prompt 'In the beginning God' -n 16 --no-stream > b.txt
cmp a.txt b.txt
curl -s "$URL/v1/chat/completions" -d '{"messages": [{"role": "system", "content": "Answer."}, {"role": "user", "content": "Who made the heaven?"}], "max_tokens": 8, "temperature": 0}' > c.json
printf '<|system|>\nAnswer.\n<|user|>\nWho made the heaven?\n<|assistant|>\n' > chat_prompt.txt
"$gen" "$model" --prompt-file chat_prompt.txt -n 8 --no-stream > d.txt
jq -j '.choices[0].message.content + "\n"' c.json | cmp - d.txt
curl -s "$URL/v1/models" > m.json
