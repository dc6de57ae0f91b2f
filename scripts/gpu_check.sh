#!/usr/bin/env bash
# The GPU half of `make -f Makefile.shortcuts gpu-check` (after the CUDA build):
#   1. the CUDA-vs-CPU tests (doctest cases cuda:* and kernels:* of unit_tests);
#   2. bench-gpu-engine: copy bandwidth, batch-1 decode of a 1.24 B-parameter random model and the
#      share of the bandwidth it reaches, c(k) for k = 1..64, each for the batch-invariant GEMM
#      chunk of 32 rows (the default, which the targets read), 16 and 64 rows, and the plain mode;
#   3. FAFO vs AR on the demo model data/models/kjv7m.h5 with fafo-generate --device cuda (chunks
#      of 32, 16 and 64 rows through ICMLKIT_CUDA_INVARIANT_ROWS, and without CUDA graphs), with the
#      decoder's and the engine's host time per step and forward;
#   4. bench-decode-host: the decoder's own host time per step on this machine's CPU (forwards
#      replayed, nothing computed);
#   5. bench-nccl-chain: data parallelism's chained gradient reduction over NCCL (issue 41) against
#      the CPU left fold, bit for bit, on 1 .. min(4, GPUs) ranks (where NCCL was found at build).
# Prints everything to stdout; with $OUT set, also writes $OUT/gpu_check.json and the parts, each
# part as soon as it is done.  Each part has a time limit in seconds: GPU_CHECK_TEST_SECONDS (180),
# GPU_CHECK_BENCH_SECONDS (180), GPU_CHECK_FAFO_SECONDS (60 per fafo-generate run), the defaults
# times GPU_CHECK_TIME_SCALE (1); a part cut by its limit says "timed out after N s" on stderr and
# in its JSON.
# Usage: scripts/gpu_check.sh BUILD_DIR
#        scripts/gpu_check.sh --bundle BUNDLE   (BUNDLE: a directory or .tar.xz from
#          scripts/gpu_bundle.sh, for a GPU machine without our Debian libraries or a
#          package registry: its programs run with its own libraries and the machine's CUDA)
#        scripts/gpu_check.sh --emulated BIN_DIR UNIT_TESTS   (a rehearsal without a GPU: the
#          programs and unit tests built against the CUDA emulator, test/cuda_emu; a tiny model,
#          a few tokens; the numbers mean nothing, the plumbing is what it checks; ends with
#          "gpu-check rehearsal: ok" when every part ran and FAFO was identical to AR)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
emulated=false
tests='cuda:*,kernels:*'
bench_args=(--ctx 512 --tokens 128 --kmax 64 --reps 5)
fafo_tokens=256
usage="usage: gpu_check.sh BUILD_DIR | --bundle BUNDLE | --emulated BIN_DIR UNIT_TESTS"
case "${1:-}" in
  --bundle|--emulated|"") ;;
  -*) echo "gpu-check: unknown option ${1} ($usage)" >&2; exit 2;;
esac
if [ "${1:-}" = "--emulated" ]; then
  emulated=true
  [ $# -eq 3 ] || { echo "gpu-check: --emulated takes a program folder and the unit-test program ($usage)" >&2; exit 2; }
  bin=$2
  unit=$3
  for p in "$bin/bench-gpu-engine" "$bin/fafo-generate" "$unit"; do
    [ -x "$p" ] || { echo "gpu-check: no program $p (build the emulator's targets: make -f Makefile.shortcuts gpu-rehearsal)" >&2; exit 2; }
  done
  tests='cuda: refused*,kernels:*'  # the emulated build runs every CUDA test as its own ctest case
  bench_args=(--model tiny --ctx 40 --tokens 4 --kmax 3 --reps 1 --copy-mib 4)
  fafo_tokens=24
elif [ "${1:-}" = "--bundle" ]; then
  [ $# -eq 2 ] || { echo "gpu-check: --bundle takes one bundle ($usage)" >&2; exit 2; }
  bundle=$2
  [ -e "$bundle" ] || { echo "gpu-check: no bundle at $bundle (make -f Makefile.shortcuts gpu-bundle makes one)" >&2; exit 2; }
  mkdir -p "$tmp/bundle"
  if [ -f "$bundle" ]; then
    tar -xJf "$bundle" -C "$tmp/bundle" --strip-components=1 || { echo "gpu-check: cannot unpack $bundle" >&2; exit 2; }
  else
    cp -a "$bundle/." "$tmp/bundle/" || { echo "gpu-check: cannot read $bundle" >&2; exit 2; }
  fi
  bundle=$tmp/bundle
  [ -x "$bundle/bin/unit_tests" ] || { echo "gpu-check: not a gpu_bundle.sh bundle (no bin/unit_tests)" >&2; exit 2; }
  # The bundled libstdc++ (GCC 12) needs glibc 2.36; a machine whose own libstdc++ is at least
  # as new (GLIBCXX_3.4.30) keeps its own, which matches its C library.
  sys_cxx=$(ldconfig -p 2>/dev/null | awk '/libstdc\+\+\.so\.6 .*x86-64/ {print $NF; exit}')
  if [ -n "$sys_cxx" ] && grep -q 'GLIBCXX_3\.4\.30' "$sys_cxx" 2>/dev/null; then
    rm -f "$bundle/lib/libstdc++.so.6" "$bundle/lib/libgcc_s.so.1"
  fi
  cat "$bundle/MANIFEST" 2>/dev/null
  bin=$bundle/bin
  unit=$bin/unit_tests
  # CUDA's runtime and cuBLAS from the machine: the toolkit's folders, else a pip wheel's.
  cuda_libs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libcublas.so.13" ] && cuda_libs="$cuda_libs:$d"
  done
  if [ -z "$cuda_libs" ]; then
    d=$(find /usr /opt -name 'libcublas.so.13' -path '*nvidia*' 2>/dev/null | head -1)
    [ -n "$d" ] && cuda_libs=":$(dirname "$d")"
    d=$(find /usr /opt -name 'libcudart.so.13' 2>/dev/null | head -1)
    [ -n "$d" ] && cuda_libs="$cuda_libs:$(dirname "$d")"
  fi
  export LD_LIBRARY_PATH="$bundle/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export PATH="$bin:$PATH"
  missing=$(for p in "$bin"/*; do ldd "$p" 2>/dev/null | grep 'not found'; done | sort -u)
  if [ -n "$missing" ]; then
    echo "gpu-check: libraries not found with LD_LIBRARY_PATH=$LD_LIBRARY_PATH:" >&2
    echo "$missing" >&2
    exit 2
  fi
  "$bin/lm-generate" --version || { echo "gpu-check: the bundled lm-generate does not start here" >&2; exit 2; }
else
  build=${1:-build-gpu}
  bin=$build/bin
  unit=$build/test/unit/unit_tests
fi
# The demo-model test reads the repository's data/ (compiled-in path, overridable).
export ICMLKIT_REPO_DATA="$root/data"

# Each part runs under a time limit (seconds, overridable), so a hung part costs its limit and
# not the rest of the run; after each part what exists so far is copied to $OUT, so a run cut
# short by the device's own limit still returns the parts it finished.
# GPU_CHECK_TIME_SCALE (an integer, default 1) multiplies the default limits: the sanitizer build's
# rehearsal sets 10, its programs running several times slower.
scale=${GPU_CHECK_TIME_SCALE:-1}
limit_tests=${GPU_CHECK_TEST_SECONDS:-$(( 180 * scale ))}
limit_bench=${GPU_CHECK_BENCH_SECONDS:-$(( 180 * scale ))}
limit_fafo=${GPU_CHECK_FAFO_SECONDS:-$(( 60 * scale ))}
# The reason a limited command failed: "timed out after N s (VAR)" for timeout's exit 124.
why() {  # $1 = exit code, $2 = limit, $3 = its variable, $4 = the fallback text
  if [ "$1" = 124 ]; then echo "timed out after $2 s ($3)"; else echo "$4"; fi
}
keep() {
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT"
  for f in ctest.log engine.json fafo.json decode_host.json nccl.json gpu_check.json sanitizer.log; do
    [ -f "$tmp/$f" ] && cp "$tmp/$f" "$OUT/"
  done
  return 0
}

if $emulated; then
  echo "gpu-check: rehearsal on the CUDA emulator (CPU): no number below is a GPU number"
elif ! nvidia-smi -L > /dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L fails): the CUDA tests would only skip and the benchmarks cannot run" >&2
  exit 2
else
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv
fi

echo "== gpu-check: CUDA tests"
$emulated && echo "(emulated: only the refusal and cuBLAS cases here; ctest runs every other CUDA case as its own cuda-emu/ entry)"
rc=0
timeout "$limit_tests" "$unit" -tc="$tests" > "$tmp/ctest.log" 2>&1 || rc=$?
if [ $rc -eq 0 ]; then tests_ok=true; else
  tests_ok=false status=1
  echo "gpu-check: the CUDA tests failed: $(why $rc "$limit_tests" GPU_CHECK_TEST_SECONDS "exit $rc")" >&2
fi
keep
grep -E "skipped|TEST CASE|test cases|assertions|ERROR|FAILED|values:|INFO|gap|margin" "$tmp/ctest.log" | head -200 || tail -n 40 "$tmp/ctest.log"

# Optional: the CUDA tests under compute-sanitizer (GPU_CHECK_SANITIZE=memcheck|racecheck|
# synccheck|initcheck, ICMLKIT_CUDA_GRAPHS=0 so every launch is seen), at most
# GPU_CHECK_SANITIZE_SECONDS (150) so the whole check stays inside one device command.
if [ -n "${GPU_CHECK_SANITIZE:-}" ]; then
  echo "== gpu-check: compute-sanitizer --tool $GPU_CHECK_SANITIZE on the CUDA tests"
  if command -v compute-sanitizer > /dev/null; then
    ICMLKIT_CUDA_GRAPHS=0 timeout "${GPU_CHECK_SANITIZE_SECONDS:-150}" compute-sanitizer --tool "$GPU_CHECK_SANITIZE" \
      --error-exitcode 3 "$unit" -tc='cuda:*' > "$tmp/sanitizer.log" 2>&1
    rc=$?
    tail -n 30 "$tmp/sanitizer.log"
    case $rc in 0) echo "compute-sanitizer: clean";; 124) echo "compute-sanitizer: stopped at the time limit";;
      *) echo "compute-sanitizer: errors (exit $rc)"; status=1;; esac
  else
    echo "compute-sanitizer not found: skipped"
  fi
fi

echo "== gpu-check: bench-gpu-engine"
rc=0
timeout "$limit_bench" "$bin/bench-gpu-engine" "${bench_args[@]}" > "$tmp/engine.json" || rc=$?
if [ $rc -eq 0 ]; then
  cat "$tmp/engine.json"
else
  e="bench-gpu-engine failed: $(why $rc "$limit_bench" GPU_CHECK_BENCH_SECONDS "exit $rc")"
  echo "gpu-check: $e" >&2
  jq -n --arg e "$e" '{error: $e}' > "$tmp/engine.json"
  status=1
fi
keep

echo "== gpu-check: FAFO vs AR on kjv7m (fafo-generate --device cuda)"
model=$root/data/models/kjv7m.h5
prompt="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep."
fafo_args=(--method fafo --schedule fixed --window 5 --ngram 4 --guesses 5 --kv-policy streaming --kv-budget 64 -n "$fafo_tokens" --ignore-eos --compare ar --no-text -q)
# One run per setting: fafo_run NAME DEVICE [VAR=VALUE ...]; its summary goes to $tmp/fafo_NAME.json,
# or {"error": ...} when it fails (the other settings still run).
fafo_run() {
  local name=$1 device=$2
  shift 2
  local rc=0
  timeout "$limit_fafo" env "$@" "$bin/fafo-generate" "$model" --device "$device" --prompt "$prompt" "${fafo_args[@]}" -o "$tmp/fafo_$name.jsonl" \
    2> "$tmp/fafo_$name.err" || rc=$?
  if [ $rc -eq 0 ] && jq -c 'select(.summary) | .summary' "$tmp/fafo_$name.jsonl" > "$tmp/fafo_$name.json"; then
    return 0
  fi
  local e
  e="fafo-generate ($name) failed: $(why $rc "$limit_fafo" GPU_CHECK_FAFO_SECONDS "$(tail -n 3 "$tmp/fafo_$name.err" 2>/dev/null)")"
  echo "gpu-check: $e" >&2
  jq -n --arg e "$e" '{error: $e}' > "$tmp/fafo_$name.json"
  status=1
}
fafo_run cuda cuda
fafo_run cuda_no_graphs cuda ICMLKIT_CUDA_GRAPHS=0
fafo_run cuda_invariant_rows_16 cuda ICMLKIT_CUDA_INVARIANT_ROWS=16
fafo_run cuda_invariant_rows_64 cuda ICMLKIT_CUDA_INVARIANT_ROWS=64
fafo_run cpu cpu
# Per run: speeds, the decoder's own host time per step, and on CUDA the engine's host
# preparation per forward (host_prep_ns / forwards), its settings and graph counters.
jq -n --argjson n_tok "$fafo_tokens" --slurpfile g "$tmp/fafo_cuda.json" --slurpfile n "$tmp/fafo_cuda_no_graphs.json" \
      --slurpfile r16 "$tmp/fafo_cuda_invariant_rows_16.json" --slurpfile r64 "$tmp/fafo_cuda_invariant_rows_64.json" \
      --slurpfile c "$tmp/fafo_cpu.json" '
  def us: if . == null then null else . * 1e6 end;
  def prep($k): if $k.forwards then $k.host_prep_ns / $k.forwards / 1000 else null end;
  def run: if .error then . else
    {fafo_tokens_per_s: .decode_tokens_per_s, ar_tokens_per_s: .compare.decode_tokens_per_s, speedup, identical_to_ar,
     mean_accepted_per_step, decoder_host_us_per_step: (.mean_host_seconds_per_step | us),
     ar_decoder_host_us_per_step: (.compare.mean_host_seconds_per_step | us), engine_settings}
    + (if .engine_counters then {engine_counters, ar_engine_counters: .compare.engine_counters,
         engine_host_prep_us_per_forward: prep(.engine_counters), ar_engine_host_prep_us_per_forward: prep(.compare.engine_counters)}
       else {} end) end;
  {model: "data/models/kjv7m.h5", flags: "--method fafo --schedule fixed --window 5 --ngram 4 --guesses 5 --kv-policy streaming --kv-budget 64 -n \($n_tok) --ignore-eos --compare ar",
   cuda: ($g[0] | run + (if .error then {} else {device} end)),
   cuda_no_graphs: ($n[0] | run), cuda_invariant_rows_16: ($r16[0] | run), cuda_invariant_rows_64: ($r64[0] | run),
   cpu: ($c[0] | run)}' > "$tmp/fafo_summary.json" || { echo '{"error": "could not summarise the FAFO runs"}' > "$tmp/fafo_summary.json"; status=1; }
# The same tokens on both devices? (CUDA equals CPU within tolerance, not bitwise.)
same=null
rc=0
timeout "$limit_fafo" "$bin/fafo-generate" "$model" --device cuda --prompt "$prompt" --method ar -n "$fafo_tokens" --ignore-eos -q > "$tmp/ar_gpu.txt" &&
  timeout "$limit_fafo" "$bin/fafo-generate" "$model" --device cpu --prompt "$prompt" --method ar -n "$fafo_tokens" --ignore-eos -q > "$tmp/ar_cpu.txt" || rc=$?
if [ $rc -eq 0 ]; then
  same=$(cmp -s "$tmp/ar_gpu.txt" "$tmp/ar_cpu.txt" && echo true || echo false)
else
  echo "gpu-check: the greedy CUDA-vs-CPU text runs failed: $(why $rc "$limit_fafo" GPU_CHECK_FAFO_SECONDS "exit $rc")" >&2
  status=1
fi
jq --argjson same "$same" '. + {ar_text_cuda_equals_cpu: $same}' "$tmp/fafo_summary.json" > "$tmp/fafo.json"
cat "$tmp/fafo.json"
keep

# The decoder's host work per step with the forwards replayed (no model computed), on this
# machine's CPU: what the GPU waits for between steps on the decoder's side.
echo "== gpu-check: bench-decode-host (the decoder's host time per step, CPU)"
if [ -x "$bin/bench-decode-host" ] && timeout "$limit_fafo" "$bin/bench-decode-host" "$model" --tokens "$fafo_tokens" > "$tmp/decode_host.json"; then
  cat "$tmp/decode_host.json"
else
  echo '{"error": "bench-decode-host failed or is missing"}' > "$tmp/decode_host.json"
  status=1
fi

# Data parallelism's chained reduction over NCCL (issue 41) against the CPU fold, bit for bit, on
# every GPU count up to 4 here.  Built where NCCL was found; a bundle does not carry it (libnccl is
# 200 MB).
echo "== gpu-check: bench-nccl-chain (NCCL chained reduction vs the CPU fold)"
if ! $emulated && [ -x "$bin/bench-nccl-chain" ]; then
  nccl_rc=0
  timeout "$limit_fafo" "$bin/bench-nccl-chain" > "$tmp/nccl.json" || nccl_rc=$?
  [ -s "$tmp/nccl.json" ] || echo "{\"error\": \"bench-nccl-chain: $(why $nccl_rc "$limit_fafo" GPU_CHECK_FAFO_SECONDS "exit $nccl_rc")\"}" > "$tmp/nccl.json"
  [ $nccl_rc -eq 0 ] || status=1
else
  echo '{"skipped": "bench-nccl-chain not built here (no NCCL, a bundle, or the emulator)"}' > "$tmp/nccl.json"
fi
cat "$tmp/nccl.json"

jq -n --slurpfile e "$tmp/engine.json" --slurpfile f "$tmp/fafo.json" --slurpfile h "$tmp/decode_host.json" --argjson ok "$tests_ok" \
  --slurpfile nc "$tmp/nccl.json" \
  '{gpu_check: {cuda_tests_passed: $ok, engine: $e[0], fafo_kjv7m: $f[0], decode_host: $h[0], nccl_chain: $nc[0],
    by_mode: {decode_b1_share_of_bandwidth: ($e[0].decode_b1 // {} | with_entries(select(.value | type == "object" and has("share_of_bandwidth")))
                                              | map_values(.share_of_bandwidth)),
              c16: ($e[0].c_k // {} | with_entries(select(.value | type == "object" and has("c16"))) | map_values(.c16))},
    targets: {decode_b1_share_ge_0_70: (($e[0].decode_b1.batch_invariant.share_of_bandwidth // 0) >= 0.70),
              c16_le_1_2: ($e[0].c_k.batch_invariant.c16 | if . == null then null else . <= 1.2 end),
              fafo_speedup_ge_1_3: (($f[0].cuda.speedup // 0) >= 1.3),
              fafo_identical: ($f[0].cuda.identical_to_ar // false)}}}' > "$tmp/gpu_check.json" ||
  { echo "gpu-check: could not assemble the summary (jq failed)" >&2; status=1; }
echo "== gpu-check: summary"
cat "$tmp/gpu_check.json"
keep
if $emulated && [ $status -eq 0 ]; then
  if jq -e '.gpu_check | .cuda_tests_passed and (.engine.decode_b1.batch_invariant.tokens_per_s > 0)
        and (.engine.c_k.batch_invariant.c | length > 0) and .fafo_kjv7m.cuda.identical_to_ar
        and .fafo_kjv7m.cuda_no_graphs.identical_to_ar and (.fafo_kjv7m.ar_text_cuda_equals_cpu | type == "boolean")
        and (.fafo_kjv7m.cuda.engine_host_prep_us_per_forward > 0) and (.decode_host.methods.fafo.host_us_per_step > 0)' \
        "$tmp/gpu_check.json" > /dev/null; then
    echo "gpu-check rehearsal: ok"
  else
    echo "gpu-check rehearsal: the summary lacks a part (see above)"
    status=1
  fi
fi
[ $status -eq 0 ] || echo "gpu-check: a part failed (exit $status): see the lines above" >&2
exit $status
