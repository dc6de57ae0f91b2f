#!/usr/bin/env bash
# Mixture-of-experts decode on the CPU engine (issue 31): moe and latent-moe models against the
# dense model of equal active FFN weights, 2 threads.  Prints one JSON line.
# Usage: bash bench/moe_decode.sh build/bin [--quick]
set -euo pipefail
bin=${1:-build/bin}
shift || true
"$bin/bench-moe-decode" --threads 2 "$@"
