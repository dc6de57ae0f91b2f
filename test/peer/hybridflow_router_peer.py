#!/usr/bin/env python3
"""Peer check of HybridFlow's router network (issue 39): the reference RouterNet in torch (eval mode:
Linear -> ReLU -> Dropout, depth times, then Linear(hidden, 1), as planner/router_train.py builds it)
against `hybridflow-train-router --router FILE --score` on the same inputs.

Inputs: ROWS rows drawn with numpy's default_rng(SEED) in float32: an embedding of unit norm (as
Qwen3-Embedding's), the inference meta vector [n_rely 0..3, words 5..200, min(words/100, 1), 0 x 5],
r_B and r_L in [0, 2).  The router file is a .safetensors (scripts/hybridflow/convert_router_pt.py
output, or a router hybridflow-train-router trained) or a torch .pt state_dict (converted here).

Our forward accumulates in double from the float32 weights, so the reference is torch's forward in
float64 on the same float32 weights and inputs; torch's float32 forward must agree too (float32
rounding, about 1e-7 here).  Within 1e-6: the raw output against float64 (absolute), against float32
(relative to max(1, |raw|)), and s against float64.

Usage: hybridflow_router_peer.py BIN ROUTER WORK [ROWS] [SEED]   (exit 77 when torch is missing)
Prints one JSON object: rows, max_abs_diff_raw_f64, max_abs_diff_raw_f32, max_diff_raw_f32_rel,
max_abs_diff_s_f64, ok (exit 1 when not ok).
"""
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    from torch import nn
except ImportError as e:  # a skip, not a failure: the peer is not installed
    print(f"skipped: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "hybridflow"))


def router_from_state(state):
    """The reference network for a state_dict with keys net.{3i}.weight / .bias."""
    n_lin = len([k for k in state if k.endswith(".weight")])
    layers = []
    for i in range(n_lin):
        w = state[f"net.{3 * i}.weight"]
        layers.append(nn.Linear(w.shape[1], w.shape[0]))
        if i + 1 < n_lin:
            layers += [nn.ReLU(), nn.Dropout(0.1)]
    net = nn.Module()
    net.net = nn.Sequential(*layers)
    net.to(state["net.0.weight"].dtype)  # float64 for the double reference
    net.load_state_dict(state)
    net.eval()
    return net


def main(argv):
    if len(argv) < 4:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    bin_dir, router, work = argv[1], argv[2], argv[3]
    rows = int(argv[4]) if len(argv) > 4 else 64
    seed = int(argv[5]) if len(argv) > 5 else 0
    os.makedirs(work, exist_ok=True)
    if router.endswith(".pt"):
        from convert_router_pt import convert  # needs safetensors
        converted = os.path.join(work, "router.safetensors")
        state = convert(router, converted)
        router = converted
    else:
        from safetensors.torch import load_file
        state = load_file(router)
    net = router_from_state(state)
    in_dim = state["net.0.weight"].shape[1]
    embed_dim = in_dim - 10

    rng = np.random.default_rng(seed)
    e = rng.standard_normal((rows, embed_dim))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    words = rng.integers(5, 201, rows)
    meta = np.zeros((rows, 8))
    meta[:, 0] = rng.integers(0, 4, rows)
    meta[:, 1] = words
    meta[:, 2] = np.minimum(words / 100.0, 1.0)
    r = rng.uniform(0.0, 2.0, (rows, 2))
    x = np.concatenate([e, meta, r], axis=1).astype(np.float32)

    inputs = os.path.join(work, "router_inputs.jsonl")
    with open(inputs, "w") as f:
        for row in x:
            f.write(json.dumps({"x": [float(v) for v in row]}) + "\n")  # float32 -> double is exact
    out = subprocess.run([os.path.join(bin_dir, "hybridflow-train-router"), "--router", router, "--score", inputs],
                         check=True, capture_output=True, text=True).stdout
    ours = [json.loads(line) for line in out.splitlines()]
    assert len(ours) == rows, f"{len(ours)} lines for {rows} rows"
    raw = np.array([o["raw"] for o in ours])
    s = np.array([o["s"] for o in ours])

    with torch.no_grad():
        t32 = net.net(torch.from_numpy(x)).squeeze(-1).double().numpy()
        net64 = router_from_state({k: v.double() for k, v in state.items()})
        t64 = net64.net(torch.from_numpy(x).double()).squeeze(-1).numpy()
    d64 = float(np.max(np.abs(raw - t64)))
    d32 = float(np.max(np.abs(raw - t32)))
    d32_rel = float(np.max(np.abs(raw - t32) / np.maximum(1.0, np.abs(t64))))
    ds = float(np.max(np.abs(s - 1.0 / (1.0 + np.exp(-t64)))))
    ok = d64 <= 1e-6 and d32_rel <= 1e-6 and ds <= 1e-6
    print(json.dumps({"rows": rows, "input_dim": int(in_dim), "raw_range": [float(raw.min()), float(raw.max())],
                      "max_abs_diff_raw_f64": d64, "max_abs_diff_raw_f32": d32, "max_diff_raw_f32_rel": d32_rel, "max_abs_diff_s_f64": ds,
                      "tolerance": 1e-6, "ok": ok}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
