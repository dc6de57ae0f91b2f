#!/usr/bin/env bash
# The tiny grid end to end: lm-sweep trains its 11 cells (2 jobs), then InfoLaw, Chinchilla and
# the data-constrained law (infolaw-fit) and the mixing laws (mixlaw-fit) read the table as it is,
# fitted on the "fit" cells and tested on the held-out recipe's cells.
# Usage: fits.sh BIN_DIR GRID
set -eu
bin=$1 grid=$2
"$bin/lm-sweep" "$grid" -o run/ --jobs 2 -t 2 -q
shares=$(jq -r '.shares | map(tostring) | join(",")' run/data/manifest.json)
"$bin/infolaw-fit" run/table.csv --law infolaw --shares "$shares" --weight-prefix w --where role!=noise \
  --test-where role==heldout-recipe --id-col cell --samples 2000 -q -o infolaw.json
"$bin/infolaw-fit" run/table.csv --law chinchilla --test-where role==heldout-recipe --id-col cell -q \
  --grid a=0:10:5 --grid b=0:10:5 --grid e=0:1:1 --grid alpha=0.5 --grid beta=0.5 -o chinchilla.json
"$bin/mixlaw-fit" run/table.csv --weight-pattern 'w{}' --loss-pattern 'loss{}' --params-col params --params-scale 1e-6 \
  --tokens-col tokens --tokens-scale 1e-9 --test-where role==heldout-recipe --law all --starts 1 --hops 1 -q -o mix.json
jq -e '.test.rows == 2 and (.test.residuals | map(.id) | sort) == ["a.mid.D4096.Enat.s1", "b.mid.D4096.Enat.s1"]
       and .rows_used == 9 and .rows_test == 2 and (.test.mae | isnormal) and .test.max_ae >= .test.mae' infolaw.json > /dev/null
jq -e '.test.rows == 2 and .rows_used == 9 and (.test.mae | isnormal)' chinchilla.json > /dev/null
jq -e '[.laws[] | .val.per_domain["0"].count == 2 and (.val.per_domain["0"].max_ae | isnormal)] | all and length == 4' mix.json > /dev/null
echo ok
