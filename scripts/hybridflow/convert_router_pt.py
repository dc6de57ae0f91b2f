#!/usr/bin/env python3
"""Converts HybridFlow's trained router (a torch state_dict saved with torch.save, e.g. the reference's
planner/router_trained_vllm.pt) to the safetensors file that hybridflow-train-router --router and
HybridFlow's runner read: the same keys (net.0.weight [256, 1034], net.0.bias, net.3.weight [256, 256],
net.3.bias, net.6.weight [1, 256], net.6.bias), float32, nothing renamed or transposed.

Needs torch and safetensors (pip install torch safetensors).

Usage: convert_router_pt.py ROUTER.pt OUT.safetensors
"""
import re
import sys


def load_state_dict(pt_path):
    """The router's state_dict from a torch.save file, every tensor float32 and contiguous.  Raises
    ValueError when the keys are not net.{3i}.weight / net.{3i}.bias."""
    import torch

    state = torch.load(pt_path, map_location="cpu", weights_only=True)
    if not isinstance(state, dict):
        raise ValueError(f"{pt_path}: not a state_dict (got {type(state).__name__})")
    out = {}
    for key, value in state.items():
        if not re.fullmatch(r"net\.\d+\.(weight|bias)", key) or int(key.split(".")[1]) % 3 != 0:
            raise ValueError(f"{pt_path}: unexpected key {key!r} (a router has net.{{0,3,6,...}}.weight and .bias)")
        out[key] = value.detach().to(torch.float32).contiguous()
    if "net.0.weight" not in out:
        raise ValueError(f"{pt_path}: no net.0.weight")
    return out


def convert(pt_path, out_path):
    """Writes the safetensors file; returns the state_dict written."""
    from safetensors.torch import save_file

    state = load_state_dict(pt_path)
    first = state["net.0.weight"]
    save_file(state, out_path, metadata={"format": "pt", "source": "torch state_dict", "meta_dim": "8",
                                         "embed_dim": str(first.shape[1] - 10)})
    return state


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        state = convert(argv[1], argv[2])
    except (OSError, ValueError, RuntimeError) as e:
        print(f"convert_router_pt: error: {e}", file=sys.stderr)
        return 1
    shapes = {k: list(v.shape) for k, v in state.items()}
    print(f"wrote {argv[2]}: {shapes}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
