#!/usr/bin/env bash
# Exits 0 when every listed HDF5 attribute (-a NAME) and dataset (-d NAME) of REF equals that of
# each OTHER file (the h5dump text after its file-name line); else names the first difference.
# usage: h5_same.sh REF OTHER... -- -a ATTR ... -d DATASET ...
set -euo pipefail
ref=$1; shift
others=()
while [ "$1" != "--" ]; do others+=("$1"); shift; done
shift
while [ $# -gt 0 ]; do
  kind=$1 name=$2; shift 2
  want=$(h5dump "$kind" "$name" "$ref" | tail -n +2)
  for f in "${others[@]}"; do
    [ "$want" = "$(h5dump "$kind" "$name" "$f" | tail -n +2)" ] || { echo "h5_same: $kind $name differs in $f" >&2; exit 3; }
  done
done
