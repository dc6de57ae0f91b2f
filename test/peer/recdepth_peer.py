#!/usr/bin/env python3
"""Peer check of our recurrent-depth decoder (issue 36, libcore/lm/recdepth.hpp) against the Huginn / Raven
reference (seal-rg/recurrent-pretraining, recpre/raven_modeling_minimal.py + raven_config_minimal.py).

A tiny random RavenForCausalLM (n_embd 64, 4 heads, MHA, intermediate 96, 2 prelude + 4 core + 2 coda
sandwich blocks: the reference's latest-m4 cache hard-codes 2 prelude and 4 core blocks; vocab 300) is
built with the reference's own code, its weights redrawn (INIT: non-unit norms, non-zero qk_bias, logits
spread over ~15 nats, the recurrence changing them by nats) and written in our native HDF5 format (float32,
recdepth_embed_scale = the reference's emb_scale sqrt(n_embd), recdepth_state_std 0; the reference runs
with init_scale 0: both start from the zero state).  Two variants: qk_bias + tied head, no qk_bias +
untied head.  Checks, at recurrences 4 and 7 (one checkpoint per recurrence: lm-generate runs a model at
its recdepth_mean_recurrence):
  forward   our log-probabilities at every prompt position (lm-generate -n 1 on each prefix) against the
            reference forward(input_ids, num_steps=r) log_softmax, the reference run in float64 (its
            RMSNorm and RoPE still round through float32): max abs error <= 1e-5; and run in float32
            (both sides' rounding, ~5-8e-6 measured): <= 2e-5;
  decode    greedy decoding: ours (the core KV keeps the latest iteration) against a model(...) loop with
            HuginnDynamicCache("latest-m4-compress-s4") and against generate_minimal with that lookup:
            identical tokens, step log-probabilities within 1e-4.  The reference's "full" lookup (every
            iteration's KV kept), forced on our tokens, is reported for scale: it differs by nats.
Larger random weights than INIT make the 34-block float32 computation ill-conditioned (the reference's own
float32 and float64 runs then differ by ~1e-3 at r = 1 and by nats at r = 7), so INIT is kept moderate.
The two recpre files are copied from the reference repository (a work tree or a bare git directory) into
WORK at run time.  The reference needs transformers 4.x (under 5.x its tie_weights / ModelOutput glue
fails): when the installed one is 5.x, TF4_DIR (pip install --target of transformers<5,
huggingface_hub<1, tokenizers) is put first on sys.path.  Prints JSON; exit 1 on a mismatch, 77 when
torch, h5py, a usable transformers or the reference is unavailable.

usage: recdepth_peer.py BIN_DIR WORK_DIR REFERENCE_REPO [TF4_DIR]
"""
import copy
import json
import math
import shutil
import subprocess
import sys
import time
from pathlib import Path

t_start = time.time()
bin_dir, work = Path(sys.argv[1]), Path(sys.argv[2])
ref_repo = Path(sys.argv[3]) if len(sys.argv) > 3 else None
tf4_dir = Path(sys.argv[4]) if len(sys.argv) > 4 else None
work.mkdir(parents=True, exist_ok=True)


def skip(why):
    print(f"recdepth_peer: skipped ({why})")
    sys.exit(77)


# --- the reference's two files, copied into WORK/recpre ------------------------------------------------
FILES = ("raven_modeling_minimal.py", "raven_config_minimal.py")
if ref_repo is None or not ref_repo.exists():
    skip(f"reference repository {ref_repo} not found")
pkg = work / "recpre"
pkg.mkdir(exist_ok=True)
for f in FILES:
    if (ref_repo / "recpre" / f).is_file():  # a work tree
        shutil.copyfile(ref_repo / "recpre" / f, pkg / f)
    else:  # a bare git directory
        r = subprocess.run(["git", "-C", str(ref_repo), "show", f"HEAD:recpre/{f}"], capture_output=True)
        if r.returncode != 0:
            skip(f"recpre/{f} not in {ref_repo}")
        (pkg / f).write_bytes(r.stdout)
r = subprocess.run(["git", "-C", str(ref_repo), "rev-parse", "HEAD"], capture_output=True, text=True)
ref_commit = r.stdout.strip() if r.returncode == 0 else None
(pkg / "__init__.py").write_text("")

try:
    from importlib import metadata
    installed = metadata.version("transformers")
    if int(installed.split(".")[0]) >= 5:  # the reference's glue needs 4.x: put TF4_DIR first
        if tf4_dir is None or not (tf4_dir / "transformers").is_dir():
            skip(f"transformers {installed} cannot run the reference and no transformers 4.x directory was given")
        sys.path.insert(0, str(tf4_dir))
    import numpy as np
    import h5py
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    sys.path.insert(0, str(work))
    from transformers import GenerationConfig
    from recpre.raven_config_minimal import RavenConfig
    from recpre.raven_modeling_minimal import RavenForCausalLM, HuginnDynamicCache
except Exception as e:  # noqa: BLE001  (optional peer)
    skip(e)

torch.set_num_threads(1)  # tiny matrices: one thread is fastest and unaffected by load
D, H, FF, P, C, CODA, V = 64, 4, 96, 2, 4, 2, 300
RECURRENCES = (4, 7)
PROMPT = [1, 5, 9, 23, 17, 250, 3, 77, 140, 299, 0, 42]
N_NEW = 12
LATEST = "latest-m4-compress-s4"
TOL_FWD, TOL_FWD32, TOL_DEC = 1e-5, 2e-5, 1e-4
INIT = {"linear": 0.5, "embedding": 0.3, "qk_bias": 0.2, "norm": 0.2}


def build_reference(qk_bias, tied, seed):
    torch.manual_seed(seed)
    cfg = RavenConfig(n_embd=D, n_heads=H, n_layers=P + C + CODA, block_size=128, vocab_size=V, padding_multiple=1,
                      tie_embeddings=tied, intermediate_size=FF, n_layers_in_prelude=P, n_layers_in_recurrent_block=C,
                      n_layers_in_coda=CODA, mean_recurrence=RECURRENCES[0], qk_bias=qk_bias, rope_base=50000.0,
                      norm_eps=1e-6)
    model = RavenForCausalLM(cfg).float().eval()
    with torch.no_grad():  # INIT (see the module comment)
        for name, p in model.named_parameters():
            if ".norm_" in name or name.endswith("ln_f.weight"):
                p.copy_(torch.empty_like(p).uniform_(1 - INIT["norm"], 1 + INIT["norm"]))
            elif name.endswith("qk_bias"):
                p.copy_(torch.randn_like(p) * INIT["qk_bias"])
            elif name.endswith(("wte.weight", "lm_head.weight")):
                p.copy_(torch.randn_like(p) * INIT["embedding"])
            else:  # Wqkv, attn.proj, mlp.fc, mlp.proj, adapter: INIT["linear"] / sqrt(fan_in)
                p.copy_(torch.randn_like(p) * (INIT["linear"] / math.sqrt(p.shape[1])))
    if tied:
        assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "head not tied"
    return model


def write_native(model, path, recurrence):
    """Our native HDF5 (lm/README.md, libcore/lm/model.cpp tensor_slots / save_checkpoint), float32."""
    cfg, sd = model.config, {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    types = ["recdepth-prelude"] * P + ["recdepth-core"] * C + ["recdepth-coda"] * CODA
    with h5py.File(path, "w") as f:
        a = f.attrs
        a["format"] = "icmlkit-lm-v2"
        a["architecture"] = "llama"
        a["block_types"] = ",".join(types)
        for k, v in dict(arith_version=1, vocab_size=V, d_model=D, n_layers=len(types), n_heads=H, n_kv_heads=H,
                         d_ff=FF, n_ctx=cfg.block_size, tied=int(cfg.tie_embeddings), bos_id=-1, eos_id=-1, add_bos=0,
                         recdepth_mean_recurrence=recurrence, recdepth_backprop_depth=0,
                         recdepth_qk_bias=int(cfg.qk_bias)).items():
            a[k] = np.int64(v)
        a["rope_theta"] = np.float64(cfg.rope_base)
        a["rope_style"] = "interleaved"  # apply_rotary_emb_complex_like: pairs (2i, 2i + 1) of each head
        a["rms_eps"] = np.float64(cfg.norm_eps)
        a["dtype"] = "f32"
        a["recdepth_embed_scale"] = np.float64(model.emb_scale)
        a["recdepth_state_std"] = np.float64(0.0)

        def put(name, arr):
            f.create_dataset(name, data=np.ascontiguousarray(arr, dtype=np.float32))

        put("token_embd.weight", sd["transformer.wte.weight"])
        blocks = ([f"transformer.prelude.{i}." for i in range(P)] + [f"transformer.core_block.{i}." for i in range(C)]
                  + [f"transformer.coda.{i}." for i in range(CODA)])
        for n, src in enumerate(blocks):
            g = f"blk.{n}."
            wq, wk, wv = np.split(sd[src + "attn.Wqkv.weight"], 3, axis=0)  # MHA: [d; d; d] rows
            gate, up = np.split(sd[src + "mlp.fc.weight"], 2, axis=0)      # chunk(2): silu(first) * second
            put(g + "attn_norm.weight", sd[src + "norm_1.weight"])
            put(g + "attn_q.weight", wq)
            put(g + "attn_k.weight", wk)
            put(g + "attn_v.weight", wv)
            put(g + "attn_output.weight", sd[src + "attn.proj.weight"])
            put(g + "post_attn_norm.weight", sd[src + "norm_2.weight"])
            put(g + "ffn_norm.weight", sd[src + "norm_3.weight"])
            put(g + "ffn_gate.weight", gate)
            put(g + "ffn_up.weight", up)
            put(g + "ffn_down.weight", sd[src + "mlp.proj.weight"])
            put(g + "post_ffn_norm.weight", sd[src + "norm_4.weight"])
            if cfg.qk_bias:
                qb, kb = sd[src + "attn.qk_bias"]  # [2, 1, H, hd]
                put(g + "attn_q.bias", qb.reshape(-1))
                put(g + "attn_k.bias", kb.reshape(-1))
        put("recdepth_adapter.weight", sd["transformer.adapter.weight"])  # [d, 2d] on [state; prelude output]
        put("output_norm.weight", sd["transformer.ln_f.weight"])
        if not cfg.tie_embeddings:
            put("output.weight", sd["lm_head.weight"])


def ours(path, prompt, n_new, jsonl):
    subprocess.run([bin_dir / "lm-generate", path, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n_new),
                    "--ignore-eos", "--top-logprobs", "20", "-o", jsonl, "-q", "--no-stream", "-t", "1"],
                   check=True, stdout=subprocess.DEVNULL)
    return [r for r in map(json.loads, Path(jsonl).read_text().splitlines()) if "step" in r]


def gap(rec, logp_row):
    return max(abs(lp - logp_row[i].item()) for i, lp in zip(rec["top_ids"], rec["top_logprobs"]))


@torch.no_grad()
def ref_forward(model, r):
    """log_softmax of the reference forward on PROMPT at recurrence r from the zero state [positions, vocab]."""
    return torch.log_softmax(model(torch.tensor([PROMPT]), num_steps=r, init_scale=0.0).logits[0].double(), -1)


@torch.no_grad()
def ref_decode(model, r, strategy, forced=None):
    """Greedy (or `forced` tokens): prefill, then one token per forward through the reference's cache with
    `strategy`; ids and per-step log_softmax."""
    cache = HuginnDynamicCache(lookup_strategy=strategy)
    ids, logps = [], []
    x = torch.tensor([PROMPT])
    pos = torch.arange(len(PROMPT))[None]
    for step in range(N_NEW):
        out = model(x, position_ids=pos, past_key_values=cache, use_cache=True, num_steps=r, init_scale=0.0)
        lp = torch.log_softmax(out.logits[0, -1].double(), dim=-1)
        logps.append(lp)
        ids.append(int(lp.argmax()) if forced is None else forced[step])
        pos = torch.tensor([[len(PROMPT) + len(ids) - 1]])
        x = torch.tensor([[ids[-1]]])
    return ids, logps


results, ok = {"reference_commit": ref_commit, "transformers": transformers.__version__, "torch": torch.__version__,
               "tolerances": {"forward_float64_reference": TOL_FWD, "forward_float32_reference": TOL_FWD32,
                              "decode": TOL_DEC}}, True
for seed, (variant, qk_bias, tied) in enumerate([("qkbias_tied", True, True), ("noqkbias_untied", False, False)]):
    model = build_reference(qk_bias, tied, 36 + seed)
    model64 = copy.deepcopy(model).double()  # the same code in float64 (its RMSNorm and RoPE still round via float32)
    row = {}
    for r in RECURRENCES:
        path = work / f"{variant}_r{r}.h5"
        write_native(model, path, r)
        ref32, ref64 = ref_forward(model, r), ref_forward(model64, r)
        # (1) forward at recurrence r, every position (prefix p's last row = position p - 1 of the full forward)
        fwd32 = fwd64 = 0.0
        for p in range(1, len(PROMPT) + 1):
            rec = ours(path, PROMPT[:p], 1, work / f"{variant}_r{r}_p{p}.jsonl")[0]
            fwd32, fwd64 = max(fwd32, gap(rec, ref32[p - 1])), max(fwd64, gap(rec, ref64[p - 1]))
        # (2) greedy decoding with the latest-iteration KV
        steps = ours(path, PROMPT, N_NEW, work / f"{variant}_r{r}_gen.jsonl")
        mine = [s["id"] for s in steps]
        ref_ids, ref_lp = ref_decode(model, r, LATEST)
        dec_err = max(gap(s, ref_lp[s["step"]]) for s in steps)
        gc = GenerationConfig(do_sample=False, eos_token_id=None, pad_token_id=None, bos_token_id=None)
        gm = model.generate_minimal(torch.tensor([PROMPT]), generation_config=gc, cache_lookup_strategy=LATEST,
                                    init_scale=0.0, num_steps=r, max_new_tokens=N_NEW)
        gm_ids = gm[0, len(PROMPT):].tolist()
        # for scale: the reference's "full" lookup (every iteration's KV), greedy and forced on our tokens
        full_ids, _ = ref_decode(model, r, "full")
        _, full_lp = ref_decode(model, r, "full", forced=mine)
        other = RECURRENCES[1] if r == RECURRENCES[0] else RECURRENCES[0]
        row[f"r{r}"] = {
            "forward_max_abs_logprob_error": {"vs_reference_float64": fwd64, "vs_reference_float32": fwd32},
            "decode_tokens_equal": {"model_loop_latest_m4_compress_s4": mine == ref_ids, "generate_minimal": mine == gm_ids},
            "decode_max_abs_logprob_error": dec_err,
            "tokens": mine,
            "scale": {"mean_logprob_spread": float((ref32.max(-1).values - ref32.min(-1).values).mean()),
                      f"max_logprob_change_vs_r{other}": float((ref32 - ref_forward(model, other)).abs().max()),
                      "reference_full_kv_greedy_equal": full_ids == mine,
                      "ours_vs_reference_full_kv_forced_max_abs_logprob": max(gap(s, full_lp[s["step"]]) for s in steps)},
        }
        ok &= (fwd64 <= TOL_FWD and fwd32 <= TOL_FWD32 and mine == ref_ids and mine == gm_ids and dec_err <= TOL_DEC)
    results[variant] = row
results["seconds"] = round(time.time() - t_start, 1)
print(json.dumps(results, indent=1))
print("recdepth_peer: ok" if ok else "recdepth_peer: FAILED")
sys.exit(0 if ok else 1)
