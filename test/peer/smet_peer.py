#!/usr/bin/env python3
"""Peer check of SMET (issue 30): one topology update and the optimizer step after it, on the same
tensors and random draws, through bench-optim-step --optimizer smet and through the authors' code
(QiaoXiao7282/SMET @58706b2): Masking.magnitude_prune_block and Masking.random_grow_block
(sparselearning/core_dst.py), Adam_block.update_index_map and Adam_block.step
(sparselearning/optimizer_dst.py).  Checked: the pruned and regrown blocks (exactly), the weights
after the step, and the first and second moments and local steps of every active entry (within
1e-6 of the largest), for unstructured (block 1) and block-sparse (block 4) matrices.

Our run uses the reference code's forms here (--sparse-code-form warmup,steps: a regrown block's
step restarts at 1 and is incremented before its first update; the warm-up multiplies the stored
first moment by min(t / W, 1)), since the reference has no other; the paper's forms are checked by
hand in test/unit/test_nn_sparse.cpp.  The reference keeps its state in slot order (a regrown
block takes its pruned block's slot), ours in entry order: the comparison maps slot to block.
Masking's module imports (wandb, transformers, datasets, its training utilities) are stubbed: the
two methods used need only torch and the block size.

Usage: smet_peer.py BIN WORK SMET_DIR     (exit 77 when torch or the reference is unavailable)
"""
import json
import os
import subprocess
import sys
import types

BIN, WORK, SMET_DIR = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
os.makedirs(WORK, exist_ok=True)
try:
    import numpy as np
    import torch
    for name in ["wandb", "transformers", "datasets", "peft_pretraining", "peft_pretraining.training_utils",
                 "peft_pretraining.args_utils"]:
        sys.modules[name] = types.ModuleType(name)
    sys.modules["transformers"].AutoConfig = sys.modules["transformers"].AutoTokenizer = None
    sys.modules["transformers"].default_data_collator = None
    sys.modules["peft_pretraining"].training_utils = sys.modules["peft_pretraining.training_utils"]
    sys.modules["peft_pretraining"].args_utils = sys.modules["peft_pretraining.args_utils"]
    if "loguru" not in sys.modules:
        try:
            import loguru  # noqa: F401
        except ImportError:
            lg = types.ModuleType("loguru")
            lg.logger = types.SimpleNamespace(info=lambda *a, **k: None, warning=lambda *a, **k: None)
            sys.modules["loguru"] = lg
    sys.path.insert(0, SMET_DIR)
    from sparselearning.core_dst import Masking
    from sparselearning.optimizer_dst import Adam_block
except ImportError as e:
    print(f"SMET peer unavailable: {e}", file=sys.stderr)
    sys.exit(77)
torch.set_num_threads(2)


def reference(case):
    """The reference's topology update and Adam_block step on the case's tensors."""
    bs, numel = case["block"], case["numel"]
    fake = types.SimpleNamespace(blocksize=bs)
    w = torch.nn.Parameter(torch.tensor(case["weight"], dtype=torch.float32))
    block_idx = torch.tensor(case["blocks"], dtype=torch.int64)
    opt = Adam_block([w], lr=case["lr"], betas=(case["beta1"], case["beta2"]), eps=case["eps"], weight_decay=0,
                     block_size=bs, decay_steps=case["warmup"], index_map={id(w): block_idx}, index_grads={})
    n_slots = len(case["blocks"])
    m = torch.zeros(n_slots * bs)
    v = torch.zeros(n_slots * bs)
    m[:len(case["m"])] = torch.tensor(case["m"])
    v[:len(case["v"])] = torch.tensor(case["v"])
    opt.state[w] = {"idx": block_idx, "step": torch.tensor(case["steps"], dtype=torch.int16), "exp_avg": m, "exp_avg_sq": v}
    before = block_idx.clone()
    pruned = Masking.magnitude_prune_block(fake, block_idx, w, case["prune_rate"])
    scores = torch.tensor(case["scores"], dtype=torch.float32)
    real_rand = torch.rand
    torch.rand = lambda *a, **k: scores.clone()  # the draws supplied to both
    try:
        new_idx, replace = Masking.random_grow_block(fake, block_idx, w, pruned)
    finally:
        torch.rand = real_rand
    opt.update_index_map(w, new_idx, replace)
    full = (new_idx[:, None] * bs + torch.arange(bs)[None, :]).reshape(-1)
    full = full[full < numel]
    with torch.no_grad():  # apply_mask
        flat = w.data.view(-1)
        kept = flat[full].clone()
        flat.zero_()
        flat[full] = kept
    opt.index_grads = {id(w): torch.tensor(case["grad"], dtype=torch.float32)[full]}
    opt.step()
    st = opt.state[w]
    grown = sorted(set(new_idx.tolist()) - set(before.tolist()))
    # per block id: its slot's moments and step
    per_block = {}
    for slot, b in enumerate(new_idx.tolist()):
        per_block[b] = (st["exp_avg"][slot * bs:(slot + 1) * bs].tolist(), st["exp_avg_sq"][slot * bs:(slot + 1) * bs].tolist(),
                        int(st["step"][slot]))
    return {"pruned": sorted(pruned.tolist()), "grown": grown, "weight": w.data.tolist(), "per_block": per_block}


def make_case(rng, numel, bs, density):
    nb = (numel + bs - 1) // bs
    blocks = sorted(rng.choice(nb, size=int(nb * density), replace=False).tolist())
    weight = np.zeros(numel, np.float32)
    for b in blocks:
        weight[b * bs:(b + 1) * bs] = rng.standard_normal(bs).astype(np.float32) * 0.05
    n_active = len(blocks) * bs
    return {"numel": numel, "block": bs, "weight": weight.tolist(), "blocks": blocks,
            "m": (rng.standard_normal(n_active) * 1e-3).astype(np.float32).tolist(),
            "v": (rng.random(n_active) * 1e-6 + 1e-8).astype(np.float32).tolist(),
            "steps": rng.integers(30, 300, size=len(blocks)).tolist(), "global_step": 300, "prune_rate": 0.2,
            "scores": rng.random(nb).astype(np.float32).tolist(),
            "grad": (rng.standard_normal(numel) * 1e-2).astype(np.float32).tolist(),
            "lr": 2e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "warmup": 100, "code_form": True, "local_steps": True}


def main():
    rng = np.random.default_rng(30)
    worst = 0.0
    ok = True
    for numel, bs, density in [(384, 1, 0.25), (384, 4, 0.5), (768, 1, 0.1)]:
        case = make_case(rng, numel, bs, density)
        path = os.path.join(WORK, f"smet-{numel}-{bs}.json")
        with open(path, "w") as f:
            json.dump(case, f)
        ours = json.loads(subprocess.run([os.path.join(BIN, "bench-optim-step"), "--optimizer", "smet", "--in", path],
                                         check=True, capture_output=True, text=True).stdout)
        ref = reference(case)
        same_sets = ours["pruned"] == ref["pruned"] and ours["grown"] == ref["grown"]
        dw = float(np.max(np.abs(np.array(ours["weight"]) - np.array(ref["weight"]))))
        scale = float(np.max(np.abs(np.array(ref["weight"]))))
        # our state, entry order -> per block
        k = 0
        dm = dv = 0.0
        steps_ok = True
        for b in ours["blocks"]:
            n_b = min(bs, numel - b * bs)
            rm, rv, rt = ref["per_block"][b]
            om, ov, ot = ours["m"][k:k + n_b], ours["v"][k:k + n_b], ours["steps"][k:k + n_b]
            dm = max(dm, max(abs(a - c) for a, c in zip(om, rm[:n_b])))
            dv = max(dv, max(abs(a - c) for a, c in zip(ov, rv[:n_b])))
            steps_ok &= all(t == rt for t in ot)
            k += n_b
        rel_w = dw / scale
        dm /= max(abs(x) for x in ours["m"])  # relative to the largest moment
        dv /= max(abs(x) for x in ours["v"])
        worst = max(worst, rel_w, dm, dv)
        good = same_sets and steps_ok and rel_w < 1e-6 and dm < 1e-6 and dv < 1e-6
        ok &= good
        print(json.dumps({"numel": numel, "block": bs, "density": density, "pruned": len(ours["pruned"]),
                          "same_pruned_and_grown": same_sets, "steps_equal": steps_ok, "max_weight_diff_rel": rel_w,
                          "max_m_rel": dm, "max_v_rel": dv, "ok": good}))
    print(json.dumps({"smet_peer": "ok" if ok else "FAILED", "worst_rel": worst}))
    sys.exit(0 if ok else 1)


main()
