#!/usr/bin/env python3
"""Peer check and speed comparison against llama.cpp (llama-cpp-python from PyPI; optional).

Our GGUF export of a model must give llama.cpp the same greedy tokens as lm-generate, and both
decode speeds are measured on the same file and threads in one run; where they part, the JSON
gives llama.cpp's top-2 logit margin there (over max|logit|) and the first step with one below 1e-3.  Prints JSON; exit 1 when
the greedy tokens differ, 77 when llama_cpp is absent.

usage: llamacpp_peer.py BIN_DIR MODEL.gguf [N_NEW] [THREADS] [LM-GENERATE FLAGS...]
(e.g. --act-quant q8 to decode Q8_0 / Q4_0 files in llama.cpp's int8 arithmetic)
"""
import json
import subprocess
import sys
import time
from pathlib import Path

try:
    import llama_cpp
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

bin_dir, model = Path(sys.argv[1]), sys.argv[2]
n_new = int(sys.argv[3]) if len(sys.argv) > 3 else 64
threads = int(sys.argv[4]) if len(sys.argv) > 4 else 2
extra = sys.argv[5:]

# f32 KV cache (llama.cpp's default is f16, which alone flips near-tied greedy tokens).
llm = llama_cpp.Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=512, n_batch=512,
                      verbose=False, logits_all=True, type_k=0, type_v=0)
vocab = llm.n_vocab()
prompt = [1] + [(i * 37 + 11) % (vocab - 3) + 3 for i in range(7)]
# llama.cpp greedy: evaluate the prompt, then argmax step by step (no sampler randomness).
llm.reset()
t0 = time.perf_counter()
llm.eval(prompt)
t_prefill = time.perf_counter() - t0
ids, margins = [], []
t1 = time.perf_counter()
for _ in range(n_new):
    logits = llm.scores[llm.n_tokens - 1]
    tok = int(logits.argmax())
    ids.append(tok)
    llm.eval([tok])
t_decode = time.perf_counter() - t1
# each step's top-2 logit margin over max|logit| (where near-ties may part the two engines)
for step in range(n_new):
    lg = llm.scores[len(prompt) - 1 + step]
    top2 = sorted(lg)[-2:]
    margins.append(float((top2[1] - top2[0]) / max(abs(lg.max()), abs(lg.min()))))
jl = Path(model).with_suffix(".ours.jsonl")
subprocess.run([bin_dir / "lm-generate", model, "--prompt-ids", ",".join(map(str, prompt)), "-n", str(n_new),
                "--ignore-eos", "--threads", str(threads), "-o", jl, "-q", "--no-stream"] + extra, check=True,
               stdout=subprocess.DEVNULL)
recs = [json.loads(l) for l in jl.read_text().splitlines()]
ours = [r["id"] for r in recs if "step" in r]
summary = [r["summary"] for r in recs if "summary" in r][0]
first_diff = next((i for i, (a, b) in enumerate(zip(ours, ids)) if a != b), None)
out = {"model": model, "lm_generate_flags": extra, "threads": threads, "new_tokens": n_new, "greedy_equal": ours == ids,
       "first_difference_at": first_diff,
       "first_margin_below_1e-3_at": next((i for i, m in enumerate(margins) if m < 1e-3), None),
       "margin_at_difference": margins[first_diff] if first_diff is not None else None,
       "llama_cpp_decode_tokens_per_s": n_new / t_decode,
       "ours_decode_tokens_per_s": summary["decode_tokens_per_s"],
       "llama_cpp_over_ours": (n_new / t_decode) / summary["decode_tokens_per_s"],
       "llama_cpp_version": llama_cpp.__version__}
print(json.dumps(out))
sys.exit(0 if ours == ids else 1)
