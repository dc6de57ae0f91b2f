#!/usr/bin/env bash
# One end-to-end CLI case: run a tool in a fresh scratch directory and check its exit code,
# stderr, stdout (jq expressions that must be true) and which files exist afterwards.
#
#   run_case.sh --rc N [--stderr REGEX] [--jq EXPR]... [--file-jq PATH EXPR]...
#               [--no-file PATH]... [--file PATH]... [--needs PATH] [--stdin FILE] [--tool NAME] -- CMD ARGS...
#
# A non-zero --rc also requires stderr to be exactly one line "<tool>: error: ..." (<tool> is the
# command's basename, or --tool when the command is a shell wrapper).
# --needs: skip (exit 77) when PATH is absent, e.g. ../shared/data on a user's machine.
set -uo pipefail
tool_name=""; rc_want=0; stderr_re=""; jqs=(); file_jqs=(); nofiles=(); files=(); needs=""; stdin=/dev/null
while [ $# -gt 0 ]; do
  case "$1" in
    --rc) rc_want=$2; shift 2;;
    --stderr) stderr_re=$2; shift 2;;
    --jq) jqs+=("$2"); shift 2;;
    --file-jq) file_jqs+=("$2" "$3"); shift 3;;
    --no-file) nofiles+=("$2"); shift 2;;
    --file) files+=("$2"); shift 2;;
    --needs) needs=$2; shift 2;;
    --stdin) stdin=$2; shift 2;;
    --tool) tool_name=$2; shift 2;;
    --) shift; break;;
    *) echo "run_case.sh: unknown option $1" >&2; exit 2;;
  esac
done
if [ -n "$needs" ] && [ ! -e "$needs" ]; then echo "skipped: $needs is absent"; exit 77; fi
work=$(mktemp -d "${TMPDIR:-/tmp}/icmlkit_cli.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Pre-existing "good" file that a failing run must not clobber.
echo '{"good": true}' > "$work/existing.json"
cd "$work" || exit 1
# Per-case caches (fafo-generate's pass costs): nothing written to the user's home.
export XDG_CACHE_HOME="$work/.xdg-cache"
"$@" < "$stdin" > stdout.txt 2> stderr.txt
rc=$?
fail() { echo "FAIL: $*"; echo "--- command: $*"; echo "--- exit code: $rc"; echo "--- stderr:"; cat stderr.txt; echo "--- stdout (head):"; head -c 2000 stdout.txt; exit 1; }
[ "$rc" = "$rc_want" ] || fail "exit code $rc, want $rc_want"
if [ "$rc_want" != 0 ]; then
  tool=${tool_name:-$(basename "$1")}
  [ "$(wc -l < stderr.txt)" = 1 ] || fail "stderr must be exactly one line"
  grep -qE "^$tool: error: " stderr.txt || fail "stderr must start with '$tool: error: '"
  grep -q '{"good": true}' existing.json || fail "existing.json was clobbered"
  [ -z "$(ls -A | grep -E '\.tmp\.')" ] || fail "a temporary file was left behind"
fi
if [ -n "$stderr_re" ]; then grep -qE -- "$stderr_re" stderr.txt || fail "stderr does not match /$stderr_re/"; fi
for e in "${jqs[@]+"${jqs[@]}"}"; do
  [ "$(jq -e "$e" stdout.txt 2>/dev/null)" = "true" ] || fail "stdout: jq '$e' is not true"
done
i=0
while [ $i -lt ${#file_jqs[@]} ]; do
  f=${file_jqs[$i]}; e=${file_jqs[$((i+1))]}
  [ "$(jq -e "$e" "$f" 2>/dev/null)" = "true" ] || fail "$f: jq '$e' is not true"
  i=$((i+2))
done
for f in "${nofiles[@]+"${nofiles[@]}"}"; do [ ! -e "$f" ] || fail "$f must not exist"; done
for f in "${files[@]+"${files[@]}"}"; do [ -s "$f" ] || fail "$f must exist and be non-empty"; done
echo "ok"
