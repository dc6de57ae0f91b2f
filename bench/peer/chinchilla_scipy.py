#!/usr/bin/python3
"""Peer for bench/chinchilla_fit.sh: Chinchilla "Approach 3" fit done the way
Epoch AI's replication does it, with plain SciPy.

Model (log space):  ln L_hat = LSE(a - alpha*ln N, b - beta*ln D, e)
                    i.e. L = E + A/N^alpha + B/D^beta with A=e^a, B=e^b, E=e^e.
Objective:          sum over rows of Huber_delta(ln L_hat - ln L), delta = 1e-3.
Procedure:          for every start of a 4,500-point grid run
                    scipy.optimize.minimize(method="L-BFGS-B") with SciPy's
                    default finite-difference gradient (no jac), and keep the
                    lowest-objective start whose result.success is True.

Usage: /usr/bin/python3 chinchilla_scipy.py DATA.csv [--starts-limit K]
CSV columns: name,params,tokens,unique_tokens,loss (N=params, D=tokens, L=loss).
Prints one JSON object on stdout. Single-threaded on purpose.
"""
import os

# One BLAS/OpenMP thread: what a plain SciPy user gets, and fair per-core.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import csv
import itertools
import json
import math
import sys
import time

import numpy as np
from scipy.optimize import minimize
from scipy.special import huber, logsumexp

HUBER_DELTA = 1e-3

# Same grid and order as infolaw-fit's default (a outermost, beta innermost).
GRID_A = np.arange(0.0, 30.0, 5.0)          # 0,5,...,25
GRID_B = np.arange(0.0, 30.0, 5.0)          # 0,5,...,25
GRID_E = np.arange(-1.0, 1.5, 0.5)          # -1,-0.5,...,1
GRID_ALPHA = np.arange(0.0, 2.5, 0.5)       # 0,0.5,...,2
GRID_BETA = np.arange(0.0, 2.5, 0.5)        # 0,0.5,...,2
GRID = [np.array(p) for p in itertools.product(GRID_A, GRID_B, GRID_E,
                                               GRID_ALPHA, GRID_BETA)]
assert len(GRID) == 4500


def load_csv(path):
    """Return ln N, ln D, ln L as float64 arrays."""
    n, d, l = [], [], []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            n.append(float(row["params"]))
            d.append(float(row["tokens"]))
            l.append(float(row["loss"]))
    return np.log(n), np.log(d), np.log(l)


def make_objective(log_n, log_d, log_l):
    def objective(x):
        a, b, e, alpha, beta = x
        # Three terms per row, stacked as columns, then log-sum-exp per row.
        terms = np.stack([a - alpha * log_n,
                          b - beta * log_d,
                          np.full_like(log_n, e)], axis=1)
        resid = logsumexp(terms, axis=1) - log_l
        return float(np.sum(huber(HUBER_DELTA, resid)))
    return objective


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--starts-limit", type=int, default=None, metavar="K",
                    help="quick mode: run only every k-th start "
                         "(k = ceil(4500/K)), i.e. at most K starts")
    args = ap.parse_args()

    log_n, log_d, log_l = load_csv(args.csv)
    objective = make_objective(log_n, log_d, log_l)

    stride = 1
    if args.starts_limit is not None and 0 < args.starts_limit < len(GRID):
        stride = -(-len(GRID) // args.starts_limit)  # ceil division
    indices = range(0, len(GRID), stride)

    best = None          # (objective, grid index, OptimizeResult)
    converged = 0
    t0 = time.perf_counter()
    for i in indices:
        res = minimize(objective, GRID[i], method="L-BFGS-B")
        if not res.success:
            continue
        converged += 1
        if best is None or res.fun < best[0]:
            best = (float(res.fun), i, res)
    seconds = time.perf_counter() - t0

    out = {
        "seconds": seconds,
        "objective": None,
        "params": None,
        "starts": len(indices),        # starts actually run
        "grid_size": len(GRID),
        "stride": stride,
        "converged": converged,
        "rows": int(log_l.size),
        "method": "scipy.optimize.minimize L-BFGS-B, numerical gradient",
        "versions": {"numpy": np.__version__,
                     "scipy": __import__("scipy").__version__,
                     "python": sys.version.split()[0]},
    }
    if best is not None:
        fun, idx, res = best
        a, b, e, alpha, beta = (float(v) for v in res.x)
        out["objective"] = fun
        out["params"] = {"a": a, "b": b, "e": e, "alpha": alpha, "beta": beta,
                         "A": math.exp(a), "B": math.exp(b), "E": math.exp(e)}
        out["best_index"] = idx
        out["best_iterations"] = int(res.nit)
        out["best_nfev"] = int(res.nfev)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
