# moe-grow (issue 32): growth of trained moe checkpoints.  Uses moe.cmake's MOE_* variables.
set(MOEGROW $<TARGET_FILE:moe-grow>)
set(GROW_TRAIN "${MOE_TRAIN} ${FX}/kjv_genesis_1-20.tsv --column 2 --doc-column 1 --val-every 5 --batch 4 --threads 1 --lr 3e-3 --warmup 2")
set(GROW_BASE "${GROW_TRAIN} --vocab-size 512 --d-model 32 --n-layers 2 --n-heads 4 --n-kv-heads 2 --d-ff 64 --n-ctx 64 --moe standard --experts 4 --top-k 1 --steps 20 -o base.h5 -q > /dev/null")
set(GROW_EVAL "${MOE_EVAL} --column 2 --doc-column 1 --val-every 5 --split val -q")
# Width growth at alpha = 0 keeps the trained model's held-out loss (engine, 1e-6); interposition
# then doubles the blocks; the grown model trains further from --init and resumes bit for bit; the
# provenance lists both steps in order.
set(GROW_SH "bash ${CMAKE_CURRENT_SOURCE_DIR}/moe_grow.sh")
cli_case(moe-grow/width-keeps-depth-grows-trains-resumes --rc 0
  --file-jq r.json "(.base - .wide | fabs) < 1e-6 and .deep != .wide and .after < .deep and .same and .growth == [{\"width\": \"noisy\", \"factor\": 2, \"alpha\": 0, \"seed\": 20260701}, {\"depth\": \"interpose\", \"factor\": 2}] and .trained == .growth and .resumed == .growth"
  -- bash -c "${GROW_BASE} && ${MOEGROW} base.h5 --width noisy --alpha 0 -o wide.h5 -q && ${MOEGROW} wide.h5 --depth interpose -o deep.h5 -q && ${GROW_TRAIN} --init deep.h5 --steps 10 -o t.h5 -q > /dev/null && ${GROW_TRAIN} --init deep.h5 --steps 10 --stop-at 5 -o r.h5 -q > /dev/null && ${GROW_TRAIN} --init deep.h5 --steps 10 --resume -o r.h5 -q > /dev/null && a=$(h5dump -d blk.3.ffn_up_exps.weight t.h5 | tail -n +3 | md5sum) && b=$(h5dump -d blk.3.ffn_up_exps.weight r.h5 | tail -n +3 | md5sum) && ${GROW_SH} evals ${MOE_EVAL} ${FX}/kjv_genesis_1-20.tsv base wide deep t && ${GROW_SH} meta deep.h5 > meta.json && ${GROW_SH} meta t.h5 > tmeta.json && ${GROW_SH} meta r.h5 > rmeta.json && jq -n --slurpfile m meta.json --argjson same $([ \"$a\" = \"$b\" ] && echo true || echo false) --argjson base \"$(jq .loss base.json)\" --argjson wide \"$(jq .loss wide.json)\" --argjson deep \"$(jq .loss deep.json)\" --argjson after \"$(jq .loss t.json)\" --slurpfile tm tmeta.json --slurpfile rm rmeta.json '{base: $base, wide: $wide, deep: $deep, after: $after, same: $same, growth: $m[0].growth, trained: $tm[0].growth, resumed: $rm[0].growth}' > r.json")
cli_case(moe-grow/stack-places-the-stack --rc 0
  -- bash -c "${GROW_BASE} && ${MOEGROW} base.h5 --depth stack --layers 6 -o s.h5 -q && ${GROW_SH} stack s.h5 base.h5 6 2 && ${MOEGROW} base.h5 --depth interpose --layers 6 -o i.h5 -q && ! ${GROW_SH} stack i.h5 base.h5 6 2 2> /dev/null")
cli_case(moe-grow/dense-width --rc 2 --tool moe-grow --stderr "^moe-grow: error: width growth needs a model with moe or latent-moe blocks. d.h5 is dense \\(--width\\)$" --no-file o.h5
  -- bash -c "${MOE_MK} -o d.h5 -q && ${MOEGROW} d.h5 --width noisy -o o.h5")
cli_case(moe-grow/alpha-negative --rc 2 --tool moe-grow --stderr "^moe-grow: error: alpha must be >= 0 \\(got -0.5\\) \\(--alpha\\)$" --no-file o.h5
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && ${MOEGROW} m.h5 --width noisy --alpha -0.5 -o o.h5")
cli_case(moe-grow/experts-not-a-multiple --rc 2 --tool moe-grow --stderr "^moe-grow: error: --experts 12 is not a multiple \\(2x or more\\) of the model's 8 experts \\(--experts\\)$" --no-file o.h5
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && ${MOEGROW} m.h5 --width noisy --experts 12 -o o.h5")
cli_case(moe-grow/nothing-to-grow --rc 2 --stderr "^moe-grow: error: nothing to grow: give --depth and/or --width \\(--depth\\)$" --no-file o.h5
  -- ${MOEGROW} ${FX}/genesis.txt -o o.h5)
cli_case(moe-grow/unreadable-model --rc 1 --stderr "^moe-grow: error: .*genesis.txt.*$" --no-file o.h5
  -- ${MOEGROW} ${FX}/genesis.txt --depth stack -o o.h5)
# Any format in and out: a GGUF Mixtral grown at alpha = 0 into a Hugging Face directory (16
# experts, top-4: still a Mixtral) scores as the input did.
cli_case(moe-grow/gguf-in-hf-out --rc 0 --file-jq g/config.json ".model_type == \"mixtral\" and .num_local_experts == 16 and .num_experts_per_tok == 4"
  --file-jq r.json "(.a - .b | fabs) < 1e-6"
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && ${MOE_CONV} m.h5 -o m.gguf -q && ${MOEGROW} m.gguf --width noisy --alpha 0 -o g -q && ${MOE_EVAL} m.gguf ${FX}/genesis.txt --max-tokens 200 -q > a.json && ${MOE_EVAL} g ${FX}/genesis.txt --max-tokens 200 -q > b.json && jq -n --argjson a \"$(jq .loss a.json)\" --argjson b \"$(jq .loss b.json)\" '{a: $a, b: $b}' > r.json")
# Found by a newcomer: an input inside the output directory (a Hugging Face model's own
# model.safetensors) would be replaced; an alpha so large that the grown weights overflow; a model
# whose forward overflows has no loss for lm-eval to report.
cli_case(moe-grow/input-inside-output-dir --rc 2 --tool moe-grow --stderr "^moe-grow: error: -o is the directory that holds h/model.safetensors \\(given to input\\). write the output elsewhere \\(h\\)$"
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && ${MOE_CONV} m.h5 -o h -q && cp h/model.safetensors keep && (${MOEGROW} h/model.safetensors --width noisy -o h 2> err || (cmp -s keep h/model.safetensors && cat err >&2 && exit 2))")
cli_case(moe-grow/alpha-overflows --rc 2 --tool moe-grow --stderr "^moe-grow: error: alpha = 1e.300 makes non-finite weights in block 0: choose a smaller alpha \\(--alpha\\)$" --no-file o.h5
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && ${MOEGROW} m.h5 --width noisy --alpha 1e300 -o o.h5")
cli_case(lm-eval/forward-overflows --rc 1 --tool lm-eval --stderr "^lm-eval: error: the loss is not finite \\(.*\\): the model's forward overflows \\(a.h5\\)$" --no-file e.json
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && ${MOEGROW} m.h5 --width noisy --alpha 1e20 -o a.h5 -q && ${MOE_EVAL} a.h5 ${FX}/genesis.txt -o e.json")
# ... while an input beside the files a Hugging Face output writes is fine (only theirs are replaced).
cli_case(lm-convert/input-beside-hf-output --rc 0 --file h/config.json --file h/m.gguf
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && mkdir h && ${MOE_CONV} m.h5 -o h/m.gguf -q && ${MOE_CONV} h/m.gguf -o h -q")
