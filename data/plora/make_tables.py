#!/usr/bin/env python3
"""Writes the two throughput tables of plora-plan --throughput beside this script, both derived, neither
measured (see README.md here):
  gpu_table_a100.json      modelled step times of packed LoRA jobs on a Llama-3-8B base on one A100-SXM4-80GB
  cpu_table_synthetic.json a compute-bound CPU's step times for the kjv7m demo model, from its training rate
Usage: python3 make_tables.py"""
import json
import math

# NVIDIA A100 datasheet (SXM4 80GB): dense BF16 tensor-core peak, HBM2e bandwidth, SM count.
PEAK = 312e12      # FLOP/s
BW = 2.039e12      # bytes/s
SMS = 108
# Llama-3-8B (its config.json): layers, width, heads, KV heads, head_dim, MLP width, vocabulary.
L, D, H, KV, HD, FF, V = 32, 4096, 32, 8, 128, 14336, 128256
DQ, DKV = H * HD, KV * HD
SEQ = 256          # tokens per row (the space's seq_len)
TARGETS = [("q", D, DQ), ("v", D, DKV)]   # LoRA targets (in, out): PEFT's default q_proj, v_proj
# Assumptions (not measurements):
TILE = 128         # GEMM output tile 128 x 128, one tile per SM per wave (NVIDIA's tile/wave quantization model)
ATTN_EFF = 0.5     # flash attention at half the tensor peak
LORA_EFF = 0.3     # the segmented (SGMV) LoRA products at 30% of the peak (rank <= 32: skinny products)
LAUNCH = 10e-6     # host time per kernel launch of an eager framework (seconds)


def gemm(m, n, k):
    """Seconds of one bf16 GEMM [m, k] x [k, n]: tile/wave-quantized compute vs memory, the larger."""
    waves = math.ceil(math.ceil(m / TILE) * math.ceil(n / TILE) / SMS)
    compute = waves * 2 * TILE * TILE * k / (PEAK / SMS)
    memory = 2 * (m * k + k * n + m * n) / BW
    return max(compute, memory)


def step_seconds(jobs, rank, batch):
    rows = jobs * batch
    m = rows * SEQ                      # tokens in the pack
    w = jobs * batch * rank             # rank-weighted rows
    gpu = 0.0
    # frozen base: forward Y = X W^T and backward dX = dY W for every projection (no weight gradient)
    for (n, k) in [(DQ, D), (DKV, D), (DKV, D), (D, DQ), (FF, D), (FF, D), (D, FF)]:
        gpu += L * (gemm(m, n, k) + gemm(m, k, n))
    gpu += gemm(m, V, D) + gemm(m, D, V)                          # LM head
    # causal flash attention, forward 2 s^2 d per row and layer, backward 2.5x the forward
    gpu += L * 3.5 * 2 * SEQ * SEQ * D * rows / (ATTN_EFF * PEAK)
    # element-wise work (norms, RoPE, SwiGLU, residuals), bf16 read + write, backward twice the forward
    ew = 3 * (20 * D + 4 * (DQ + DKV) + 6 * FF)                  # bytes per token and layer
    gpu += (L * ew + 3 * 2 * 2 * V) * m / BW                      # + softmax cross-entropy over the vocabulary
    # LoRA: per target and layer, 6 r (in + out) FLOPs per token (forward 2, backward 4) vs reading
    # x twice, y twice and adding into dx (2 bytes each)
    for (_, i, o) in TARGETS:
        flops = 6 * SEQ * w * (i + o)
        mem = 2 * m * (3 * i + 4 * o)
        gpu += L * max(flops / (LORA_EFF * PEAK), mem / BW)
    # AdamW on each job's adapter (float32 value, gradient, m, v: 16 bytes read, 12 written per weight)
    params = rank * L * sum(i + o for (_, i, o) in TARGETS)
    gpu += jobs * 28 * params / BW
    # host: kernels launched per step (per layer 45 base + 6 per LoRA target for the whole pack; 10 for
    # embedding, head and loss; 4 fused optimizer launches per job); the GPU waits when the host is slower
    kernels = L * (45 + 6 * len(TARGETS)) + 10 + 4 * jobs
    host = kernels * LAUNCH
    return max(gpu, host)


def cpu_step_seconds(jobs, rank, batch):
    """kjv7m on this project's 2 CPU cores: data/models/README.md trains it (all weights) at 681 tokens/s,
    6N FLOPs per token; with the base frozen a token costs 4N (no weight gradients): 256 / 681 x 4/6 =
    0.2506 s per 256-token row.  A rank-r adapter on q,v adds 6 r (in + out) L = 32256 r FLOPs per token
    against 4N = 4 x 6.45e6: 0.2506 x 32256 / 2.58e7 = 3.13e-4 s per row and unit of rank.  10 ms per
    step of loop and optimizer (assumed).  No packing gain but that 10 ms: a CPU has no idle units."""
    rows = jobs * batch
    return 0.010 + 0.2506 * rows + 3.13e-4 * rows * rank


def write(path, table):
    """One measurement per line."""
    head = {k: v for k, v in table.items() if k != "measurements"}
    lines = ",\n".join("  " + json.dumps(m) for m in table["measurements"])
    with open(path, "w") as f:
        f.write(json.dumps(head, indent=1)[:-2] + ',\n "measurements": [\n' + lines + "\n ]\n}\n")


import os
here = os.path.dirname(os.path.abspath(__file__))
points = []
for jobs in [1, 2, 3, 4, 6, 8, 12, 16]:
    for rank in [4, 8, 16, 32]:
        points.append({"jobs": jobs, "rank": rank, "batch": 1, "step_seconds": float(f"{step_seconds(jobs, rank, 1):.6g}")})
source = ("MODELLED, not measured: data/plora/make_tables.py. Per packed step of R rows x 256 tokens on one A100-SXM4-80GB "
          "(datasheet: 312 TFLOP/s dense BF16, 2.039 TB/s HBM, 108 SMs) for Llama-3-8B (32 layers, d 4096, 32/8 heads, d_ff 14336, "
          "vocab 128256) with LoRA on q,v: every frozen-base GEMM forward and input-gradient as max(tile/wave-quantized compute "
          "with 128x128 tiles one per SM per wave, bf16 bytes / bandwidth); flash attention at 50% of peak; element-wise bytes "
          "/ bandwidth; segmented LoRA products as max(FLOPs at 30% of peak, bytes / bandwidth); AdamW bytes of each adapter; "
          "step = max(GPU time, kernel launches x 10 us of host time). The 50%, 30%, 10 us and the tile model are assumptions.")
write(os.path.join(here, "gpu_table_a100.json"),
      {"device": "NVIDIA A100-SXM4-80GB (modelled)", "model": "Llama-3-8B, LoRA on q,v, bf16 base", "source": source,
       "seq_len": SEQ, "measurements": points})
cpu = [{"jobs": k, "rank": r, "batch": 1, "step_seconds": float(f"{cpu_step_seconds(k, r, 1):.6g}")}
       for k in [1, 2, 4, 8, 16] for r in [4, 8, 16, 32]]
write(os.path.join(here, "cpu_table_synthetic.json"),
      {"device": "2 CPU cores (synthetic)", "model": "kjv7m (data/models/kjv7m.h5), LoRA on q,v",
       "source": ("SYNTHETIC, not measured: data/plora/make_tables.py. t = 0.010 + 0.2506 R + 3.13e-4 R r seconds per step "
                  "of R rows x 256 tokens: kjv7m's full training rate on 2 cores (681 tokens/s, data/models/README.md, 6N "
                  "FLOPs per token) scaled to a frozen base (4N), plus the q,v adapter's FLOPs per unit of rank, plus an "
                  "assumed 10 ms per step. Replace with a table timed on the machine."),
       "seq_len": SEQ, "measurements": cpu})
