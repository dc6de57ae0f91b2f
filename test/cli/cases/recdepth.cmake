# ---- recdepth-sample (issue 36): ar, ar-adaptive and the diffusion-forcing sampler ----------------
set(RDS $<TARGET_FILE:recdepth-sample>)
# A tiny random recurrent-depth model (1 prelude, 2 core, 1 coda blocks, mean recurrence 8, n_ctx 128)
# with a tokenizer trained on the shipped Genesis excerpt.
set(RDS_MODEL "$<TARGET_FILE:tokenizer-train> ${FX}/genesis.txt --chunk-lines 3 --vocab-size 400 -o t.model -q && $<TARGET_FILE:lm-init> --tokenizer t.model --preset tiny --arch recurrent-depth --mean-recurrence 8 --n-ctx 128 -o rd.h5 -q")

# The sampler's degenerate case: inner recurrence r, a wavefront of one, no EMA, no noise is ar.
cli_case(recdepth-sample/degenerate-diffusion-is-ar --rc 0
  --file-jq out.json ".agreement_with_ar == 1 and .ids == .ar.ids and .generated_tokens == 24 and .forwards == 23"
  --file-jq out.json "([.recurrence_per_token[] == 8] | all) and .core_iterations_per_token == 8 and .settings.recurrence == 8"
  --file-jq out.json ".method == \"diffusion-forcing\" and .meta.tool == \"recdepth-sample\" and (.text | type) == \"string\""
  -- bash -c "${RDS_MODEL} && ${RDS} rd.h5 --prompt 'In the beginning' -n 24 --ignore-eos --inner-recurrence 8 --max-wavefront 1 --ema 0 --state-noise 0 --compare-ar -o out.json -q")
# Defaults with a wider headway: the summary, the score and the step log agree with each other.
cli_case(recdepth-sample/summary-score-steps-log --rc 0
  --file-jq out.json ".generated_tokens == 20 and .decode_tokens == 19 and .score.tokens == 20 and .score.perplexity > 1 and .stop_reason == \"max_new_tokens\""
  --file-jq out.json ".settings.headway == 2 and .settings.inner_recurrence == 4 and .settings.freeze == \"latent-diff\" and .forwards >= 10"
  --file-jq steps.json ".[0].meta.tool == \"recdepth-sample\" and ([.[1:][] | .committed] | add) == 19 and ([.[1:][] | .wavefront <= 128] | all)"
  --file-jq both.json ".[0].forwards == (.[1] | length) - 1 and .[0].core_iterations == ([.[1][1:][] | .core_iterations] | add)"
  -- bash -c "${RDS_MODEL} && ${RDS} rd.h5 --prompt 'And God said' -n 20 --ignore-eos --headway 2 --score --steps-log s.jsonl -o out.json -q && jq -s . s.jsonl > steps.json && jq -s . out.json steps.json > both.json")
# --prompts: one record per prompt and totals; ar-adaptive at threshold 0 never exits and is ar.
cli_case(recdepth-sample/prompts-file-adaptive-threshold-zero --rc 0
  --jq ".totals.prompts == 2 and (.prompts | length) == 2 and .totals.agreement_with_ar == 1 and .totals.generated_tokens == 24"
  --jq "(.prompts[1].where | test(\"line 3$\")) and .totals.core_iterations_per_token == 8 and .settings.kl_threshold == 0"
  -- bash -c "${RDS_MODEL} && printf 'In the beginning\\n\\nAnd God said\\n' > p.txt && ${RDS} rd.h5 --prompts p.txt -n 12 --ignore-eos --method ar-adaptive --kl-threshold 0 --compare-ar -q")
# Seeded sampling: the same seed gives the same ids on 1 and 2 threads, another seed others.
cli_case(recdepth-sample/sampling-seeded-across-threads --rc 0
  -- bash -c "${RDS_MODEL} && ${RDS} rd.h5 --prompt x -n 30 --ignore-eos --temperature 1 --seed 3 --threads 1 -q | jq -c .ids > a.txt && ${RDS} rd.h5 --prompt x -n 30 --ignore-eos --temperature 1 --seed 3 --threads 2 -q | jq -c .ids > b.txt && ${RDS} rd.h5 --prompt x -n 30 --ignore-eos --temperature 1 --seed 4 -q | jq -c .ids > c.txt && cmp a.txt b.txt && ! cmp -s a.txt c.txt && test -s a.txt")

# ---- bad input: one line, nothing written --------------------------------------------------------
cli_case(recdepth-sample/recurrence-zero --rc 2 --stderr "^recdepth-sample: error: must be an integer in 1\\.\\.65536, got 0 \\(--recurrence\\)$" --no-file o.json
  -- ${RDS} missing.h5 --prompt x --recurrence 0 -o o.json)
cli_case(recdepth-sample/inner-recurrence-zero --rc 2 --stderr "^recdepth-sample: error: must be an integer in 1\\.\\.65536, got 0 \\(--inner-recurrence\\)$" --no-file o.json
  -- ${RDS} missing.h5 --prompt x --inner-recurrence 0 -o o.json)
cli_case(recdepth-sample/wavefront-smaller-than-headway --rc 2 --stderr "^recdepth-sample: error: --max-wavefront 2 is smaller than --headway 3: a step's new positions must fit the wavefront \\(--max-wavefront\\)$" --no-file o.json
  -- ${RDS} missing.h5 --prompt x --headway 3 --max-wavefront 2 -o o.json)
cli_case(recdepth-sample/flag-of-another-method --rc 2 --stderr "^recdepth-sample: error: --inner-recurrence is used by --method diffusion-forcing only \\(this run: ar\\) \\(--inner-recurrence\\)$" --no-file o.json
  -- ${RDS} missing.h5 --prompt x --method ar --inner-recurrence 4 -o o.json)
cli_case(recdepth-sample/steps-log-not-jsonl --rc 2 --stderr "give a path ending in \\.jsonl" --no-file s.json
  -- ${RDS} missing.h5 --prompt x --steps-log s.json)
cli_case(recdepth-sample/missing-model --rc 1 --stderr "^recdepth-sample: error: cannot read file" --no-file o.json
  -- ${RDS} missing.h5 --prompt x -o o.json)
cli_case(recdepth-sample/llama-checkpoint --rc 1 --no-file o.json
  --stderr "^recdepth-sample: error: not a recurrent-depth model: its blocks are 6 llama, not recdepth-prelude / core / coda \\(make one with lm-init or lm-train --arch recurrent-depth\\) \\(.*kjv7m\\.h5\\)$"
  -- ${RDS} ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 --prompt x -o o.json)
cli_case(recdepth-sample/prompt-fills-context --rc 1 --tool recdepth-sample --stderr "no room to generate in the context of n_ctx = 128" --no-file o.json
  -- bash -c "${RDS_MODEL} && ${RDS} rd.h5 --prompt-file ${FX}/genesis.txt -o o.json")

# ---- lm-init / lm-train --arch recurrent-depth ------------------------------------------------------
# lm-train on a recurrent-depth model: the log records each step's sampled recurrence, the checkpoint
# keeps the adapter and Huginn's settings, lm-eval scores it at chosen recurrences.
cli_case(lm-train/recurrent-depth-trains --rc 0
  --file-jq log.json "[.[] | select(.step) | .recurrence] | length == 4 and (map(. >= 1) | all)"
  --file-jq log.json "[.[] | select(.summary)][0].summary.finished == true"
  --file-jq e.json ".[0].recurrence == 1 and .[1].recurrence == 8 and .[0].loss > 0 and .[0].loss != .[1].loss"
  -- bash -c "$<TARGET_FILE:lm-train> ${FX}/genesis.txt --vocab-size 400 --arch recurrent-depth --prelude 1 --core 1 --coda 1 --d-model 32 --n-heads 2 --n-kv-heads 2 --d-ff 64 --n-ctx 64 --mean-recurrence 4 --backprop-depth 2 --seq-len 32 --batch 2 --steps 4 --log-every 1 --val-every 4 -o rd.h5 --log log.jsonl -q && jq -s . log.jsonl > log.json && $<TARGET_FILE:lm-eval> rd.h5 ${FX}/genesis.txt --recurrence 1 --max-tokens 64 -o e1.json -q && $<TARGET_FILE:lm-eval> rd.h5 ${FX}/genesis.txt --recurrence 8 --max-tokens 64 -o e8.json -q && jq -s . e1.json e8.json > e.json")
cli_case(lm-init/recurrent-depth-flag-without-arch --rc 2 --stderr "^lm-init: error: --mean-recurrence needs --arch recurrent-depth \\(--mean-recurrence\\)$" --no-file m.h5
  -- $<TARGET_FILE:lm-init> --preset tiny --mean-recurrence 8 -o m.h5)
cli_case(lm-init/recurrent-depth-with-n-layers --rc 2 --stderr "sets the blocks with --prelude, --core and --coda \\(--n-layers\\)$" --no-file m.h5
  -- $<TARGET_FILE:lm-init> --preset tiny --arch recurrent-depth --n-layers 4 -o m.h5)
cli_case(lm-init/recurrent-depth-backprop-above-mean --rc 2 --stderr "--backprop-depth 9 exceeds --mean-recurrence 4" --no-file m.h5
  -- $<TARGET_FILE:lm-init> --preset tiny --arch recurrent-depth --mean-recurrence 4 --backprop-depth 9 -o m.h5)
cli_case(lm-eval/recurrence-on-a-llama-model --rc 2 --stderr "--recurrence needs a recurrent-depth model" --no-file o.json
  -- $<TARGET_FILE:lm-eval> ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 ${FX}/genesis.txt --recurrence 4 -o o.json)
cli_case(lm-convert/recurrent-depth-to-gguf --rc 2 --tool lm-convert --stderr "recurrent-depth models exist in the native HDF5 format only" --no-file m.gguf
  -- bash -c "$<TARGET_FILE:lm-init> --preset tiny --arch recurrent-depth -o rd.h5 -q && $<TARGET_FILE:lm-convert> rd.h5 -o m.gguf")
# --ar-recurrence: the baseline of --compare-ar at another recurrence (ar at r = 2 against ar at 8);
# it needs --compare-ar.
cli_case(recdepth-sample/ar-recurrence-baseline --rc 0
  --file-jq out.json ".settings.recurrence == 2 and .settings.ar_recurrence == 8 and .core_iterations_per_token == 2 and .agreement_with_ar <= 1 and .speedup_over_ar > 0"
  -- bash -c "${RDS_MODEL} && ${RDS} rd.h5 --prompt 'In the beginning' -n 12 --ignore-eos --method ar --recurrence 2 --ar-recurrence 8 --compare-ar -o out.json -q")
cli_case(recdepth-sample/ar-recurrence-without-compare --rc 2 --tool recdepth-sample --stderr "give --compare-ar" --no-file o.json
  -- bash -c "${RDS_MODEL} && ${RDS} rd.h5 --prompt x --ar-recurrence 8 -o o.json")
# A resumed recurrent-depth run keeps the checkpoint's recurrence settings: a different one is refused.
cli_case(lm-train/recurrent-depth-resume-refuses-other-recurrence --rc 2 --tool lm-train
  --stderr "^lm-train: error: --mean-recurrence 6 differs from the checkpoint's 4"
  -- bash -c "$<TARGET_FILE:lm-train> ${FX}/genesis.txt --vocab-size 400 --arch recurrent-depth --prelude 1 --core 1 --coda 1 --d-model 32 --n-heads 2 --n-kv-heads 2 --d-ff 64 --n-ctx 64 --mean-recurrence 4 --backprop-depth 2 --seq-len 32 --batch 2 --steps 4 --stop-at 2 -o rd.h5 --log log.jsonl -q && $<TARGET_FILE:lm-train> ${FX}/genesis.txt --resume --arch recurrent-depth --mean-recurrence 6 --steps 4 -o rd.h5 --log log.jsonl -q")
cli_case(lm-train/recurrent-depth-exit-loss --rc 2 --stderr "^lm-train: error: --exit-loss has no blocks to exit from in a recurrent-depth model" --no-file log.jsonl
  -- $<TARGET_FILE:lm-train> ${FX}/genesis.txt --vocab-size 400 --arch recurrent-depth --exit-loss 1 --steps 2 -o rd.h5 --log log.jsonl)
