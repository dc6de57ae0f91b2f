#!/usr/bin/env bash
# Replays a harness's kept corpus (test/fuzz/corpus/TARGET.tar.xz) and its regression inputs
# (test/fuzz/regressions/<TARGET without fuzz_>-*) through fuzz-replay: a ctest case of the normal
# and the sanitizer suites.  Scratch files go to a temporary directory removed at exit.
# Usage: replay.sh FUZZ_REPLAY TARGET CMAKE
set -euo pipefail
usage() { echo "replay.sh: $1 (usage: replay.sh FUZZ_REPLAY TARGET CMAKE)" >&2; exit 2; }
[ $# -eq 3 ] || usage "three arguments are required"
replay=$1 target=$2 cmake=$3
[ -x "$replay" ] || usage "no fuzz-replay program at $replay"
command -v "$cmake" > /dev/null || usage "no cmake at $cmake"
root=$(cd "$(dirname "$0")" && pwd)
tarball=$root/corpus/$target.tar.xz
[ -f "$tarball" ] || { echo "replay.sh: no kept corpus $tarball" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus" "$work/scratch"
(cd "$work/corpus" && "$cmake" -E tar xf "$tarball")
inputs=("$work/corpus")
for f in "$root/regressions/${target#fuzz_}"-*; do [ -f "$f" ] && inputs+=("$f"); done
# a corpus far smaller than the one packed would mean the tarball lost its contents (fuzz-replay
# reads the directory's own files, not its subdirectories)
n=$(find "$work/corpus" -maxdepth 1 -type f | wc -l)
[ "$n" -ge 10 ] || { echo "replay.sh: $tarball holds only $n inputs" >&2; exit 1; }
ICMLKIT_FUZZ_SCRATCH=$work/scratch "$replay" "$target" "${inputs[@]}"
