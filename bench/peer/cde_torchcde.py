"""Peer for bench/cde_epoch.sh: the cubic neural CDE of torchcde (Kidger et al.) trained on a UEA
.ts file with the same data preparation and hyperparameters as cde-train, on the CPU.

Prints one JSON object: seconds per epoch, forward NFE per batch (the vector field of a batched
torchdiffeq solve is evaluated once per step for the whole batch), final loss, test accuracy.
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torchcde


def read_ts(path):
    labels, cases, data = None, [], False
    for line in open(path):
        line = line.strip()
        if not line or line.startswith('#'):
            continue
        if not data:
            if line.lower().startswith('@classlabel'):
                labels = line.split()[2:]
            if line.lower().startswith('@data'):
                data = True
            continue
        parts = line.split(':')
        dims = [[float('nan') if v in ('?', 'NaN') else float(v) for v in p.split(',')] for p in parts[:-1]]
        cases.append((np.array(dims).T, labels.index(parts[-1].strip())))
    return cases, labels


class Func(torch.nn.Module):
    def __init__(self, c, h, w):
        super().__init__()
        self.c, self.h = c, h
        self.l1 = torch.nn.Linear(h, w)
        self.l2 = torch.nn.Linear(w, h * c)
        self.nfe = 0

    def forward(self, t, z):
        self.nfe += 1
        return torch.tanh(self.l2(torch.relu(self.l1(z)))).view(z.size(0), self.h, self.c)


class NCDE(torch.nn.Module):
    def __init__(self, c, h, w, k, rtol, atol):
        super().__init__()
        self.func = Func(c, h, w)
        self.initial = torch.nn.Linear(c, h)
        self.readout = torch.nn.Linear(h, k)
        self.rtol, self.atol = rtol, atol

    def forward(self, coeffs, t):
        X = torchcde.CubicSpline(coeffs, t)
        z0 = self.initial(X.evaluate(X.interval[0]))
        zT = torchcde.cdeint(X=X, func=self.func, z0=z0, t=X.interval, adjoint=False, method='dopri5',
                             rtol=self.rtol, atol=self.atol)
        return self.readout(zT[:, 1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('train')
    ap.add_argument('test')
    ap.add_argument('--hidden', type=int, default=16)
    ap.add_argument('--width', type=int, default=32)
    ap.add_argument('--epochs', type=int, default=3)
    ap.add_argument('--batch-size', type=int, default=8)
    ap.add_argument('--lr', type=float, default=0.01)
    ap.add_argument('--rtol', type=float, default=1e-3)
    ap.add_argument('--atol', type=float, default=1e-3)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--seed', type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    torch.set_default_dtype(torch.float64)  # cde-train computes in double
    tr, labels = read_ts(a.train)
    te, _ = read_ts(a.test)
    L = max(x.shape[0] for x, _ in tr)
    assert all(x.shape[0] == L for x, _ in tr + te), 'equal-length series only'
    Xtr = np.stack([x for x, _ in tr])
    Xte = np.stack([x for x, _ in te])
    mu = np.nanmean(Xtr, axis=(0, 1))
    sd = np.nanstd(Xtr, axis=(0, 1), ddof=1) + 1e-8
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    t = torch.arange(L, dtype=torch.float64)
    ctr = torchcde.hermite_cubic_coefficients_with_backward_differences(torch.tensor(Xtr), t)
    cte = torchcde.hermite_cubic_coefficients_with_backward_differences(torch.tensor(Xte), t)
    ytr = torch.tensor([y for _, y in tr])
    yte = torch.tensor([y for _, y in te])
    model = NCDE(Xtr.shape[2], a.hidden, a.width, len(labels), a.rtol, a.atol)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    lossf = torch.nn.CrossEntropyLoss()
    secs, nfes, batches = [], 0, 0
    for ep in range(a.epochs):
        perm = torch.randperm(len(ytr))
        t0 = time.perf_counter()
        for s in range(0, len(ytr), a.batch_size):
            idx = perm[s:s + a.batch_size]
            model.func.nfe = 0
            out = model(ctr[idx], t)
            nfes += model.func.nfe
            batches += 1
            loss = lossf(out, ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        secs.append(time.perf_counter() - t0)
    with torch.no_grad():
        model.func.nfe = 0
        acc = (model(cte, t).argmax(-1) == yte).double().mean().item()
    print(json.dumps({'peer': 'torchcde ' + torchcde.__version__ + ', torch ' + torch.__version__,
                      'seconds_per_epoch': float(np.mean(secs)), 'epoch_seconds': secs,
                      'nfe_per_batch': nfes / batches, 'final_loss': loss.item(), 'test_accuracy': acc,
                      'threads': a.threads, 'epochs': a.epochs}))


if __name__ == '__main__':
    main()
