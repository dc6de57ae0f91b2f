#!/usr/bin/env bash
# Helpers for the rank CLI cases (kept out of CMake strings, whose ';' splits arguments).
#   rank_helpers.sh drop10 IN.csv OUT.csv   ~10% of ranks replaced by NA by a fixed pattern
#                                           (cells with (31 line + 17 column) % 10 == 0); line 1
#                                           keeps exactly one missing rank
#   rank_helpers.sh erank-diff A.csv B.csv  max over items of |E_A[rho_i] - E_B[rho_i]| from two
#                                           marginal CSVs (item,rank,probability, same row order)
set -euo pipefail
case "$1" in
  drop10)
    awk -F, 'BEGIN{OFS=","} {c=0; for(i=1;i<=NF;i++) if((NR*31+i*17)%10==0 && !(NR==1 && c>=1)) {$i="NA"; c++}; print}' "$2" > "$3";;
  erank-diff)
    paste -d, "$2" "$3" | awk -F, 'NR>1{ea[$1]+=$2*$3; eb[$1]+=$5*$6} END{m=0; for(i in ea){d=ea[i]-eb[i]; if(d<0)d=-d; if(d>m)m=d}; print m}';;
  *) echo "rank_helpers.sh: unknown command $1" >&2; exit 2;;
esac
