#!/usr/bin/env bash
# Benchmark: SOSMC-ULA reward tuning of the hexagon Gaussian mixture at N = 10,000 particles
# (5,000 reference samples, Adam, beta 0.001) -- smc-optimize vs. a JAX port of the reference
# loop (bench/peer/sosmc_gmm_jax.py; akyildiz-group/SOSMC's sosmc_ula in
# reward_tuning/langevin_processes/experiments.ipynb, whose notebook cannot be fetched or run
# here), measured in the same run on the same CPU threads.  Figure: theta updates per second.
#
# Usage: bash bench/smc_gmm.sh [--quick] [BIN_DIR]
#   BIN_DIR   default ./build/bin
#   --quick   50 steps instead of 200
# The peer's pinned PyPI dependencies (jax, jaxlib 0.4.30, optax 0.2.4, numpy 2.0.2; the
# reference's requirements.txt) are installed into build/bench-venv on first use; without
# network access the peer is reported as skipped.  Ours runs with --threads = nproc; XLA
# uses every core by default.  Prints ONE JSON object on stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
peer_py="$here/peer/sosmc_gmm_jax.py"
venv="$root/build/bench-venv"

steps=200
pos=()
for arg in "$@"; do
  case "$arg" in
    --quick) steps=50 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) pos+=("$arg") ;;
  esac
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
ours_cmd=("$smc" --problem gmm-reward --method sosmc --optimizer adam --lr 0.1 --step-size 0.1
          --beta 0.001 --particles "$N" --n-ref 5000 --steps "$steps" --threads "$threads" -q -o "$tmp/ours.json")
echo "[bench] ${ours_cmd[*]}" >&2
"${ours_cmd[@]}"
ours="$(jq -c --argjson t "$threads" '{steps, particles, seconds, steps_per_second, mean_reward, threads: $t}' "$tmp/ours.json")"

# --- peer ------------------------------------------------------------------
peer_json=""; peer_skip=""
if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import jax, optax' >/dev/null 2>&1; then
  echo "[bench] installing jax 0.4.30 + optax 0.2.4 into $venv ..." >&2
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q "jax==0.4.30" "jaxlib==0.4.30" "optax==0.2.4" "numpy==2.0.2"; } >&2; then
    peer_skip="cannot install jax/optax into $venv (no network?)"
  fi
fi
if [[ -z "$peer_skip" ]]; then
  echo "[bench] peer: JAX port of sosmc_ula (lax.scan, jit), N=$N, $steps steps ..." >&2
  # Run outside the repository so nothing is picked up from the working tree.
  if ! peer_json="$(cd "$tmp" && "$venv/bin/python" "$peer_py" --particles "$N" --n-ref 5000 --steps "$steps" \
                      --beta 0.001 --lr 0.1 --gamma 0.1)"; then
    peer_skip="peer script failed"; peer_json=""
  fi
fi
load_after="$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"

jq -cn --argjson ours "$ours" --arg peer "$peer_json" --arg skip "$peer_skip" \
   --argjson nproc "$(nproc)" --arg cpu "$cpu" --arg lb "$load_before" --arg la "$load_after" '
  {benchmark: "sosmc-ula-gmm-hexagon-reward-tuning",
   problem: {particles: 10000, n_ref: 5000, components: 6, dim: 2, optimizer: "adam", lr: 0.1,
             step_size: 0.1, beta: 0.001},
   ours: $ours}
  + ( if $peer == "" then {peer_skipped: $skip}
      else ($peer | fromjson) as $p
      | {peer: ({name: "JAX port of the reference sosmc_ula loop (jit + lax.scan; not the notebook itself)"}
                + ($p | {steps, particles, seconds, steps_per_second, compile_seconds, final_reward, jax_version, threads})),
         speedup: ($ours.steps_per_second / $p.steps_per_second)}
      end )
  + {machine: {nproc: $nproc, cpu: $cpu, loadavg_before: $lb, loadavg_after: $la}}'
