#!/usr/bin/env bash
# Replays a harness's kept corpus (test/fuzz/corpus/TARGET.tar.xz) and its regression inputs
# (test/fuzz/regressions/<TARGET without fuzz_>-*) through fuzz-replay: a ctest case of the normal
# and the sanitizer suites.  Scratch files go to a temporary directory removed at exit.
# Usage: replay.sh FUZZ_REPLAY TARGET CMAKE
set -euo pipefail
usage() { echo "replay.sh: $1 (usage: replay.sh FUZZ_REPLAY TARGET CMAKE)" >&2; exit 2; }
[ $# -eq 3 ] || usage "three arguments are required"
replay=$1 target=$2 cmake=$3
[ -f "$replay" ] && [ -x "$replay" ] || usage "no fuzz-replay program at $replay"
command -v "$cmake" > /dev/null || usage "no cmake at $cmake"
root=$(cd "$(dirname "$0")" && pwd)
[[ $target =~ ^fuzz_[a-z_]+$ ]] || usage "TARGET must be a harness name such as fuzz_gguf, got '$target'"
tarball=$root/corpus/$target.tar.xz
[ -f "$tarball" ] || { echo "replay.sh: no kept corpus $tarball (unknown TARGET?)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus" "$work/scratch"
(cd "$work/corpus" && "$cmake" -E tar xf "$tarball" > "$work/tar.log" 2>&1) ||
  { echo "replay.sh: cannot unpack $tarball (damaged? restore it: git checkout -- test/fuzz/corpus)" >&2; exit 1; }
inputs=("$work/corpus")
for f in "$root/regressions/${target#fuzz_}"-*; do [ -f "$f" ] && inputs+=("$f"); done
# a corpus far smaller than the one packed would mean the tarball lost its contents (fuzz-replay
# reads the directory's own files, not its subdirectories)
n=$(find "$work/corpus" -maxdepth 1 -type f | wc -l)
[ "$n" -ge 10 ] || { echo "replay.sh: $tarball holds only $n inputs" >&2; exit 1; }
rc=0
ICMLKIT_FUZZ_SCRATCH=$work/scratch "$replay" "$target" "${inputs[@]}" > "$work/out.txt" || rc=$?
cat "$work/out.txt"
if [ $rc -ne 0 ]; then
  echo "replay.sh: $target failed (exit $rc); an input named $work/corpus/NAME is NAME in $tarball" >&2
  exit $rc
fi
# a program that ran no input at all must not pass
grep -q "replayed, no finding" "$work/out.txt" || { echo "replay.sh: $replay did not report a replay" >&2; exit 1; }
