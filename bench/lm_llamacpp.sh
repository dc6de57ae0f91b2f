#!/usr/bin/env bash
# Decode tokens/s of lm-generate vs llama.cpp (llama-cpp-python, built from PyPI into
# build/llamacpp-venv) on the same GGUF files (F32 and F16 of a ~100M random model with a
# SentencePiece vocabulary), 2 threads, one run; greedy tokens must agree on peaked models.  Also the copy
# bandwidth limit (weight bytes per token / measured bandwidth) for both.
# Prints JSON lines.  Usage: bash bench/lm_llamacpp.sh build/bin
set -euo pipefail
bin=${1:-build/bin}
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/build/llamacpp-venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
  echo "bench: building llama-cpp-python into $venv (several minutes)" >&2
  python3 -m venv "$venv"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_CURL=OFF" \
    "$venv/bin/pip" install -q llama-cpp-python numpy >&2 || { echo '{"bench": "lm_llamacpp", "skipped": "llama-cpp-python did not install"}'; exit 0; }
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
corpus=$root/../shared/data/corpus/kjv.tsv
if [ -f "$corpus" ]; then "$bin/tokenizer-train" "$corpus" --column 2 --chunk-lines 4 --vocab-size 4096 -o "$work/t.model" -q
else "$bin/tokenizer-train" "$root/test/cli/fixtures/genesis.txt" --vocab-size 500 -o "$work/t.model" -q; fi
# Greedy agreement needs peaked distributions (a random N(0, 0.02) model has near-tied logits that
# any rounding flips): a small model with init std 0.3, rotate-half and interleaved layouts.
for style in half interleaved; do
  "$bin/lm-init" --tokenizer "$work/t.model" --d-model 64 --n-layers 2 --n-heads 4 --n-kv-heads 2 --d-ff 96 \
    --n-ctx 512 --init-std 0.3 --rope-style $style -o "$work/p_$style.h5" -q
  "$bin/lm-convert" "$work/p_$style.h5" -o "$work/p_$style.gguf" -q
  "$venv/bin/python" "$root/test/peer/llamacpp_peer.py" "$bin" "$work/p_$style.gguf" 32 2 2>/dev/null \
    | sed "s/^{/{\"bench\": \"lm_llamacpp_greedy\", \"rope_style\": \"$style\", /" || true
done
# A Mixtral (issue 31: lm-init --moe standard, 8 experts, top-2) under llama.cpp's llama architecture
# with 3-D expert tensors: the same greedy tokens.
"$bin/lm-init" --tokenizer "$work/t.model" --d-model 64 --n-layers 2 --n-heads 4 --n-kv-heads 2 --d-ff 96 \
  --n-ctx 512 --init-std 0.3 --moe standard --experts 8 --top-k 2 -o "$work/p_moe.h5" -q
"$bin/lm-convert" "$work/p_moe.h5" -o "$work/p_moe.gguf" -q
"$venv/bin/python" "$root/test/peer/llamacpp_peer.py" "$bin" "$work/p_moe.gguf" 32 2 2>/dev/null \
  | sed "s/^{/{\"bench\": \"lm_llamacpp_greedy\", \"model\": \"mixtral\", /" || true
"$bin/lm-init" --tokenizer "$work/t.model" --preset 100m --n-ctx 512 -o "$work/m.h5" -q
"$bin/lm-convert" "$work/m.h5" -o "$work/m_f32.gguf" -q
"$bin/lm-convert" "$work/m.h5" -o "$work/m_f16.gguf" --dtype f16 -q
for f in m_f32 m_f16; do
  "$venv/bin/python" "$root/test/peer/llamacpp_peer.py" "$bin" "$work/$f.gguf" 32 2 2>/dev/null | sed "s/^{/{\"bench\": \"lm_llamacpp\", \"file\": \"$f\", /" || true
done
# Issue 37: k-row passes, prefill and decode of both engines on the same F32 / F16 files (7m and
# 100m shapes), medians of 5 interleaved rounds, with the machine's roofline.
"$venv/bin/python" "$root/bench/lm_engine_vs_llamacpp.py" "$bin" || true
