#!/usr/bin/env python3
"""Peers for bench/ann_vamana.sh: generate the clustered set, exact neighbours, and time
diskannpy (Vamana, in-memory) and hnswlib on the same data and threads.

  ann_peers.py gen DIR N DIM NQ SEED       -> DIR/base.fbin DIR/queries.fbin DIR/gt.npy
  ann_peers.py diskann DIR R L ALPHA T Ls  -> JSON {build_seconds, sweep: [{L, recall, qps}]}
  ann_peers.py hnswlib DIR M EFC T efs     -> JSON {build_seconds, sweep: [{ef, recall, qps}]}
Recall@10 is computed against the exact L2 neighbours (numpy brute force) with ties counted
as hits when no farther than the 10th true distance (ann-benchmarks' rule, as bimetric-search).
"""
import json, os, sys, time
import numpy as np


def _version(dist):
    """The installed version of a PyPI distribution, for the JSON record."""
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return "?"


def write_fbin(path, x):
    x = np.ascontiguousarray(x, dtype=np.float32)
    with open(path, "wb") as f:
        np.array(x.shape, dtype=np.uint32).tofile(f)
        x.tofile(f)


def read_fbin(path):
    with open(path, "rb") as f:
        n, d = np.fromfile(f, dtype=np.uint32, count=2)
        return np.fromfile(f, dtype=np.float32, count=int(n) * int(d)).reshape(int(n), int(d))


def gen(dirn, n, dim, nq, seed):
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, size=(256, dim)).astype(np.float32)
    lab = rng.integers(0, 256, size=n + nq)
    x = centres[lab] + rng.normal(0.0, 1.0, size=(n + nq, dim)).astype(np.float32)
    base, q = x[:n], x[n:]
    write_fbin(os.path.join(dirn, "base.fbin"), base)
    write_fbin(os.path.join(dirn, "queries.fbin"), q)
    # exact 10-th neighbour distance per query (squared L2), in blocks
    bn = (base.astype(np.float64) ** 2).sum(1)
    kth = np.empty(nq)
    for s in range(0, nq, 100):
        qq = q[s:s + 100].astype(np.float64)
        d2 = (qq ** 2).sum(1)[:, None] + bn[None, :] - 2 * qq @ base.T.astype(np.float64)
        kth[s:s + 100] = np.partition(d2, 9, axis=1)[:, 9]
    np.save(os.path.join(dirn, "kth.npy"), kth)


def recall(dirn, ids):
    base = read_fbin(os.path.join(dirn, "base.fbin")).astype(np.float64)
    q = read_fbin(os.path.join(dirn, "queries.fbin")).astype(np.float64)
    kth = np.load(os.path.join(dirn, "kth.npy"))
    hits = 0
    for i in range(q.shape[0]):
        d2 = ((base[ids[i][:10]] - q[i]) ** 2).sum(1)
        hits += int((d2 <= kth[i] * (1 + 1e-6) + 1e-9).sum())
    return hits / (10.0 * q.shape[0])


def diskann(dirn, R, L, alpha, T, Ls):
    import diskannpy as dap
    base = read_fbin(os.path.join(dirn, "base.fbin"))
    q = read_fbin(os.path.join(dirn, "queries.fbin"))
    idx_dir = os.path.join(dirn, "diskann")
    os.makedirs(idx_dir, exist_ok=True)
    t = time.perf_counter()
    dap.build_memory_index(data=base, distance_metric="l2", index_directory=idx_dir, complexity=L, graph_degree=R,
                           alpha=alpha, num_threads=T, index_prefix="ann", use_pq_build=False)
    build = time.perf_counter() - t
    index = dap.StaticMemoryIndex(index_directory=idx_dir, num_threads=T, initial_search_complexity=max(Ls), index_prefix="ann")
    sweep = []
    for l in Ls:
        t = time.perf_counter()
        res = index.batch_search(q, k_neighbors=10, complexity=max(l, 10), num_threads=T)
        secs = time.perf_counter() - t
        ids = res.identifiers if hasattr(res, "identifiers") else res[0]
        sweep.append({"L": l, "recall_at_10": recall(dirn, ids), "queries_per_second": q.shape[0] / secs})
    return {"peer": "diskannpy " + _version("diskannpy"), "build_seconds": build, "sweep": sweep}


def hnsw(dirn, M, efc, T, efs):
    import hnswlib
    base = read_fbin(os.path.join(dirn, "base.fbin"))
    q = read_fbin(os.path.join(dirn, "queries.fbin"))
    t = time.perf_counter()
    p = hnswlib.Index(space="l2", dim=base.shape[1])
    p.init_index(max_elements=base.shape[0], ef_construction=efc, M=M, random_seed=100)
    p.set_num_threads(T)
    p.add_items(base, np.arange(base.shape[0]))
    build = time.perf_counter() - t
    sweep = []
    for ef in efs:
        p.set_ef(max(ef, 10))
        t = time.perf_counter()
        ids, _ = p.knn_query(q, k=10, num_threads=T)
        secs = time.perf_counter() - t
        sweep.append({"ef": ef, "recall_at_10": recall(dirn, ids), "queries_per_second": q.shape[0] / secs})
    return {"peer": "hnswlib " + _version("hnswlib"), "build_seconds": build, "sweep": sweep}


if __name__ == "__main__":
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "gen":
        gen(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]))
    elif cmd == "diskann":
        print(json.dumps(diskann(a[0], int(a[1]), int(a[2]), float(a[3]), int(a[4]), [int(v) for v in a[5].split(",")])))
    elif cmd == "hnswlib":
        print(json.dumps(hnsw(a[0], int(a[1]), int(a[2]), int(a[3]), [int(v) for v in a[4].split(",")])))
