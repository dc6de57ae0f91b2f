# HF FAKE_TASKS FAKE_PLANS TRAIN_ROUTER ROUTER_FIXTURES: a router trained on the router fixture
# (4-d embeddings, the fake server's dimension) routes the same way twice with one seed in
# simulation, and live it records its values and forces steps 1 and the newest step to the cloud.
set -e
hf=$1 tasks=$2 plans=$3 train=$4 fx=$5
"$train" "$fx/train.jsonl" --embeddings "$fx/train_emb.jsonl" --hidden 8 --epochs 2 -o r.safetensors -q > /dev/null
for f in a b; do
  "$hf" "$tasks" --plans "$plans" --simulate --policy router --router r.safetensors --embed "$URL" --seed 5 -o $f.jsonl -q > /dev/null
done
test "$(jq -c '[.steps[] | [.route, .router.u, .router.s]]' a.jsonl)" = "$(jq -c '[.steps[] | [.route, .router.u, .router.s]]' b.jsonl)"
"$hf" "$tasks" --plans "$plans" --edge "$URL" --cloud "$URL" --policy router --router r.safetensors --embed "$URL" -o live.jsonl -q > /dev/null
jq -e -s '[.[].steps[] | select(.ID == 1 or .ID == 4) | .forced and .route == "cloud"] | all' live.jsonl > /dev/null
jq -e -s '[.[].steps[] | select(.ID == 2 or .ID == 3) | .router.p_cloud >= 0 and .router.p_cloud <= 1 and (.router.u | type) == "number" and .forced == false] | all' live.jsonl > /dev/null
