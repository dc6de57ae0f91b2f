"""Shared by the transformers peer checks (hf_mixtral.py, peft_lora.py): our lm-generate's greedy tokens
with per-step top log-probabilities, and their largest gap to a reference's log-softmax."""
import json
import subprocess
from pathlib import Path


def lm_generate_logprobs(bin_dir, model_path, prompt, n_new, jsonl, extra=()):
    """lm-generate's greedy ids and per-step records (top-20 log-probabilities) for `prompt` (ids),
    written to `jsonl`; `extra` adds flags (e.g. ["--lora", DIR])."""
    jsonl = Path(jsonl)
    subprocess.run([Path(bin_dir) / "lm-generate", model_path, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n_new),
                    "--ignore-eos", "--top-logprobs", "20", "-o", jsonl, "-q", "--no-stream", *extra],
                   check=True, stdout=subprocess.DEVNULL)
    steps = [r for r in map(json.loads, jsonl.read_text().splitlines()) if "step" in r]
    return [r["id"] for r in steps], steps


def max_logprob_error(steps, logp, prompt_len):
    """Largest |our top log-probability - logp[position, id]| over the steps, logp [positions, vocab] the
    reference's log-softmax on prompt + our tokens (step s predicts position prompt_len + s - 1)."""
    err = 0.0
    for r in steps:
        pos = prompt_len + r["step"] - 1
        for i, lp in zip(r["top_ids"], r["top_logprobs"]):
            err = max(err, abs(lp - logp[pos, i].item()))
    return err
