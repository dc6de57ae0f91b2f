#!/usr/bin/env bash
# make -f Makefile.shortcuts slurm-check (issue 42): brings up a real one-node Slurm on this
# machine (Debian's slurm-wlm and munge; a munged and a slurmctld + slurmd of our own, with their
# configuration, state and sockets in a temporary folder and ports 16817-16818, so an installed
# Slurm is left alone), submits every template of scripts/slurm with submit.sh (an array job, then
# its merge after afterok) and checks each end to end against one process's outputs (the checks of
# test/cli/slurm/templates.sh), then stops the daemons.  Needs root (slurmd runs jobs as the
# submitting user) and the test fixtures of a source checkout.
# Usage: scripts/slurm/slurm_check.sh BIN_DIR [DIGITS_CSV]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=$(cd "${1:-$root/build/bin}" && pwd)
digits=${2:-$root/../shared/data/vectors/digits.csv.gz}
for p in slurmctld slurmd munged sbatch squeue scontrol; do
  command -v $p > /dev/null || { echo "slurm-check: $p not found (Debian: slurm-wlm munge; make -f Makefile.shortcuts slurm-check installs them)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "slurm-check: run as root (slurmd starts the jobs)" >&2; exit 2; }
[ -f "$digits" ] || { echo "slurm-check: $digits is missing (the index template's data)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/icmlkit-slurm.XXXXXX)
chmod 755 "$tmp"
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
stop() {
  local pids=()
  for f in slurmd slurmctld munged; do [ -f "$tmp/$f.pid" ] && pids+=("$(cat "$tmp/$f.pid")"); done
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null || true; done
  for _ in $(seq 1 100); do  # gone before the folder they use is
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  rm -rf "$tmp"
}
trap stop EXIT
# munge: a key of this run, its own socket
dd if=/dev/urandom of="$tmp/munge.key" bs=1 count=1024 status=none
chmod 400 "$tmp/munge.key"
munged --force --key-file="$tmp/munge.key" --socket="$tmp/munge.socket" --pid-file="$tmp/munged.pid" \
  --log-file="$tmp/munged.log" --seed-file="$tmp/munged.seed"
mkdir -p "$tmp/state" "$tmp/spool"
cat > "$tmp/slurm.conf" << CONF
ClusterName=icmlkit-check
SlurmctldHost=$host
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$tmp/munge.socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=check Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 1 60); do
  sinfo -h -o %t 2> /dev/null | grep -qx idle && break
  sleep 1
done
sinfo -h -o %t | grep -qx idle || { echo "slurm-check: the node did not come up"; tail -20 "$tmp/slurmctld.log" "$tmp/slurmd.log"; exit 1; }
echo "slurm-check: Slurm $(sinfo -V | cut -d' ' -f2) up on $host ($cpus CPUs)"
work="$tmp/work"
mkdir -p "$work"
chmod 777 "$work"
cd "$work"
ICMLKIT_RUNNER=slurm bash "$root/test/cli/slurm/templates.sh" "$bin" "$here" "$root/test/cli/fixtures" "$digits"
