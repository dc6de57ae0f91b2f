# Four requests in flight at once (seeded sampling and greedy) are decoded together, and each
# gets exactly the tokens it gets alone (and lm-generate's).  Args: LM_GENERATE MODEL.
set -eu
gen=$1 model=$2
req() { printf '{"prompt": "And the earth", "max_tokens": 24, "temperature": 0.9, "seed": %s}' "$1"; }
for s in 1 2 3; do curl -s "$URL/v1/completions" -d "$(req $s)" > "p$s.json" & done
curl -s "$URL/v1/completions" -d '{"prompt": "And God said", "max_tokens": 24, "temperature": 0}' > p0.json &
wait
curl -s "$URL/health" > h.json
for s in 1 2 3; do
  curl -s "$URL/v1/completions" -d "$(req $s)" > "q$s.json"
  jq -e -s '.[0].choices == .[1].choices and .[0].usage == .[1].usage' "p$s.json" "q$s.json" > /dev/null
done
"$gen" "$model" --prompt 'And the earth' -n 24 --temperature 0.9 --seed 2 --no-stream > g.txt
jq -j '(.choices[0].text | ltrimstr(" ")) + "\n"' p2.json | cmp - g.txt
"$gen" "$model" --prompt 'And God said' -n 24 --no-stream > g0.txt
jq -j '(.choices[0].text | ltrimstr(" ")) + "\n"' p0.json | cmp - g0.txt
