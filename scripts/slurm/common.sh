# Shared by the sbatch templates of scripts/slurm (issue 42): where the programs are, and the task's
# place in its job array.  Sourced, not run.
#   ICMLKIT_BIN   folder of the icmlkit programs (default: the folder of the first one on PATH)
set -euo pipefail
bin=${ICMLKIT_BIN:-$(dirname "$(command -v lm-train 2> /dev/null || echo ./build/bin/lm-train)")}
task=${SLURM_ARRAY_TASK_ID:-0}
tasks=${SLURM_ARRAY_TASK_COUNT:-1}
threads=${SLURM_CPUS_PER_TASK:-1}
need() { for v in "$@"; do [ -n "${!v:-}" ] || { echo "$(basename "$0"): set $v (see scripts/slurm/README.md)" >&2; exit 2; }; done; }
