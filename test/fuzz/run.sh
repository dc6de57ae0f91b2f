#!/usr/bin/env bash
# Seeds each fuzzer (the kept corpus test/fuzz/corpus/<target>.tar.xz, model files made by our own
# tools, the kept seeds of test/fuzz/seeds), then runs it for SECONDS.  Findings are written to
# test/fuzz/findings/ with each target's whole log (<target>.log); the first finding stops the
# script (keep each, once fixed, as test/fuzz/regressions/<target without fuzz_>-NAME: the test
# suite replays it through its harness).  FUZZ_ONLY=fuzz_table runs one target; FUZZ_CORPUS=DIR keeps the
# corpora between runs (a long campaign in pieces); FUZZ_ARGS adds libFuzzer flags (-fork=2: two
# processes sharing the corpus; its execution count is the last "#N: cov" line, not a stats block).
# Inputs are capped at 64 KiB (-max_len): a larger seed is cut, so keep seeds small.
# Usage: run.sh BIN_DIR FUZZ_DIR [SECONDS (default 300)]
set -euo pipefail
targets="fuzz_gguf fuzz_safetensors fuzz_checkpoint fuzz_hf_config fuzz_table fuzz_ts fuzz_vectors fuzz_rank fuzz_openai"
usage() { echo "run.sh: $1 (usage: run.sh BIN_DIR FUZZ_DIR [SECONDS]; FUZZ_ONLY one of: $targets)" >&2; exit 2; }
[ $# -ge 2 ] || usage "BIN_DIR and FUZZ_DIR are required"
[ $# -le 3 ] || usage "too many arguments"
secs=${3:-300}
[[ $secs =~ ^[1-9][0-9]{0,8}$ ]] || usage "SECONDS must be a positive whole number of seconds (below 10^9), got '$secs'"
[ -z "${FUZZ_ONLY:-}" ] || { [[ $FUZZ_ONLY != *" "* ]] && [[ " $targets " == *" $FUZZ_ONLY "* ]]; } || usage "unknown FUZZ_ONLY '$FUZZ_ONLY' (one target)"
if [ -n "${FUZZ_CORPUS:-}" ]; then  # made absolute: each fuzzer runs in test/fuzz/findings
  mkdir -p "$FUZZ_CORPUS" 2> /dev/null && [ -d "$FUZZ_CORPUS" ] || usage "FUZZ_CORPUS '$FUZZ_CORPUS' is not a directory that can be made"
  FUZZ_CORPUS=$(cd "$FUZZ_CORPUS" && pwd)
fi
[ -x "$1/lm-init" ] || usage "$1 has no lm-init (BIN_DIR is the normal build's bin/)"
for t in ${FUZZ_ONLY:-$targets}; do [ -x "$2/$t" ] || usage "$2 has no $t (FUZZ_DIR is the fuzz build's fuzz/: make -f Makefile.shortcuts fuzz)"; done
bin=$(cd "$1" && pwd); fuzz=$(cd "$2" && pwd)
root=$(cd "$(dirname "$0")" && pwd)
# undefined behaviour is a finding too: stop at the first report (the harnesses are built recoverable)
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gguf" "$work/st" "$work/scratch" "$root/findings"
# the harnesses' scratch files, removed with $work even when a fuzzer dies on a finding
export ICMLKIT_FUZZ_SCRATCH=$work/scratch
"$bin/tokenizer-train" "$root/../cli/fixtures/genesis.txt" --vocab-size 400 -o "$work/t.model" -q
"$bin/lm-init" --tokenizer "$work/t.model" --d-model 16 --n-layers 1 --n-heads 2 --n-kv-heads 1 --d-ff 24 --n-ctx 16 -o "$work/m.h5" -q
"$bin/lm-init" --vocab-size 40 --d-model 16 --n-layers 1 --n-heads 2 --n-kv-heads 2 --d-ff 24 --n-ctx 16 --tied -o "$work/bare.h5" -q
"$bin/lm-convert" "$work/m.h5" -o "$work/gguf/f32.gguf" -q
"$bin/lm-convert" "$work/bare.h5" -o "$work/gguf/f16.gguf" --dtype f16 -q
"$bin/lm-convert" "$work/bare.h5" -o "$work/hf" --dtype bf16 -q
cp "$work/hf/model.safetensors" "$work/st/bf16.safetensors"
"$bin/lm-convert" "$work/bare.h5" -o "$work/hf32" -q
cp "$work/hf32/model.safetensors" "$work/st/f32.safetensors"
# moe models (issue 31): a Mixtral (llama architecture, 3-D experts) and an icmlkit-moe file
"$bin/lm-init" --vocab-size 40 --d-model 16 --n-layers 1 --n-heads 2 --n-kv-heads 1 --d-ff 8 --n-ctx 16 --moe standard --experts 4 --top-k 2 -o "$work/moe.h5" -q
"$bin/lm-init" --vocab-size 40 --d-model 16 --n-layers 1 --n-heads 2 --n-kv-heads 1 --d-ff 8 --n-ctx 16 --moe latent --latent 4 --experts 4 --top-k 2 \
  --d-shared 8 --router sigmoid -o "$work/lmoe.h5" -q
"$bin/lm-convert" "$work/moe.h5" -o "$work/gguf/mixtral.gguf" -q
"$bin/lm-convert" "$work/lmoe.h5" -o "$work/gguf/icmlkit-moe.gguf" --dtype f16 -q
"$bin/lm-convert" "$work/lmoe.h5" -o "$work/hfmoe" -q
cp "$work/hfmoe/model.safetensors" "$work/st/moe.safetensors"
# config.json of each kind: llama (bf16, f32), icmlkit_moe, mixtral
"$bin/lm-convert" "$work/moe.h5" -o "$work/hfmix" -q
mkdir -p "$work/hfc"
for d in hf hf32 hfmoe hfmix; do cp "$work/$d/config.json" "$work/hfc/$d.json"; done
# HDF5 checkpoints: fuzz_checkpoint's JSON recipes of our own files (llama with a tokenizer, tied, f16,
# moe, latent-moe, recurrent-depth), written by the harness itself from the files
"$bin/lm-init" --vocab-size 40 --d-model 16 --n-layers 1 --n-heads 2 --n-kv-heads 2 --d-ff 24 --n-ctx 16 --dtype f16 -o "$work/half.h5" -q
"$bin/lm-init" --vocab-size 40 --d-model 16 --n-heads 2 --n-kv-heads 1 --d-ff 24 --n-ctx 16 --arch recurrent-depth \
  --prelude 1 --core 1 --coda 1 --mean-recurrence 2 --backprop-depth 1 -o "$work/recdepth.h5" -q
mkdir -p "$work/ckpt"
if [ -x "$fuzz/fuzz_checkpoint" ]; then
  ICMLKIT_FUZZ_EMIT_SEEDS=$work/ckpt ICMLKIT_FUZZ_SEED_MODELS=$(printf "$work/%s.h5:" m bare half moe lmoe recdepth) \
    "$fuzz/fuzz_checkpoint" > /dev/null
fi
# the other parsers: the CLI tests' fixtures, each led by the byte that picks the harness's format
# where it has one, and the seeds that have no fixture (test/fuzz/seeds/<target>)
fx=$root/../cli/fixtures
for t in table ts vectors rank openai; do mkdir -p "$work/$t"; done
seed() { { printf "\\x$2"; cat "$fx/$3"; } > "$work/$1/$2-$3"; }  # TARGET FORMAT_BYTE FIXTURE
seed table 00 two_rows.csv; seed table 00 ragged.csv; seed table 01 noheader.csv; seed table 02 published_queries.tsv
seed table 03 mix_split.json; seed table 04 mix_losses_long.jsonl
seed vectors 00 ann_empty.fbin; seed vectors 02 ann_small.csv
seed rank 00 rank_small.csv; seed rank 00 rank_partial.csv; seed rank 01 rank_tie.csv
cp "$fx"/cde_*.ts "$work/ts/"
for t in vectors openai ckpt; do cp "$root/seeds/$t"/* "$work/$t/"; done
for t in gguf st ckpt hfc table ts vectors rank openai; do
  case $t in st) exe=$fuzz/fuzz_safetensors ;; hfc) exe=$fuzz/fuzz_hf_config ;; ckpt) exe=$fuzz/fuzz_checkpoint ;; *) exe=$fuzz/fuzz_$t ;; esac
  [ -z "${FUZZ_ONLY:-}" ] || [ "$(basename "$exe")" = "$FUZZ_ONLY" ] || continue
  # the kept corpus of the longest campaign so far (pack-corpus.sh), with the seeds made above
  kept=$root/corpus/$(basename "$exe").tar.xz
  [ ! -f "$kept" ] || tar -xJf "$kept" -C "$work/$t"
  echo "fuzz: $(basename "$exe") for ${secs}s, $(ls "$work/$t" | wc -l) seeds (the kept corpus and files made by our tools)"
  # the corpus it grows is kept between runs in FUZZ_CORPUS/<target> when FUZZ_CORPUS is set
  corpus=$work/$t
  if [ -n "${FUZZ_CORPUS:-}" ]; then corpus=$FUZZ_CORPUS/$(basename "$exe"); mkdir -p "$corpus"
    # (not cp -n: coreutils 9.2-9.4 exit 1 when it skips a file)
    for f in "$work/$t"/*; do [ -e "$corpus/${f##*/}" ] || cp "$f" "$corpus/"; done
  fi
  # the whole log in test/fuzz/findings/<target>.log, its last lines here; a finding stops the script
  log=$root/findings/$(basename "$exe").log rc=0
  (cd "$root/findings" && "$exe" "$corpus" -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 ${FUZZ_ARGS:-} 2>&1 | tee "$log" | tail -15) || rc=$?
  if [ $rc -ne 0 ]; then
    echo "run.sh: $(basename "$exe") stopped with a finding (exit $rc): the input is in $root/findings/, the whole report in $log; the targets after it did not run" >&2
    exit $rc
  fi
done
