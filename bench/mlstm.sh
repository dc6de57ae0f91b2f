#!/usr/bin/env bash
# The mLSTM kernels (issue 35): our recurrent, parallel and chunkwise forms (bench-mlstm --time, float32,
# one thread) and NX-AI's PyTorch backends (xlstm/blocks/mlstm/backends.py) on the same shape in the
# same run when build/peer-venv has torch and xlstm (make -f Makefile.shortcuts peer installs them).
# Prints one JSON object.  $1 = bin directory.
set -euo pipefail
bin=${1:-build/bin}
S=${S:-1024} D=${D:-32} H=${H:-8}
ours=$(OMP_NUM_THREADS=1 "$bin/bench-mlstm" --time --S "$S" --d "$D" --heads "$H")
peer=null
py=build/peer-venv/bin/python
if [ -x "$py" ]; then
  peer=$(OMP_NUM_THREADS=1 "$py" - "$S" "$D" "$H" 2>/dev/null <<'PY' || echo null
import json, sys, time, torch
from xlstm.blocks.mlstm import backends
torch.set_num_threads(1)
S, D, H = map(int, sys.argv[1:4])
g = torch.Generator().manual_seed(1)
q, k, v = (torch.randn(1, H, S, D, generator=g) for _ in range(3))
ig, fg = torch.randn(1, H, S, 1, generator=g), 3 + torch.randn(1, H, S, 1, generator=g)
def ms(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
out = {"parallel_ms": ms(lambda: backends.parallel_stabilized_simple(q, k, v, ig, fg)),
       "chunkwise_ms": ms(lambda: backends.chunkwise_simple(q, k, v, ig.squeeze(-1), fg.squeeze(-1), chunk_size=64)),
       "torch": torch.__version__}
print(json.dumps(out))
PY
)
fi
echo "{\"ours\": $ours, \"nx_ai_torch\": $peer}"
