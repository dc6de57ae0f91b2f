#!/usr/bin/env python3
"""Peer check against Hugging Face transformers (optional; needs torch + transformers + gguf).

A tiny random LlamaForCausalLM is saved as safetensors; icmlkit reads that directory unchanged
and (after lm-convert) as GGUF.  Checks: our per-step log-probabilities against the model's own
log_softmax (max abs error), identical greedy continuations, and that the gguf reference reader
(PyPI `gguf`, from llama.cpp) accepts our GGUF export.  Prints JSON; exit 1 on a mismatch,
77 when the Python packages are absent.

usage: hf_llama.py BIN_DIR WORK_DIR
"""
import json
import subprocess
import sys
from pathlib import Path

try:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:  # optional peer
    print(f"skipped: {e}")
    sys.exit(77)

bin_dir, work = Path(sys.argv[1]), Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
torch.set_num_threads(2)
results = {}
for name, kv_heads, tied in [("gqa_untied", 2, False), ("mha_tied", 4, True)]:
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=128,
                      rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=tied,
                      initializer_range=0.25, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg).float().eval()
    d = work / name
    model.save_pretrained(d, safe_serialization=True)
    prompt = [1, 5, 9, 23, 17, 250]
    n_new = 24
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n_new, min_new_tokens=n_new,
                             do_sample=False, pad_token_id=0)
        hf_ids = out[0, len(prompt):].tolist()
        logp = torch.log_softmax(model(out).logits[0].double(), dim=-1)
    row = {}
    for label, path in [("safetensors", d), ("gguf", work / f"{name}.gguf")]:
        if label == "gguf":
            subprocess.run([bin_dir / "lm-convert", d, "-o", path, "-q"], check=True)
        jl = work / f"{name}_{label}.jsonl"
        subprocess.run([bin_dir / "lm-generate", path, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n_new),
                        "--ignore-eos", "--top-logprobs", "20", "-o", jl, "-q", "--no-stream"],
                       check=True, stdout=subprocess.DEVNULL)
        recs = [json.loads(l) for l in jl.read_text().splitlines()]
        steps = [r for r in recs if "step" in r]
        ours = [r["id"] for r in steps]
        err = 0.0
        for r in steps:
            pos = len(prompt) + r["step"] - 1
            for i, lp in zip(r["top_ids"], r["top_logprobs"]):
                err = max(err, abs(lp - logp[pos, i].item()))
        row[label] = {"greedy_equal": ours == hf_ids, "max_abs_logprob_error": err}
    import gguf  # llama.cpp's reference reader
    reader = gguf.GGUFReader(str(work / f"{name}.gguf"))
    names = {t.name for t in reader.tensors}
    row["gguf_reference_reader"] = {"tensors": len(names), "has_blk1_ffn_down": "blk.1.ffn_down.weight" in names,
                                    "architecture": bytes(reader.fields["general.architecture"].parts[-1]).decode()}
    results[name] = row
print(json.dumps(results, indent=1))
ok = all(r[k]["greedy_equal"] and r[k]["max_abs_logprob_error"] < 1e-4 for r in results.values()
         for k in ("safetensors", "gguf")) and all(r["gguf_reference_reader"]["has_blk1_ffn_down"] for r in results.values())
sys.exit(0 if ok else 1)
