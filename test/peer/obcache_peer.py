#!/usr/bin/env python3
"""Peer check of obcache-score's OBCache scores against the reference code (optional).

The reference is KVScoreTracker in kv_cache_pruner/cache_utils.py of MalachiAjayi/kv-cache-pruner,
the public fork of the paper's DreamSoul-AI/OBCache (its OBCScoreTracker); this script imports it
from REF_DIR and never copies it.  obcache-score scores a prompt on the demo model with
--save-attention; for every preset the tracker is fed the same attention probabilities, logits,
outputs and values (its prefill path with ptb_window = the preset's window), its per-query-head
scores are summed over each KV group (--gqa-reduce sum), and both are compared: the largest
difference relative to the largest score must stay within 1e-5.  The reference's p = 1 key term
(sum |v| where ||v||^2 belongs) is compared with --reference-value-norm, and shown to differ from
our default.  Prints JSON; exit 1 on a mismatch, 77 when torch, h5py or the reference is absent.

usage: obcache_peer.py BIN_DIR WORK_DIR MODEL PROMPT_FILE REF_DIR
"""
import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

try:
    import h5py
    import numpy as np
    import torch
except ImportError as e:  # optional peer
    print(f"skipped: {e}")
    sys.exit(77)

bin_dir, work, model, prompt_file, ref_dir = (Path(a) for a in sys.argv[1:6])
ref = ref_dir / "kv_cache_pruner" / "cache_utils.py"
if not ref.exists():
    print(f"skipped: no reference at {ref} (git clone https://github.com/MalachiAjayi/kv-cache-pruner {ref_dir})")
    sys.exit(77)
try:
    import transformers.cache_utils  # noqa: F401  (the reference subclasses its Cache)
except ImportError:  # the tracker itself needs only torch: give the import a stand-in base class
    tf = types.ModuleType("transformers")
    cu = types.ModuleType("transformers.cache_utils")
    cu.Cache = type("Cache", (), {"__init__": lambda self, *a, **k: None})
    tf.cache_utils = cu
    sys.modules["transformers"], sys.modules["transformers.cache_utils"] = tf, cu
spec = importlib.util.spec_from_file_location("obc_reference", ref)
reference = importlib.util.module_from_spec(spec)
spec.loader.exec_module(reference)
torch.set_num_threads(2)

# preset suffix -> the tracker's (use_v_score, use_k_score, use_cross, p, use_vnorm)
TERMS = {"": (True, False, False, 1, False), "+obcV": (True, False, False, 2, True),
         "+obcK": (False, True, False, 2, True), "+obcVK": (True, True, True, 2, True),
         "+obcVK_no_cross": (True, True, False, 2, True), "+obcV_p1": (True, False, False, 1, True),
         "+obcVK_p1": (True, True, True, 1, True)}
RECENT = 16
methods = [b + s for b in ("h2o", "tova", "snapkv") for s in TERMS]
work.mkdir(parents=True, exist_ok=True)


def score(out, extra=()):
    subprocess.run([bin_dir / "obcache-score", model, "--prompt-file", prompt_file, "--prompt-tokens", "200",
                    "--methods", ",".join(methods), "--budget", "0.2", "--num-recent", str(RECENT), "--save-attention",
                    "-o", out, "-q", *extra], check=True, stdout=subprocess.DEVNULL)
    return h5py.File(out, "r")


ours, ours_ref = score(work / "obc.h5"), score(work / "obc_ref.h5", ["--reference-value-norm"])
n_layers = sum(1 for k in ours["attention"].keys() if k.startswith("layer_"))
results, worst = {}, 0.0
for name in methods:
    base, suffix = (name.split("+", 1)[0], "+" + name.split("+", 1)[1]) if "+" in name else (name, "")
    use_v, use_k, use_cross, p, use_vnorm = TERMS[suffix]
    window = 1 if base == "tova" else RECENT
    f = ours_ref if suffix.endswith("_p1") and use_k else ours
    rel = 0.0
    for layer in range(n_layers):
        att = f["attention"][f"layer_{layer}"]
        rows = att["rows"][0]
        probs, logits = np.asarray(att["probs"], np.float64), np.asarray(att["logits"], np.float64)
        outputs, values = np.asarray(att["outputs"], np.float64), np.asarray(att["values"], np.float64)
        H, W, n = probs.shape
        group = H // values.shape[0]
        # The tracker's prefill input: [1, H, n, n] with the window's rows at the end.
        A, qK, O = torch.zeros(1, H, n, n, dtype=torch.float64), torch.zeros(1, H, n, n, dtype=torch.float64), \
            torch.zeros(1, H, n, values.shape[2], dtype=torch.float64)
        take = [i for i, r in enumerate(rows) if r >= n - window]
        A[0, :, n - window:, :] = torch.from_numpy(probs[:, take, :])
        qK[0, :, n - window:, :] = torch.from_numpy(logits[:, take, :])
        O[0, :, n - window:, :] = torch.from_numpy(outputs[:, take, :])
        V = torch.from_numpy(np.repeat(values, group, axis=0))[None]  # repeat_kv
        tracker = reference.KVScoreTracker(use_v_score=use_v, use_k_score=use_k, use_cross=use_cross, p=p,
                                           use_vnorm=use_vnorm, ptb_window=window, ptb_is_recent=base == "tova")
        tracker.update(A, V, qK, O, layer_idx=0)
        theirs = tracker.retrieve_score(0)[0].reshape(H // group, group, n).sum(1).numpy()
        mine = np.asarray(f[name][f"layer_{layer}"]["scores"], np.float64)
        rel = max(rel, float(np.abs(mine - theirs).max() / max(np.abs(theirs).max(), 1e-300)))
    results[name] = rel
    worst = max(worst, rel)
# Our default p = 1 joint score (||v||^2 in the key term) departs from the reference's.
p1 = "h2o+obcVK_p1"
default_gap = float(np.abs(np.asarray(ours[p1]["layer_0"]["scores"]) - np.asarray(ours_ref[p1]["layer_0"]["scores"])).max())
ok = worst <= 1e-5 and default_gap > 0
print(json.dumps({"max_relative_difference": results, "worst": worst, "p1_default_vs_reference_gap": default_gap,
                  "tolerance": 1e-5, "ok": ok}, indent=1))
sys.exit(0 if ok else 1)
