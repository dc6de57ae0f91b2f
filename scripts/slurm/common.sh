# Shared by the sbatch templates of scripts/slurm (issue 42): where the programs are, and the task's
# place in its job array.  Sourced, not run.
#   ICMLKIT_BIN   folder of the icmlkit programs (default: this checkout's build/bin, else the folder
#                 of lm-train on PATH)
set -euo pipefail
if [ -n "${ICMLKIT_BIN:-}" ]; then
  bin=$ICMLKIT_BIN
elif [ -x "${ICMLKIT_SLURM:-$(dirname "${BASH_SOURCE[0]}")}/../../build/bin/lm-train" ]; then
  bin=$(cd "${ICMLKIT_SLURM:-$(dirname "${BASH_SOURCE[0]}")}/../../build/bin" && pwd)
else
  bin=$(dirname "$(command -v lm-train 2> /dev/null || echo /nonexistent/lm-train)")
fi
[ -x "$bin/lm-train" ] || { echo "scripts/slurm: no icmlkit programs in $bin: set ICMLKIT_BIN" >&2; exit 2; }
task=${SLURM_ARRAY_TASK_ID:-0}
tasks=${SLURM_ARRAY_TASK_COUNT:-1}
threads=${SLURM_CPUS_PER_TASK:-1}
need() { for v in "$@"; do [ -n "${!v:-}" ] || { echo "$(basename "$0"): set $v (see scripts/slurm/README.md)" >&2; exit 2; }; done; }
