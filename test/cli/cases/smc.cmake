# ---- smc-optimize ------------------------------------------------------------------------------
set(SMC $<TARGET_FILE:smc-optimize>)
cli_case(smc-optimize/toy-sosmc-converges-to-mle
  --rc 0 --jq "(.theta - .mle | fabs) < 0.05 and .method == \"sosmc\" and .resamples > 0"
  --file traj.jsonl
  -- ${SMC} --problem toy --method sosmc --particles 100 --steps 400 --trajectory traj.jsonl)
cli_case(smc-optimize/toy-em-exact
  --rc 0 --jq "(.theta - .mle | fabs) < 1e-9"
  -- ${SMC} --problem toy --method em --steps 100)
cli_case(smc-optimize/trajectory-lines
  --rc 0
  -- bash -c "${SMC} --problem toy --method impdiff --steps 25 --trajectory t.jsonl -q > /dev/null && test $(wc -l < t.jsonl) -eq 26 && head -1 t.jsonl | jq -e .meta.tool")
cli_case(smc-optimize/logistic-breast-cancer --needs ${SHARED}/tabular/breast_cancer.csv
  --rc 0 --jq ".test_accuracy > 0.93 and .train_rows == 455 and .features == 30"
  -- ${SMC} --problem logistic --data ${SHARED}/tabular/breast_cancer.csv --no-header --skip-lines 1 --method pgd)
cli_case(smc-optimize/em-needs-toy --rc 2 --stderr "exact EM exists only for the toy problem"
  -- ${SMC} --problem logistic --data ${FX}/logistic_bad_label.csv --method em)
cli_case(smc-optimize/nan-data --rc 1 --stderr "non-finite value nan in column 'y'" --no-file out.json
  -- ${SMC} --problem toy --data ${FX}/toy_nan.csv -o out.json)
cli_case(smc-optimize/bad-label --rc 1 --stderr "label 2 is not 0 or 1" -- ${SMC} --problem logistic --data ${FX}/logistic_bad_label.csv)
cli_case(smc-optimize/zero-particles --rc 2 --stderr "must be an integer in 1..10000000" -- ${SMC} --particles 0)
cli_case(smc-optimize/negative-step --rc 2 --stderr "must be > 0" -- ${SMC} --step-size -0.1)
cli_case(smc-optimize/unknown-problem --rc 2 -- ${SMC} --problem mnist)
cli_case(smc-optimize/bad-trajectory-extension --rc 2 --stderr "ending in .jsonl" --no-file t.json -- ${SMC} --trajectory t.json)
cli_case(smc-optimize/gmm-reward-tuning
  --rc 0 --jq ".mean_reward > 1.5 * .reference_mean_reward and (.theta | length) == 6"
  -- ${SMC} --problem gmm-reward --beta 0.001 --particles 500 --steps 200 --lr 20 --step-size 0.1)
cli_case(smc-optimize/logistic-methods-agree --needs ${SHARED}/tabular/breast_cancer.csv
  --rc 0
  -- bash -c "a=$(${SMC} --problem logistic --data ${SHARED}/tabular/breast_cancer.csv --no-header --skip-lines 1 --method sosmc | jq .theta) && b=$(${SMC} --problem logistic --data ${SHARED}/tabular/breast_cancer.csv --no-header --skip-lines 1 --method pgd | jq .theta) && jq -en \"($a - $b | fabs) < 0.1\"")
cli_case(smc-optimize/toy-sosmc-hmc
  --rc 0 --jq "(.theta - .mle | fabs) < 0.05"
  -- ${SMC} --problem toy --method sosmc --move hmc --leapfrog 5 --steps 400)
cli_case(smc-optimize/finite-divergence --rc 1 --stderr "theta diverged" --no-file out.json
  -- ${SMC} --problem toy --lr 1e6 --steps 20 -o out.json)
cli_case(smc-optimize/toy-data-needs-y --rc 1 --stderr "missing column 'y'" -- ${SMC} --problem toy --data ${FX}/bad_cell.csv)

