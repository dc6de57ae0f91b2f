# ---- lm-serve (issue 38): the OpenAI API over loopback, curl + jq as the client ---------------
# Each session case (serve_session.sh) starts the server on a free port with the demo model, runs
# one script of test/cli/serve/ against it, then stops it with SIGTERM and requires exit 0.
set(SERVE_SESSION bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_session.sh $<TARGET_FILE:lm-serve> ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5)
set(SERVE_SCRIPTS ${CMAKE_CURRENT_SOURCE_DIR}/serve)
set(SERVE_GEN_ARGS $<TARGET_FILE:lm-generate> ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5)

cli_case(serve/completion-equals-lm-generate --rc 0
  --file-jq a.json ".object == \"text_completion\" and .usage.prompt_tokens == 5 and .usage.completion_tokens == 16 and .usage.total_tokens == 21 and .choices[0].finish_reason == \"length\""
  --file-jq c.json ".object == \"chat.completion\" and .choices[0].message.role == \"assistant\" and .usage.completion_tokens == 8 and .usage.prompt_tokens > 10"
  --file-jq m.json ".object == \"list\" and .data[0].id == \"kjv7m.h5\" and .data[0].object == \"model\""
  --file log.jsonl
  -- ${SERVE_SESSION} --access-log log.jsonl -- ${SERVE_SCRIPTS}/completion.sh ${SERVE_GEN_ARGS})
cli_case(serve/concurrent-requests-equal-alone --rc 0
  --file-jq h.json ".max_active >= 2 and .requests == 4"
  -- ${SERVE_SESSION} -- ${SERVE_SCRIPTS}/concurrent.sh ${SERVE_GEN_ARGS})
cli_case(serve/stream-server-sent-events --rc 0
  --file-jq last.json ".choices[0].finish_reason == \"length\" and .usage.completion_tokens == 12 and .object == \"text_completion\""
  --file-jq first.json ".object == \"chat.completion.chunk\" and .choices[0].delta.role == \"assistant\""
  -- ${SERVE_SESSION} -- ${SERVE_SCRIPTS}/stream.sh)
# Embeddings: one unit vector per input, the same text the same vector.
cli_case(serve/embeddings-unit-vectors --rc 0
  --file-jq e.json ".object == \"list\" and (.data | length) == 3 and (.data[0].embedding | length) == 256 and .usage.prompt_tokens > 3"
  --file-jq e.json "[.data[].embedding | map(. * .) | add | sqrt | . - 1 | fabs] | max < 1e-5"
  --file-jq e.json ".data[0].embedding == .data[2].embedding and .data[0].embedding != .data[1].embedding"
  -- ${SERVE_SESSION} -- -c "curl -s $URL/v1/embeddings -d '{\"input\": [\"In the beginning\", \"And God said\", \"In the beginning\"]}' > e.json")
cli_case(serve/bad-requests-json-errors --rc 0
  -- ${SERVE_SESSION} --api-key k3y --max-body 16384 -- ${SERVE_SCRIPTS}/bad_requests.sh)
cli_case(serve/busy-503-and-client-leaving --rc 0
  --file-jq h.json ".active == 0 and .queued == 0 and .slots == 1"
  -- ${SERVE_SESSION} --slots 1 --max-queue 0 -- ${SERVE_SCRIPTS}/busy.sh)
# Start-up errors: a model without a tokenizer (exit 1), a port in use (exit 1), bad flags (exit 2).
cli_case(serve/model-without-tokenizer --rc 1 --stderr "^lm-serve: error: the model has no tokenizer" --tool lm-serve
  -- bash -c "$<TARGET_FILE:lm-init> --d-model 64 --d-ff 128 --n-layers 1 --n-heads 2 --vocab-size 64 -o m.h5 -q && $<TARGET_FILE:lm-serve> m.h5 --port 0")
cli_case(serve/port-in-use --rc 0
  -- ${SERVE_SESSION} -- -c "$<TARGET_FILE:lm-serve> ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 --port \${URL##*:} 2> err.txt && exit 1 || grep -q \"^lm-serve: error: cannot listen on 127.0.0.1 port \${URL##*:} \" err.txt")
cli_case(serve/slots-zero-refused --rc 2 --stderr "--slots"
  -- $<TARGET_FILE:lm-serve> ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 --slots 0)
# --device cuda (one slot on the device engine): here the build or the machine has no CUDA.
if(DEFINED DEV_NO_CUDA)
  cli_case(serve/cuda-unavailable --rc 1 --stderr "^lm-serve: ${DEV_NO_CUDA}"
    -- $<TARGET_FILE:lm-serve> ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5 --device cuda --port 0)
endif()
# SIGTERM mid-stream: the streams in flight (and the one queued) finish with [DONE], exit 0.
cli_case(serve/sigterm-lets-streams-finish --rc 0
  -- bash ${CMAKE_CURRENT_SOURCE_DIR}/serve/sigterm.sh $<TARGET_FILE:lm-serve> ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5)
