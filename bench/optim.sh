#!/usr/bin/env bash
# Optimizer step time and state (issue 29): our AdamW, Adam-mini and FOAM (level 2) against
# torch.optim.AdamW, the adam-mini package and FOAM's foam_torch/foam_adam.py on the same 2
# threads, one step over the parameters of the repro shape (vocab 4096, d_model 256, 6 layers,
# d_ff 768; 6.82M parameters).  One JSON object (test/peer/optim_peer.py --time).
# PyTorch and adam-mini come from PyPI into build/bench-venv-torch (or BENCH_PYTHON); FOAM's code
# from $FOAM_TORCH (a foam_torch folder), else a clone of zqOuO/FOAM under build/, else FOAM is left out.
# Usage: bash bench/optim.sh build/bin
set -euo pipefail
bin=${1:-build/bin}
here=$(cd "$(dirname "$0")" && pwd)
root="$here/.."
py=${BENCH_PYTHON:-}
if [ -z "$py" ]; then
  venv="$root/build/bench-venv-torch"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, adam_mini, transformers, galore_torch' 2>/dev/null; then
    { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } >&2 && "$venv/bin/pip" install -q torch adam-mini transformers galore-torch >&2 || true
  fi
  py="$venv/bin/python"
fi
foam=${FOAM_TORCH:-}
if [ -z "$foam" ]; then
  [ -d "$root/build/peer-work/FOAM" ] || git clone -q --depth 1 https://github.com/zqOuO/FOAM "$root/build/peer-work/FOAM" 2>/dev/null || true
  [ -f "$root/build/peer-work/FOAM/foam_torch/foam_adam.py" ] && foam="$root/build/peer-work/FOAM/foam_torch"
fi
PYTHONDONTWRITEBYTECODE=1 "$py" "$root/test/peer/optim_peer.py" "$bin" "$(mktemp -d)" ${foam:+"$foam"} --time 2>/dev/null ||
  echo '{"bench": "optimizer step", "error": "peer unavailable (torch / adam-mini)"}'
