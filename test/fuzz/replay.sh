#!/usr/bin/env bash
# Replays a harness's kept corpus (test/fuzz/corpus/TARGET.tar.xz) and its regression inputs
# (test/fuzz/regressions/<TARGET without fuzz_>-*) through fuzz-replay: a ctest case of the normal
# and the sanitizer suites.  Usage: replay.sh FUZZ_REPLAY TARGET CMAKE
set -euo pipefail
[ $# -eq 3 ] || { echo "replay.sh: usage: replay.sh FUZZ_REPLAY TARGET CMAKE" >&2; exit 2; }
replay=$1 target=$2 cmake=$3
root=$(cd "$(dirname "$0")" && pwd)
tarball=$root/corpus/$target.tar.xz
[ -f "$tarball" ] || { echo "replay.sh: no kept corpus $tarball" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && "$cmake" -E tar xf "$tarball")
inputs=("$work")
for f in "$root/regressions/${target#fuzz_}"-*; do [ -f "$f" ] && inputs+=("$f"); done
# a corpus far smaller than the one packed would mean the tarball lost its contents
n=$(find "$work" -type f | wc -l)
[ "$n" -ge 10 ] || { echo "replay.sh: $tarball holds only $n inputs" >&2; exit 1; }
"$replay" "$target" "${inputs[@]}"
