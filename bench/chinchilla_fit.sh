#!/usr/bin/env bash
# Benchmark: Chinchilla "Approach 3" fit (4,500-start grid, Huber delta=1e-3 on
# log-loss residuals) -- infolaw-fit vs. a plain SciPy L-BFGS-B peer
# (bench/peer/chinchilla_scipy.py, Epoch AI's replication procedure).
#
# Usage: bash bench/chinchilla_fit.sh [--quick] [BIN_DIR] [DATA_CSV]
#   BIN_DIR   default ./build/bin
#   DATA_CSV  default ../shared/data/scaling/datablations_runs.csv
#   --quick   peer runs only 450 of the 4,500 starts (every 10th); its
#             seconds are extrapolated x10 and marked as such.
# Prints ONE JSON object on stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
peer_py="$here/peer/chinchilla_scipy.py"
python=/usr/bin/python3

quick=0
pos=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) pos+=("$arg") ;;
  esac
done
bin_dir="${pos[0]:-./build/bin}"
data="${pos[1]:-../shared/data/scaling/datablations_runs.csv}"
fit="$bin_dir/infolaw-fit"

# JSON helpers: jq when available, else Debian's python3.
have_jq=0; command -v jq >/dev/null 2>&1 && have_jq=1
json_str() {  # json_str TEXT -> JSON string literal
  if (( have_jq )); then jq -cn --arg s "$1" '$s'
  else "$python" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; fi
}
json_get() {  # json_get JSON DOTTED.PATH -> value (raw), e.g. starts.total
  if (( have_jq )); then jq -r ".$2" <<<"$1"
  else "$python" -c 'import json,sys
v=json.loads(sys.argv[1])
for k in sys.argv[2].split("."): v=v[k]
print(v)' "$1" "$2"; fi
}

if [[ ! -f "$data" ]]; then
  echo "{\"skipped\": $(json_str "data file not found: $data")}"
  exit 0
fi
if [[ ! -x "$fit" ]]; then
  echo "chinchilla_fit.sh: $fit not found or not executable (build first)" >&2
  exit 1
fi

# --- ours ------------------------------------------------------------------
echo "[bench] infolaw-fit --threads 2 ..." >&2
ours2="$("$fit" "$data" --law chinchilla --threads 2)"
echo "[bench] infolaw-fit --threads 1 ..." >&2
ours1="$("$fit" "$data" --law chinchilla --threads 1)"
ours_s2="$(json_get "$ours2" seconds)"
ours_s1="$(json_get "$ours1" seconds)"
ours_obj="$(json_get "$ours2" objective)"
rows="$(json_get "$ours2" rows_used)"
starts="$(json_get "$ours2" starts.total)"
ours_conv="$(json_get "$ours2" starts.converged)"

# --- peer ------------------------------------------------------------------
peer_json=""        # raw peer output, empty if skipped/failed
peer_skip=""        # reason the peer was not measured
if ! "$python" -c 'import numpy, scipy' >/dev/null 2>&1; then
  peer_skip="$python cannot import numpy/scipy"
else
  peer_args=("$data")
  (( quick )) && peer_args+=(--starts-limit 450)
  echo "[bench] peer (scipy L-BFGS-B) ${peer_args[*]} ..." >&2
  if ! peer_json="$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
                     "$python" "$peer_py" "${peer_args[@]}")"; then
    peer_skip="peer script failed"; peer_json=""
  fi
fi

# --- assemble --------------------------------------------------------------
# All numbers are passed as JSON text; derived ratios are computed here.
nproc_n="$(nproc)"
cpu="$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
ours_obj_json="{\"seconds_2threads\":$ours_s2,\"seconds_1thread\":$ours_s1,\"objective\":$ours_obj,\"converged\":$ours_conv}"

assemble_py='import json,sys
data,rows,starts,ours,peer,skip,quick,nproc,cpu=sys.argv[1:]
ours=json.loads(ours); out={"benchmark":"chinchilla-approach3-fit","data":data,
 "rows":int(rows),"starts":int(starts),"ours":ours}
if peer:
    p=json.loads(peer); runs=p["starts"]; q=quick=="1"
    sec=p["seconds"]*(p["grid_size"]/runs if q else 1.0)
    pe={"name":"scipy L-BFGS-B (numerical gradient)","seconds":sec,
        "objective":p["objective"],"starts_run":runs,"converged":p["converged"],
        "params":p["params"],"versions":p["versions"]}
    if q: pe.update(seconds_extrapolated=True,seconds_measured=p["seconds"],
                    extrapolation_factor=p["grid_size"]/runs)
    out["peer"]=pe
    out["speedup_2threads"]=sec/ours["seconds_2threads"]
    out["speedup_1thread"]=sec/ours["seconds_1thread"]
    out["objective_ratio"]=(ours["objective"]/p["objective"]
                            if p["objective"] else None)
else:
    out["peer_skipped"]=skip
out["machine"]={"nproc":int(nproc),"cpu":cpu}
print(json.dumps(out))'

if (( have_jq )); then
  jq -cn --arg data "$data" --argjson rows "$rows" --argjson starts "$starts" \
     --argjson ours "$ours_obj_json" --arg peer "$peer_json" \
     --arg skip "$peer_skip" --argjson quick "$quick" \
     --argjson nproc "$nproc_n" --arg cpu "$cpu" '
    {benchmark: "chinchilla-approach3-fit", data: $data, rows: $rows,
     starts: $starts, ours: $ours}
    + ( if $peer == "" then {peer_skipped: $skip}
        else ($peer | fromjson) as $p
        | ($p.grid_size / $p.starts) as $f
        | (if $quick == 1 then $p.seconds * $f else $p.seconds end) as $sec
        | {peer: ({name: "scipy L-BFGS-B (numerical gradient)",
                   seconds: $sec, objective: $p.objective,
                   starts_run: $p.starts, converged: $p.converged,
                   params: $p.params, versions: $p.versions}
                  + (if $quick == 1 then {seconds_extrapolated: true,
                       seconds_measured: $p.seconds,
                       extrapolation_factor: $f} else {} end)),
           speedup_2threads: ($sec / $ours.seconds_2threads),
           speedup_1thread: ($sec / $ours.seconds_1thread),
           objective_ratio: (if ($p.objective // 0) == 0 then null
                             else $ours.objective / $p.objective end)}
        end )
    + {machine: {nproc: $nproc, cpu: $cpu}}'
else
  "$python" -c "$assemble_py" "$data" "$rows" "$starts" "$ours_obj_json" \
    "$peer_json" "$peer_skip" "$quick" "$nproc_n" "$cpu"
fi
