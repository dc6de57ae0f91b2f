#!/usr/bin/env python3
"""Peer check of LoRA adapter exchange against Hugging Face PEFT (optional; torch + transformers + peft).

(a) PEFT -> icmlkit: a tiny random LlamaForCausalLM is saved with save_pretrained; PEFT adapters
    with random nonzero lora_B (init_lora_weights=False, then B ~ N(0, 0.1^2)) are saved with
    save_pretrained: r 4 on all seven projections, and r 2 rsLoRA on q/v of layer 1 only
    (layers_to_transform, so layer 0 has no tensors).  Our lm-generate --lora on the Hugging Face
    directory (rope_style half) and on its GGUF conversion (interleaved: the q/k lora_B rows are
    permuted on reading), and lm-convert --merge-lora GGUF -> native then lm-generate, give per-step
    top-20 log-probabilities that must match log_softmax of the logits of the saved adapter loaded
    back by PeftModel.from_pretrained on the same tokens (max abs error <= 1e-5), and the same greedy
    tokens.  The PEFT model runs in float64 so that the error measured is ours (float32 against
    float32 differs by about 2e-5 here: both sides' rounding; the base alone is 6e-6 from float64).
(b) icmlkit -> PEFT: an adapter our writer made for MODEL (given as ADAPTER_DIR MODEL, or made
    here: tokenizer-train + lm-init --init-std 0.25 on the Genesis fixture, lm-convert to GGUF so
    the base is interleaved, lm-train --lora-rank 4 on all seven projections for 30 steps).  MODEL
    is written as a Hugging Face directory by lm-convert, PEFT loads the adapter on it with
    PeftModel.from_pretrained, and its log-probabilities must match ours (lm-generate MODEL --lora
    ADAPTER_DIR) the same way; the adapter must matter (> 1e-3 without it).  This shows that PEFT reads our
    adapter_config.json (it ignores the "icmlkit" key with a warning) and our keys, and that both
    read the file alike; that the file holds the in-memory adapter (the q/k lora_B row order of an
    interleaved model) is test_lm_lora.cpp's check, which compares the merge in memory with the file.
Prints JSON; exit 1 on a mismatch, 77 when torch / transformers / peft are absent.

usage: peft_lora.py BIN_DIR WORK_DIR [ADAPTER_DIR MODEL]
"""
import json
import subprocess
import sys
from pathlib import Path

try:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
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
TOL = 1e-5


def ours(model_path, adapter, tag):
    """lm-generate's greedy ids and per-step top-20 log-probabilities (adapter merged by --lora)."""
    extra = ["--no-text"] + (["--lora", adapter] if adapter else [])
    return lm_generate_logprobs(bin_dir, model_path, prompt, n_new, work / f"{tag}.jsonl", extra)


def peft_f64(base_path, adapter_dir):
    """The saved adapter on the saved base, loaded back by PEFT, computing in float64."""
    base = LlamaForCausalLM.from_pretrained(base_path, torch_dtype=torch.float64).eval()
    return PeftModel.from_pretrained(base, adapter_dir).double().eval()


def compare(peft_model, ids, steps):
    """Max abs error of our top log-probabilities against the PEFT model's on prompt + our tokens,
    and whether each of our greedy tokens is the PEFT model's arg-max."""
    with torch.no_grad():
        logp = torch.log_softmax(peft_model(torch.tensor([prompt + ids])).logits[0].double(), dim=-1)
    greedy = all(int(logp[len(prompt) + r["step"] - 1].argmax()) == r["id"] for r in steps)
    return {"max_abs_logprob_error": max_logprob_error(steps, logp, len(prompt)), "greedy_equal": greedy}


def randomise_b(peft_model):
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.1 * torch.randn_like(p))


results = {}
# (a) PEFT -> icmlkit
cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, rope_theta=10000.0, rms_norm_eps=1e-5,
                  tie_word_embeddings=False, initializer_range=0.25, bos_token_id=1, eos_token_id=2)
base_dir = work / "base"
LlamaForCausalLM(cfg).float().eval().save_pretrained(base_dir, safe_serialization=True)
gguf = work / "base.gguf"
subprocess.run([bin_dir / "lm-convert", base_dir, "-o", gguf, "-q"], check=True)
all7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
adapters = {
    "r4_all_targets": LoraConfig(r=4, lora_alpha=8, target_modules=all7, init_lora_weights=False, task_type="CAUSAL_LM"),
    "r2_rslora_qv_layer1": LoraConfig(r=2, lora_alpha=16, use_rslora=True, target_modules=["q_proj", "v_proj"],
                                      layers_to_transform=[1], init_lora_weights=False, task_type="CAUSAL_LM"),
}
for name, lcfg in adapters.items():
    base = LlamaForCausalLM.from_pretrained(base_dir, torch_dtype=torch.float32).eval()
    pm = get_peft_model(base, lcfg)
    randomise_b(pm)
    pm.eval()
    adir = work / name
    pm.save_pretrained(adir, safe_serialization=True)
    pm = peft_f64(base_dir, adir)
    row = {}
    for label, path, adapter in [("hf_dir", base_dir, adir), ("gguf", gguf, adir)]:
        ids, steps = ours(path, adapter, f"{name}_{label}")
        row[label] = compare(pm, ids, steps)
    ids, steps = ours(base_dir, None, f"{name}_no_adapter")  # the check is not vacuous: the adapter matters
    row["without_adapter_error"] = compare(pm, ids, steps)["max_abs_logprob_error"]
    merged = work / f"{name}_merged.h5"
    subprocess.run([bin_dir / "lm-convert", gguf, "--merge-lora", adir, "-o", merged, "-q"], check=True)
    ids, steps = ours(merged, None, f"{name}_merged")
    row["gguf_merged_h5"] = compare(pm, ids, steps)
    results[name] = row

# (b) icmlkit -> PEFT
if len(sys.argv) >= 5:
    adir, model_path = Path(sys.argv[3]), Path(sys.argv[4])
else:  # an adapter trained by lm-train on an interleaved (GGUF) base
    text = Path(__file__).resolve().parents[1] / "cli" / "fixtures" / "genesis.txt"
    model_path, adir = work / "ours.gguf", work / "ours_adapter"
    for cmd in [["tokenizer-train", text, "--chunk-lines", "3", "--vocab-size", "400", "-o", work / "t.model"],
                ["lm-init", "--tokenizer", work / "t.model", "--preset", "tiny", "--init-std", "0.25", "--n-ctx", "64",
                 "-o", work / "ours.h5"],
                ["lm-convert", work / "ours.h5", "-o", model_path],
                ["lm-train", text, "--init", model_path, "--lora-rank", "4", "--lora-targets", "q,k,v,o,gate,up,down",
                 "--steps", "30", "--lr", "1e-2", "--seq-len", "32", "-o", adir]]:
        subprocess.run([bin_dir / cmd[0]] + cmd[1:] + ["-q"], check=True, stdout=subprocess.DEVNULL)
hf = work / "ours_base"
subprocess.run([bin_dir / "lm-convert", model_path, "-o", f"{hf}/", "-q", "--dtype", "f32"], check=True)
pm = peft_f64(hf, adir)
ids, steps = ours(model_path, adir, "ours_adapter")
results["icmlkit_adapter_in_peft"] = compare(pm, ids, steps)
ids, steps = ours(model_path, None, "ours_no_adapter")
results["icmlkit_adapter_in_peft"]["without_adapter_error"] = compare(pm, ids, steps)["max_abs_logprob_error"]

print(json.dumps(results, indent=1))
rows = [r for v in results.values() for r in (v.values() if "greedy_equal" not in v else [v])]
ok = all(r["greedy_equal"] and r["max_abs_logprob_error"] <= TOL for r in rows if isinstance(r, dict))
ok = ok and all(v["without_adapter_error"] > 1e-3 for v in results.values())
sys.exit(0 if ok else 1)
