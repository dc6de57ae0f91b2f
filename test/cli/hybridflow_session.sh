#!/usr/bin/env bash
# One scripted-server session for a hybridflow-run CLI case: start hybridflow-fake-openai with
# FLAGS on a free loopback port, export its base URL as $URL, run `bash ARGS...` (files land in the
# case's directory), then stop the server.  The script's exit status is the case's.
#   hybridflow_session.sh FAKE [FLAGS...] -- ARGS...
set -u
fake=$1
shift
flags=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do flags+=("$1"); shift; done
shift
"$fake" "${flags[@]}" > fake.out 2> fake.err &
pid=$!
for _ in $(seq 1 200); do
  [ -s fake.out ] && break
  kill -0 "$pid" 2> /dev/null || { echo "fake server exited: $(cat fake.err)" >&2; exit 1; }
  sleep 0.05
done
URL=$(jq -r .listening fake.out) || { echo "no listening line" >&2; kill "$pid"; exit 1; }
export URL
bash "$@"
rc=$?
kill -TERM "$pid" 2> /dev/null
wait "$pid" 2> /dev/null
exit "$rc"
