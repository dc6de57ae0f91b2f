#!/usr/bin/env bash
# Refreshes the kept corpora test/fuzz/corpus/<target>.tar.xz from a campaign's grown corpora:
# libFuzzer's -merge=1 keeps the smallest set of inputs that covers every feature of the grown
# corpus and the corpus kept now, and the set is packed reproducibly (sorted names, fixed time,
# owner and modes, one xz thread: the same set gives the same bytes; the merge itself may keep a
# few inputs more or fewer from one run to the next).  The normal test suite replays these
# (test/fuzz/replay.sh); run.sh seeds from them.
# Usage: pack-corpus.sh FUZZ_DIR CORPUS_DIR [TARGET...]   (CORPUS_DIR/<target> as FUZZ_CORPUS makes;
# the targets default to those with a directory there)
set -euo pipefail
usage() { echo "pack-corpus.sh: $1 (usage: pack-corpus.sh FUZZ_DIR CORPUS_DIR [TARGET...])" >&2; exit 2; }
[ $# -ge 2 ] || usage "FUZZ_DIR and CORPUS_DIR are required"
[ -d "$1" ] || usage "no fuzz directory $1"
[ -d "$2" ] || usage "no corpus directory $2"
fuzz=$(cd "$1" && pwd); grown=$(cd "$2" && pwd); shift 2
root=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || for d in "$grown"/fuzz_*; do [ -d "$d" ] && targets+=("$(basename "$d")"); done
[ ${#targets[@]} -gt 0 ] || usage "no fuzz_* directory in $grown"
# every target checked before any tarball is rewritten
for t in "${targets[@]}"; do
  [[ $t =~ ^fuzz_[a-z_]+$ ]] || usage "a target is a harness name such as fuzz_gguf, got '$t'"
  [ -x "$fuzz/$t" ] || usage "$fuzz has no $t"
  [ -d "$grown/$t" ] || usage "no $grown/$t"
done
mkdir -p "$root/corpus"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
  rm -rf "${work:?}"/*; mkdir -p "$work/kept" "$work/merged" "$work/found"
  [ ! -f "$root/corpus/$t.tar.xz" ] || tar -xJf "$root/corpus/$t.tar.xz" -C "$work/kept" 2> /dev/null ||
    { echo "pack-corpus.sh: cannot unpack the kept corpus $root/corpus/$t.tar.xz (restore it: git checkout -- test/fuzz/corpus)" >&2; exit 1; }
  (cd "$work" && "$fuzz/$t" -merge=1 -max_len=65536 -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$work/found/" \
    "$work/merged" "$work/kept" "$grown/$t" > merge.log 2>&1) ||
    { tail -20 "$work/merge.log" >&2; echo "pack-corpus.sh: merging $t failed (a finding? see above)" >&2; exit 1; }
  # the merge survives an input that crashes (it retries without it): that input is a finding
  if [ -n "$(ls "$work/found")" ]; then
    mkdir -p "$root/findings"; cp "$work/found"/* "$root/findings/"; cp "$work/merge.log" "$root/findings/$t.merge.log"
    echo "pack-corpus.sh: merging $t met a finding ($(cd "$work/found" && echo *)); copied to $root/findings/ with merge.log; nothing packed" >&2
    exit 1
  fi
  # the replay refuses a corpus of under 10 inputs; never replace a kept corpus with one
  [ "$(ls "$work/merged" | wc -l)" -ge 10 ] || { echo "pack-corpus.sh: $t merged to under 10 inputs; nothing packed" >&2; exit 1; }
  chmod 0644 "$work/merged"/*
  XZ_OPT=-T1 tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --mode=go-w -C "$work/merged" -cJf "$work/$t.tar.xz" .
  mv "$work/$t.tar.xz" "$root/corpus/$t.tar.xz"
  echo "pack-corpus.sh: $t: $(ls "$work/merged" | wc -l) inputs, $(stat -c %s "$root/corpus/$t.tar.xz") bytes packed"
done
