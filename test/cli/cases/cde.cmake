# ---- cde-train / cde-eval ----------------------------------------------------------------------
set(CDET $<TARGET_FILE:cde-train>)
set(CDEE $<TARGET_FILE:cde-eval>)
set(CDE_SMALL --hidden 8 --width 16 --epochs 30 --batch-size 8 --lr 0.01 -q)
set(CDE_SMALL_STR "--hidden 8 --width 16 --epochs 30 --batch-size 8 --lr 0.01 -q")
cli_case(cde-train/fixture-trains-and-logs
  --rc 0 --jq ".train_accuracy >= 0.9 and .epochs == 30 and .meta.tool == \"cde-train\""
  --file m.h5 --file log.jsonl
  -- bash -c "${CDET} ${FX}/cde_train.ts ${CDE_SMALL_STR} -o m.h5 --log log.jsonl > /dev/null && test $(wc -l < log.jsonl) -eq 31 && head -1 log.jsonl | jq -e .meta.inputs[0].sha256 > /dev/null && tail -1 log.jsonl | jq -e '.nfe > 0 and .nfe_backward > 0 and .seconds >= 0' > /dev/null && ${CDET} ${FX}/cde_train.ts ${CDE_SMALL_STR} -o m.h5")
cli_case(cde-eval/fixture-test-accuracy
  --rc 0 --jq ".accuracy >= 0.85 and .cases == 8 and .nfe > 0 and .meta.tool == \"cde-eval\" and (.meta.inputs | length) == 2"
  -- bash -c "${CDET} ${FX}/cde_train.ts ${CDE_SMALL_STR} -o m.h5 > /dev/null && ${CDEE} m.h5 ${FX}/cde_test.ts")
cli_case(cde-train/gp-mv-cde-drop
  --rc 0 --jq ".train_accuracy >= 0.8 and .model == \"mv-cde\""
  -- ${CDET} ${FX}/cde_train.ts --model mv-cde --path gp --bandwidths 1,3 --drop-rate 0.3 ${CDE_SMALL} -o m.h5)
cli_case(cde-train/kernel-mvc-cde-rk4
  --rc 0 --jq ".train_accuracy >= 0.8 and .nfe == 40"
  -- ${CDET} ${FX}/cde_train.ts --model mvc-cde --path kernel --bandwidths 0.5,2 --solver rk4 --step 0.9 ${CDE_SMALL} -o m.h5)
cli_case(cde-train/seed-reproducible
  --rc 0
  -- bash -c "${CDET} ${FX}/cde_train.ts ${CDE_SMALL_STR} --epochs 3 --threads 2 -o a.h5 | jq -c '.final_loss' > a && ${CDET} ${FX}/cde_train.ts ${CDE_SMALL_STR} --epochs 3 --threads 2 -o b.h5 | jq -c '.final_loss' > b && cmp a b")
cli_case(cde-train/spirals
  --rc 0 --jq ".val_accuracy >= 0.95"
  -- ${CDET} --spirals 128 --spirals-length 50 --hidden 8 --width 32 --epochs 15 --batch-size 16 --lr 0.01 --rtol 1e-3 --atol 1e-3 -q -o s.h5)
cli_case(cde-train/basicmotions --needs ${SHARED}/timeseries/BasicMotions_TRAIN.ts
  --rc 0 --jq ".accuracy >= 0.85 and .cases == 40"
  -- bash -c "${CDET} ${SHARED}/timeseries/BasicMotions_TRAIN.ts --path kernel --bandwidth 2 --hidden 16 --width 32 --epochs 30 --batch-size 8 --lr 0.01 --rtol 1e-3 --atol 1e-3 --threads 1 -q -o bm.h5 > /dev/null && ${CDEE} bm.h5 ${SHARED}/timeseries/BasicMotions_TEST.ts")
# bad input
cli_case(cde-train/malformed-header --rc 1 --stderr "@dimensions must be a positive integer .*cde_bad_header.ts, line 2" --no-file m.h5
  -- ${CDET} ${FX}/cde_bad_header.ts -o m.h5)
cli_case(cde-train/ragged-dimensions --rc 1 --stderr "dimensions of unequal length" --no-file m.h5
  -- ${CDET} ${FX}/cde_ragged.ts -o m.h5)
cli_case(cde-train/all-nan-series --rc 1 --stderr "dimension 1 has no observed value .*line 12" --no-file m.h5
  -- ${CDET} ${FX}/cde_all_nan.ts -o m.h5)
cli_case(cde-eval/unknown-test-label --rc 1 --tool cde-eval --stderr "class label 'sideways' is not one the model was trained on" --no-file e.json
  -- bash -c "${CDET} ${FX}/cde_train.ts --hidden 4 --epochs 1 -q -o m.h5 > /dev/null && ${CDEE} m.h5 ${FX}/cde_unknown_label.ts -o e.json")
cli_case(cde-train/zero-rtol --rc 2 --stderr "must be > 0" -- ${CDET} ${FX}/cde_train.ts --rtol 0)
cli_case(cde-train/negative-atol --rc 2 --stderr "must be > 0" -- ${CDET} ${FX}/cde_train.ts --atol -1e-3)
cli_case(cde-train/unknown-path --rc 2 --stderr "unknown path 'bspline'" --no-file m.h5 -- ${CDET} ${FX}/cde_train.ts --path bspline -o m.h5)
cli_case(cde-train/mv-needs-smoother --rc 2 --stderr "multi-view models need a kernel or gp path" -- ${CDET} ${FX}/cde_train.ts --model mv-cde --bandwidths 1)
cli_case(cde-train/missing-file --rc 1 --stderr "cannot read file" --no-file m.h5 -- ${CDET} nonexistent.ts -o m.h5)
cli_case(cde-train/bad-output-extension --rc 2 --stderr "ending in .h5" -- ${CDET} ${FX}/cde_train.ts -o m.json)
cli_case(cde-eval/not-a-checkpoint --rc 1 --no-file e.json -- ${CDEE} ${FX}/cde_train.ts ${FX}/cde_test.ts -o e.json)
cli_case(cde-eval/channel-mismatch --rc 1 --tool cde-eval --stderr "test cases have 4 channels, the model 3" --no-file e.json
  -- bash -c "${CDET} ${FX}/cde_train.ts --time-channel --epochs 1 -q -o m.h5 > /dev/null && ${CDEE} m.h5 ${FX}/cde_three_dims.ts -o e.json")
cli_case(cde-train/solver-budget-exceeded --rc 1 --stderr "more than max_steps solver steps \\(series [0-9]+, dopri5\\)" --no-file m.h5 --no-file log.jsonl
  -- ${CDET} ${FX}/cde_train.ts --max-steps 3 --rtol 1e-9 --atol 1e-9 -q -o m.h5 --log log.jsonl)
