#!/usr/bin/env bash
# POET-X (issue 29): the forward + backward of one [768, 256] matrix (the repro model's MLP shape)
# on 2048 tokens, blocks of 64 and 128, ours (bench-optim-step --optimizer poet-x --time: R from Q,
# input-centric forward, backward, dL/dQ) against the authors' poet_torch POETLinear on its PyTorch
# path (eager, the Triton kernel's Cayley polynomial), both on 2 threads.  One JSON object
# (test/peer/poet_peer.py --time).
# PyTorch comes from PyPI into build/bench-venv-torch (or BENCH_PYTHON); poet_torch from $POET_TORCH (a
# folder holding poet_torch/), else a clone of Sphere-AI-Lab/poet under build/.
# Usage: bash bench/poet.sh build/bin
set -euo pipefail
bin=${1:-build/bin}
here=$(cd "$(dirname "$0")" && pwd)
root="$here/.."
py=${BENCH_PYTHON:-}
if [ -z "$py" ]; then
  venv="$root/build/bench-venv-torch"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
    { [ -x "$venv/bin/python" ] || python3 -m venv "$venv"; } >&2 && "$venv/bin/pip" install -q torch numpy >&2 || true
  fi
  py="$venv/bin/python"
fi
poet=${POET_TORCH:-}
if [ -z "$poet" ]; then
  [ -d "$root/build/peer-work/poet-repo" ] || git clone -q --depth 1 https://github.com/Sphere-AI-Lab/poet "$root/build/peer-work/poet-repo" 2>/dev/null || true
  poet="$root/build/peer-work/poet-repo"
fi
PYTHONDONTWRITEBYTECODE=1 "$py" "$root/test/peer/poet_peer.py" "$bin" "$(mktemp -d)" "$poet" --time 2>/dev/null ||
  echo '{"bench": "POET-X matrix forward + backward", "error": "peer unavailable (torch / poet_torch)"}'
