#!/usr/bin/env python3
"""Peer check of POET-X (issue 29): one matrix through bench-optim-step --optimizer poet-x and through
the authors' poet_torch (Sphere-AI-Lab/poet @3a34bb6) on the same tensors: the layer output, dL/dx,
dL/dQ (oft_R's gradient), the effective weight (get_effective_weight) and one POETAdamW step of Q,
all within 1e-5.

The reference runs its PyTorch path: Triton is hidden from it, so its Cayley transform is the
fallback `_cayley_transform_pytorch` (I + 2(Q + Q^2 + Q^3 + Q^4): our --poet-cayley series, k 4).
The Triton kernel's polynomial (I + 2Q + 2Q^2 + 2Q^3 + Q^4: our default neumann, k 3) is checked by
swapping that one function for the kernel's formula written in PyTorch.  torch.compile is disabled
(TORCHDYNAMO_DISABLE) so the eager graph runs on the CPU.

Usage: poet_peer.py BIN WORK POET_DIR            (POET_DIR holds poet_torch/; exit 77 when unavailable)
       poet_peer.py BIN WORK POET_DIR --time     (one matrix's forward + backward, ours and the reference's, JSON)
"""
import json
import os
import subprocess
import sys
import time

os.environ["TORCHDYNAMO_DISABLE"] = "1"
sys.modules["triton"] = None  # the reference's PyTorch path (its Triton kernels need a GPU)

BIN, WORK = sys.argv[1], sys.argv[2]
POET_DIR = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else ""
TIME = "--time" in sys.argv
os.makedirs(WORK, exist_ok=True)
try:
    import numpy as np
    import torch
    sys.path.insert(0, POET_DIR)
    import contextlib
    import warnings
    warnings.simplefilter("ignore")
    with contextlib.redirect_stdout(sys.stderr):  # its "Triton not found" notice
        import poet_torch.core.ops as ops
        from poet_torch.layers.poet_linear import POETLinear
        from poet_torch.optim.adamw import POETAdamW
except ImportError as e:
    print(f"POET-X peer unavailable: {e}", file=sys.stderr)
    sys.exit(77)
torch.set_num_threads(2)
fallback_cayley = ops._cayley_transform_pytorch


def triton_kernel_cayley(Q):
    """The polynomial of the reference's cayley_forward_kernel: I + 2Q + 2Q^2 + 2Q^3 + Q^4."""
    Q2 = Q @ Q
    Y = 2.0 * (Q + Q2 + Q2 @ Q) + Q2 @ Q2
    Y.diagonal(dim1=-2, dim2=-1).add_(1.0)
    return Y


def reference_layer(rows, cols, b, W0, q, perm_in, perm_out):
    layer = POETLinear(cols, rows, block_size=b)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(W0).reshape(rows, cols))
        layer.oft_R.copy_(torch.tensor(q).reshape(layer.oft_R.shape))
        pin, pout = torch.tensor(perm_in, dtype=torch.int32), torch.tensor(perm_out, dtype=torch.int32)
        layer.perm_in.copy_(pin)
        layer.perm_out.copy_(pout)
        layer.perm_in_inv.copy_(torch.argsort(pin).to(torch.int32))
        layer.perm_out_inv.copy_(torch.argsort(pout).to(torch.int32))
    return layer


def ours(spec):
    path = os.path.join(WORK, "layer.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    out = subprocess.run([os.path.join(BIN, "bench-optim-step"), "--optimizer", "poet-x", "--in", path, "--threads", "2"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


if TIME:  # one [768, 256] matrix (the repro model's MLP) on 2048 tokens, b 64 and 128, both on 2 threads
    result = {}
    ops._cayley_transform_pytorch = triton_kernel_cayley  # the polynomial ours times (neumann k 3)
    for b in (64, 128):
        rows, cols, N = 768, 256, 2048
        g = torch.Generator().manual_seed(1)
        layer = POETLinear(cols, rows, block_size=b)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(rows, cols, generator=g) * 0.05)
            layer.oft_R.copy_(torch.randn(layer.oft_R.shape, generator=g) * 1e-3)
        x = torch.randn(N, cols, generator=g, requires_grad=True)
        dy = torch.randn(N, rows, generator=g) * 1e-3
        layer(x).backward(dy)
        t0 = time.perf_counter()
        for _ in range(10):
            layer.oft_R.grad = None
            x.grad = None
            layer(x).backward(dy)
        torch_ms = (time.perf_counter() - t0) / 10 * 1e3
        out = json.loads(subprocess.run([os.path.join(BIN, "bench-optim-step"), "--optimizer", "poet-x", "--time", "--rows", str(rows),
                                         "--cols", str(cols), "--block", str(b), "--tokens", str(N), "--steps", "10", "--threads", "2"],
                                        check=True, capture_output=True, text=True).stdout)
        result[f"b{b}"] = {"ours_fwd_bwd_ms": out["fwd_bwd_ms"], "torch_fwd_bwd_ms": torch_ms}
    print(json.dumps({"bench": "POET-X matrix forward + backward", "rows": 768, "cols": 256, "tokens": 2048, "threads": 2,
                      "torch": torch.__version__, "result": result}))
    sys.exit(0)

rows, cols, b, N = 48, 32, 16, 5
rng = np.random.default_rng(3)
failed = False
for polynomial, terms, cayley in (("series", 4, fallback_cayley), ("neumann", 3, triton_kernel_cayley)):
    ops._cayley_transform_pytorch = cayley
    W0 = rng.standard_normal((rows, cols)).astype(np.float32)
    W0 /= np.linalg.norm(W0, axis=1, keepdims=True)
    nq = (rows // b + cols // b) * b * (b - 1) // 2
    q = (rng.standard_normal(nq) * 0.05).astype(np.float32)
    perm_in, perm_out = rng.permutation(cols).tolist(), rng.permutation(rows).tolist()
    x = rng.standard_normal((N, cols)).astype(np.float32)
    dy = rng.standard_normal((N, rows)).astype(np.float32)
    lr, scale = 1e-2, 0.5
    res = ours({"rows": rows, "cols": cols, "block": b, "polynomial": polynomial, "terms": terms, "weight": W0.ravel().tolist(),
                "q": q.tolist(), "perm_in": perm_in, "perm_out": perm_out, "N": N, "x": x.ravel().tolist(),
                "dy": dy.ravel().tolist(), "lr": lr, "poet_scale": scale, "beta1": 0.9, "beta2": 0.999, "eps": 1e-6})
    layer = reference_layer(rows, cols, b, W0, q, perm_in, perm_out)
    xt = torch.tensor(x, requires_grad=True)
    y = layer(xt)
    y.backward(torch.tensor(dy))
    with torch.no_grad():
        weff = layer.get_effective_weight()
    opt = POETAdamW([{"params": [layer.oft_R], "use_poet": True, "lr": lr, "weight_decay": 0.0}], lr=lr, poet_scale=scale)
    grad_q = layer.oft_R.grad.detach().clone()
    opt.step()
    checks = {"y": (res["y"], y), "dx": (res["dx"], xt.grad), "grad_q": (res["grad_q"], grad_q),
              "effective_weight": (res["effective_weight"], weff), "q_after_step": (res["q_after_step"], layer.oft_R)}
    for name, (a, ref) in checks.items():
        err = float(np.max(np.abs(np.array(a, dtype=np.float64) - ref.detach().double().numpy().ravel())))
        ok = err < 1e-5
        failed |= not ok
        print(f"poet-x {polynomial} k {terms} {name}: max |ours - reference| = {err:.2e} {'ok' if ok else 'FAIL'}")
sys.exit(1 if failed else 0)
