#!/usr/bin/env bash
# make -f Makefile.shortcuts repro: reproduce the published numbers this toolkit can check,
# printing one table row per check with the command that made it.
set -euo pipefail
bin=${1:-build/bin}
runs=../shared/data/scaling/datablations_runs.csv
if [ ! -f "$runs" ]; then echo "repro: $runs is absent (huggingface/datablations); nothing to reproduce"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fix=a=6.255414,b=7.3049974,e=0.6254804,alpha=0.3526596,beta=0.3526596
printf '%-44s %-22s %-22s\n' "check" "ours" "published"
out=$("$bin/infolaw-fit" "$runs" --law data-constrained --fix "$fix" -q)
printf '%-44s %-22s %-22s\n' "datablations R_D* (base fixed)" "$(jq .params.rd_star <<<"$out")" "15.387756"
printf '%-44s %-22s %-22s\n' "datablations R_N* (base fixed)" "$(jq .params.rn_star <<<"$out")" "5.309743"
printf '%-44s %-22s %-22s\n' "datablations Huber objective" "$(jq .objective <<<"$out")" "0.0158259"
printf '%-44s %-22s %-22s\n' "datablations R^2" "$(jq .fit.r2 <<<"$out")" "0.7722"
echo "$out" > $tmp/fit.json
printf 'params,tokens,unique_tokens\n6.34e9,242e9,25e9\n8.67e9,178e9,25e9\n' > $tmp/q.csv
cat > $tmp/pub.json <<'JSON'
{"law": "data-constrained", "params": {"a": 6.255414, "b": 7.3049974, "e": 0.6254804, "alpha": 0.3526596,
 "beta": 0.3526596, "rd_star": 15.387756, "rn_star": 5.309743}}
JSON
pred=$("$bin/infolaw-predict" $tmp/pub.json $tmp/q.csv)
printf '%-44s %-22s %-22s\n' "L(6.34e9, 242e9, 25e9), published params" "$(jq .rows[0].pred_loss <<<"$pred")" "2.2256440889984477"
printf '%-44s %-22s %-22s\n' "L(8.67e9, 178e9, 25e9), published params" "$(jq .rows[1].pred_loss <<<"$pred")" "2.2269634075087867"
echo
echo "commands: $bin/infolaw-fit $runs --law data-constrained --fix $fix"
echo "          $bin/infolaw-predict test/cli/fixtures/datablations_published.json test/cli/fixtures/published_queries.csv"

# ---- Dai & Zheng data-mixing laws ------------------------------------------------------------------
s=../shared/data/scaling
# (the 17-domain Pile table, three splits over 5 seeds: scripts/repro.d/mix.sh)
if [ -f "$s/dai-zheng/dmsl_llm_slimpajama.csv" ]; then
  echo
  echo "Extrapolation, 7 SlimPajama domains: fit on models < 2.7B, evaluate on 2.7B (all token budgets)"
  cmd="$bin/mixlaw-fit $s/dai-zheng/dmsl_llm_slimpajama.csv --weight-pattern weight_{} --loss-pattern {}_loss --params-col model_size --params-scale 1e-6 --tokens-col n_tokens --tokens-scale 1e-9 --drop-incomplete --extrapolate params --law all --seeds 1 -q"
  $cmd | jq -r '["law","val MRE %","val MAE","#params","fit s"], (.summary[] | [.law, (.val_mre*100*1000|round/1000), (.val_mae*10000|round/10000), .n_params, (.fit_seconds*100|round/100)]) | @tsv' | column -t -s $'\t'
  echo "command: $cmd"
fi

# ---- one script per module in scripts/repro.d/, each given the bin directory ------------------------
for f in "$(dirname "$0")"/repro.d/*.sh; do
  [ -e "$f" ] || continue
  echo
  bash "$f" "$bin"
done
