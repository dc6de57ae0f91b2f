#!/usr/bin/env bash
# Training speed (issue 5): our CPU trainer vs a PyTorch CPU training step of the same model
# (demo configuration: vocab 4096, d 256, 6 layers, 8/4 heads, d_ff 688, 1 x 1024 tokens, AdamW),
# same thread count, same run.  PyTorch comes from PyPI into build/bench-venv-torch (or set
# BENCH_PYTHON to a python that has torch).  Prints one JSON object.
# Usage: bash bench/lm_train.sh build/bin [threads] [steps]
set -euo pipefail
bin=${1:-build/bin}
threads=${2:-2}
steps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
ours=$("$bin/bench-lm-train" --threads "$threads" --steps "$steps")
py=${BENCH_PYTHON:-}
if [ -z "$py" ]; then
  venv="$here/../build/bench-venv-torch"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    python3 -m venv "$venv" >&2 && "$venv/bin/pip" install -q torch >&2 || true
  fi
  py="$venv/bin/python"
fi
if peer=$(PYTHONDONTWRITEBYTECODE=1 "$py" "$here/peer/lm_train_torch.py" "$threads" "$steps" 2>/dev/null); then
  jq -n --argjson o "$ours" --argjson p "$peer" '{ours: $o, peer: $p, speedup_vs_pytorch: ($o.tokens_per_s / $p.tokens_per_s)}'
else
  jq -n --argjson o "$ours" '{ours: $o, peer: null, note: "PyTorch not available"}'
fi
