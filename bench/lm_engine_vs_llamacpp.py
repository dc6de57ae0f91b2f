#!/usr/bin/env python3
"""The CPU engine against llama.cpp on the same GGUF files, with the roofline (issue 37).

For each file (lm-init --preset 7m and 100m with a 4,096-token vocabulary, F32, F16 and BF16 GGUF,
and with --dtypes also Q8_0 and Q4_0; ours runs the BF16 file with --weights bf16-dot, bfloat16
arithmetic as llama.cpp's, and the Q8_0 / Q4_0 files with --act-quant q8, activations quantised to
Q8_0 and integer dot products as llama.cpp's, and also as lossless f32 products, "ours_exact"):
the time of a k-row pass (k new tokens after a 64-token context, logits of every row) for k in
1, 8, 16, 64, and of a 256-token prefill, for our engine (bench-lm-engine --model) and for
llama.cpp (llama-cpp-python, llama_decode timed alone, f32 KV cache like ours), each the median
of 5 interleaved rounds (a round runs ours then llama.cpp on every file; each run reports the
median of its repetitions).  The roofline of a k-row pass is
max(weight bytes / read bandwidth, 2 k W / FMA peak), both measured on this machine by
bench-lm-engine --roofline (W: the weights the pass multiplies, embeddings excluded; for the BF16
files the AMX-BF16 tile peak where it is higher; for Q8_0 / Q4_0 only the bandwidth term, a lower
bound, as no int8 peak is measured).
Prints one JSON line per file, then a summary line.

usage: lm_engine_vs_llamacpp.py BIN_DIR [--threads N] [--rounds N] [--quick] [--dtypes f32,f16,bf16,q8_0,q4_0]
(run it with the python of a venv that has llama_cpp; on a CPU with AMX, a llama.cpp built without
AMX: the AMX build of llama-cpp-python 0.3.x dies with SIGILL on Q8_0 / Q4_0 files here)
       lm_engine_vs_llamacpp.py --llama FILE --threads N --reps N   (one llama.cpp run; internal)
"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KS = (1, 8, 16, 64)
CTX = 64


def llama_run(path, threads, reps):
    """One llama.cpp process: median seconds of each k-row pass and of the prefill."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=512, n_batch=512,
                          n_ubatch=512, logits_all=True, verbose=False, type_k=0, type_v=0)
    vocab = llm.n_vocab()
    ctx = [(i * 7 + 3) % vocab for i in range(CTX)]
    llm.eval(ctx)

    def timed(tokens, n_past):
        llm._ctx.kv_cache_seq_rm(-1, n_past, -1)
        llm._batch.set_batch(batch=tokens, n_past=n_past, logits_all=True)
        t0 = time.perf_counter()
        llm._ctx.decode(llm._batch)
        return time.perf_counter() - t0

    def med(tokens, n_past, n):
        return statistics.median(timed(tokens, n_past) for _ in range(n))

    for k in (1, 16, 64):  # warm-up, as ours
        timed([(i * 31 + 5) % vocab for i in range(k)], CTX)
    passes = {str(k): med([(i * 31 + 5) % vocab for i in range(k)], CTX, reps) for k in KS}
    prefill = med([(i * 13 + 1) % vocab for i in range(256)], 0, max(1, reps // 2))
    # leave the context intact for nothing else: the process ends here
    return {"engine": "llama.cpp", "file": path, "threads": threads, "pass_s": passes, "prefill_s": prefill,
            "llama_cpp_version": llama_cpp.__version__}


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin", nargs="?")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="the 7m files only, 3 rounds")
    ap.add_argument("--dtypes", default="f32,f16,bf16", help="comma list of f32, f16, bf16, q8_0, q4_0")
    ap.add_argument("--llama")
    a = ap.parse_args()
    if a.llama:
        print(json.dumps(llama_run(a.llama, a.threads, a.reps)))
        return 0
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        print(json.dumps({"bench": "lm_engine_vs_llamacpp", "skipped": f"llama_cpp: {e}"}))
        return 0
    dtypes = a.dtypes.split(",")
    if not dtypes or any(d not in ("f32", "f16", "bf16", "q8_0", "q4_0") for d in dtypes):
        ap.error("--dtypes: a comma list of f32, f16, bf16, q8_0, q4_0")
    bindir = Path(a.bin)
    root = Path(__file__).resolve().parent.parent
    rounds = 3 if a.quick else a.rounds
    with tempfile.TemporaryDirectory() as work:
        w = Path(work)
        corpus = root.parent / "shared/data/corpus/kjv.tsv"
        if corpus.exists():
            tok = [bindir / "tokenizer-train", corpus, "--column", "2", "--chunk-lines", "4", "--vocab-size", "4096"]
        else:
            tok = [bindir / "tokenizer-train", root / "test/cli/fixtures/genesis.txt", "--vocab-size", "500"]
        subprocess.run(tok + ["-o", w / "t.model", "-q"], check=True)
        files = []
        for preset in ("7m",) if a.quick else ("7m", "100m"):
            h5 = w / f"{preset}.h5"
            subprocess.run([bindir / "lm-init", "--tokenizer", w / "t.model", "--preset", preset, "--n-ctx", "512",
                            "-o", h5, "-q"], check=True)
            for dtype in dtypes:
                g = w / f"{preset}_{dtype}.gguf"
                subprocess.run([bindir / "lm-convert", h5, "-o", g, "--dtype", dtype, "-q"], check=True)
                files.append((preset, dtype, str(g)))
        roof = run_json([bindir / "bench-lm-engine", "--roofline", "--threads", str(a.threads)])
        def modes(dtype):
            # as llama.cpp computes each file: BF16 in bfloat16 arithmetic, Q8_0 / Q4_0 with Q8_0 activations
            if dtype == "bf16":
                return {"ours": ["--weights", "bf16-dot"]}
            if dtype in ("q8_0", "q4_0"):
                return {"ours": ["--act-quant", "q8"], "ours_exact": []}
            return {"ours": []}

        runs = {f: {"llama": [], **{m: [] for m in modes(d)}} for _, d, f in files}
        for _ in range(rounds):
            for _, dtype, f in files:
                for label, mode in modes(dtype).items():
                    runs[f][label].append(run_json([bindir / "bench-lm-engine", "--model", f, "--threads", str(a.threads),
                                                    "--reps", str(a.reps)] + mode))
                runs[f]["llama"].append(run_json([sys.executable, __file__, "--llama", f, "--threads", str(a.threads),
                                                  "--reps", str(a.reps)]))
        bw, peak = roof["read_bandwidth_gb_s"] * 1e9, roof["fma_peak_gflop_s"] * 1e9
        summary = []
        for preset, dtype, f in files:
            ours, ll = runs[f]["ours"], runs[f]["llama"]
            first = ours[0]
            cfg_bytes = first["weight_bytes"]
            # the weights a pass multiplies: all but the token embeddings (d_model x vocab, f32 or f16)
            matmul_weights = first["matmul_weights"]
            row = {"bench": "lm_engine_vs_llamacpp", "model": preset, "weights": dtype, "file_weights": first["weights"],
                   "n_weights": first["n_weights"], "weight_bytes": cfg_bytes, "threads": a.threads, "rounds": rounds,
                   "isa": first["isa"], "read_bandwidth_gb_s": roof["read_bandwidth_gb_s"],
                   "fma_peak_gflop_s": roof["fma_peak_gflop_s"], "llama_cpp_version": ll[0]["llama_cpp_version"],
                   "pass_ms": {}}
            for k in KS:
                o = statistics.median(r["pass_s"][str(k)] for r in ours)
                l = statistics.median(r["pass_s"][str(k)] for r in ll)
                # bf16 arithmetic: the fastest bf16 unit's peak (AMX tiles where usable, else FMA)
                pk = peak if dtype != "bf16" else max(peak, (roof.get("amx_bf16_peak_gflop_s") or 0) * 1e9)
                roofline = first["matmul_weight_bytes"] / bw
                if dtype not in ("q8_0", "q4_0"):
                    roofline = max(roofline, 2.0 * k * matmul_weights / pk)
                row["pass_ms"][str(k)] = {"ours": o * 1e3, "llama_cpp": l * 1e3, "roofline": roofline * 1e3,
                                          "ours_over_llama_cpp": o / l, "ours_over_roofline": o / roofline}
                if "ours_exact" in runs[f]:
                    row["pass_ms"][str(k)]["ours_exact"] = 1e3 * statistics.median(r["pass_s"][str(k)] for r in runs[f]["ours_exact"])
            o1 = row["pass_ms"]["1"]
            row["decode_tokens_per_s"] = {"ours": 1e3 / o1["ours"], "llama_cpp": 1e3 / o1["llama_cpp"]}
            po = statistics.median(r["prefill_s"] for r in ours)
            pl = statistics.median(r["prefill_s"] for r in ll)
            row["prefill_tokens_per_s"] = {"ours": 256 / po, "llama_cpp": 256 / pl}
            if "ours_exact" in runs[f]:
                row["prefill_tokens_per_s"]["ours_exact"] = 256 / statistics.median(r["prefill_s"] for r in runs[f]["ours_exact"])
            row["c_k"] = {"ours": {str(k): row["pass_ms"][str(k)]["ours"] / o1["ours"] for k in KS},
                          "llama_cpp": {str(k): row["pass_ms"][str(k)]["llama_cpp"] / o1["llama_cpp"] for k in KS}}
            print(json.dumps(row), flush=True)
            summary.append({"model": preset, "weights": dtype,
                            "k_pass_ours_le_llama_cpp": all(row["pass_ms"][str(k)]["ours_over_llama_cpp"] <= 1.0 for k in KS),
                            "decode_ratio": row["decode_tokens_per_s"]["ours"] / row["decode_tokens_per_s"]["llama_cpp"],
                            "prefill_ratio": row["prefill_tokens_per_s"]["ours"] / row["prefill_tokens_per_s"]["llama_cpp"]})
        print(json.dumps({"bench": "lm_engine_vs_llamacpp_summary", "files": summary,
                          "targets": {"k_pass": "ours <= llama.cpp for k in 1, 8, 16, 64",
                                      "roofline_100m_f32": "ours <= 1.25 x roofline",
                                      "decode": ">= 0.98 x llama.cpp", "prefill": ">= llama.cpp",
                                      "q8_0_q4_0_act_quant": ">= 0.8 x llama.cpp's decode and prefill"}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
