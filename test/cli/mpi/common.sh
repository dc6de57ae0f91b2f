# Shared by the data-parallel lm-train cases (issue 41); sourced with LM_TRAIN as $1.  Skips (77)
# where mpirun is missing or lm-train was built without MPI.
set -u
lm=$1
command -v mpirun > /dev/null || { echo "mpirun not found (Debian: openmpi-bin): skipped"; exit 77; }
"$lm" --version | grep -q '^mpi: on' || { echo "lm-train was built without MPI: skipped"; exit 77; }
# OpenMPI refuses root unless told; CI machines run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under ASan (make test-sanitize), OpenMPI's own allocations still held at MPI_Finalize, many in
# plugins it has already unloaded (so no suppression can name them), are reported as leaks: the
# ranks run without leak checks; our code's leaks are checked by the one-process lm-train cases.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
# ranks of one thread each, more ranks than cores allowed, not bound to a core
mpi() { local n=$1; shift; mpirun -np "$n" --oversubscribe --bind-to none "$@"; }
# the checkpoint's state SHA-256 (weights and optimizer state, as lm-train recorded them)
state() { h5dump -a /train/state_sha256 "$1" | sed -n 's/.*(0): "\(.*\)".*/\1/p'; }
fail() { echo "$*"; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
corpus=$here/../fixtures/sweep/kjv-genesis.tsv.gz
# a tiny model on Genesis: steps of 6 micro-batches of 2 windows of 32 tokens
data="$corpus --column 2 --doc-column 1 --vocab-size 400 --threads 1 -q"
shape="--d-model 32 --n-heads 2 --n-kv-heads 1 --d-ff 64 --n-ctx 32"
tiny="$data $shape --n-layers 2 --batch 2 --accum 6 --eval-every 4"
