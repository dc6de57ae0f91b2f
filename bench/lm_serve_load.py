#!/usr/bin/env python3
"""A bounded load test of lm-serve on loopback (issue 38): N concurrent clients for T seconds.

Starts `lm-serve MODEL --port 0 --slots 8`, then for N in 1, 4, 8 clients runs each client in a
loop of streamed completions (128 new tokens, greedy, --ignore-eos semantics through a model whose
eos is rare; each client's prompt differs) for T seconds, and reports per level: requests,
errors, completion tokens/s over all clients, p50/p99 request latency and time to first token
(the first streamed chunk).  In the same run it measures the engine's c(8) = time of an 8-row pass
/ time of a 1-row pass (bench-lm-engine --model MODEL) and checks the issue's target:
8 clients' tokens/s >= 0.8 x (8 / c(8)) x one client's.  Prints one JSON line per level, then a
summary line.  Python standard library only.

usage: lm_serve_load.py BIN_DIR [MODEL] [--seconds T] [--tokens N]
"""
import argparse
import http.client
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def stream_completion(host, port, prompt, tokens):
    """One streamed completion: (latency s, time to first chunk s, completion tokens, error or None)."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True})
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        return time.perf_counter() - t0, None, 0, f"HTTP {resp.status}: {resp.read()[:200]!r}"
    ttft, usage, done = None, None, False
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        if ttft is None:
            ttft = time.perf_counter() - t0
        if line == "data: [DONE]":
            done = True
            break
        if '"usage"' in line:  # only the final chunks are parsed: the client shares the server's cores
            usage = json.loads(line[6:])["usage"]
    conn.close()
    if not done or usage is None:
        return time.perf_counter() - t0, ttft, 0, "stream ended without usage or [DONE]"
    return time.perf_counter() - t0, ttft, usage["completion_tokens"], None


def run_level(host, port, clients, seconds, tokens):
    results, lock = [], threading.Lock()
    stop_at = time.perf_counter() + seconds

    def client(k):
        i = 0
        while time.perf_counter() < stop_at:
            r = stream_completion(host, port, f"And the {k} {i} said", tokens)
            with lock:
                results.append(r)
            i += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ok = [r for r in results if r[3] is None]
    lat = sorted(r[0] for r in ok)
    ttft = sorted(r[1] for r in ok)

    def q(v, p):
        return v[min(len(v) - 1, int(p * len(v)))] if v else None

    return {"bench": "lm_serve_load", "clients": clients, "seconds": wall, "requests": len(results),
            "errors": len(results) - len(ok), "first_error": next((r[3] for r in results if r[3]), None),
            "completion_tokens": sum(r[2] for r in ok), "tokens_per_s": sum(r[2] for r in ok) / wall,
            "latency_p50_s": q(lat, 0.5), "latency_p99_s": q(lat, 0.99),
            "ttft_p50_s": q(ttft, 0.5), "ttft_p99_s": q(ttft, 0.99)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin")
    ap.add_argument("model", nargs="?")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args()
    bindir = Path(a.bin)
    model = a.model or str(Path(__file__).resolve().parent.parent / "data/models/kjv7m.h5")
    engine = json.loads(subprocess.run([bindir / "bench-lm-engine", "--model", model, "--reps", "9"], check=True,
                                       capture_output=True, text=True).stdout.strip().splitlines()[-1])
    c8 = engine["pass_s"]["8"] / engine["pass_s"]["1"]
    srv = subprocess.Popen([bindir / "lm-serve", model, "--port", "0", "--slots", "8", "--max-queue", "64"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = json.loads(srv.stdout.readline())["listening"]
        host, port = url.split("//")[1].split(":")
        stream_completion(host, int(port), "warm up", 8)
        levels = {}
        for n in (1, 4, 8):
            levels[n] = run_level(host, int(port), n, a.seconds, a.tokens)
            print(json.dumps(levels[n]), flush=True)
        health = json.loads(subprocess.run(["curl", "-s", url + "/health"], capture_output=True, text=True).stdout or "{}")
    finally:
        srv.terminate()
        rc = srv.wait(timeout=60)
    one, eight = levels[1]["tokens_per_s"], levels[8]["tokens_per_s"]
    print(json.dumps({"bench": "lm_serve_load_summary", "model": model, "engine_c8": c8,
                      "engine_pass_ms": {k: v * 1e3 for k, v in engine["pass_s"].items()},
                      "tokens_per_s": {str(n): levels[n]["tokens_per_s"] for n in levels},
                      "ideal_8_over_1": 8 / c8, "measured_8_over_1": eight / one,
                      "target_8_ge_0.8_ideal": eight >= 0.8 * (8 / c8) * one,
                      "errors": sum(levels[n]["errors"] for n in levels), "max_active": health.get("max_active"),
                      "server_exit": rc}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
