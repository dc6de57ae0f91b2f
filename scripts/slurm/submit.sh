#!/usr/bin/env bash
# Submits one of the job-array templates of scripts/slurm and its merge step (issue 42):
#   scripts/slurm/submit.sh sweep|bootstrap|plora|index [sbatch options...]
# The array's size comes from the inputs: the grid's cells (lm-sweep --dry-run), TASKS for the
# bootstrap, the schedule's workers (plora), SHARDS (index); the merge runs after every task
# succeeded (--dependency=afterok).  The templates' inputs are environment variables (see each
# template and README.md), exported to the jobs.  Prints the two job ids.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 1 ] || { echo "usage: submit.sh sweep|bootstrap|plora|index [sbatch options...]" >&2; exit 2; }
kind=$1
shift
export ICMLKIT_SLURM=$here
tasks=$(bash "$here/array_size.sh" "$kind")
[ "$tasks" -ge 1 ] || { echo "submit.sh: no tasks for $kind" >&2; exit 1; }
array=$(sbatch --parsable --export=ALL --array=0-$((tasks - 1)) "$@" "$here/$kind.sbatch")
# the merge's dependency last, so that no option given here replaces it
if ! merge=$(sbatch --parsable --export=ALL "$@" --dependency=afterok:"${array%%;*}" "$here/$kind-merge.sbatch"); then
  scancel "${array%%;*}" 2> /dev/null || true
  echo "submit.sh: the merge job was refused; array job ${array%%;*} cancelled" >&2
  exit 1
fi
echo "$kind: array job ${array%%;*} ($tasks tasks), merge job ${merge%%;*}"
