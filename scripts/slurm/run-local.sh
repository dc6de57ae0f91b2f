#!/usr/bin/env bash
# Runs a template's array tasks one after another on this machine, then its merge, with the
# variables Slurm would set (SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT,
# SLURM_ARRAY_TASK_MIN/MAX, SLURM_NTASKS, SLURM_CPUS_PER_TASK): what the tests run, and a way to
# try a template before submitting it.  A task that fails stops the run (as afterok would).
#   scripts/slurm/run-local.sh sweep|bootstrap|plora|index
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 1 ] || { echo "usage: run-local.sh sweep|bootstrap|plora|index" >&2; exit 2; }
kind=$1
export ICMLKIT_SLURM=$here
tasks=$(bash "$here/array_size.sh" "$kind")
[ "${tasks:-0}" -ge 1 ] || { echo "run-local.sh: no tasks for $kind" >&2; exit 1; }
for ((i = 0; i < tasks; ++i)); do
  SLURM_JOB_ID=$((1000 + i)) SLURM_ARRAY_JOB_ID=1000 SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_TASK_COUNT=$tasks SLURM_ARRAY_TASK_MIN=0 \
    SLURM_ARRAY_TASK_MAX=$((tasks - 1)) SLURM_NTASKS=1 SLURM_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1} bash "$here/$kind.sbatch" ||
    { echo "run-local.sh: $kind task $i of $tasks failed" >&2; exit 1; }
done
SLURM_JOB_ID=2000 SLURM_NTASKS=1 SLURM_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-1} bash "$here/$kind-merge.sbatch" ||
  { echo "run-local.sh: the $kind merge failed" >&2; exit 1; }
echo "$kind: $tasks tasks and the merge done"
