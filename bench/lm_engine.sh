#!/usr/bin/env bash
# CPU engine speed (issue: the CPU engine): prefill/decode tokens/s, c(k), decode vs the copy
# bandwidth limit, our matmul vs Eigen GEMM — on a ~7M and a ~134M random model, 2 threads.
# Then the same with f16-held weights (--dtype f16: half the bytes per decode step).
# Prints JSON lines.  Usage: bash bench/lm_engine.sh build/bin [--quick]
set -euo pipefail
bin=${1:-build/bin}
shift || true
"$bin/bench-lm-engine" --threads 2 "$@"
"$bin/bench-lm-engine" --threads 2 --dtype f16 "$@"
