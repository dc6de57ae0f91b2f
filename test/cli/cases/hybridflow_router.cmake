# hybridflow-train-router (issue 39): HybridFlow's utility router (arXiv 2512.22137).  Fixtures:
# fixtures/hybridflow_router, synthetic profiles whose utility is dU = (n_depends - 2) - 0.1 with
# 4-d noise embeddings (train 64 rows, heldout 40).
set(HFR $<TARGET_FILE:hybridflow-train-router>)
set(HFR_FX ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/hybridflow_router)
set(HFR_TRAIN ${HFR_FX}/train.jsonl --embeddings ${HFR_FX}/train_emb.jsonl)
set(HFR_EVAL --evaluate ${HFR_FX}/heldout.jsonl --evaluate-embeddings ${HFR_FX}/heldout_emb.jsonl)
string(REPLACE ";" " " HFR_TRAIN_S "${HFR_TRAIN}")  # for bash -c command strings
string(REPLACE ";" " " HFR_EVAL_S "${HFR_EVAL}")

# ---- real runs ---------------------------------------------------------------------------------
# 30 epochs (the reference's), input 4 + 8 + 2 = 14; the loss log has one line per epoch.
cli_case(hybridflow-train-router/train --rc 0 --file r.safetensors --file loss.jsonl
  --jq ".training.n_profiles == 64 and .training.input_dim == 14 and (.training.epoch_loss | length) == 30"
  --jq ".training.meta_vector == \"inference\" and .training.options.tau == 0.5 and .training.options.B_max == 5000"
  --jq ".meta.tool == \"hybridflow-train-router\" and (.meta.inputs | length) == 2"
  --file-jq loss.jsonl "select(.epoch == 30) | .loss > 0"
  -- ${HFR} ${HFR_TRAIN} -o r.safetensors --log loss.jsonl)
# Trained with a larger step, the router ranks the held-out subtasks: at share 0.5 its utility is
# above random's expectation and every draw's, and equals the oracle's here (dU is a function of n_depends).
cli_case(hybridflow-train-router/train-and-evaluate --rc 0 --file r.safetensors
  --jq "(.evaluation.rows | length) == 11 and .evaluation.n == 40 and .evaluation.scored_at == {\"r_B\": 1, \"r_L\": 1}"
  --jq ".evaluation.rows[9] | .rule == \"share\" and .n_cloud == 20 and .router_utility > .random_expected + 0.5 and .router_beats_draws == 1"
  --jq "[.evaluation.rows[] | .router_utility >= .random_expected] | all"
  -- ${HFR} ${HFR_TRAIN} -o r.safetensors --lr 1e-3 --hidden 32 ${HFR_EVAL} --random-draws 200)
# An existing router evaluated again gives the same evaluation; --score gives one line per row.
cli_case(hybridflow-train-router/router-evaluate-and-score --rc 0 --tool hybridflow-train-router
  -- bash -c "${HFR} ${HFR_TRAIN_S} -o r.safetensors --hidden 8 --epochs 3 ${HFR_EVAL_S} -q > a.json && ${HFR} --router r.safetensors ${HFR_EVAL_S} > b.json && test \"$(jq -S .evaluation a.json)\" = \"$(jq -S .evaluation b.json)\" && printf '{\"x\": [0,0,0,0, 1,2,0.02,0,0,0,0,0, 1,1]}\\n{\"embedding\": [0,0,0,0], \"meta\": [1,2,0.02,0,0,0,0,0], \"r_B\": 1, \"r_L\": 1}\\n' > in.jsonl && ${HFR} --router r.safetensors --score in.jsonl > s.jsonl && test $(wc -l < s.jsonl) = 2 && test \"$(sed -n 1p s.jsonl)\" = \"$(sed -n 2p s.jsonl)\" && jq -e '.s > 0 and .s < 1' s.jsonl > /dev/null")
# Deterministic for a seed: the same file bit for bit (the same command line, so the same provenance).
cli_case(hybridflow-train-router/seeded --rc 0 --tool hybridflow-train-router
  -- bash -c "mkdir a b c && (cd a && ${HFR} ${HFR_TRAIN_S} -o r.safetensors --epochs 2 -q > /dev/null) && (cd b && ${HFR} ${HFR_TRAIN_S} -o r.safetensors --epochs 2 -q > /dev/null) && cmp a/r.safetensors b/r.safetensors && cd c && ${HFR} ${HFR_TRAIN_S} -o r.safetensors --epochs 2 --seed 5 -q > /dev/null && ! cmp -s ../a/r.safetensors r.safetensors")

# ---- bad inputs: exit 1, one line, no output file --------------------------------------------------
cli_case(hybridflow-train-router/missing-profiles --rc 1 --stderr "cannot read file" --no-file r.safetensors
  -- ${HFR} nope.jsonl --embeddings ${HFR_FX}/train_emb.jsonl -o r.safetensors)
cli_case(hybridflow-train-router/malformed-profile-line --rc 1 --stderr "line 2" --no-file r.safetensors --tool hybridflow-train-router
  -- bash -c "head -1 ${HFR_FX}/train.jsonl > p.jsonl && echo '{\"task\": \"q\", \"subtask\": {}}' >> p.jsonl && ${HFR} p.jsonl --embeddings ${HFR_FX}/train_emb.jsonl -o r.safetensors")
cli_case(hybridflow-train-router/embedding-count-mismatch --rc 1 --stderr "64 embeddings for 40 profiles|40 profiles" --no-file r.safetensors
  -- ${HFR} ${HFR_FX}/heldout.jsonl --embeddings ${HFR_FX}/train_emb.jsonl -o r.safetensors)
cli_case(hybridflow-train-router/nan-embedding --rc 1 --stderr "line 1" --no-file r.safetensors --tool hybridflow-train-router
  -- bash -c "echo '{\"embedding\": [NaN, 1, 2, 3]}' > e.jsonl && ${HFR} ${HFR_FX}/train.jsonl --embeddings e.jsonl -o r.safetensors")
cli_case(hybridflow-train-router/bad-router-file --rc 1 --tool hybridflow-train-router
  -- bash -c "echo junk > r.safetensors && ${HFR} --router r.safetensors ${HFR_EVAL_S}")
cli_case(hybridflow-train-router/score-wrong-length --rc 1 --stderr "x of length 3" --tool hybridflow-train-router
  -- bash -c "${HFR} ${HFR_TRAIN_S} -o r.safetensors --epochs 1 -q > /dev/null && echo '{\"x\": [1,2,3]}' > in.jsonl && ${HFR} --router r.safetensors --score in.jsonl")
# A failing evaluation leaves no router file.
cli_case(hybridflow-train-router/evaluation-failure-no-router --rc 1 --no-file r.safetensors
  -- ${HFR} ${HFR_TRAIN} -o r.safetensors --evaluate ${HFR_FX}/heldout.jsonl --evaluate-embeddings ${HFR_FX}/train_emb.jsonl)

# ---- usage errors: exit 2 ------------------------------------------------------------------------
cli_case(hybridflow-train-router/no-output --rc 2 --stderr "-o" -- ${HFR} ${HFR_TRAIN})
cli_case(hybridflow-train-router/no-embeddings --rc 2 --stderr "--embeddings" -- ${HFR} ${HFR_FX}/train.jsonl -o r.safetensors)
cli_case(hybridflow-train-router/wrong-output-extension --rc 2 --no-file r.pt -- ${HFR} ${HFR_TRAIN} -o r.pt)
cli_case(hybridflow-train-router/score-without-router --rc 2 --stderr "--router" -- ${HFR} --score x.jsonl)
cli_case(hybridflow-train-router/bad-epochs --rc 2 --stderr "--epochs" -- ${HFR} ${HFR_TRAIN} -o r.safetensors --epochs 0)
