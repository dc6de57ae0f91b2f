#!/usr/bin/env bash
# A generating tool killed by SIGTERM mid-run leaves neither its -o file nor the temporary
# beside it.  Usage: sigterm_no_temporary.sh LM_GENERATE MODEL  (runs in the case's directory)
# The signal is sent once text has been streamed, so the run is past its start (the -o
# temporary exists, which is checked) however slow the machine is.
set -u
gen=$1 model=$2
"$gen" "$model" --prompt 'And God said' -n 1000 --ignore-eos -o r.jsonl > out.txt 2> err.txt &
pid=$!
for _ in $(seq 1 600); do
  [ -s out.txt ] && break
  kill -0 "$pid" 2> /dev/null || { echo "the run ended before streaming any text" >&2; exit 1; }
  sleep 0.05
done
[ -s out.txt ] || { echo "no text after 30 s" >&2; kill "$pid"; exit 1; }
ls -A | grep -q '[.]tmp[.]' || { echo "no -o temporary while running" >&2; kill "$pid"; exit 1; }
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 143 ] || { echo "exit status $rc, want 143 (SIGTERM)" >&2; exit 1; }
[ ! -e r.jsonl ] || { echo "-o was written" >&2; exit 1; }
left=$(ls -A | grep -c '[.]tmp[.]')
[ "$left" -eq 0 ] || { echo "$left temporaries left" >&2; exit 1; }
