#!/usr/bin/env bash
# PLoRA packing on this CPU (issue 33): bench-plora's single / packed / wide tokens/s for K jobs
# of rank r and batch b (default 8 rank-8 jobs of 1 x 256 tokens, the issue's target case), with
# the PEFT peer in the same run: one transformers + peft LoRA job of the same shape and batch (the
# usual practice runs the K jobs like it, one after another).  One JSON object.
# transformers and peft come from PyPI into build/peer-venv (or set BENCH_PYTHON).
# Usage: bash bench/plora.sh build/bin [jobs] [rank] [batch] [threads]
set -euo pipefail
bin=${1:-build/bin}
K=${2:-8}
rank=${3:-8}
batch=${4:-1}
threads=${5:-2}
here=$(cd "$(dirname "$0")" && pwd)
root="$here/.."
py=${BENCH_PYTHON:-}
if [ -z "$py" ]; then
  venv="$root/build/peer-venv"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, transformers, peft' 2>/dev/null; then
    python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q --index-url https://download.pytorch.org/whl/cpu torch >&2 &&
      "$venv/bin/pip" install -q transformers peft >&2 || true
  fi
  py="$venv/bin/python"
fi
ours=$("$bin/bench-plora" --jobs "$K" --rank "$rank" --batch "$batch" --threads "$threads" --steps 5 --table)
peer=$(PYTHONDONTWRITEBYTECODE=1 "$py" "$here/peer/plora_peft.py" "$threads" 5 "$rank" "$batch" 256 q,k,v,o 2>/dev/null || echo null)
jq -n --argjson o "$ours" --argjson p "$peer" \
  '{ours: $o, peer: $p,
    single_vs_peft: (if $p == null then null else $o.single.tokens_per_s / $p.tokens_per_s end),
    packed_vs_peft_sequential: (if $p == null then null else $o.packed.tokens_per_s / $p.tokens_per_s end)}'
