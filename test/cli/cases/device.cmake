# ---- --device (lm/engine.hpp): cpu is the default engine; cuda needs a CUDA build and a GPU ------
set(DEV_KJV ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5)
# What --device cuda says on this machine: built without CUDA, or (CUDA built, no nvidia-smi on
# the configuring machine) no CUDA device.  With a GPU these cases are not added: the CUDA engine
# is tested by test/unit/gpu/test_engine_cuda.cpp (make -f Makefile.shortcuts gpu-check).
find_program(ICMLKIT_NVIDIA_SMI nvidia-smi)
if(NOT ICMLKIT_HAVE_CUDA)
  set(DEV_NO_CUDA "error: --device cuda: built without CUDA")
elseif(NOT ICMLKIT_NVIDIA_SMI)
  set(DEV_NO_CUDA "error: --device cuda: no usable CUDA GPU or driver found \\(")
endif()
if(DEFINED DEV_NO_CUDA)
  cli_case(device/lm-generate-cuda-unavailable --rc 1 --stderr "^lm-generate: ${DEV_NO_CUDA}" --tool lm-generate --no-file r.jsonl
    -- $<TARGET_FILE:lm-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --device cuda -o r.jsonl)
  cli_case(device/fafo-generate-cuda-unavailable --rc 1 --stderr "^fafo-generate: ${DEV_NO_CUDA}" --tool fafo-generate --no-file r.jsonl
    -- $<TARGET_FILE:fafo-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --device cuda -o r.jsonl)
  cli_case(device/lm-eval-cuda-unavailable --rc 1 --stderr "^lm-eval: ${DEV_NO_CUDA}" --tool lm-eval --no-file e.json
    -- bash -c "printf 'In the beginning\\n' > t.txt && $<TARGET_FILE:lm-eval> ${DEV_KJV} t.txt --device cuda -o e.json")
endif()
cli_case(device/unknown-device --rc 2 --stderr "--device" --tool lm-generate
  -- $<TARGET_FILE:lm-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --device tpu)
cli_case(device/fafo-cuda-needs-streaming-policy --rc 2 --stderr "needs attention records.*--device cuda" --tool fafo-generate
  -- $<TARGET_FILE:fafo-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --method fafo --kv-policy h2o --device cuda)
# --device cpu is the default: the same bytes as without the flag.
cli_case(device/cpu-explicit-equals-default --rc 0
  -- bash -c "$<TARGET_FILE:lm-generate> ${DEV_KJV} --prompt 'In the beginning' -n 12 --no-stream > a.txt && $<TARGET_FILE:lm-generate> ${DEV_KJV} --prompt 'In the beginning' -n 12 --no-stream --device cpu > b.txt && cmp a.txt b.txt && test -s a.txt && $<TARGET_FILE:fafo-generate> ${DEV_KJV} --prompt 'In the beginning' -n 12 --device cpu --method fafo > c.txt && cmp a.txt c.txt")

# ---- --weights (lm::open_engine_for): the compute precision, recorded as engine_settings.weights --
# Truth: a model stored as f16 is held as f16 by default (auto) and as f32 with --weights f32; both
# compute the same logits (hold_half is exact), so the greedy text is the same.
set(DEV_F16 "$<TARGET_FILE:lm-init> --preset tiny --dtype f16 -o h.h5 -q")
cli_case(device/weights-auto-f16-and-f32-same-text --rc 0
  --file-jq a.json ".summary.engine_settings == {\"weights\": \"f16\"}"
  --file-jq b.json ".summary.engine_settings == {\"weights\": \"f32\"} and .summary.compute_weights == \"f32\""
  --file-jq e.json ".engine_settings == {\"weights\": \"f32\"}"
  -- bash -c "${DEV_F16} && $<TARGET_FILE:fafo-generate> h.h5 --prompt-ids 1,2,3 -n 12 --ignore-eos -o a.jsonl > a.txt && tail -n 1 a.jsonl > a.json && $<TARGET_FILE:lm-generate> h.h5 --prompt-ids 1,2,3 -n 12 --ignore-eos --weights f32 --no-stream -o b.jsonl > b.txt && tail -n 1 b.jsonl > b.json && cmp a.txt b.txt && test -s a.txt && $<TARGET_FILE:lm-eval> ${DEV_KJV} ${PROJECT_SOURCE_DIR}/test/cli/fixtures/genesis.txt --max-tokens 20 -o e.json -q")
# Issue 37: bf16-stored weights are held as bf16 on the CPU too (same kernel, same logits as f32).
cli_case(device/weights-auto-bf16-and-f32-same-text --rc 0
  --file-jq a.json ".summary.engine_settings == {\"weights\": \"bf16\"}"
  --file-jq b.json ".summary.engine_settings == {\"weights\": \"f32\"}"
  -- bash -c "$<TARGET_FILE:lm-init> --preset tiny --dtype bf16 -o b.h5 -q && $<TARGET_FILE:fafo-generate> b.h5 --prompt-ids 1,2,3 -n 12 --ignore-eos -o a.jsonl > a.txt && tail -n 1 a.jsonl > a.json && $<TARGET_FILE:fafo-generate> b.h5 --prompt-ids 1,2,3 -n 12 --ignore-eos --weights f32 -o b.jsonl > b.txt && tail -n 1 b.jsonl > b.json && cmp a.txt b.txt && test -s a.txt")
cli_case(device/weights-bf16-needs-exact-weights --rc 1 --stderr "^fafo-generate: error: --weights bf16 needs bf16-representable weights"
  --tool fafo-generate --no-file r.jsonl -- bash -c "$<TARGET_FILE:lm-init> --preset tiny -o f.h5 -q && $<TARGET_FILE:fafo-generate> f.h5 --prompt-ids 1,2 -n 2 --weights bf16 -o r.jsonl")
cli_case(device/weights-f16-needs-exact-weights --rc 1 --stderr "^lm-generate: error: --weights f16 needs f16-representable weights"
  --tool lm-generate --no-file r.jsonl -- $<TARGET_FILE:lm-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --weights f16 -o r.jsonl)
cli_case(device/lm-eval-weights-f16-on-cpu-refused --rc 2 --stderr "^lm-eval: error: lm-eval computes in f32 on the CPU"
  --tool lm-eval --no-file e.json -- $<TARGET_FILE:lm-eval> ${DEV_KJV} ${PROJECT_SOURCE_DIR}/test/cli/fixtures/genesis.txt --weights f16 -o e.json)
cli_case(device/weights-unknown --rc 2 --stderr "--weights" --tool fafo-generate
  -- $<TARGET_FILE:fafo-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --weights fp8)
# Issue 37: GGUF Q8_0 / Q4_0 (lm-convert --dtype q8_0|q4_0, ggml's rounding) stay quantised on the CPU
# under --weights auto and give the same text as the same file widened to f32.
cli_case(device/weights-q8-q4-held-quantised-same-text --rc 0
  --file-jq a8.json ".summary.engine_settings == {\"weights\": \"q8_0\"}"
  --file-jq a4.json ".summary.engine_settings == {\"weights\": \"q4_0\"}"
  -- bash -c "$<TARGET_FILE:lm-convert> ${DEV_KJV} -o q8.gguf --dtype q8_0 -q && $<TARGET_FILE:lm-convert> ${DEV_KJV} -o q4.gguf --dtype q4_0 -q && $<TARGET_FILE:lm-generate> q8.gguf --prompt 'And God said' -n 16 --ignore-eos --no-stream -o a8.jsonl > a8.txt && $<TARGET_FILE:lm-generate> q8.gguf --prompt 'And God said' -n 16 --ignore-eos --no-stream --weights f32 > b8.txt && $<TARGET_FILE:lm-generate> q4.gguf --prompt 'And God said' -n 16 --ignore-eos --no-stream -o a4.jsonl > a4.txt && $<TARGET_FILE:lm-generate> q4.gguf --prompt 'And God said' -n 16 --ignore-eos --no-stream --weights f32 > b4.txt && cmp a8.txt b8.txt && cmp a4.txt b4.txt && test -s a8.txt && tail -n 1 a8.jsonl > a8.json && tail -n 1 a4.jsonl > a4.json")
cli_case(device/q8-dtype-needs-gguf --rc 2 --stderr "^lm-convert: error: q8_0 is a GGUF block format: write \\*\\.gguf"
  -- $<TARGET_FILE:lm-convert> ${DEV_KJV} -o x.h5 --dtype q8_0)
# Issue 37, --weights bf16-dot (lm::hold_bf16_dot): weights and activations rounded to bfloat16,
# bf16 dot products; every row's bits are its own, so FAFO stays identical to AR in the mode, and
# the loss stays within 0.01 nats of f32's on the demo model (measured: 1.4e-5 on the KJV split).
cli_case(device/weights-bf16-dot-fafo-identical-to-ar --rc 0
  --file-jq a.json ".summary.engine_settings.weights == \"bf16-dot\" and (.summary.engine_settings.bf16_unit | IN(\"amx\", \"avx512-bf16\", \"emulated\")) and .summary.identical_to_ar == true"
  -- bash -c "$<TARGET_FILE:fafo-generate> ${DEV_KJV} --prompt 'In the beginning God created the heaven and the earth. And the earth was without form' -n 24 --ignore-eos --weights bf16-dot --compare ar -o a.jsonl -q && tail -n 1 a.jsonl > a.json")
cli_case(device/weights-bf16-dot-lm-eval-near-f32 --rc 0
  --file-jq b.json ".engine_settings.weights == \"bf16-dot\" and .top1_accuracy == null"
  -- bash -c "$<TARGET_FILE:lm-eval> ${DEV_KJV} ${PROJECT_SOURCE_DIR}/test/cli/fixtures/genesis.txt --max-tokens 200 -o a.json -q && $<TARGET_FILE:lm-eval> ${DEV_KJV} ${PROJECT_SOURCE_DIR}/test/cli/fixtures/genesis.txt --max-tokens 200 --weights bf16-dot -o b.json -q && jq -e -s '(.[0].loss - .[1].loss | fabs) < 0.01 and .[0].tokens == .[1].tokens' a.json b.json")
cli_case(device/weights-bf16-dot-cuda-refused --rc 2 --stderr "^lm-generate: error: --weights bf16-dot is a CPU mode"
  --tool lm-generate --no-file r.jsonl -- $<TARGET_FILE:lm-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --weights bf16-dot --device cuda -o r.jsonl)
# A GGUF whose matrices are all Q4_0 holds about 0.56 bytes per weight: the reader's size check
# (a config cannot imply more weights than the file can hold) must allow it.
cli_case(device/gguf-all-q4_0-loads --rc 0
  --file-jq a.json ".summary.engine_settings == {\"weights\": \"q4_0\"} and .summary.generated_tokens == 2"
  -- bash -c "$<TARGET_FILE:lm-init> --d-model 256 --d-ff 512 --n-layers 4 --n-heads 4 --vocab-size 512 -o m.h5 -q && $<TARGET_FILE:lm-convert> m.h5 -o q4.gguf --dtype q4_0 -q && test $(stat -c %s q4.gguf) -lt 2700000 && $<TARGET_FILE:lm-generate> q4.gguf --prompt-ids 1,2,3 -n 2 --ignore-eos --no-stream -o a.jsonl > /dev/null && tail -n 1 a.jsonl > a.json")
# Issue 37, --act-quant q8 (lm::hold_act_q8): a GGUF's Q8_0 / Q4_0 blocks times activations
# quantised to Q8_0 blocks (integer dot products, llama.cpp's arithmetic).  Every row's bits are
# its own, so FAFO stays identical to AR in the mode; the loss stays within 0.02 nats of the exact
# product's (measured on genesis.txt's first 400 tokens: 4.4e-4 for Q8_0); a model of vocabulary 500
# (the head's rows not a multiple of 16) keeps the head's exact product and still runs.
cli_case(device/act-quant-q8-fafo-identical-to-ar --rc 0
  --file-jq a8.json ".summary.engine_settings == {\"weights\": \"q8_0\", \"act_quant\": \"q8\"} and .summary.identical_to_ar == true"
  --file-jq a4.json ".summary.engine_settings == {\"weights\": \"q4_0\", \"act_quant\": \"q8\"} and .summary.identical_to_ar == true"
  -- bash -c "$<TARGET_FILE:lm-convert> ${DEV_KJV} -o q8.gguf --dtype q8_0 -q && $<TARGET_FILE:lm-convert> ${DEV_KJV} -o q4.gguf --dtype q4_0 -q && $<TARGET_FILE:fafo-generate> q8.gguf --prompt 'In the beginning God created the heaven and the earth. And the earth was without form' -n 24 --ignore-eos --act-quant q8 --compare ar -o a8.jsonl -q && $<TARGET_FILE:fafo-generate> q4.gguf --prompt 'And God said' -n 24 --ignore-eos --act-quant q8 --compare ar -o a4.jsonl -q && tail -n 1 a8.jsonl > a8.json && tail -n 1 a4.jsonl > a4.json")
cli_case(device/act-quant-q8-lm-eval-near-exact --rc 0
  --file-jq b.json ".engine_settings == {\"weights\": \"q8_0\", \"act_quant\": \"q8\"} and .top1_accuracy == null"
  -- bash -c "$<TARGET_FILE:lm-convert> ${DEV_KJV} -o q8.gguf --dtype q8_0 -q && $<TARGET_FILE:lm-eval> q8.gguf ${PROJECT_SOURCE_DIR}/test/cli/fixtures/genesis.txt --max-tokens 200 -o a.json -q && $<TARGET_FILE:lm-eval> q8.gguf ${PROJECT_SOURCE_DIR}/test/cli/fixtures/genesis.txt --max-tokens 200 --act-quant q8 -o b.json -q && jq -e -s '(.[0].loss - .[1].loss | fabs) < 0.02 and .[0].loss != .[1].loss and .[0].tokens == .[1].tokens' a.json b.json")
cli_case(device/act-quant-q8-head-not-16-rows --rc 0
  --file-jq a.json ".summary.engine_settings.act_quant == \"q8\" and .summary.identical_to_ar == true"
  -- bash -c "$<TARGET_FILE:lm-init> --d-model 64 --d-ff 128 --n-layers 2 --n-heads 2 --vocab-size 500 -o m.h5 -q && $<TARGET_FILE:lm-convert> m.h5 -o q8.gguf --dtype q8_0 -q && $<TARGET_FILE:fafo-generate> q8.gguf --prompt-ids 1,2,3,1,2,3 -n 12 --ignore-eos --act-quant q8 --compare ar -o a.jsonl -q && tail -n 1 a.jsonl > a.json")
cli_case(device/act-quant-needs-quantised-weights --rc 1 --stderr "^lm-generate: error: --act-quant q8 needs Q8_0 or Q4_0 weights"
  --tool lm-generate --no-file r.jsonl -- $<TARGET_FILE:lm-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --act-quant q8 -o r.jsonl)
cli_case(device/act-quant-with-weights-f32-refused --rc 2 --stderr "^fafo-generate: error: --act-quant q8 multiplies the file's Q8_0 / Q4_0 blocks"
  --tool fafo-generate --no-file r.jsonl -- $<TARGET_FILE:fafo-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --act-quant q8 --weights f32 -o r.jsonl)
cli_case(device/act-quant-cuda-refused --rc 2 --stderr "^lm-generate: error: --act-quant q8 is a CPU mode"
  --tool lm-generate --no-file r.jsonl -- $<TARGET_FILE:lm-generate> ${DEV_KJV} --prompt-ids 1,2 -n 2 --act-quant q8 --device cuda -o r.jsonl)
cli_case(device/act-quant-unknown --rc 2 --stderr "--act-quant" --tool lm-eval
  -- $<TARGET_FILE:lm-eval> ${DEV_KJV} ${PROJECT_SOURCE_DIR}/test/cli/fixtures/genesis.txt --act-quant q4)
