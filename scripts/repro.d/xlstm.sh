#!/usr/bin/env bash
# Issue 35 (xlstm-distill, winrate; "Effective Distillation to Hybrid xLSTM Architectures", arXiv
# 2603.15590): the paper's comparison in miniature.  Teacher data/models/kjv7m.h5 (6 blocks, 8/4
# heads, n_ctx 1024); every student distils on the KJV training chapters with the same budget,
# $XL_ALIGN tokens of Stage I (layer-wise alignment, only maps and gates) + $XL_KD tokens of Stage II
# (0.9 CE + 0.1 top-256 KL, lr 1e-4), windows of 256 x 8:
#   hybrid     mLSTM + window 64 + 4 sinks, gated (the paper's student)
#   linear     linear attention (Hedgehog features, no gates, no window)          [ablation baseline]
#   swa        window 64 + 4 sinks only (Stage II gets the Stage I tokens too)    [baseline]
#   nosinks    hybrid with 0 sinks                                                [ablation]
#   nostage1   hybrid, all tokens in Stage II                                     [ablation]
#   expert-ot / expert-nt   hybrid's Stage I model, Stage II on the Old / New Testament only
#   merged     0.5 expert-ot + 0.5 expert-nt (Stage III)
# Two seeds (data order and benchmark passages).  Benchmarks (xlstm-distill --evaluate, higher is
# better): top-1/top-5 next-token accuracy on the held-out chapters of 4 book groups, repeated-passage
# recall at 64/256/768 tokens, agreement with the teacher's greedy 64-token continuations; winrate
# turns them into C_alpha curves and alpha* per student; --speed gives prefill/decode tokens/s and
# cache bytes at contexts 256, 1024, 4096.
# Cost: about 1.7 CPU-hours (under an hour on 2 cores); REPRO_QUICK=1 is a rehearsal (tiny budgets,
# one seed).  Runs go $XL_JOBS at a time (default 2) into $XL_OUT (default build/repro-xlstm); a run
# already there is not run again.  Results: data/repro/xlstm/.  $1 = bin directory.
set -euo pipefail
bin=${1:-build/bin}
teacher=data/models/kjv7m.h5
corpus=data/corpus/kjv.tsv.gz
split=(--column 2 --doc-column 1 --val-every 20)
out=${XL_OUT:-build/repro-xlstm}
res=${XL_RESULTS:-data/repro/xlstm}
align=${XL_ALIGN:-65536} kd=${XL_KD:-196608} bench=${XL_BENCH:-8192} seeds="1 2"
if [ "${REPRO_QUICK:-0}" = 1 ]; then align=${XL_ALIGN:-4096} kd=${XL_KD:-4096} bench=${XL_BENCH:-512} seeds=1 res=$out/results; fi
jobs=${XL_JOBS:-2}
threads=$(( $(nproc) / jobs ))
[ "$threads" -ge 1 ] || threads=1
mkdir -p "$out" "$res"
ot=Ge,Exo,Lev,Num,Deu,Josh,Jdgs,Ruth,1Sm,2Sm,1Ki,2Ki,1Chr,2Chr,Ezra,Neh,Est,Job,Psa,Prv,Eccl,SSol,Isa,Jer,Lam,Eze,Dan,Hos,Joel,Amos,Obad,Jonah,Mic,Nahum,Hab,Zep,Hag,Zec,Mal
nt=Mat,Mark,Luke,John,Acts,Rom,1Cor,2Cor,Gal,Eph,Phi,Col,1Th,2Th,1Tim,2Tim,Titus,Phmn,Heb,Jas,1Pet,2Pet,1Jn,2Jn,3Jn,Jude,Rev
common=("$teacher" "$corpus" "${split[@]}" --seq-len 256 --batch 8 --kd-lr 1e-4 --checkpoint-every 1000000 --threads "$threads" -q)

# $1 arm, $2 seed: one student (its log and error output beside it)
run_arm() {
  local arm=$1 s=$2 tag="$1-s$2" extra=()
  [ -f "$out/$tag.h5" ] && return 0
  case $arm in
    hybrid) extra=(--align-tokens "$align" --kd-tokens "$kd") ;;
    linear) extra=(--mixer linear --align-tokens "$align" --kd-tokens "$kd") ;;
    swa) extra=(--mixer swa --align-tokens 0 --kd-tokens $(( align + kd ))) ;;
    nosinks) extra=(--sinks 0 --align-tokens "$align" --kd-tokens "$kd") ;;
    nostage1) extra=(--align-tokens 0 --kd-tokens $(( align + kd ))) ;;
    expert-ot) extra=(--init "$out/hybrid-s$s.stage1.h5" --align-tokens 0 --kd-tokens "$kd" --books "$ot") ;;
    expert-nt) extra=(--init "$out/hybrid-s$s.stage1.h5" --align-tokens 0 --kd-tokens "$kd" --books "$nt") ;;
  esac
  "$bin/xlstm-distill" "${common[@]}" "${extra[@]}" --seed "$s" -o "$out/$tag.h5" --log "$out/$tag.jsonl" 2>"$out/$tag.err" ||
    { echo "xlstm repro: $tag failed:"; tail -3 "$out/$tag.err"; return 1; }
}
export -f run_arm
export bin out align kd ot nt
prelude="$(declare -p common)"
# hybrid first (the experts start from its Stage I model), then the rest
for s in $seeds; do echo "hybrid $s"; done | xargs -P "$jobs" -L 1 bash -c "$prelude; run_arm \"\$0\" \"\$1\""
for s in $seeds; do for a in linear swa nosinks nostage1 expert-ot expert-nt; do echo "$a $s"; done; done |
  xargs -P "$jobs" -L 1 bash -c "$prelude; run_arm \"\$0\" \"\$1\""
for s in $seeds; do
  [ -f "$out/merged-s$s.h5" ] || "$bin/xlstm-distill" --merge "$out/expert-ot-s$s.h5" --merge "$out/expert-nt-s$s.h5" \
    --merge-weights 0.5,0.5 -o "$out/merged-s$s.h5" -q
done

# ---- benchmarks and Win-and-Tie rates, per seed ----
arms="hybrid linear swa nosinks nostage1 expert-ot expert-nt merged"
for s in $seeds; do
  if [ ! -f "$res/scores-s$s.csv" ]; then
    ev=()
    for a in $arms; do ev+=(--evaluate "$out/$a-s$s.h5" --name "$a"); done
    sp=()
    [ "$s" = 1 ] && sp=(--speed "$res/speed.json")
    "$bin/xlstm-distill" "$teacher" "$corpus" "${split[@]}" "${ev[@]}" "${sp[@]}" --bench-tokens "$bench" --seed "$s" \
      --threads "$(nproc)" -o "$res/scores-s$s.csv" -q
  fi
  "$bin/winrate" "$res/scores-s$s.csv" --alpha-max 0.2 --alpha-step 0.001 -o "$res/winrate-s$s.json" --plot "$res/winrate-s$s.png"
done

# ---- the table ----
{
  echo "Hybrid xLSTM distillation of kjv7m, $align Stage I + $kd Stage II tokens per student (xlstm-distill; winrate)"
  echo "alpha* = the least relative tolerance at which the student ties or beats the teacher on half of the $(($(wc -l <"$res/scores-s1.csv") - 1)) benchmarks (lower is better)"
  printf '%-10s' arm
  for s in $seeds; do printf ' %12s %8s' "alpha*(s$s)" "C_0(s$s)"; done
  echo
  for a in $arms; do
    printf '%-10s' "$a"
    for s in $seeds; do
      printf ' %12s %8s' "$(jq -r --arg a "$a" '.students[] | select(.name == $a) | (.alpha_star // "never")' "$res/winrate-s$s.json")" \
        "$(jq -r --arg a "$a" '.students[] | select(.name == $a) | .C_0' "$res/winrate-s$s.json")"
    done
    echo
  done
  echo
  echo "scores (seed 1; teacher first):"
  column -t -s, "$res/scores-s1.csv"
  if [ -f "$res/speed.json" ]; then
    echo
    echo "CPU engine speed, seed 1 (tokens/s, cache bytes at the end; prefill context-64 tokens, then 64 greedy decode steps):"
    jq -r 'to_entries[] | select(.key != "meta") | .key as $m | .value[] |
      [$m, .context, (.prefill_tok_s // "-" | tostring), (.decode_tok_s // "-" | tostring), (.cache_bytes // .skipped | tostring)] | @tsv' \
      "$res/speed.json" | column -t -s $'\t'
  fi
} | tee "$res/table.txt"
