# ---- LoRA adapters (issue 33): --lora on lm-eval / lm-generate / fafo-generate, lm-convert --merge-lora ----
# fixtures/lora_tiny is a PEFT adapter (r 2, all seven projections) for the tiny model below
# (fixtures/make_lora_tiny.py says how it was made).
set(LORA_FX ${FX}/lora_tiny)
set(LORA_EVAL $<TARGET_FILE:lm-eval>)
set(LORA_CONV $<TARGET_FILE:lm-convert>)
set(LORA_MODEL "$<TARGET_FILE:tokenizer-train> ${FX}/genesis.txt --chunk-lines 3 --vocab-size 400 -o t.model -q && $<TARGET_FILE:lm-init> --tokenizer t.model --preset tiny --n-ctx 64 -o m.h5 -q")
set(LORA_BARE "$<TARGET_FILE:lm-init> --preset tiny -o m.h5 -q")

# The adapter changes the loss; merging it into a file (native, GGUF, Hugging Face) gives the loss
# of --lora; a GGUF copy of the base (interleaved q/k rows) with --lora gives it too.  Losses agree
# to 1e-5 relative (float rounding of different row orders; the native merge is bitwise the same).
cli_case(lora/eval-merge-and-formats-agree
  --rc 0 --file-jq r.json "(.plain - .lora | fabs) > 1e-3"
  --file-jq r.json ".merged_h5 == .lora"
  --file-jq r.json ".lora as $l | [.gguf_lora, .merged_gguf, .merged_hf] | map((. - $l | fabs) / $l < 1e-5) | all"
  --file-jq e.json ".meta.lora.rank == 2 and .meta.lora.scaling == 2 and .meta.lora.tensors == 14 and (.meta.inputs | length) == 4"
  --file-jq e.json "([.meta.inputs[1:3][] | (.sha256 | length) == 64] | all) and (.meta.inputs[2].path | endswith(\"adapter_model.safetensors\"))"
  -- bash -c "${LORA_MODEL} && ${LORA_EVAL} m.h5 ${FX}/genesis.txt -q > p.json && ${LORA_EVAL} m.h5 ${FX}/genesis.txt --lora ${LORA_FX} -q > e.json && ${LORA_CONV} m.h5 --merge-lora ${LORA_FX} -o merged.h5 -q && ${LORA_EVAL} merged.h5 ${FX}/genesis.txt -q > mh.json && ${LORA_CONV} m.h5 -o m.gguf -q && ${LORA_EVAL} m.gguf ${FX}/genesis.txt --lora ${LORA_FX}/adapter_config.json -q > g.json && ${LORA_CONV} m.h5 --merge-lora ${LORA_FX} -o merged.gguf -q && ${LORA_EVAL} merged.gguf ${FX}/genesis.txt -q > mg.json && ${LORA_CONV} m.gguf --merge-lora ${LORA_FX} -o merged_hf/ -q && ${LORA_EVAL} merged_hf ${FX}/genesis.txt -q > mf.json && jq -n --argjson p \"$(jq .loss p.json)\" --argjson l \"$(jq .loss e.json)\" --argjson mh \"$(jq .loss mh.json)\" --argjson g \"$(jq .loss g.json)\" --argjson mg \"$(jq .loss mg.json)\" --argjson mf \"$(jq .loss mf.json)\" '{plain: $p, lora: $l, merged_h5: $mh, gguf_lora: $g, merged_gguf: $mg, merged_hf: $mf}' > r.json")
cli_case(lora/generate-runs
  --rc 0 --file-jq all.json "(.[0].meta.lora.tensors == 14) and (.[-1].summary.generated_tokens == 8)"
  -- bash -c "${LORA_MODEL} && $<TARGET_FILE:lm-generate> m.h5 --lora ${LORA_FX} --prompt 'And God said' -n 8 --ignore-eos -o run.jsonl -q > /dev/null && jq -s . run.jsonl > all.json")
cli_case(lora/fafo-generate-runs
  --rc 0 --file-jq s.json ".summary.identical_to_ar == true and .summary.generated_tokens == 8"
  -- bash -c "${LORA_MODEL} && $<TARGET_FILE:fafo-generate> m.h5 --lora ${LORA_FX} --prompt 'And God said' -n 8 --ignore-eos --compare ar -o run.jsonl -q > /dev/null && tail -n 1 run.jsonl > s.json")

# ---- bad adapters: exit 1, one line, nothing written ----------------------------------------------
cli_case(lora/eval-not-an-adapter --rc 1 --stderr "a LoRA adapter is a PEFT directory" --tool lm-eval --no-file e.json
  -- bash -c "${LORA_BARE} && ${LORA_EVAL} m.h5 ${FX}/genesis.txt --lora ${FX}/genesis.txt -o e.json")
cli_case(lora/eval-missing-dir --rc 1 --stderr "cannot read file: No such file or directory \\(nope\\)" --tool lm-eval --no-file e.json
  -- bash -c "${LORA_BARE} && ${LORA_EVAL} m.h5 ${FX}/genesis.txt --lora nope -o e.json")
cli_case(lora/convert-missing-weights --rc 1 --stderr "cannot read file: .*adapter_model.safetensors" --tool lm-convert --no-file x.h5
  -- bash -c "${LORA_BARE} && mkdir a && cp ${LORA_FX}/adapter_config.json a/ && ${LORA_CONV} m.h5 --merge-lora a -o x.h5")
cli_case(lora/convert-other-shapes --rc 1 --stderr "does not fit the base model: expected \\[2, 100\\]" --tool lm-convert --no-file out
  -- bash -c "$<TARGET_FILE:lm-init> --preset tiny --d-ff 100 -o m.h5 -q && ${LORA_CONV} m.h5 --merge-lora ${LORA_FX} -o out/")
cli_case(lora/generate-recorded-base-differs --rc 1 --stderr "made for another base model \\(base_sha256 000000000000" --tool lm-generate --no-file r.jsonl
  -- bash -c "${LORA_BARE} && mkdir a && cp ${LORA_FX}/* a/ && jq '.icmlkit = {base_sha256: \"0000000000000000000000000000000000000000000000000000000000000000\"}' ${LORA_FX}/adapter_config.json > a/adapter_config.json && $<TARGET_FILE:lm-generate> m.h5 --prompt-ids 1,2 --lora a -o r.jsonl")
cli_case(lora/fafo-dora-refused --rc 1 --stderr "DoRA adapters \\(use_dora true\\) are not supported" --tool fafo-generate --no-file r.jsonl
  -- bash -c "${LORA_BARE} && mkdir a && cp ${LORA_FX}/* a/ && jq '.use_dora = true' ${LORA_FX}/adapter_config.json > a/adapter_config.json && $<TARGET_FILE:fafo-generate> m.h5 --prompt-ids 1,2 --lora a -o r.jsonl")
cli_case(lora/help --rc 0
  -- bash -c "${LORA_CONV} --help | grep -q -- '--merge-lora' && ${LORA_EVAL} --help | grep -q -- '--lora' && $<TARGET_FILE:lm-generate> --help | grep -q -- '--lora' && $<TARGET_FILE:fafo-generate> --help | grep -q -- '--lora'")
