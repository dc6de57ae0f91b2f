#!/usr/bin/env python3
"""Peer check of the mixture-of-experts formats against Hugging Face transformers (optional).

Both directions, on tiny random models with peaked weights:
- transformers -> icmlkit: a MixtralForCausalLM saved with save_pretrained is read by lm-generate
  unchanged (safetensors) and after lm-convert (GGUF); our per-step log-probabilities against the
  model's own log_softmax, and the greedy continuations.
- icmlkit -> transformers: an `lm-init --moe standard` model written by lm-convert as a
  Hugging Face directory loads in MixtralForCausalLM.from_pretrained, whose log-probabilities of
  our greedy continuation must match ours.
Prints JSON; exit 1 on a mismatch, 77 when torch / transformers are absent.

usage: hf_mixtral.py BIN_DIR WORK_DIR
"""
import json
import subprocess
import sys
from pathlib import Path

try:
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM
except ImportError as e:  # optional peer
    print(f"skipped: {e}")
    sys.exit(77)
from peer_common import lm_generate_logprobs, max_logprob_error  # noqa: E402 (beside this script)

bin_dir, work = Path(sys.argv[1]), Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
torch.manual_seed(0)
torch.set_num_threads(2)
prompt = [1, 5, 9, 23, 17, 250]
n_new = 24


def ours(path):
    """lm-generate's greedy ids and per-step top-20 log-probabilities of `path`."""
    return lm_generate_logprobs(bin_dir, path, prompt, n_new, work / (Path(path).name + ".jsonl"))


def max_error(steps, logp):
    return max_logprob_error(steps, logp, len(prompt))


results = {}
# transformers -> icmlkit
cfg = MixtralConfig(vocab_size=300, hidden_size=64, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-5,
                    num_local_experts=4, num_experts_per_tok=2, sliding_window=None, tie_word_embeddings=False,
                    initializer_range=0.25, bos_token_id=1, eos_token_id=2)
model = MixtralForCausalLM(cfg).float().eval()
d = work / "mixtral_hf"
model.save_pretrained(d, safe_serialization=True)
with torch.no_grad():
    out = model.generate(torch.tensor([prompt]), max_new_tokens=n_new, min_new_tokens=n_new, do_sample=False,
                         pad_token_id=0)
    hf_ids = out[0, len(prompt):].tolist()
    logp = torch.log_softmax(model(out).logits[0].double(), dim=-1)
for label, path in [("safetensors", d), ("gguf", work / "mixtral_hf.gguf")]:
    if label == "gguf":
        subprocess.run([bin_dir / "lm-convert", d, "-o", path, "-q"], check=True)
    ids, steps = ours(path)
    results["hf_to_icmlkit_" + label] = {"greedy_equal": ids == hf_ids, "max_abs_logprob_error": max_error(steps, logp)}

# icmlkit -> transformers
h5 = work / "ours_moe.h5"
subprocess.run([bin_dir / "lm-init", "--vocab-size", "300", "--d-model", "64", "--n-layers", "2", "--n-heads", "4",
                "--n-kv-heads", "2", "--d-ff", "48", "--n-ctx", "128", "--init-std", "0.25", "--moe", "standard",
                "--experts", "4", "--top-k", "2", "-o", h5, "-q"], check=True)
exported = work / "ours_moe_hf"
subprocess.run([bin_dir / "lm-convert", h5, "-o", exported, "-q"], check=True)
ids, steps = ours(h5)
back = MixtralForCausalLM.from_pretrained(exported).float().eval()
with torch.no_grad():
    logp = torch.log_softmax(back(torch.tensor([prompt + ids])).logits[0].double(), dim=-1)
greedy = [int(logp[len(prompt) + i - 1].argmax()) for i in range(n_new)]
results["icmlkit_to_hf"] = {"greedy_equal": greedy == ids, "max_abs_logprob_error": max_error(steps, logp),
                            "architecture": json.loads((exported / "config.json").read_text())["architectures"][0]}
print(json.dumps(results, indent=1))
ok = all(r["greedy_equal"] and r["max_abs_logprob_error"] < 1e-4 for r in results.values())
sys.exit(0 if ok else 1)
