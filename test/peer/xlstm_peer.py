#!/usr/bin/env python3
"""Peer check of our mLSTM (issue 35, libcore/nn/mlstm.hpp) against NX-AI's reference PyTorch backends
(PyPI xlstm, xlstm/blocks/mlstm/backends.py): parallel_stabilized_simple, recurrent_step_stabilized_simple
(run from the empty state m = -inf, the convention both parallel forms imply) and chunkwise_simple, on
the same tensors.  Our recurrent, parallel and chunkwise outputs (float32, through bench-mlstm --in)
must agree with each reference form computed in float64 within 2e-5 of the output's scale.  Inputs:
softmax-normalised q and k (what the hybrid student's Hedgehog feature maps give), random v and gate
pre-activations, S = 128 (two chunks of 64), 3 heads.

Usage: xlstm_peer.py BIN WORK     (exit 77 when torch or xlstm is unavailable)
"""
import json
import math
import os
import subprocess
import sys

BIN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
try:
    import numpy as np
    import torch
    from xlstm.blocks.mlstm import backends
except Exception as e:  # noqa: BLE001
    print(f"xlstm_peer: skipped ({e})")
    sys.exit(77)

rng = np.random.default_rng(35)
S, D, H = 128, 16, 3


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


q = softmax(rng.normal(size=(H, S, D)) * 2).astype(np.float32)
k = softmax(rng.normal(size=(H, S, D)) * 2).astype(np.float32)
v = rng.normal(size=(H, S, D)).astype(np.float32)
ig = (rng.normal(size=(H, S)) * 2).astype(np.float32)
fg = (3 + rng.normal(size=(H, S)) * 1.5).astype(np.float32)
inp = {"S": S, "dk": D, "dv": D, "chunk": 64,
       "heads": [{"q": q[h].ravel().tolist(), "k": k[h].ravel().tolist(), "v": v[h].ravel().tolist(),
                  "ig": ig[h].tolist(), "fg": fg[h].tolist()} for h in range(H)]}
path = os.path.join(WORK, "heads.json")
with open(path, "w") as f:
    json.dump(inp, f)
ours = json.loads(subprocess.run([os.path.join(BIN, "bench-mlstm"), "--in", path], check=True, capture_output=True,
                                 text=True).stdout)

T = lambda a: torch.tensor(a, dtype=torch.float64).unsqueeze(0)  # noqa: E731  (1, H, ...)
Q, K, V, IG, FG = T(q), T(k), T(v), T(ig).unsqueeze(-1), T(fg).unsqueeze(-1)
ref = {"parallel": backends.parallel_stabilized_simple(Q, K, V, IG, FG)[0].numpy()}
c = torch.zeros(1, H, D, D, dtype=torch.float64)
n = torch.zeros(1, H, D, 1, dtype=torch.float64)
m = torch.full((1, H, 1, 1), -math.inf, dtype=torch.float64)
steps = []
for t in range(S):
    h, (c, n, m) = backends.recurrent_step_stabilized_simple(c, n, m, Q[:, :, t:t + 1].clone(), K[:, :, t:t + 1].clone(),
                                                             V[:, :, t:t + 1].clone(), IG[:, :, t:t + 1], FG[:, :, t:t + 1])
    steps.append(h.reshape(1, H, 1, D))
ref["recurrent"] = torch.cat(steps, dim=2)[0].numpy()
ch = backends.chunkwise_simple(Q, K, V, IG.squeeze(-1), FG.squeeze(-1), chunk_size=64)
ref["chunkwise"] = (ch[0] if isinstance(ch, tuple) else ch)[0].numpy()

worst = {}
scale = max(float(np.abs(r).max()) for r in ref.values())
for form in ("recurrent", "parallel", "chunkwise"):
    mine = np.array(ours[form]).reshape(H, S, D)
    for rform, r in ref.items():
        worst[f"ours {form} vs NX-AI {rform}"] = float(np.abs(mine - r).max()) / scale
print(json.dumps({"scale": scale, "max_abs_error_over_scale": worst}, indent=1))
bad = {key: e for key, e in worst.items() if e > 2e-5}
if bad:
    print(f"xlstm_peer: FAILED {bad}")
    sys.exit(1)
print("xlstm_peer: ok")
