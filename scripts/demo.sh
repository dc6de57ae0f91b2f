#!/usr/bin/env bash
# make -f Makefile.shortcuts demo: FAFO decoding on the shipped KJV demo model, then the
# data-constrained fit of Muennighoff et al. on their 182 real runs, printed as short results.
set -euo pipefail
bin=${1:-build/bin}
runs=../shared/data/scaling/datablations_runs.csv
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fix=a=6.255414,b=7.3049974,e=0.6254804,alpha=0.3526596,beta=0.3526596
model=data/models/kjv7m.h5
if [ -f "$model" ]; then
  echo "== fafo-generate on the shipped KJV demo model (data/models/README.md): FAFO, checked against AR"
  printf 'prompt: And God said unto Moses\ncontinuation:'
  "$bin/fafo-generate" "$model" --prompt 'And God said unto Moses' -n 96 --method fafo --window 5 --ngram 4 \
    --guesses 5 --kv-policy streaming --kv-budget 64 --compare ar -o "$tmp/fafo.jsonl" | fold -s -w 100
  jq -r 'select(.summary) | .summary | "\(.generated_tokens) tokens in \(.decode_steps) decode steps (\(.mean_accepted_per_step*100|round/100) accepted per step); identical to AR: \(.identical_to_ar); speedup over AR on this CPU: \(.speedup*100|round/100)x"' "$tmp/fafo.jsonl"
fi
if [ ! -f "$runs" ]; then
  echo "demo: $runs is absent; the 182 runs come from the public repository huggingface/datablations"
  echo "      (utils/parametric_fit.ipynb).  Fitting the shipped generated table instead."
  runs=data/scaling/data_constrained_synthetic.csv
fi
echo "== infolaw-fit --law data-constrained on $runs (base parameters fixed as published)"
"$bin/infolaw-fit" "$runs" --law data-constrained --fix "$fix" -q -o $tmp/fit.json
jq -r '"R_D* = \(.params.rd_star*1000|round/1000)   R_N* = \(.params.rn_star*1000|round/1000)   (published: 15.39, 5.31)",
       "Huber objective = \(.objective)   R^2 = \(.fit.r2*10000|round/10000)   rows = \(.rows_used)"' $tmp/fit.json
echo "== infolaw-predict: Figure 1 (right) of the paper, 25B unique tokens"
printf 'params,tokens,unique_tokens\n6.34e9,242e9,25e9\n8.67e9,178e9,25e9\n' > $tmp/q.csv
"$bin/infolaw-predict" $tmp/fit.json $tmp/q.csv -o $tmp/pred.json
jq -r '.rows[] | "N = \(.params)  D = \(.tokens)  U = \(.unique_tokens)  ->  predicted loss \(.pred_loss)"' $tmp/pred.json
echo "== compute-optimal allocation for 1e21 and 1e23 FLOPs under the fitted base law"
"$bin/infolaw-predict" $tmp/fit.json --compute 1e21 --compute 1e23 |
  jq -r '.rows[] | "C = \(.flops)  N_opt = \(.params|floor)  D_opt = \(.tokens|floor)  loss = \(.loss)"'
echo "== mixlaw-fit --law all: data-mixing laws on one split"
mix=../shared/data/scaling/pile17_1B.csv
N=195.2 D=2500
if [ -f "$mix" ]; then
  "$bin/mixlaw-fit" "$mix" --split ../shared/data/scaling/pile17_1B_split.json --params 195.2 --tokens 2500 --fix H=0.3 \
    --law all --seeds 1 -q -o "$tmp/mix.json"
  echo "(62 Pile mixtures x 17 domains, 1B models; the paper's 70/30 split)"
else
  echo "($mix is absent: it joins RegMix's public 1B runs (sail-sg/regmix); using a generated 3-domain sweep)"
  N=100 D=10
  "$bin/mixlaw-fit" data/scaling/mixture_synthetic.csv --params $N --tokens $D --val-fraction 0.25 --law all -q -o "$tmp/mix.json"
fi
jq -r '.summary[] | "\(.law)\t\(.n_params) params\tvalidation MRE \(.val_mre*10000|round/100) %"' "$tmp/mix.json" | column -t -s $'\t'
echo "== mixlaw-optimize: the mixture minimising the mean predicted loss under the full law"
"$bin/mixlaw-optimize" "$tmp/mix.json" --law capacity-noise --params $N --tokens $D -q |
  jq -r '.mixture | to_entries | sort_by(-.value) | .[:5][] | "\(.key)\t\(.value*1000|round/10) %"' | column -t -s $'\t'
