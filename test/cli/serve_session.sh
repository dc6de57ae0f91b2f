#!/usr/bin/env bash
# One lm-serve session for a CLI case: start the server on a free loopback port, wait for its
# {"listening": URL} line, run the bash SCRIPT with ARGS and $URL set (its files land in the
# case's directory), stop the server with SIGTERM and require it to exit 0 within 30 s.
#   serve_session.sh LM_SERVE MODEL [SERVER FLAGS...] -- SCRIPT [ARGS...]
# The server's stdout/stderr go to serve.out / serve.err; the script's exit status is the case's
# unless the server fails.
set -u
serve=$1 model=$2
shift 2
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
shift
"$serve" "$model" --port 0 "${flags[@]}" > serve.out 2> serve.err &
pid=$!
for _ in $(seq 1 600); do
  [ -s serve.out ] && break
  kill -0 "$pid" 2> /dev/null || { echo "lm-serve exited before listening: $(cat serve.err)" >&2; exit 1; }
  sleep 0.05
done
URL=$(jq -r .listening serve.out) || { echo "no listening line" >&2; kill "$pid"; exit 1; }
export URL
bash "$@"
rc=$?
kill -TERM "$pid"
for _ in $(seq 1 600); do kill -0 "$pid" 2> /dev/null || break; sleep 0.05; done
if kill -0 "$pid" 2> /dev/null; then echo "lm-serve still running 30 s after SIGTERM" >&2; kill -KILL "$pid"; exit 1; fi
wait "$pid"
src=$?
[ "$src" -eq 0 ] || { echo "lm-serve exited with $src after SIGTERM: $(cat serve.err)" >&2; exit 1; }
exit "$rc"
