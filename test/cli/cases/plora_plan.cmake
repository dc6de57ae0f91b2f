# plora-plan (issue 33): the PLoRA planner on the shipped search space and throughput tables.
set(PP $<TARGET_FILE:plora-plan>)
set(PP_INIT $<TARGET_FILE:lm-init>)
set(PL ${PROJECT_SOURCE_DIR}/data/plora)
set(PP_GPU --throughput ${PL}/gpu_table_a100.json)
set(PP_CPU --throughput ${PL}/cpu_table_synthetic.json)
set(PP_GPU_SH "--throughput ${PL}/gpu_table_a100.json")  # the same inside bash -c strings (a list would split at ';')
# every job exactly once in the written schedule, and every group within the memory limit
set(PP_ONCE "([.schedule[].groups[].jobs[]] | sort) == ([.memory_model.jobs[].name] | sort) and ([.schedule[].groups[].peak_bytes] | max) <= .memory_bytes")

# ---- real runs -------------------------------------------------------------------------------------
# space16 on the demo model (the space's base) at 280 MB, which admits 4 of the 16 jobs at once: on the
# modelled A100 table the plan beats every baseline and sequential by 1.33x or more.
cli_case(plora_plan/space16-gpu-table-4-jobs --rc 0
  --jq "${PP_ONCE} and .memory_model.max_jobs_at_once == 4 and .methods.plan.max_group_jobs == 4"
  --jq ".methods.plan.makespan_s < .methods.lpt.makespan_s and .methods.plan.makespan_s < .methods[\"max-pack\"].makespan_s and .methods.plan.speedup_vs_sequential > 1.33"
  --jq ".meta.tool == \"plora-plan\" and (.meta.inputs | length) == 3 and (.meta.inputs[1].sha256 | length) == 64 and (.space_sha256 | length) == 64"
  --jq ".method == \"plan\" and (.how_chosen | startswith(\"exact in the model\")) and .throughput_model.source != \"\" and .memory_model.overhead_bytes == 100663296"
  -- ${PP} ${PL}/space16.json --memory 280MB ${PP_GPU})
# two workers, the file and the picture; on the CPU-like table packing gains little
cli_case(plora_plan/workers-output-plot --rc 0 --file s.json --file s.png
  --file-jq s.json "${PP_ONCE} and (.schedule | length) == 2 and .workers == 2 and .methods.plan.makespan_s <= .methods.lpt.makespan_s"
  --file-jq s.json ".methods.plan.speedup_vs_sequential < 1.1 and .methods.sequential.max_concurrent_jobs == 2"
  -- ${PP} ${PL}/space16.json --model ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 --memory 1GiB --workers 2 ${PP_CPU} -o s.json --plot s.png)
# Slurm-style job arrays: worker 1's part only
cli_case(plora_plan/array-task --rc 0
  --jq "(.schedule | length) == 1 and .schedule[0].worker == 1 and .array_task == {\"index\": 1, \"count\": 3} and (.schedule[0].groups | length) > 0"
  -- ${PP} ${PL}/space16.json --memory 280MB --workers 3 ${PP_GPU} --array-task 1/3)
# --method writes that method's schedule (its makespan is the latest group end)
cli_case(plora_plan/method-lpt --rc 0
  --jq ".method == \"lpt\" and ([.schedule[].groups[].end_s] | max) == .methods.lpt.makespan_s"
  -- ${PP} ${PL}/space16.json --memory 280MB --workers 2 ${PP_GPU} --method lpt)
# a tiny model made here (--model overrides the space's base), successive halving from stdin, local search
cli_case(plora_plan/tiny-model-early-stop-stdin --rc 0
  --file-jq r.json "([.schedule[].groups[] | select(.round == 0) | .jobs[]] | sort) == ([.memory_model.jobs[].name] | sort) and ([.schedule[].groups[] | select(.round == 1) | .jobs[]] | length) == 8"
  --file-jq r.json ".early_stop.rounds == [{\"round\": 0, \"from_step\": 0, \"to_step\": 40, \"jobs\": 16}, {\"round\": 1, \"from_step\": 40, \"to_step\": null, \"jobs\": 8}]"
  --file-jq r.json ".memory_model.max_jobs_at_once == 4 and (.how_chosen | contains(\"local search\")) and .methods.plan.makespan_s <= .methods.lpt.makespan_s"
  --file-jq r.json "[.schedule[].groups[] | select(.round == 1) | .steps[]] | all(. == 160)"
  -- bash -c "${PP_INIT} --preset tiny --vocab-size 256 -o t.h5 -q && jq '. + {early_stop: {eta: 2, rungs: [40]}} | del(.base) | .data.path = \"x.tsv\"' ${PL}/space16.json | ${PP} - --model t.h5 --memory 114MB ${PP_GPU_SH} --exact-max-jobs 0 -o r.json")

# ---- bad input: one line, exit 1 or 2, nothing written ---------------------------------------------------
cli_case(plora_plan/missing-space --rc 1 --stderr "cannot read file" --no-file o.json
  -- ${PP} nonexistent.json --memory 1GiB ${PP_GPU} -o o.json)
cli_case(plora_plan/malformed-space --rc 1 --tool plora-plan --stderr "malformed JSON \\(.*bad.json, byte" --no-file o.json
  -- bash -c "printf '{\"seq_len\": 256,' > bad.json && ${PP} bad.json --memory 1GiB ${PP_GPU_SH} -o o.json")
cli_case(plora_plan/unknown-key --rc 1 --tool plora-plan --stderr "unknown key 'rnak' .*job 'x'" --no-file o.json
  -- bash -c "jq '.jobs = [{name: \"x\", rnak: 4}]' ${PL}/space16.json > s.json && ${PP} s.json --model ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 --memory 1GiB ${PP_GPU_SH} -o o.json")
cli_case(plora_plan/rank-zero --rc 1 --tool plora-plan --stderr "rank must be an integer >= 1, got 0 \\(s.json, grid.rank\\[0\\]\\)" --no-file o.json
  -- bash -c "jq '.grid.rank = [0, 8]' ${PL}/space16.json > s.json && ${PP} s.json --model ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 --memory 1GiB ${PP_GPU_SH} -o o.json")
cli_case(plora_plan/rank-above-width --rc 1 --tool plora-plan --stderr "rank 200 is above the width of the v projection \\(128 x 256\\) of the base \\(s.json, job 'j04'\\)" --no-file o.json
  -- bash -c "jq '.grid.rank = [4, 200]' ${PL}/space16.json > s.json && ${PP} s.json --model ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 --memory 1GiB ${PP_GPU_SH} -o o.json")
cli_case(plora_plan/memory-too-small --rc 1 --stderr "job 'j12' alone needs 163374080 bytes, 63374080 more than the memory limit 100000000 .*16 of 16 jobs do not fit alone \\(--memory\\)" --no-file o.json
  -- ${PP} ${PL}/space16.json --memory 100MB ${PP_GPU} -o o.json)
cli_case(plora_plan/moe-base --rc 1 --tool plora-plan --stderr "llama blocks only" --no-file o.json
  -- bash -c "${PP_INIT} --preset tiny --vocab-size 256 --moe standard --experts 4 --top-k 1 -o m.h5 -q && ${PP} ${PL}/space16.json --model m.h5 --memory 1GiB ${PP_GPU_SH} -o o.json")
cli_case(plora_plan/table-seq-len-differs --rc 1 --tool plora-plan --stderr "timed at seq_len 512, the space trains at seq_len 256" --no-file o.json
  -- bash -c "jq '.seq_len = 512' ${PL}/gpu_table_a100.json > t.json && ${PP} ${PL}/space16.json --memory 1GiB --throughput t.json -o o.json")
cli_case(plora_plan/table-bad-time --rc 1 --tool plora-plan --stderr "step_seconds must be a finite number > 0, got -1 \\(t.json, measurements\\[0\\]\\)" --no-file o.json
  -- bash -c "jq '.measurements[0].step_seconds = -1' ${PL}/gpu_table_a100.json > t.json && ${PP} ${PL}/space16.json --memory 1GiB --throughput t.json -o o.json")
cli_case(plora_plan/array-task-count-differs --rc 2 --stderr "N = 3 must equal --workers 2 \\(--array-task\\)" --no-file o.json
  -- ${PP} ${PL}/space16.json --memory 1GiB --workers 2 ${PP_GPU} --array-task 0/3 -o o.json)
cli_case(plora_plan/array-task-malformed --rc 2 --stderr "expected i/N" --no-file o.json
  -- ${PP} ${PL}/space16.json --memory 1GiB --workers 2 ${PP_GPU} --array-task 2/2 -o o.json)
cli_case(plora_plan/bad-memory --rc 2 --stderr "'12X' is not a byte count .*\\(--memory\\)" --no-file o.json
  -- ${PP} ${PL}/space16.json --memory 12X ${PP_GPU} -o o.json)
cli_case(plora_plan/no-throughput --rc 2 --stderr "--throughput" -- ${PP} ${PL}/space16.json --memory 1GiB)
cli_case(plora_plan/no-model --rc 2 --tool plora-plan --stderr "no base model: give --model" --no-file o.json
  -- bash -c "jq 'del(.base)' ${PL}/space16.json > s.json && ${PP} s.json --memory 1GiB ${PP_GPU_SH} -o o.json")
cli_case(plora_plan/output-not-json --rc 2 --stderr "ending in .json" --no-file o.csv
  -- ${PP} ${PL}/space16.json --memory 1GiB ${PP_GPU} -o o.csv)
cli_case(plora_plan/failure-keeps-existing-output --rc 1 --stderr "more than the memory limit"
  -- ${PP} ${PL}/space16.json --memory 100MB ${PP_GPU} -o existing.json)
cli_case(plora_plan/help --rc 0 -- bash -c "${PP} --help | grep -q 'Examples:' && ${PP} --version | grep -q cuda")
