# lm-sweep (issue 40): a grid of small lm-train runs over quality buckets, recipes and repetition,
# and the scaling-law fits that read its table.  Fixture: fixtures/sweep (Genesis - Exodus 17 of the
# KJV, 2,000 verses; grids of tiny models that train in well under a second per cell).
set(SWEEP $<TARGET_FILE:lm-sweep>)
set(SWEEP_FX ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/sweep)
set(SWEEP_SH ${CMAKE_CURRENT_SOURCE_DIR}/sweep)

# ---- real runs ---------------------------------------------------------------------------------
# scripts/repro.d/sweep.sh on the CI grid (REPRO_QUICK=1): every cell trained, the noise floor from
# 3 seeds, InfoLaw / Chinchilla / the data-constrained law / the 4 mixing laws fitted on the fit cells
# and tested on each held-out set (never fitted), the capacity-noise optimum trained with 2 seeds.
cli_case(lm-sweep/repro-quick --rc 0 --tool lm-sweep
  --file-jq out/results/summary.json "(.errors | length) == 21 and ([.errors[] | select(.law == \"infolaw\") | .n] == [4, 4, 2])"
  --file-jq out/results/summary.json "(.targets | keys) == [\"infolaw_recipe_mae_below_capacity_noise\", \"infolaw_recipe_mae_within_2_median_seed_sd\", \"infolaw_recipe_mae_within_2_seed_sd\", \"optimum_not_worse_than_best_grid\", \"optimum_within_law_val_error\"]"
  --file-jq out/results/summary.json ".seed_sd > 0 and (.optimum.real | length) == 2 and .optimum.grid_cells == 4 and (.optimum.mixture | add - 1 | fabs) < 1e-9"
  --file-jq out/results/fits/infolaw-heldout-recipe.json ".rows_used == 13 and .test.rows == 4 and (.test.residuals | map(.id | test(\"mid\")) | all) and (.test.mae | isnormal)"
  --file-jq out/results/noise.json ".cells[0].cell == \"a.prop.D2048.Enat\" and (.cells[0].losses | length) == 3"
  -- bash -c "d=$PWD && cd ${PROJECT_SOURCE_DIR} && REPRO_QUICK=1 SWEEP_OUT=$d/out SWEEP_JOBS=2 bash scripts/repro.d/sweep.sh $<TARGET_FILE_DIR:lm-sweep> > $d/out.txt")
# The table (JSON): one row per cell in grid order; recipe weights as given; the epochs cell sees its
# unique tokens about 4 times (whole verses: 3.5-4); provenance names each cell's checkpoint and seed;
# the data manifest measures the degradation (half the words replaced) and the buckets' token shares.
cli_case(lm-sweep/table-and-manifest --rc 0 --file run/table.json --file run/data/manifest.json --file run/data/tokenizer.model
  --file-jq run/table.json ".rows | length == 11 and (map(.index) == [range(0; 11)])"
  --file-jq run/table.json ".rows | map(.w0 + .w1 == 1) | all"
  --file-jq run/table.json ".rows[2] | .recipe == \"hq\" and .w0 == 0.7 and .w1 == 0.3 and .tokens == 2048"
  --file-jq run/table.json ".rows[10] | .cell == \"a.prop.D4096.E4.s1\" and .epochs > 3.5 and .epochs <= 4.05 and .unique_tokens == .u0 + .u1"
  --file-jq run/table.json ".rows | map(.loss == .loss0 and (.loss | isnormal) and .loss < 6.0 and .flops > 0) | all"
  --file-jq run/table.json ".meta.runs | length == 11 and (map(.checkpoint | test(\"^cells/.*/model.h5$\")) | all) and (map(.seed) | unique) == [1]"
  --file-jq run/table.json "(.meta.shares | add - 1 | fabs) < 1e-12 and .meta.buckets[1].name == \"replace50\""
  --file-jq run/data/manifest.json ".buckets[1] | .kind == \"made\" and (.replaced_share - 0.5 | fabs) < 0.02 and .units > 1000"
  --file-jq run/data/manifest.json ".buckets[0].replaced_share == 0 and .tokenizer.vocab_size == 400 and .source_tokens == (.buckets | map(.tokens) | add)"
  -- ${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run/ --table run/table.json -q)
# Killed mid-cell: the rerun keeps the finished cell, resumes the killed one bit-identically, one row each.
cli_case(lm-sweep/killed-sweep-resumes --rc 0 --tool lm-sweep -- bash ${SWEEP_SH}/resume.sh ${SWEEP} ${SWEEP_FX}/grid-resume.json)
# A second run trains nothing (each cell's result is kept); --collect only rebuilds the table.
cli_case(lm-sweep/rerun-skips-finished-cells --rc 0 --tool lm-sweep
  -- bash -c "${SWEEP} ${SWEEP_FX}/grid-resume.json -o r/ --cell 0 -q && test $(tail -n +2 r/table.csv | wc -l) = 1 && touch -d '2000-01-01' r/cells/*/result.json && ${SWEEP} ${SWEEP_FX}/grid-resume.json -o r/ --cell 0 -v 2> err.txt && grep -q 'already done' err.txt && test -z \"$(find r/cells -name result.json -newer err.txt)\" && rm r/table.csv && ${SWEEP} ${SWEEP_FX}/grid-resume.json -o r/ --collect -q && test $(tail -n +2 r/table.csv | wc -l) = 1 && test ! -d r/cells/b.prop.D96000.E2.s1")
# --dry-run: every cell with its FLOP and estimated seconds; nothing is trained.
cli_case(lm-sweep/dry-run --rc 0 --tool lm-sweep
  -- bash -c "${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run/ --dry-run --measure-steps 2 > out.txt && grep -q '^total: 11 cells' out.txt && grep -q 'a.prop.D4096.E4.s1' out.txt && test $(grep -c ' fit ' out.txt) = 9 && test ! -d run/cells")

# ---- impossible or bad grids: exit 1 before any training, one line naming the cell -----------------
cli_case(lm-sweep/too-many-epochs --rc 1 --stderr "cell a.prop.D2048.E100.s1: 100 epochs .* more epochs than the tokens allow" --no-file run/cells --tool lm-sweep
  -- bash -c "jq '.cells = [{\"models\": [\"a\"], \"tokens\": [2048], \"recipes\": [\"prop\"], \"epochs\": [100]}]' ${SWEEP_FX}/grid-tiny.json > g.json && cp ${SWEEP_FX}/kjv-genesis.tsv.gz . && ${SWEEP} g.json -o run/ -q")
cli_case(lm-sweep/too-few-epochs --rc 1 --stderr "cell a.hq.D200000.E1.s1: recipe 'hq' can draw at most .* epochs are too few" --no-file run/cells --tool lm-sweep
  -- bash -c "jq '.cells = [{\"models\": [\"a\"], \"tokens\": [200000], \"recipes\": [\"hq\"], \"epochs\": [1]}]' ${SWEEP_FX}/grid-tiny.json > g.json && cp ${SWEEP_FX}/kjv-genesis.tsv.gz . && ${SWEEP} g.json -o run/ -q")
cli_case(lm-sweep/weight-outside-0-1 --rc 1 --stderr "cell a.mid.D4096.Enat.s1 \\(and 1 more\\): recipes.mid: weight of bucket 'clean' is 1.2, outside" --no-file run --tool lm-sweep
  -- bash -c "jq '.recipes.mid = [1.2, -0.2]' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/weights-not-summing-to-1 --rc 1 --stderr "cell a.hq.D2048.Enat.s1 \\(and 3 more\\): recipes.hq: weights sum to 0.9, not 1" --no-file run --tool lm-sweep
  -- bash -c "jq '.recipes.hq = {\"clean\": 0.6, \"replace50\": 0.3}' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/unknown-key --rc 1 --stderr "models.a: unknown key 'd_mdoel'" --no-file run --tool lm-sweep
  -- bash -c "jq '.models.a.d_mdoel = 8' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/unknown-recipe --rc 1 --stderr "no recipe named 'best'" --no-file run --tool lm-sweep
  -- bash -c "jq '.cells[0].recipes = [\"best\"]' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/duplicate-cell --rc 1 --stderr "cell a.prop.D4096.E4.s1 is already in the grid" --no-file run --tool lm-sweep
  -- bash -c "jq '.cells += [.cells[2]]' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/tokens-below-one-step --rc 1 --stderr "cell a.prop.D100.Enat.s1: 100 tokens are less than one optimizer step" --no-file run --tool lm-sweep
  -- bash -c "jq '.cells = [{\"models\": [\"a\"], \"tokens\": [100], \"recipes\": [\"prop\"]}]' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/malformed-grid --rc 1 --no-file run --tool lm-sweep -- bash -c "echo '{\"data\": ' > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/missing-grid --rc 1 --stderr "cannot read file" --no-file run -- ${SWEEP} nope.json -o run/)
cli_case(lm-sweep/missing-source --rc 1 --stderr "nope.tsv" --no-file run/data/manifest.json --tool lm-sweep
  -- bash -c "jq '.data.source.path = \"nope.tsv\"' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
# A folder made from another data section is refused, not mixed.
cli_case(lm-sweep/other-data-in-folder --rc 1 --stderr "another data section" --tool lm-sweep
  -- bash -c "${SWEEP} ${SWEEP_FX}/grid-resume.json -o run/ --cell 0 -q && jq '.data.seed = 7' ${SWEEP_FX}/grid-resume.json > g.json && cp ${SWEEP_FX}/kjv-genesis.tsv.gz . && ${SWEEP} g.json -o run/ -q")

cli_case(lm-sweep/name-with-dot --rc 1 --stderr "name 'a.b' must be 1-64 letters" --no-file run --tool lm-sweep
  -- bash -c "jq '.recipes[\"a.b\"] = [0.5, 0.5]' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/model-name-escapes-folder --rc 1 --stderr "name '../x' must be" --no-file run --tool lm-sweep
  -- bash -c "jq '.models[\"../x\"] = .models.a' ${SWEEP_FX}/grid-tiny.json > g.json && ${SWEEP} g.json -o run/")
cli_case(lm-sweep/no-lm-train-in-bin-dir --rc 1 --stderr "lm-train is not in" --no-file run -- ${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run/ --bin-dir .)
cli_case(lm-sweep/output-is-a-file --rc 1 --stderr "not a folder" --tool lm-sweep -- bash -c "touch run && ${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run")
cli_case(lm-sweep/table-dir-checked-first --rc 1 --stderr "output directory does not exist" --no-file run -- ${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run/ --table nodir/t.csv)
cli_case(lm-sweep/collect-without-data --rc 1 --stderr "no sweep data in this folder" --no-file run/data -- ${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run/ --collect)
# A cell another process holds (its lock) is skipped with a note, not trained twice; the run exits 1
# (its table is not complete yet); once free, a rerun trains it.
cli_case(lm-sweep/locked-cell-skipped --rc 0 --tool lm-sweep
  -- bash -c "mkdir -p r/cells/a.prop.D1024.Enat.s1 && (flock r/cells/a.prop.D1024.Enat.s1/.lock sleep 5 &) && sleep 0.3 && ! ${SWEEP} ${SWEEP_FX}/grid-resume.json -o r/ --cell 0 2> err.txt && grep -q 'being run by another lm-sweep' err.txt && grep -q 'error: 1 cell(s) skipped' err.txt && test ! -f r/cells/a.prop.D1024.Enat.s1/result.json && test ! -f r/table.csv && sleep 5 && ${SWEEP} ${SWEEP_FX}/grid-resume.json -o r/ --cell 0 -q && test -f r/cells/a.prop.D1024.Enat.s1/result.json")
# A grid edited after a run: the finished cells keep their results, the table takes index and role from the grid now.
cli_case(lm-sweep/edited-grid-renumbers-finished-cells --rc 0 --tool lm-sweep
  -- bash -c "${SWEEP} ${SWEEP_FX}/grid-resume.json -o r/ --cell 0 -q && jq '.cells = [{\"role\": \"extra\", \"models\": [\"b\"], \"tokens\": [2048], \"recipes\": [\"prop\"]}, (.cells[0] + {\"role\": \"heldout\"})]' ${SWEEP_FX}/grid-resume.json > g.json && cp ${SWEEP_FX}/kjv-genesis.tsv.gz . && ${SWEEP} g.json -o r/ --collect -q && test \"$(cut -d, -f1-3 r/table.csv | tail -1)\" = '1,a.prop.D1024.Enat.s1,heldout'")

# ---- usage errors: exit 2 ------------------------------------------------------------------------
cli_case(lm-sweep/cell-with-collect --rc 2 --stderr "--collect|--cell" -- ${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run/ --cell 1 --collect)
cli_case(lm-sweep/cell-out-of-range --rc 2 --stderr "the grid has 2 cells" --tool lm-sweep
  -- bash -c "${SWEEP} ${SWEEP_FX}/grid-resume.json -o run/ --cell 5")
cli_case(lm-sweep/no-output --rc 2 --stderr "-o" -- ${SWEEP} ${SWEEP_FX}/grid-tiny.json)
cli_case(lm-sweep/bad-jobs --rc 2 --stderr "--jobs" -- ${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run/ --jobs 0)
cli_case(lm-sweep/table-extension --rc 2 --stderr "--table" -- ${SWEEP} ${SWEEP_FX}/grid-tiny.json -o run/ --table t.txt)

# ---- the fits' held-out options on the shipped generated tables ------------------------------------
cli_case(infolaw-fit/test-where-holds-out-rows
  --rc 0 --jq ".rows_used == 40 and .rows_test == 8 and .test.rows == 8 and (.test.residuals | length) == 8"
  --jq ".test.mre < 0.01 and .test.max_ae >= .test.mae and (.test.residuals | map(.row) | min) > 0"
  -- ${FIT} ${DATA}/chinchilla_synthetic.csv ${SMALL_GRID} --test-where params>=5e9)
cli_case(mixlaw-fit/test-where-holds-out-rows
  --rc 0 --jq ".split.train == 30 and .split.val == 10 and (.split.how | test(\"index>=30\")) and .laws[0].val.max_ae >= .laws[0].val.mae"
  -- $<TARGET_FILE:mixlaw-fit> ${DATA}/mixture_synthetic.csv --law exponential --starts 1 --hops 0 --test-where index>=30 -q)
cli_case(mixlaw-fit/test-where-with-separate-loss-table --needs ${SHARED}/scaling/regmix/train_mixture_1m.csv
  --rc 0 --jq ".split.val > 0 and .split.train > 0 and (.split.how | test(\"--test-where\"))"
  -- $<TARGET_FILE:mixlaw-fit> ${SHARED}/scaling/regmix/train_mixture_1m.csv ${SHARED}/scaling/regmix/train_pile_loss_1m.csv
     --weight-pattern train_the_pile_{} --loss-pattern metric/the_pile_{}_val_loss --allow-missing-losses --law linear
     --params 1 --tokens 1 --where index<400 --test-where index>=300 -q)
cli_case(mixlaw-fit/test-where-matches-nothing --rc 1 --stderr "no row matches --test-where" --no-file out.json
  -- $<TARGET_FILE:mixlaw-fit> ${DATA}/mixture_synthetic.csv --law exponential --test-where index>=5000 -o out.json)

# The README's table is the shipped results' (data/repro/sweep/summary.json), rounded to 3 decimals.
cli_case(readme/sweep-table-matches-results --rc 0 --tool readme
  -- bash ${SWEEP_SH}/readme_table.sh ${PROJECT_SOURCE_DIR}/data/repro/sweep/summary.json ${PROJECT_SOURCE_DIR}/README.md)
