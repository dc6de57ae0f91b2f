"""PEFT peer of bench-plora: one LoRA job (transformers' LlamaForCausalLM of the 7m shape, random
weights, peft LoraConfig rank r on the given targets, AdamW on the adapter only) at batch b x S
tokens, same thread count: the usual way a search runs its jobs, one after another.  Median of
`steps` timed steps after one warm-up.  Prints one JSON object."""
import json, resource, sys, time

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

# Usage: plora_peft.py threads steps rank batch seq_len targets(q,k,v,o)
threads, steps, rank, batch, S = (int(a) for a in sys.argv[1:6])
targets = [t + "_proj" for t in sys.argv[6].split(",")]
torch.set_num_threads(threads)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=6, num_attention_heads=8,
                  num_key_value_heads=4, max_position_embeddings=1024, rms_norm_eps=1e-5, tie_word_embeddings=False)
model = get_peft_model(LlamaForCausalLM(cfg), LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, lora_dropout=0.0))
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.0)
x = torch.randint(0, 4096, (batch, S))
times = []
for i in range(steps + 1):
    t0 = time.perf_counter()
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if i > 0:
        times.append(time.perf_counter() - t0)
times.sort()
t = times[len(times) // 2]
print(json.dumps({"peer": "transformers + peft", "torch": torch.__version__, "threads": threads, "rank": rank, "batch": batch,
                  "seq_len": S, "step_seconds": t, "tokens_per_s": batch * S / t,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
