# ---- fafo-generate: FAFO and its baselines ------------------------------------------------------
set(FAFO $<TARGET_FILE:fafo-generate>)
set(FAFO_LMGEN $<TARGET_FILE:lm-generate>)
# A tiny random decoder with a tokenizer trained on the shipped Genesis excerpt (n_ctx 128).
set(FAFO_MODEL "$<TARGET_FILE:tokenizer-train> ${FX}/genesis.txt --chunk-lines 3 --vocab-size 400 -o t.model -q && $<TARGET_FILE:lm-init> --tokenizer t.model --preset tiny --n-ctx 128 -o m.h5 -q")

cli_case(fafo/greedy-identical-to-ar-jsonl
  --rc 0 --file-jq all.json "(.[0].meta.tool == \"fafo-generate\") and (.[-1].summary.identical_to_ar == true) and (.[-1].summary.generated_tokens == 40)"
  --file-jq all.json "(.[-1].summary.decode_steps == (length - 2)) and ([.[1:-1][] | .accepted] | add) == 39 and (.[-1].summary.kv_policy == \"h2o\")"
  --file-jq all.json "(.[-1].summary.speedup > 0) and (.[-1].summary.compare.generated_tokens == 40) and ([.[1:-1][] | .draft_rows == 4 * 2 - 1] | all)"
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt-file ${FX}/genesis.txt --prompt-tokens 50 -n 40 --ignore-eos --method fafo --schedule fixed --window 4 --ngram 3 --guesses 4 --kv-policy h2o --kv-budget 8 --compare ar -o run.jsonl -q > /dev/null && jq -s . run.jsonl > all.json")
cli_case(fafo/every-method-prints-lm-generate-text
  --rc 0
  -- bash -c "${FAFO_MODEL} && ${FAFO_LMGEN} m.h5 --prompt 'And God said' -n 60 --ignore-eos --no-stream > ar.txt && ${FAFO} m.h5 --prompt 'And God said' -n 60 --ignore-eos --method prompt-lookup > a.txt && ${FAFO} m.h5 --prompt 'And God said' -n 60 --ignore-eos --method lookahead > b.txt && ${FAFO} m.h5 --prompt 'And God said' -n 60 --ignore-eos --method fafo --kv-policy tova --kv-budget 2 > c.txt && ${FAFO} m.h5 --prompt 'And God said' -n 60 --ignore-eos --method fafo --kv-policy snapkv --kv-budget 3 --kv-window 1 > d.txt && ${FAFO} m.h5 --prompt 'And God said' -n 60 --ignore-eos --method fafo --no-stream > e.txt && cmp ar.txt e.txt && cmp ar.txt a.txt && cmp ar.txt b.txt && cmp ar.txt c.txt && cmp ar.txt d.txt && test -s ar.txt")
cli_case(fafo/self-spec-search-and-decode
  --rc 0 --file-jq skip.json "(.n_layers == 2) and ((.attn + .mlp) | length) >= 1 and (.meta.objective_trace | length) >= 2"
  -- bash -c "${FAFO_MODEL} && head -n 4 ${FX}/genesis.txt > calib.txt && ${FAFO} m.h5 --calibration calib.txt --search-skip-set skip.json --calibration-tokens 16 -q && ${FAFO} m.h5 --prompt 'And God said' -n 30 --ignore-eos --method self-spec --skip-set skip.json --compare ar -o r.jsonl -q > /dev/null && test $(jq -s '.[-1].summary.identical_to_ar' r.jsonl) = true")
cli_case(fafo/sampling-seeded
  --rc 0
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x -n 30 --ignore-eos --temperature 1 --seed 3 --method lookahead > a.txt && ${FAFO} m.h5 --prompt x -n 30 --ignore-eos --temperature 1 --seed 3 --method lookahead > b.txt && ${FAFO} m.h5 --prompt x -n 30 --ignore-eos --temperature 1 --seed 4 --method lookahead > c.txt && cmp a.txt b.txt && ! cmp -s a.txt c.txt")

# ---- bad input ----------------------------------------------------------------------------------
cli_case(fafo/window-zero --rc 2 --stderr "must be an integer in 1\\.\\.256, got 0 \\(--window\\)$" --tool fafo-generate --no-file r.jsonl
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x --method lookahead --window 0 -o r.jsonl")
cli_case(fafo/ngram-one --rc 2 --stderr "must be an integer in 2\\.\\.32, got 1 \\(--ngram\\)$" --tool fafo-generate
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x --method fafo --ngram 1")
cli_case(fafo/budget-zero --rc 2 --stderr "must be an integer in 1\\.\\.16777216, got 0 \\(--kv-budget\\)$" --tool fafo-generate
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x --method fafo --kv-budget 0")
cli_case(fafo/guesses-too-many --rc 2 --stderr "must be an integer in 0\\.\\.256, got 1000 \\(--guesses\\)$" --tool fafo-generate
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x --method lookahead --guesses 1000")
cli_case(fafo/prompt-fills-context --rc 1 --stderr "no room to generate in the context of n_ctx = 128" --tool fafo-generate --no-file r.jsonl
  -- bash -c "${FAFO_MODEL} && cat ${FX}/genesis.txt ${FX}/genesis.txt > long.txt && ${FAFO} m.h5 --prompt-file long.txt -o r.jsonl")
cli_case(fafo/prompt-tokens-too-many --rc 1 --stderr "fewer than --prompt-tokens 500" --tool fafo-generate
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt 'And God' --prompt-tokens 500")
cli_case(fafo/self-spec-needs-skip-set --rc 2 --stderr "needs --skip-set" --tool fafo-generate
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x --method self-spec")
cli_case(fafo/skip-set-bad-layer --rc 1 --stderr "not a layer in .0, 2." --tool fafo-generate
  -- bash -c "${FAFO_MODEL} && echo '{\"attn\": [5], \"mlp\": []}' > s.json && ${FAFO} m.h5 --prompt x --method self-spec --skip-set s.json")
cli_case(fafo/skip-set-not-json --rc 1 --stderr "not JSON" --tool fafo-generate
  -- bash -c "${FAFO_MODEL} && echo nope > s.json && ${FAFO} m.h5 --prompt x --method self-spec --skip-set s.json")
cli_case(fafo/bad-output-extension --rc 2 --stderr "ending in .jsonl" --no-file r.json -- ${FAFO} x.h5 --prompt x -o r.json)
cli_case(fafo/unknown-method --rc 2 -- ${FAFO} x.h5 --prompt x --method medusa)
cli_case(fafo/missing-model --rc 1 --stderr "cannot read file" -- ${FAFO} nope.h5 --prompt x)
cli_case(fafo/search-output-dir-checked-first --rc 1 --stderr "output directory does not exist \\(nodir\\)$" -- ${FAFO} x.h5 --calibration c.txt --search-skip-set nodir/s.json)
cli_case(fafo/empty-prompt-ids --rc 2 --stderr "empty list of token ids" --tool fafo-generate -- bash -c "${FAFO} x.h5 --prompt-ids ''")
cli_case(fafo/negative-sinks --rc 2 --stderr "must be an integer in -1\\.\\.16777216, got -5 \\(--kv-sinks\\)$" --tool fafo-generate
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x --method fafo --kv-sinks -5")
cli_case(fafo/flag-unused-by-method --rc 2 --stderr "--kv-budget is not used by --method lookahead" --no-file r.jsonl
  -- ${FAFO} x.h5 --prompt x --method lookahead --kv-budget 8 -o r.jsonl)
cli_case(fafo/skip-set-unused-by-method --rc 2 --stderr "--skip-set is not used by --method fafo" -- ${FAFO} x.h5 --prompt x --method fafo --skip-set s.json)
cli_case(fafo/policy-flag-of-another-policy --rc 2 --stderr "--kv-window is only used by --kv-policy snapkv .this run uses tova." -- ${FAFO} x.h5 --prompt x --method fafo --kv-policy tova --kv-window 4)
cli_case(fafo/calibration-without-search --rc 2 --stderr "--calibration is only used with --search-skip-set" -- ${FAFO} x.h5 --prompt x --calibration c.txt)
cli_case(fafo/search-needs-calibration --rc 2 --stderr "needs --calibration" -- ${FAFO} x.h5 --search-skip-set s.json)

# ---- the shipped demo model: every method and policy reproduces AR exactly ----------------------
set(DEMO_MODEL ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5)
set(DEMO_PROMPT "zcat ${PROJECT_SOURCE_DIR}/data/corpus/kjv.tsv.gz | awk -F'\\t' '$1 ~ /^Ge20:/ {print $2}' > p.txt")
set(DEMO_RUN "${FAFO} ${DEMO_MODEL} --prompt-file p.txt --prompt-tokens 160 -n 32 --ignore-eos --compare ar --no-text -q")
set(DEMO_W "--window 5 --ngram 4 --guesses 5")
cli_case(fafo/demo-model-lossless --needs ${DEMO_MODEL}
  --rc 0 --file-jq all.json "([.[] | .identical_to_ar] | all) and (length == 6) and ([.[] | .generated_tokens == 32] | all)"
  --file-jq all.json "([.[] | select(.method != \"ar\") | .mean_accepted_per_step > 1.1] | all)"
  -- bash -c "${DEMO_PROMPT} && ${DEMO_RUN} --method prompt-lookup -o a.jsonl && ${DEMO_RUN} --method lookahead ${DEMO_W} -o b.jsonl && ${DEMO_RUN} --method fafo --schedule fixed ${DEMO_W} --kv-policy streaming --kv-budget 16 -o c.jsonl && ${DEMO_RUN} --method fafo --schedule fixed ${DEMO_W} --kv-policy h2o --kv-budget 16 -o d.jsonl && ${DEMO_RUN} --method fafo --schedule fixed ${DEMO_W} --kv-policy tova --kv-budget 16 -o e.jsonl && ${DEMO_RUN} --method fafo --schedule fixed ${DEMO_W} --kv-policy snapkv --kv-budget 48 -o f.jsonl && cat *.jsonl | jq -s '[.[] | select(.summary) | .summary]' > all.json")
# An int flag given a value beyond int says the allowed range, like every other range error.
cli_case(fafo/window-out-of-range --rc 2 --stderr "^fafo-generate: error: must be an integer in 1\\.\\.256, got 99999999999 \\(--window\\)$"
  -- ${FAFO} ${DEMO_MODEL} --prompt-ids 1,2 --window 99999999999)
# OBCache's scores as FAFO drafting views (issue 27): lossless like every policy, and the record
# says which preset ran.
cli_case(fafo/demo-model-obcache-presets-lossless --needs ${DEMO_MODEL}
  --rc 0 --file-jq all.json "([.[] | .identical_to_ar] | all) and (length == 3) and ([.[] | .kv_policy] == [\"h2o+obcVK\", \"snapkv+obcK\", \"tova+obcV_p1\"])"
  -- bash -c "${DEMO_PROMPT} && ${DEMO_RUN} --method fafo --schedule fixed ${DEMO_W} --kv-policy h2o+obcVK --kv-budget 16 -o a.jsonl && ${DEMO_RUN} --method fafo --schedule fixed ${DEMO_W} --kv-policy snapkv+obcK --kv-budget 48 --kv-gqa-reduce max -o b.jsonl && ${DEMO_RUN} --method fafo --schedule fixed ${DEMO_W} --kv-policy tova+obcV_p1 --kv-budget 16 -o c.jsonl && cat a.jsonl b.jsonl c.jsonl | jq -s '[.[] | select(.summary) | .summary]' > all.json")
cli_case(fafo/unknown-obcache-preset --rc 2 --stderr "kv-policy" -- ${FAFO} ${DEMO_MODEL} --prompt-ids 1,2 --method fafo --kv-policy h2o+obcX)
# ---- obcache-score (issue 27) ------------------------------------------------------------------------
set(OBC $<TARGET_FILE:obcache-score>)
set(OBC_PROMPT "zcat ${PROJECT_SOURCE_DIR}/data/corpus/kjv.tsv.gz | awk -F'\\t' '$1 ~ /^Ge1:/ {print $2}' > p.txt")
# Layout and the protocol's invariants on the demo model: [n_kv, n] scores, [n_kv, slots] keep sets,
# the 16 newest prompt slots in every non-tova keep set, overlaps in [0, 1].
cli_case(obcache-score/demo-layout-and-recent-kept --needs ${DEMO_MODEL} --rc 0 --tool obcache-score --file s.h5
  -- bash -c "${OBC_PROMPT} && ${OBC} ${DEMO_MODEL} --prompt-file p.txt --prompt-tokens 300 --methods h2o,h2o+obcVK,snapkv+obcK,tova+obcV --budget 0.1,40 -o s.h5 -q > sum.json && jq -e '.prompt_tokens == 300 and ([.budgets[].slots] == [30, 40]) and ([.overlap_jaccard[][]] | all(. >= 0 and . <= 1))' sum.json && h5dump -H -d /h2o+obcVK/layer_5/scores s.h5 | grep -q '( 4, 300 )' && h5dump -H -d /h2o+obcVK/layer_0/keep/30 s.h5 | grep -q '( 4, 30 )' && h5dump -d /h2o+obcVK/layer_3/keep/30 -w 400 s.h5 | grep -E '^ *\\(3,0\\)' | grep -q '284, 285, 286, 287, 288, 289, 290, 291, 292, 293, 294, 295, 296, 297, 298, 299$'")
# --save-attention: what the scores are computed from, dense per layer (the peer test feeds it to
# the reference's tracker); it needs -o.
cli_case(obcache-score/save-attention-layout --needs ${DEMO_MODEL} --rc 0 --tool obcache-score --file s.h5
  -- bash -c "${OBC_PROMPT} && ${OBC} ${DEMO_MODEL} --prompt-file p.txt --prompt-tokens 120 --methods h2o,tova+obcVK --budget 0.2 --save-attention -o s.h5 -q > /dev/null && h5dump -H -d /attention/layer_5/probs s.h5 | grep -q '( 8, 16, 120 )' && h5dump -H -d /attention/layer_0/values s.h5 | grep -q '( 4, 120, 32 )' && h5dump -H -d /attention/layer_2/outputs s.h5 | grep -q '( 8, 16, 32 )' && h5dump -d /attention/layer_0/rows -w 400 s.h5 | grep -q '104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119$'")
# --plot: the keep sets as a heat map (a PNG, gnuplot); another extension is refused before any work.
cli_case(obcache-score/plot-heat-map --needs ${DEMO_MODEL} --rc 0 --tool obcache-score --file k.png
  -- bash -c "${OBC_PROMPT} && ${OBC} ${DEMO_MODEL} --prompt-file p.txt --prompt-tokens 100 --methods streaming,h2o+obcVK --budget 0.2,0.5 --plot k.png -q > /dev/null && head -c 8 k.png | od -An -c | grep -q 'P   N   G'")
cli_case(obcache-score/plot-not-png --rc 2 --stderr "the heat map is a PNG" --no-file k.jpg --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --prompt-ids 1,5,9,12,7,3 --budget 0.5 --num-recent 1 --plot k.jpg")
cli_case(obcache-score/no-prompt --rc 2 --stderr "give one of --prompt, --prompt-file, --prompt-ids" --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --budget 0.5")
cli_case(obcache-score/key-score-has-no-p1 --rc 2 --stderr "h2o\\+obcK_p1" --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --prompt-ids 1,5,9,12,7,3 --methods h2o+obcK_p1")
cli_case(obcache-score/save-attention-needs-output --rc 2 --stderr "needs -o" --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --prompt-ids 1,5,9,12,7,3 --budget 0.5 --num-recent 1 --save-attention")
cli_case(obcache-score/budget-zero --rc 2 --stderr "neither a fraction" --no-file s.h5 --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --prompt-ids 1,5,9,12,7,3 --budget 0 -o s.h5")
cli_case(obcache-score/budget-above-prompt --rc 2 --stderr "above the prompt's 6 tokens" --no-file s.h5 --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --prompt-ids 1,5,9,12,7,3 --budget 9 -o s.h5")
cli_case(obcache-score/unknown-preset --rc 2 --stderr "methods" --no-file s.h5 --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --prompt-ids 1,5,9 --methods h2o+obcQ -o s.h5")
cli_case(obcache-score/prompt-above-n-ctx --rc 1 --stderr "more than n_ctx = 128" --no-file s.h5 --tool obcache-score
  -- bash -c "${FAFO_MODEL} && cat ${FX}/genesis.txt ${FX}/genesis.txt > long.txt && ${OBC} m.h5 --prompt-file long.txt --budget 0.1 -o s.h5")
# kv-eval (issue 27): with a budget of the whole prompt every method equals the full cache (recall,
# agreement and perplexity identical; paired differences exactly 0); with a small budget the
# evicted caches agree less than perfectly; bad budgets and a prompt beyond n_ctx are refused.
set(KVEVAL $<TARGET_FILE:kv-eval>)
set(KVE_ARGS ${DEMO_MODEL} ${PROJECT_SOURCE_DIR}/data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --val-every 20 --prompts 3 --passage 24 --filler 60 --cue 4 --generate 8)
cli_case(kv-eval/full-budget-equals-full-cache --needs ${DEMO_MODEL} --rc 0
  --jq "(.results | map(.next_token_agreement.mean == 1 and .full_token_accuracy.mean == 1) | all) and (.paired | map(.recall_tokens.mean == 0 and .nll.mean == 0) | all)"
  --jq "(.results | map(.perplexity.mean) | unique | length) == 1 and (.results[0].perplexity.mean - .full_cache.perplexity.mean | fabs) < 1e-9"
  --jq "(.results | map(.output_error.mean < 1e-6 and (.output_error_by_layer | length) == 6) | all) and (.paired | map(.output_error.mean | fabs < 1e-6) | all)"
  -- ${KVEVAL} ${KVE_ARGS} --methods h2o,h2o+obcVK,tova,tova+obcK --budget 89 -q)
# Eviction during decoding (--evict decode, the methods as FAFO's compressors): SnapKV compresses
# the prompt only, so its two code paths (kv/prefill_evict and kv/policy) give identical results;
# h2o and streaming evict as they decode, so their caches depart from the full one (output error
# > 0 in every layer).  Random-token passages run too.
string(REPLACE ";" " " KVE_LINE "${KVE_ARGS}")
cli_case(kv-eval/decode-snapkv-equals-prefill --needs ${DEMO_MODEL} --rc 0
  --file-jq both.json "(.[0].results | map(del(.score_seconds_per_prompt))) == (.[1].results | map(del(.score_seconds_per_prompt))) and (.[1].settings.evict == \"decode\")"
  -- bash -c "${KVEVAL} ${KVE_LINE} --methods snapkv,snapkv+obcVK --budget 0.3 -q -o p.json && ${KVEVAL} ${KVE_LINE} --methods snapkv,snapkv+obcVK --budget 0.3 --evict decode -q -o d.json && jq -s . p.json d.json > both.json")
cli_case(kv-eval/decode-evicts --needs ${DEMO_MODEL} --rc 0
  --jq "(.results | map(.output_error_by_layer | all(. > 0)) | all) and (.results | map(.next_token_agreement.mean < 1) | any) and .settings.passage_source == \"random\""
  --jq "(.results | map(.peak_slots == .slots + 1) | all)"
  -- ${KVEVAL} ${KVE_ARGS} --methods streaming,h2o+obcVK --budget 0.3 --evict decode --passage-source random -q)
cli_case(kv-eval/small-budget-departs --needs ${DEMO_MODEL} --rc 0
  --jq "(.results | map(.next_token_agreement.mean < 1) | any) and (.results | map(.slots == 17) | all) and (.paired | length) == 1"
  --jq "(.paired[0].next_token_agreement | has(\"excludes_zero\")) and .settings.methods == [\"streaming\", \"snapkv\", \"snapkv+obcVK\"]"
  --jq "(.results | map(.peak_slots == 17 + 8) | all)"
  -- ${KVEVAL} ${KVE_ARGS} --methods streaming,snapkv,snapkv+obcVK --budget 0.2 -q)
cli_case(kv-eval/budget-too-small-for-recent --needs ${DEMO_MODEL} --rc 2 --stderr "leaves none beside the --num-recent 16 newest"
  -- ${KVEVAL} ${KVE_ARGS} --methods h2o --budget 10)
cli_case(kv-eval/prompt-beyond-context --needs ${DEMO_MODEL} --rc 2 --stderr "exceeds n_ctx"
  -- ${KVEVAL} ${DEMO_MODEL} ${PROJECT_SOURCE_DIR}/data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --filler 5000 --methods h2o --budget 0.1)
# From a newcomer run: duplicates are refused before any work (they collided in the HDF5 after
# it), and an empty prompt says so.
cli_case(obcache-score/duplicate-method --rc 2 --stderr "'h2o' is listed twice" --no-file s.h5 --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --prompt-ids 1,5,9,12,7,3 --methods h2o,h2o --budget 0.5 --num-recent 1 -o s.h5")
cli_case(obcache-score/duplicate-budget-slots --rc 2 --stderr "budgets 0.5 and 3 both give 3 slots" --no-file s.h5 --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 --prompt-ids 1,5,9,12,7,3 --methods h2o --budget 0.5,3 --num-recent 1 -o s.h5")
cli_case(obcache-score/empty-prompt --rc 1 --stderr "nothing to score" --no-file s.h5 --tool obcache-score
  -- bash -c "${FAFO_MODEL} && ${OBC} m.h5 -p '' -o s.h5")
# ---- wave-calibrate / wave-generate (issue 28) ----------------------------------------------------
# Calibration on the demo model: the lens agrees with itself at the last block, the saturation
# histogram counts every token, each method's choice meets the target on the calibration text, and
# the halves of the split are disjoint.
set(WAVECAL $<TARGET_FILE:wave-calibrate>)
set(WAVEGEN $<TARGET_FILE:wave-generate>)
set(WAVE_CORPUS ${PROJECT_SOURCE_DIR}/data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --val-every 20)
string(REPLACE ";" " " WAVE_CORPUS_LINE "${WAVE_CORPUS}")
cli_case(wave-calibrate/demo-model --needs ${DEMO_MODEL} --rc 0 --tool wave-calibrate
  --jq ".depth_agreement[-1] == 1 and (.depth_agreement | length) == 6 and ([.saturation_histogram[]] | add) == .tokens and .tokens == 1024"
  --jq "([.wave, .calm, .dvp, .layerskip] | map(.target_met and .agreement >= 0.9) | all) and .wave.window_start <= .wave.window_end and .wave.window_end < 6"
  --jq "(.calibration_documents + .evaluation_documents | unique | length) == ((.calibration_documents | length) + (.evaluation_documents | length))"
  -- ${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS} --tokens 1024 --window 256 --target-agreement 0.9 -q)
# A threshold above 1 never exits: every method that checks confidence equals the full model, token
# for token; the calibrated settings decode the calibration's evaluation documents.
cli_case(wave-generate/never-exit-equals-full --needs ${DEMO_MODEL} --rc 0 --tool wave-generate
  --file-jq all.json "(map(.token_accuracy == 1 and .rouge_l == 1 and .exit_rate == 0 and .mean_depth == 6) | all) and length == 3"
  --file-jq all.json "map(.perplexity.change == 0 and .perplexity.defined_fraction == 1 and .perplexity.tokens == 32) | all"
  -- bash -c "${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS_LINE} --tokens 512 --window 256 -q -o cal.json && for m in wave calm dvp
do ${WAVEGEN} ${DEMO_MODEL} --calibration cal.json --method $m --threshold 1.5 --eval-corpus ${WAVE_CORPUS_LINE} --prompts 2 --prompt-tokens 32 -n 16 --perplexity-tokens 16 -q -o $m.jsonl || exit 1
done && cat wave.jsonl calm.jsonl dvp.jsonl | jq -s '[.[] | select(.summary) | .summary]' > all.json")
cli_case(wave-generate/calibrated-methods-run --needs ${DEMO_MODEL} --rc 0 --tool wave-generate
  --file-jq all.json "length == 5 and (map(.mean_depth <= 6 and .mean_depth >= 1 and .rouge_l > 0 and .prompts == 2) | all) and (.[0].settings.method == \"wave\") and (.[3].exit_rate > 0)"
  --file-jq steps.json "(map(select(.step)) | length) == 2 * 15 and (map(select(.step) | .depth) | all(. >= 1 and . <= 6))"
  -- bash -c "${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS_LINE} --tokens 512 --window 256 -q -o cal.json && for m in wave calm dvp skipdecode layerskip
do ${WAVEGEN} ${DEMO_MODEL} --calibration cal.json --method $m --eval-corpus ${WAVE_CORPUS_LINE} --prompts 2 --prompt-tokens 32 -n 16 -q -o $m.jsonl || exit 1
done && cat wave.jsonl calm.jsonl dvp.jsonl skipdecode.jsonl layerskip.jsonl | jq -s '[.[] | select(.summary) | .summary]' > all.json && jq -s . wave.jsonl > steps.json")
# Bad input: a window beyond the blocks, K above the vocabulary, a calibration of another model,
# settings neither given nor calibrated: one line, exit 2 / 1, no output file.
cli_case(wave-generate/window-outside-layers --needs ${DEMO_MODEL} --rc 2 --stderr "depth 9 outside \\[1, 5\\]" --no-file o.jsonl
  -- ${WAVEGEN} ${DEMO_MODEL} --prompt-ids 1,5,9 --window-start 9 --window-end 9 --proxy-k 16 --threshold 0.5 -o o.jsonl)
cli_case(wave-generate/proxy-k-above-vocab --needs ${DEMO_MODEL} --rc 2 --stderr "proxy vocabulary 99999 outside \\[2, 4096\\]" --no-file o.jsonl
  -- ${WAVEGEN} ${DEMO_MODEL} --prompt-ids 1,5,9 --window-start 1 --window-end 2 --proxy-k 99999 --threshold 0.5 -o o.jsonl)
cli_case(wave-generate/calibration-of-another-model --needs ${DEMO_MODEL} --rc 1 --tool wave-generate --stderr "calibration is of another model" --no-file o.jsonl
  -- bash -c "${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS_LINE} --tokens 64 --window 64 -q -o cal.json && ${FAFO_MODEL} && ${WAVEGEN} m.h5 --calibration cal.json --prompt-ids 1,5,9 -o o.jsonl")
cli_case(wave-generate/settings-needed --needs ${DEMO_MODEL} --rc 2 --stderr "wave needs --window-start \\(or --calibration" --no-file o.jsonl
  -- ${WAVEGEN} ${DEMO_MODEL} --prompt-ids 1,5,9 -o o.jsonl)
cli_case(wave-calibrate/proxy-k-above-vocab --needs ${DEMO_MODEL} --rc 2 --stderr "proxy size 5000 above the vocabulary" --no-file c.json
  -- ${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS} --proxy-k 64,5000 -o c.json)
# --lossless: WAVE's exits draft, the full model verifies; the output is full's token for token.
cli_case(wave-generate/lossless-equals-full --needs ${DEMO_MODEL} --rc 0 --tool wave-generate
  --jq ".summary.token_accuracy == 1 and .summary.rouge_l == 1 and .summary.lossless.rounds > 0 and .summary.lossless.accepted <= .summary.lossless.drafted"
  -- bash -c "${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS_LINE} --tokens 512 --window 256 -q -o cal.json && ${WAVEGEN} ${DEMO_MODEL} --calibration cal.json --lossless --draft 3 --eval-corpus ${WAVE_CORPUS_LINE} --prompts 2 --prompt-tokens 32 -n 24 --no-steps -q | tail -1")
# The verifier's reuse of the drafts' shared blocks changes the cost, not the output: with and
# without --no-draft-reuse the tokens are full's and equal, and the reused depth is the window start.
cli_case(wave-generate/lossless-draft-reuse-same-output --needs ${DEMO_MODEL} --rc 0 --tool wave-generate
  --file-jq r.json ".ta == .tb and (.ta | length) == 2 and .ra == 2 and .rb == 0 and .rouge == 1"
  -- bash -c "${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS_LINE} --tokens 512 --window 256 -q -o cal.json && ${WAVEGEN} ${DEMO_MODEL} --calibration cal.json --lossless --draft 3 --method wave --window-start 2 --window-end 4 --eval-corpus ${WAVE_CORPUS_LINE} --prompts 2 --prompt-tokens 32 -n 16 --no-steps -q > a.jsonl && ${WAVEGEN} ${DEMO_MODEL} --calibration cal.json --lossless --draft 3 --method wave --window-start 2 --window-end 4 --eval-corpus ${WAVE_CORPUS_LINE} --prompts 2 --prompt-tokens 32 -n 16 --no-steps -q --no-draft-reuse > b.jsonl && jq -n --slurpfile a a.jsonl --slurpfile b b.jsonl '{ta: [$a[] | .prompt_summary | select(.) | .tokens], tb: [$b[] | .prompt_summary | select(.) | .tokens], ra: $a[-1].summary.lossless.reused_depth, rb: $b[-1].summary.lossless.reused_depth, rouge: $a[-1].summary.rouge_l}' > r.json")
cli_case(wave-generate/no-draft-reuse-needs-lossless --needs ${DEMO_MODEL} --rc 2 --tool wave-generate --stderr "--no-draft-reuse needs --lossless"
  -- ${WAVEGEN} ${DEMO_MODEL} --method wave --window-start 2 --window-end 4 --no-draft-reuse --prompt-ids 1,5,9)
cli_case(wave-generate/lossless-needs-a-drafter --needs ${DEMO_MODEL} --rc 2 --tool wave-generate --stderr "drafts nothing"
  -- ${WAVEGEN} ${DEMO_MODEL} --method full --lossless --prompt-ids 1,5,9)
# Evaluation documents read with other corpus flags than the calibration's are refused (they could
# be training chapters); a JSON that is not a calibration is named as such.
cli_case(wave-generate/other-corpus-flags --needs ${DEMO_MODEL} --rc 1 --tool wave-generate --stderr "differ from the calibration's" --no-file o.jsonl
  -- bash -c "${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS_LINE} --tokens 64 --window 64 -q -o cal.json && ${WAVEGEN} ${DEMO_MODEL} --calibration cal.json --eval-corpus ${PROJECT_SOURCE_DIR}/data/corpus/kjv.tsv.gz --column 2 --doc-column 1 --val-every 10 --prompts 1 --prompt-tokens 16 -n 4 -o o.jsonl")
cli_case(wave-generate/calibration-without-evaluation-hash --needs ${DEMO_MODEL} --rc 1 --tool wave-generate --stderr "predates the record of its evaluation documents .*run wave-calibrate again" --no-file o.jsonl
  -- bash -c "${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS_LINE} --tokens 64 --window 64 -q -o cal0.json && jq 'del(.evaluation_sha256)' cal0.json > cal.json && ${WAVEGEN} ${DEMO_MODEL} --calibration cal.json --eval-corpus ${WAVE_CORPUS_LINE} --prompts 1 --prompt-tokens 16 -n 4 -o o.jsonl")
cli_case(wave-generate/not-a-calibration --needs ${DEMO_MODEL} --rc 1 --tool wave-generate --stderr "not a wave-calibrate output" --no-file o.jsonl
  -- bash -c "echo '{}' > c.json && ${WAVEGEN} ${DEMO_MODEL} --calibration c.json --prompt-ids 1,5,9 -o o.jsonl")
cli_case(wave-generate/draft-needs-lossless --needs ${DEMO_MODEL} --rc 2 --tool wave-generate --stderr "^wave-generate: error: --draft needs --lossless \\(--draft\\)$"
  -- ${WAVEGEN} ${DEMO_MODEL} --method layerskip --exit-layer 3 --draft 4 --prompt-ids 1,5,9)
# A bad value inside the calibration is the file's fault (exit 1, naming it), not a flag's.
cli_case(wave-generate/bad-calibration-value --needs ${DEMO_MODEL} --rc 1 --tool wave-generate --stderr "depth 40 outside .* \\(the calibration's value for --window-start\\) \\(cal.json\\)" --no-file o.jsonl
  -- bash -c "${WAVECAL} ${DEMO_MODEL} ${WAVE_CORPUS_LINE} --tokens 64 --window 64 -q -o cal0.json && jq '.wave.window_start = 40' cal0.json > cal.json && ${WAVEGEN} ${DEMO_MODEL} --calibration cal.json --method wave --prompt-ids 1,5,9 -o o.jsonl")

# ---- adaptive FAFO (issue 37): the default schedule picks each step's shape; output is AR's ----
# Truth: greedy output equals AR's (--compare ar); the accepted drafts' sources add up to the
# accepted tokens less one per step; the pass costs are measured on the first run, read from the
# cache (a per-case XDG_CACHE_HOME) on the second, which gives the same tokens.
cli_case(fafo/adaptive-default-lossless-and-cached --needs ${DEMO_MODEL}
  --rc 0 --file-jq a.json ".identical_to_ar == true and .schedule == \"adaptive\" and .adaptive.pass_cost_source == \"measured\" and .adaptive.arms[0].name == \"ar/prompt\""
  --file-jq a.json "(.adaptive.arms | map(.steps) | add) == .decode_steps and (.adaptive.pass_cost.k[0] == 1)"
  --file-jq steps.json "([.[] | .from_prompt + .from_lookahead + .from_both] | add) == ([.[] | .accepted - 1] | add) and ([.[] | .arm != null] | all)"
  --file-jq b.json ".adaptive.pass_cost_source == \"cache\" and .identical_to_ar == true"
  --file .xdg-cache/icmlkit/pass-cost.json
  -- bash -c "${DEMO_PROMPT} && ${FAFO} ${DEMO_MODEL} --prompt-file p.txt --prompt-tokens 160 -n 48 --ignore-eos --compare ar -o a.jsonl > a.txt && tail -n 1 a.jsonl | jq .summary > a.json && jq -s '[.[] | select(.step != null)]' a.jsonl > steps.json && ${FAFO} ${DEMO_MODEL} --prompt-file p.txt --prompt-tokens 160 -n 48 --ignore-eos --compare ar -o b.jsonl > b.txt && tail -n 1 b.jsonl | jq .summary > b.json && cmp a.txt b.txt")
# --pass-cost-cache none measures and keeps nothing; a file that is not a cache is measured over but
# never overwritten (a warning says so); an empty file becomes a cache.
cli_case(fafo/adaptive-pass-cost-cache-none-and-foreign --rc 0
  --file-jq a.json ".adaptive.pass_cost_source == \"measured\""
  --file-jq b.json ".adaptive.pass_cost_source == \"measured\""
  --file-jq pc.json "(.format == \"icmlkit-pass-cost-v1\") and (to_entries | length) == 2"
  --no-file .xdg-cache/icmlkit/pass-cost.json
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt 'And God said' -n 20 --ignore-eos --pass-cost-cache none -o a.jsonl -q > /dev/null && tail -n 1 a.jsonl | jq .summary > a.json && echo 'not a cache' > other.txt && ${FAFO} m.h5 --prompt 'And God said' -n 20 --ignore-eos --pass-cost-cache other.txt -o b.jsonl > /dev/null 2> warn.txt && grep -q 'not a pass-cost cache' warn.txt && test \"$(cat other.txt)\" = 'not a cache' && tail -n 1 b.jsonl | jq .summary > b.json && : > pc.json && ${FAFO} m.h5 --prompt 'And God said' -n 20 --ignore-eos --pass-cost-cache pc.json -q > /dev/null")
cli_case(fafo/pass-cost-cache-names-the-model --rc 2 --tool fafo-generate --stderr "--pass-cost-cache names m.h5, a file this run reads or writes"
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x -n 4 --pass-cost-cache m.h5")
cli_case(fafo/schedule-unused-by-method --rc 2 --stderr "--schedule is not used by --method lookahead" -- ${FAFO} x.h5 --prompt x --method lookahead --schedule fixed)
cli_case(fafo/draft-needs-adaptive-schedule --rc 2 --tool fafo-generate --stderr "--draft is used by --method fafo only with --schedule adaptive"
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt x --schedule fixed --draft 4")
cli_case(fafo/schedule-unknown --rc 2 --stderr "--schedule" --tool fafo-generate -- ${FAFO} x.h5 --prompt x --schedule greedy)
# -n 1: the one token comes from the prefill, no decode step is timed: speedup is null, not 0.
cli_case(fafo/one-token-speedup-null
  --rc 0 --file-jq s.json ".summary.speedup == null and .summary.identical_to_ar == true and .summary.generated_tokens == 1"
  -- bash -c "${FAFO_MODEL} && ${FAFO} m.h5 --prompt-file ${FX}/genesis.txt --prompt-tokens 20 -n 1 --ignore-eos --compare ar -o run.jsonl -q > /dev/null && tail -n 1 run.jsonl > s.json")
