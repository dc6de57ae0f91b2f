#!/usr/bin/env bash
# Benchmark: SOSMC-ULA reward tuning of the hexagon Gaussian mixture at N = 10,000 particles
# (5,000 reference samples, Adam, beta 0.001) -- smc-optimize vs. a JAX port of the reference
# loop (bench/peer/sosmc_gmm_jax.py; akyildiz-group/SOSMC's sosmc_ula in
# reward_tuning/langevin_processes/experiments.ipynb, configuration SOSMC-ULA_Adam: variance
# 1, gamma_0 0.1 clipped to [0.001, 0.99], adapt factor 1.01; the notebook itself is not run
# here), measured in the same run on the same CPU threads.  Figure: theta updates per second.
#
# Usage: bash bench/smc_gmm.sh [--quick] [--reps R] [BIN_DIR]
#   BIN_DIR   default ./build/bin
#   --quick   50 steps instead of 200, one repetition
#   --reps R  repetitions (default 3): each repetition runs ours and the peer interleaved at
#             one thread, then both at all threads; the best of the repetitions is reported
#             (steps/s and steps per CPU-second separately), and every run is listed
# The peer's pinned PyPI dependencies (jax, jaxlib 0.4.30, optax 0.2.4, numpy 2.0.2; the
# reference's requirements.txt) are installed into build/bench-venv-smc on first use; without
# network access the peer is reported as skipped.  Ours runs with --threads = nproc; XLA
# uses every core by default.  "speedup" is the wall-clock steps/s ratio; "speedup_cpu_time"
# the ratio of steps per process-CPU-second (robust when the machine is shared).
# Differences in work: ours keeps its 5,000 reference samples fixed (the peer, like the
# reference, redraws them every step) and works in double precision (the peer in float32).
# The peer's --run-mode time (the reference's Python loop over a jitted step) measured the same
# steps/s as its lax.scan mode at N = 10,000, so the bench runs the scan.
# Prints ONE JSON object on stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
peer_py="$here/peer/sosmc_gmm_jax.py"
venv="$root/build/bench-venv-smc"

steps=200
reps=3
pos=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) steps=50; reps=1 ;;
    --reps) reps="$2"; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) pos+=("$1") ;;
  esac
  shift
done
bin_dir="${pos[0]:-./build/bin}"
smc="$bin_dir/smc-optimize"
threads="$(nproc)"
N=10000

if ! command -v jq >/dev/null 2>&1; then echo '{"skipped": "jq not found"}'; exit 0; fi
if [[ ! -x "$smc" ]]; then echo "smc_gmm.sh: $smc not found or not executable (build first)" >&2; exit 1; fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"

# --- ours ------------------------------------------------------------------
ours_run() {  # $1 = threads; OMP_WAIT_POLICY from the caller's environment
  local cmd=("$smc" --problem gmm-reward --method sosmc --optimizer adam --lr 0.1 --step-size 0.1
             --beta 0.001 --particles "$N" --n-ref 5000 --steps "$steps" --threads "$1" -q -o "$tmp/ours$1.json")
  echo "[bench] ${cmd[*]}" >&2
  "${cmd[@]}"
  jq -c --argjson t "$1" '{steps, particles, seconds, steps_per_second, cpu_seconds,
                           steps_per_cpu_second: (.steps / .cpu_seconds), mean_reward, threads: $t}' "$tmp/ours$1.json"
}

# --- peer ------------------------------------------------------------------
peer_skip=""
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import jax, optax' >/dev/null 2>&1; then
  echo "[bench] installing jax 0.4.30 + optax 0.2.4 into $venv ..." >&2
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "jax==0.4.30" "jaxlib==0.4.30" "optax==0.2.4" "numpy==2.0.2"; } >&2; then
    peer_skip="cannot install jax/optax into $venv (no network?)"
  fi
fi
peer_run() {  # $1 = 1 (XLA single-threaded) or all
  local flags=""
  [[ "$1" == 1 ]] && flags="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
  echo "[bench] peer: JAX port of sosmc_ula (lax.scan, jit), N=$N, $steps steps, XLA threads $1 ..." >&2
  # Run outside the repository so nothing is picked up from the working tree.
  (cd "$tmp" && XLA_FLAGS="$flags" "$venv/bin/python" "$peer_py" --particles "$N" --n-ref 5000 --steps "$steps" \
     --beta 0.001 --lr 0.1 --gamma 0.1) | jq -c --arg t "$1" '. + {threads: (if $t == "1" then 1 else .threads end)}'
}

# --- interleaved repetitions ---------------------------------------------------
runs="$tmp/runs.jsonl"
: > "$runs"
for ((r = 1; r <= reps; r++)); do
  ours_run 1 | jq -c --argjson r "$r" '{who: "ours", mode: "one_thread", rep: $r} + .' >> "$runs"
  if [[ -z "$peer_skip" ]]; then
    { peer_run 1 | jq -c --argjson r "$r" '{who: "peer", mode: "one_thread", rep: $r} + .' >> "$runs"; } || peer_skip="peer script failed"
  fi
  ours_run "$threads" | jq -c --argjson r "$r" '{who: "ours", mode: "all_threads", rep: $r} + .' >> "$runs"
  # The same with idle OpenMP threads sleeping instead of spinning (libgomp reads the policy at
  # start-up, so only the environment can set it): on a machine with more runnable processes
  # than cores, spinning workers wait whole time slices at the per-step barrier.
  OMP_WAIT_POLICY=passive ours_run "$threads" | jq -c --argjson r "$r" '{who: "ours", mode: "all_threads_passive", rep: $r} + .' >> "$runs"
  if [[ -z "$peer_skip" ]]; then
    { peer_run all | jq -c --argjson r "$r" '{who: "peer", mode: "all_threads", rep: $r} + .' >> "$runs"; } || peer_skip="peer script failed"
  fi
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"

jq -cs --arg skip "$peer_skip" --argjson nproc "$(nproc)" --arg cpu "$cpu" --arg lb "$load_before" --arg la "$load_after" \
   --argjson reps "$reps" '
  def best($who; $mode): [.[] | select(.who == $who and .mode == $mode)]
    | {steps_per_second: (map(.steps_per_second) | max), steps_per_cpu_second: (map(.steps_per_cpu_second) | max),
       threads: (.[0].threads), runs: length};
  . as $all
  | {benchmark: "sosmc-ula-gmm-hexagon-reward-tuning",
     problem: {particles: 10000, n_ref: 5000, components: 6, dim: 2, variance: 1, optimizer: "adam", lr: 0.1,
               step_size: 0.1, step_size_clip: [0.001, 0.99], adapt_factor: 1.01, beta: 0.001},
     repetitions: $reps,
     ours: {one_thread: ($all | best("ours"; "one_thread")), all_threads: ($all | best("ours"; "all_threads")),
            all_threads_omp_passive: ($all | best("ours"; "all_threads_passive"))}}
  + ( if $skip != "" or ([$all[] | select(.who == "peer")] | length) == 0 then {peer_skipped: $skip}
      else ($all | best("peer"; "one_thread")) as $q1 | ($all | best("peer"; "all_threads")) as $qn
      | ($all | best("ours"; "one_thread")) as $o1 | ($all | best("ours"; "all_threads")) as $on
      | {peer: {name: "JAX port of the reference sosmc_ula loop (jit + lax.scan; not the notebook itself)",
                one_thread: $q1, all_threads: $qn,
                jax_version: ([$all[] | select(.who == "peer")][0].jax_version)},
         speedup_one_thread: ($o1.steps_per_second / $q1.steps_per_second),
         speedup_all_threads: ($on.steps_per_second / $qn.steps_per_second),
         speedup_cpu_time_one_thread: ($o1.steps_per_cpu_second / $q1.steps_per_cpu_second),
         speedup_cpu_time_all_threads: ($on.steps_per_cpu_second / $qn.steps_per_cpu_second),
         speedup_all_threads_omp_passive: (($all | best("ours"; "all_threads_passive")).steps_per_second / $qn.steps_per_second),
         target: "speedup >= 10"}
      end )
  + {runs: [$all[] | {who, mode, rep, threads, steps_per_second, steps_per_cpu_second}],
     machine: {nproc: $nproc, cpu: $cpu, loadavg_before: $lb, loadavg_after: $la}}' "$runs"
