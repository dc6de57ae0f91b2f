"""PyTorch CPU peer of bench-lm-train: the same Llama-style model (RMSNorm, rotate-half RoPE,
grouped-query causal attention, SwiGLU, untied head), one AdamW training step per batch of
1 x seq_len tokens, same thread count.  Prints one JSON object."""
import json, math, resource, sys, time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Usage: lm_train_torch.py [threads] [steps] [seq_len] [preset 7m|100m]
threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
preset = sys.argv[4] if len(sys.argv) > 4 else "7m"
V, D, L, H, KV, FF = {"7m": (4096, 256, 6, 8, 4, 688), "100m": (32000, 768, 12, 12, 4, 2048)}[preset]
S = int(sys.argv[3]) if len(sys.argv) > 3 and int(sys.argv[3]) > 0 else (512 if preset == "100m" else 1024)
torch.set_num_threads(threads)
torch.manual_seed(0)
HD = D // H


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.n2 = nn.RMSNorm(D, eps=1e-5), nn.RMSNorm(D, eps=1e-5)
        self.q, self.k, self.v = nn.Linear(D, D, bias=False), nn.Linear(D, KV * HD, bias=False), nn.Linear(D, KV * HD, bias=False)
        self.o = nn.Linear(D, D, bias=False)
        self.g, self.u, self.d = nn.Linear(D, FF, bias=False), nn.Linear(D, FF, bias=False), nn.Linear(FF, D, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.n1(x)
        q = self.q(h).view(B, T, H, HD).transpose(1, 2)
        k = self.k(h).view(B, T, KV, HD).transpose(1, 2)
        v = self.v(h).view(B, T, KV, HD).transpose(1, 2)
        rot = lambda t: t * cos + torch.cat((-t[..., HD // 2:], t[..., :HD // 2]), -1) * sin
        q, k = rot(q), rot(k)
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        h = self.n2(x)
        return x + self.d(F.silu(self.g(h)) * self.u(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.norm = nn.RMSNorm(D, eps=1e-5)
        self.head = nn.Linear(D, V, bias=False)
        pos = torch.arange(S, dtype=torch.float32)[:, None]
        inv = 10000.0 ** (-2 * torch.arange(HD // 2, dtype=torch.float32) / HD)
        ang = torch.cat((pos * inv, pos * inv), -1)
        self.cos, self.sin = ang.cos(), ang.sin()

    def forward(self, idx):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        return self.head(self.norm(x))


model = Model()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
data = torch.randint(0, V, (steps + 2, 1, S + 1))


def step(i):
    opt.zero_grad(set_to_none=True)
    logits = model(data[i, :, :-1])
    loss = F.cross_entropy(logits.view(-1, V), data[i, :, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


step(0)
t0 = time.perf_counter()
for i in range(steps):
    step(i + 1)
sec = time.perf_counter() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # before the matmul below
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
torch.mm(a, b)
best = 1e300
for _ in range(3):
    t1 = time.perf_counter()
    torch.mm(a, b)
    best = min(best, time.perf_counter() - t1)
print(json.dumps({"peer": "pytorch", "torch": torch.__version__, "preset": preset, "threads": threads,
                  "steps": steps, "seq_len": S, "n_params": sum(p.numel() for p in model.parameters()),
                  "tokens_per_s": steps * S / sec, "step_seconds": sec / steps, "peak_rss_mib": rss,
                  "mm_1024_gflops": 2 * 1024 ** 3 / best / 1e9}))
