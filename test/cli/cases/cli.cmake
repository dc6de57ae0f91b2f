# ---- cli/: the shared frame of every tool (run_tool) ----------------------------------------------
set(CLI_BIN $<TARGET_FILE_DIR:lm-eval>)
# -o in a missing directory fails before any work, the same way in every tool: exit 1 and one line
# naming the directory.  Each input below is missing too, so a tool that reads (or computes) before
# checking its output reports the input instead and the case fails.
set(CLI_NODIR_RUNS
  "bimetric-index missing.csv -o nodir/o.h5"
  "bimetric-search missing.csv -o nodir/o.json"
  "cde-eval missing.h5 missing.ts -o nodir/o.json"
  "cde-train missing.ts -o nodir/o.h5"
  "fafo-generate missing.h5 --prompt x -o nodir/o.jsonl"
  "hybridflow-run missing.jsonl --plans missing.jsonl --simulate --policy edge -o nodir/o.jsonl"
  "hybridflow-train-router missing.jsonl --embeddings missing.jsonl -o nodir/r.safetensors"
  "infolaw-fit missing.csv -o nodir/o.json"
  "infolaw-predict missing.json missing.csv -o nodir/o.json"
  "kv-eval missing.h5 missing.txt -o nodir/o.json"
  "latentmoe-cost -o nodir/o.json"
  "lm-convert missing.h5 -o nodir/o.h5"
  "lm-eval missing.h5 missing.txt -o nodir/o.json"
  "lm-generate missing.h5 --prompt x -o nodir/o.jsonl"
  "lm-init --preset tiny -o nodir/o.h5"
  "lm-serve missing.h5 --access-log nodir/access.jsonl"
  "lm-train missing.txt --vocab-size 400 --steps 2 -o nodir/o.h5"
  "mallows-mcmc missing.csv -o nodir/o.json"
  "mixlaw-fit missing.csv -o nodir/o.json"
  "mixlaw-optimize missing.json --params 1e9 --tokens 1e10 -o nodir/o.json"
  "mixlaw-predict missing.json missing.csv -o nodir/o.json"
  "moe-grow missing.h5 --depth stack -o nodir/o.h5"
  "obcache-score missing.h5 --prompt x -o nodir/o.h5"
  "plora-plan missing.json --model missing.h5 --memory 1G --workers 1 --throughput missing.json -o nodir/o.json"
  "plora-train missing.json --model missing.h5 -o nodir/out"
  "lm-sweep missing.json -o nodir/out"
  "lmcleaner-unlearn missing.traj missing.tsv --steps 0 -o nodir/out.h5"
  "pseudomallows-fit missing.csv -o nodir/o.json"
  "recdepth-sample missing.h5 --prompt x -o nodir/o.json"
  "smc-optimize --problem toy -o nodir/o.json"
  "tokenizer-train missing.txt -o nodir/o.model"
  "wave-calibrate missing.h5 missing.txt -o nodir/o.json"
  "wave-generate missing.h5 --prompt x -o nodir/o.jsonl"
  "winrate missing.csv -o nodir/o.json"
  "xlstm-distill missing.h5 missing.tsv -o nodir/o.h5")
string(REPLACE ";" "|" CLI_NODIR_STR "${CLI_NODIR_RUNS}")
cli_case(cli/output-dir-checked-before-work-every-tool --rc 0
  -- bash -c "runs='${CLI_NODIR_STR}'
IFS='|'
for run in $runs
do IFS=' '
set -- $run
t=$1
shift
err=$(${CLI_BIN}/$t \"$@\" 2>&1 >/dev/null)
rc=$?
if [ $rc != 1 ] || [ \"$err\" != \"$t: error: output directory does not exist (nodir)\" ]
then echo \"$t: exit $rc: $err\"
exit 1
fi
done
IFS='|'
printf '%s\\n' $runs | cut -d' ' -f1 | sort > tested.txt
ls ${CLI_BIN} | grep -vE '^bench-' | sort > all.txt
if ! cmp -s all.txt tested.txt
then echo 'tools missing from the list:'
diff all.txt tested.txt
exit 1
fi")
# The same check in the one search tool where it mattered most: with real input the search would run first.
cli_case(cli/bimetric-search-output-dir --rc 1 --stderr "^bimetric-search: error: output directory does not exist \\(nodir\\)$"
  -- $<TARGET_FILE:bimetric-search> ${FX}/ann_small.csv --holdout 2 -o nodir/o.json)

# Bad flag values read "<what> (<flag>)" in our words, whatever checked them: CLI11's Range (here in
# smc-optimize, cde-eval, and bimetric-index's --alpha declared in libcore/ann), IsMember, our validators.
cli_case(cli/range-message-smc --rc 2 --stderr "^smc-optimize: error: must be a number in 1\\.\\.10, got 0\\.5 \\(--adapt-factor\\)$"
  -- $<TARGET_FILE:smc-optimize> --adapt-factor 0.5)
cli_case(cli/range-message-cde --rc 2 --stderr "^cde-eval: error: must be a number in 0\\.\\.0\\.99, got 2 \\(--drop-rate\\)$"
  -- $<TARGET_FILE:cde-eval> m.h5 t.ts --drop-rate 2)
cli_case(cli/range-message-ann-alpha --rc 2 --stderr "^bimetric-index: error: must be a number in 1\\.\\.100, got 0\\.5 \\(--alpha\\)$"
  -- $<TARGET_FILE:bimetric-index> ${FX}/ann_small.csv --alpha 0.5 -o i.h5)
cli_case(cli/choice-message --rc 2 --stderr "^fafo-generate: error: must be one of ar, prompt-lookup, lookahead, self-spec, fafo, got 'foo' \\(--method\\)$"
  -- $<TARGET_FILE:fafo-generate> m.h5 --method foo)
cli_case(cli/validator-message-flag-last --rc 2 --stderr "^smc-optimize: error: must be an integer in 1\\.\\.10000000, got 0 \\(--particles\\)$"
  -- $<TARGET_FILE:smc-optimize> --particles 0)
cli_case(cli/unknown-flag-points-to-help --rc 2 --stderr "^smc-optimize: error: unexpected argument: --bogus \\(run with --help for usage\\)$"
  -- $<TARGET_FILE:smc-optimize> --bogus)
# Several unexpected words are named in command-line order (CLI11 lists them last to first).
cli_case(cli/unexpected-words-in-order --rc 2 --stderr "^mallows-mcmc: error: unexpected arguments: --draws 0 --foo bar \\(run with --help for usage\\)$"
  -- $<TARGET_FILE:mallows-mcmc> x.csv --draws 0 --foo bar)
# -o naming a file another argument reads is refused before any work (run_tool, every tool):
# exit 2 only when the tool exits 2 and the input is left as it was.
cli_case(cli/output-is-input --tool tokenizer-train --rc 2 --stderr "-o names the file given to text"
  -- bash -c "cp ${FX}/genesis.txt t.txt && ( $<TARGET_FILE:tokenizer-train> t.txt --vocab-size 400 -o ./t.txt || test \$? -eq 2 ) && cmp -s t.txt ${FX}/genesis.txt && exit 2")
# SentencePiece's messages without its source location; an overflowing --init-std is refused.
cli_case(cli/sentencepiece-message --rc 1 --stderr "^tokenizer-train: error: tokenizer training failed: Vocabulary size too high .200000.. Please set it to a value"
  -- $<TARGET_FILE:tokenizer-train> ${FX}/genesis.txt --vocab-size 200000 -o t.model)
cli_case(cli/lm-init-std-range --rc 2 --stderr "must be a number in 0..1000, got 1e300 .--init-std." --no-file x.h5
  -- $<TARGET_FILE:lm-init> --preset tiny --vocab-size 300 --init-std 1e300 -o x.h5)
# infolaw-predict would replace an input column with its predictions: refused before any work.
cli_case(cli/pred-col-exists --rc 2 --stderr "the query file already has a column 'params'. name the predictions otherwise .--pred-col." --no-file p.csv
  -- $<TARGET_FILE:infolaw-predict> ${FX}/datablations_published.json ${FX}/published_queries.csv --pred-col params -o p.csv)
