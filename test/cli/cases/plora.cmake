# ---- lm-train --lora-rank / plora-train (issue 33) --------------------------------------------------
set(PLORA $<TARGET_FILE:plora-train>)
# A tiny base trained here (Genesis 1-20; chapters 5, 10, 15, 20 held out) that the adapters fine-tune.
set(LORA_BASE "${TRAIN_SMALL_STR} --steps 60 -o base.h5 -q > /dev/null")
set(LORA_DATA ${KJVX} --column 2 --doc-column 1 --val-every 5)
string(REPLACE ";" " " LORA_DATA_STR "${LORA_DATA}")
# A 3-job space on the same text: ranks 2/4/8, mixed targets, batches, learning rates and a dropout.
set(SPACE3 "{\"seq_len\": 64, \"data\": {\"path\": \"${KJVX}\", \"column\": 2, \"doc_column\": 1, \"val_every\": 5}, \"defaults\": {\"steps\": 12, \"warmup\": 2, \"alpha\": 8}, \"jobs\": [{\"rank\": 2, \"targets\": [\"q\", \"v\"], \"lr\": 1e-2}, {\"rank\": 4, \"targets\": [\"k\", \"o\", \"gate\", \"up\", \"down\"], \"batch\": 2, \"lr\": 3e-3, \"dropout\": 0.1}, {\"rank\": 8, \"targets\": [\"q\", \"k\", \"v\", \"o\"], \"batch\": 3, \"steps\": 8, \"lr\": 5e-3, \"rslora\": true}]}")

# The adapter trains (held-out loss below the base's, as lm-eval measures both), -o is a PEFT
# directory whose adapted loss lm-eval --lora reproduces (1e-7: the engine merges W + sBA, the
# trainer adds the adapter's product), and the base's weights are not in it.
cli_case(lm-train/lora-adapter-trains-and-evaluates
  --rc 0 --file ad/adapter_config.json --file ad/adapter_model.safetensors
  --file-jq v.json ".lora < .base and ((.lora - .train) / .train | fabs) < 1e-6"
  --file-jq ad/adapter_config.json ".peft_type == \"LORA\" and .r == 4 and .lora_alpha == 8 and (.target_modules | sort) == ([\"down_proj\",\"gate_proj\",\"k_proj\",\"o_proj\",\"q_proj\",\"up_proj\",\"v_proj\"] | sort)"
  -- bash -c "${LORA_BASE} && ${LMTRAIN} ${LORA_DATA_STR} --init base.h5 --lora-rank 4 --lora-alpha 8 --lora-targets q,k,v,o,gate,up,down --steps 40 --batch 4 --lr 1e-2 --threads 1 -o ad -q --log a.jsonl && jq -n --argjson b \"$(${LMEVAL} base.h5 ${LORA_DATA_STR} --split val -q | jq .loss)\" --argjson l \"$(${LMEVAL} base.h5 ${LORA_DATA_STR} --split val --lora ad -q | jq .loss)\" --argjson t \"$(jq -s '.[-1].summary.val_loss' a.jsonl)\" '{base: $b, lora: $l, train: $t}' > v.json")

# Packing changes no job's arithmetic: the three jobs trained packed in one group, each alone one
# after another (--pack none), and job j00 by lm-train --lora-rank with the same settings write
# byte-identical adapter tensors; the packed run made one pass per step (12 passes for 3 jobs).
cli_case(plora-train/packed-equals-alone-and-lm-train
  --rc 0 --file p/summary.json --file p/j01/adapter_model.safetensors --file p/j02.jsonl
  --file-jq p/summary.json "(.jobs | length) == 3 and (.groups | length) == 1 and .groups[0].packed_steps == 12 and ([.jobs[].steps_done] == [12, 12, 8]) and .peak_rss_bytes > 0 and .best_job != null"
  --file-jq s/summary.json "(.groups | length) == 3"
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' > space.json && ${PLORA} space.json --model base.h5 -o p --threads 1 -q && ${PLORA} space.json --model base.h5 -o s --pack none --threads 2 -q && cmp p/j00/adapter_model.safetensors s/j00/adapter_model.safetensors && cmp p/j01/adapter_model.safetensors s/j01/adapter_model.safetensors && cmp p/j02/adapter_model.safetensors s/j02/adapter_model.safetensors && ${LMTRAIN} ${LORA_DATA_STR} --init base.h5 --lora-rank 2 --lora-alpha 8 --lora-targets q,v --seq-len 64 --batch 1 --steps 12 --warmup 2 --lr 1e-2 --min-lr 1e-4 --seed 0 --threads 1 -o one -q > /dev/null && cmp one/adapter_model.safetensors p/j00/adapter_model.safetensors")

# Successive halving (eta 2, rung at step 4): every job reaches the rung, the best 2 of 3 by
# validation loss finish, the third stops there with its adapter saved at step 4, and it is the one
# with the highest validation loss at the rung (the rung records of the three logs).
cli_case(plora-train/successive-halving
  --rc 0 --file h/j00/adapter_config.json --file h/j01/adapter_config.json --file h/j02/adapter_config.json
  --file-jq h/summary.json "([.jobs[] | select(.stopped_early)] | length) == 1 and ([.jobs[] | select(.stopped_early) | .steps_done] == [4]) and ([.jobs[] | select(.stopped_early | not) | .steps_done] | sort) == ([.jobs[] | select(.stopped_early | not) | .steps] | sort) and .early_stop.eta == 2"
  --file-jq rung.json "(. | length) == 3 and (max_by(.val_loss) | .job) == .[0].stopped"
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' | jq '. + {early_stop: {eta: 2, rungs: [4]}}' > space.json && ${PLORA} space.json --model base.h5 -o h --threads 1 -q && cat h/j00.jsonl h/j01.jsonl h/j02.jsonl | jq -s --arg s \"$(jq -r '.jobs[] | select(.stopped_early) | .name' h/summary.json)\" '[.[] | select(.event == \"rung\") | {job, val_loss, stopped: $s}]' > rung.json")

# A diverging job (learning rate 3e38, no clipping: its weights overflow) stops, marked, with its last finite adapter; the
# other two train on, bitwise as without it (their adapters equal the normal run's).
cli_case(plora-train/diverged-job-leaves-the-others-alone
  --rc 0 --file d/j01/adapter_model.safetensors
  --file-jq d/summary.json "([.jobs[] | select(.diverged) | .name] == [\"j01\"]) and ([.jobs[] | select(.diverged | not) | .steps_done] == [12, 8]) and .best_job != \"j01\""
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' > space.json && jq '.jobs[1].lr = 3e38 | .jobs[1].clip = 0 | .jobs[1].warmup = 0' space.json > bad.json && ${PLORA} space.json --model base.h5 -o n --threads 1 -q && ${PLORA} bad.json --model base.h5 -o d --threads 1 -q && cmp n/j00/adapter_model.safetensors d/j00/adapter_model.safetensors && cmp n/j02/adapter_model.safetensors d/j02/adapter_model.safetensors && grep -q diverged d/j01.jsonl")

# The data filter keeps the TSV rows whose key starts with a prefix: Genesis 1 and 10-19 ("Ge1")
# hold fewer tokens than all 20 chapters; a filter that keeps nothing is bad input.
cli_case(plora-train/data-filter
  --rc 0 --file-jq f/summary.json ".jobs[0].train_tokens > 1000 and .jobs[0].train_tokens < .all"
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' | jq '.jobs = [.jobs[0]] | .data.filter = {column: 1, prefix: [\"Ge1\"]}' > space.json && echo '${SPACE3}' | jq '.jobs = [.jobs[0]]' > all.json && ${PLORA} all.json --model base.h5 -o a -q && ${PLORA} space.json --model base.h5 -o f0 -q && jq --argjson a \"$(jq '.jobs[0].train_tokens' a/summary.json)\" '. + {all: $a}' f0/summary.json > s.json && mkdir -p f && mv s.json f/summary.json")
cli_case(plora-train/data-filter-keeps-nothing --rc 1 --stderr "the data filter keeps no row" --no-file out --tool plora-train
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' | jq '.data.filter = {column: 1, prefix: [\"Zz\"]}' > space.json && ${PLORA} space.json --model base.h5 -o out")
cli_case(plora-train/halving-refused-per-array-task --rc 2 --stderr "successive halving compares every job" --no-file out --tool plora-train
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' | jq '. + {early_stop: {eta: 2, rungs: [4]}}' > space.json && echo '{\"workers\": 2, \"schedule\": [{\"worker\": 0, \"groups\": [{\"jobs\": [\"j00\"]}]}]}' > sch.json && ${PLORA} space.json --model base.h5 --schedule sch.json --array-task 0/2 -o out")
cli_case(plora-train/schedule-of-another-space --rc 1 --stderr "planned for another search space" --no-file out --tool plora-train
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' > space.json && echo '{\"space_sha256\": \"0123456789abcdef\", \"schedule\": [{\"worker\": 0, \"groups\": [{\"jobs\": [\"j00\", \"j01\", \"j02\"]}]}]}' > sch.json && ${PLORA} space.json --model base.h5 --schedule sch.json -o out")

# A plora-plan-style schedule: two groups, and --array-task runs one worker's part only.
cli_case(plora-train/schedule-and-array-task
  --rc 0 --file w1/summary-task1.json --no-file w1/j00 --file w1/j02/adapter_model.safetensors
  --file-jq w1/summary-task1.json "(.jobs | length) == 1 and .jobs[0].name == \"j02\" and .array_task.tasks == 2"
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' > space.json && echo '{\"workers\": 2, \"schedule\": [{\"worker\": 0, \"groups\": [{\"jobs\": [\"j00\", \"j01\"]}]}, {\"worker\": 1, \"groups\": [{\"jobs\": [\"j02\"]}]}]}' > sch.json && ${PLORA} space.json --model base.h5 --schedule sch.json -o all -q && jq -e '(.groups | length) == 2' all/summary.json > /dev/null && ${PLORA} space.json --model base.h5 --schedule sch.json --array-task 1/2 -o w1 -q")

# plora-plan --profile times packs of this machine's trainer on the base (k = 1, 2, 3: the space's
# three jobs, ranks 2 and 8), plans with that table, and plora-train executes the schedule.
cli_case(plora-plan/profile-then-train
  --rc 0 --file t.json --file run/summary.json
  --file-jq t.json "([.measurements[] | [.jobs, .rank]] == [[1,2],[2,2],[3,2],[1,8],[2,8],[3,8]]) and (.measurements | all(.step_seconds > 0)) and .seq_len == 64"
  --file-jq p.json "(.methods | keys) == [\"lpt\", \"max-pack\", \"plan\", \"sequential\"] and .methods.plan.makespan_s <= .methods.sequential.makespan_s and .throughput_model.path == \"t.json\""
  --file-jq run/summary.json "(.jobs | length) == 3 and (.jobs | all(.steps_done == .steps))"
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' > space.json && $<TARGET_FILE:plora-plan> space.json --model base.h5 --memory 1GiB --overhead 1MiB --profile --profile-steps 1 --save-throughput t.json -o p.json --threads 1 -q && ${PLORA} space.json --model base.h5 --schedule p.json -o run --threads 1 -q")

# ---- bad input ---------------------------------------------------------------------------------------
cli_case(lm-train/lora-rank-zero --rc 2 --stderr "--lora-rank" --no-file ad --tool lm-train
  -- ${LMTRAIN} ${FX}/genesis.txt --init nothing.h5 --lora-rank 0 --steps 2 -o ad)
cli_case(lm-train/lora-unknown-target --rc 2 --stderr "qq" --no-file ad --tool lm-train
  -- bash -c "${LORA_BASE} && ${LMTRAIN} ${LORA_DATA_STR} --init base.h5 --lora-rank 2 --lora-targets q,qq --steps 2 -o ad")
cli_case(lm-train/lora-rank-above-width --rc 2 --stderr "exceeds" --no-file ad --tool lm-train
  -- bash -c "${LORA_BASE} && ${LMTRAIN} ${LORA_DATA_STR} --init base.h5 --lora-rank 33 --steps 2 -o ad")
cli_case(lm-train/lora-needs-init --rc 2 --stderr "--init" --no-file ad --tool lm-train
  -- ${LMTRAIN} ${FX}/genesis.txt --lora-rank 2 --steps 2 -o ad)
cli_case(lm-train/lora-flag-without-rank --rc 2 --stderr "needs --lora-rank" --no-file m.h5 --tool lm-train
  -- ${LMTRAIN} ${FX}/genesis.txt --vocab-size 300 --lora-alpha 4 --steps 2 -o m.h5)
cli_case(lm-train/lora-refuses-full-training-flags --rc 2 --stderr "--optimizer does not apply to LoRA" --no-file ad --tool lm-train
  -- bash -c "${LORA_BASE} && ${LMTRAIN} ${LORA_DATA_STR} --init base.h5 --lora-rank 2 --optimizer foam --steps 2 -o ad")
cli_case(plora-train/rank-zero-in-space --rc 1 --stderr "rank" --no-file out --tool plora-train
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' | jq '.jobs[1].rank = 0' > space.json && ${PLORA} space.json --model base.h5 -o out")
cli_case(plora-train/rank-above-width --rc 1 --stderr "job 'j02'.*exceeds" --no-file out --tool plora-train
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' | jq '.jobs[2].rank = 40' > space.json && ${PLORA} space.json --model base.h5 -o out")
cli_case(plora-train/schedule-unknown-job --rc 1 --stderr "job 'zz'" --no-file out --tool plora-train
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' > space.json && echo '{\"schedule\": [{\"worker\": 0, \"groups\": [{\"jobs\": [\"j00\", \"zz\"]}]}]}' > sch.json && ${PLORA} space.json --model base.h5 --schedule sch.json -o out")
cli_case(plora-train/schedule-missing-job --rc 1 --stderr "never runs job 'j02'" --no-file out --tool plora-train
  -- bash -c "${LORA_BASE} && echo '${SPACE3}' > space.json && echo '{\"schedule\": [{\"worker\": 0, \"groups\": [{\"jobs\": [\"j00\", \"j01\"]}]}]}' > sch.json && ${PLORA} space.json --model base.h5 --schedule sch.json -o out")
cli_case(plora-train/missing-space --rc 1 --stderr "nope.json" --no-file out --tool plora-train
  -- ${PLORA} nope.json --model x.h5 -o out)
cli_case(plora-train/bad-array-task --rc 2 --stderr "--array-task" --no-file out --tool plora-train
  -- ${PLORA} nope.json --model x.h5 --schedule s.json --array-task 3/2 -o out)
# From a newcomer test: an output over a file of the --lora directory, a non-empty -o, a config that
# leaves out lora_alpha (it would silently take PEFT's default), a positional after --lora-targets.
cli_case(lm-eval/output-into-adapter-dir-refused --rc 2 --stderr "would overwrite adapter_config.json" --tool lm-eval
  -- bash -c "${LORA_BASE} && ${LMTRAIN} ${LORA_DATA_STR} --init base.h5 --lora-rank 2 --steps 2 -o ad -q > /dev/null && cp ad/adapter_config.json keep.json && ${LMEVAL} base.h5 ${LORA_DATA_STR} --lora ad -o ad/adapter_config.json || ( r=$? && cmp keep.json ad/adapter_config.json && exit $r )")
cli_case(plora-train/non-empty-output-refused --rc 2 --stderr "is not empty" --tool plora-train
  -- bash -c "${LORA_BASE} && mkdir clash && echo '${SPACE3}' > clash/j00.jsonl && cp clash/j00.jsonl keep.json && ${PLORA} clash/j00.jsonl --model base.h5 -o clash || ( r=$? && cmp keep.json clash/j00.jsonl && exit $r )")
cli_case(lm-eval/adapter-config-without-alpha --rc 1 --stderr "'lora_alpha' is missing" --tool lm-eval
  -- bash -c "${LORA_BASE} && ${LMTRAIN} ${LORA_DATA_STR} --init base.h5 --lora-rank 2 --steps 2 -o ad -q > /dev/null && jq 'del(.lora_alpha)' ad/adapter_config.json > c.json && mv c.json ad/adapter_config.json && ${LMEVAL} base.h5 ${LORA_DATA_STR} --lora ad")
cli_case(lm-train/lora-targets-then-positional --rc 0 --file ad/adapter_model.safetensors --file-jq ad/adapter_config.json "(.target_modules | sort) == [\"k_proj\", \"q_proj\"]"
  -- bash -c "${LORA_BASE} && ${LMTRAIN} --column 2 --doc-column 1 --init base.h5 --lora-rank 2 --steps 2 -o ad --lora-targets q,k ${KJVX} -q > /dev/null")
