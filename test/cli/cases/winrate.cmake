# winrate (issue 35): the Win-and-Tie rate C_alpha and alpha* of students against a teacher
# (hybrid-xLSTM distillation paper, arXiv 2603.15590, App. A).  Fixtures are written in the case.
set(WR $<TARGET_FILE:winrate>)
# teacher [0.5, 0.8, 0.6, 1.0]; s1 [0.45, 0.8, 0.3, 0.7] ties from a_b = 0.1, 0 (equal), 0.5, 0.3;
# s2 [0.6, 0.4, 0.66, 0.9] from 0 (win), 0.5, 0 (win), 0.1.  Sorted, the 2nd smallest (ceil(0.5 x 4)):
# alpha* = 0.1 for s1, 0 for s2 (exactly half the benchmarks at alpha 0: lossless).
set(WR_CSV "printf 'benchmark,teacher,s1,s2\\narc,0.5,0.45,0.6\\nhella,0.8,0.8,0.4\\nmmlu,0.6,0.3,0.66\\npiqa,1.0,0.7,0.9\\n' > s.csv")
set(WR_JSON "echo '{\"benchmarks\": [\"arc\", \"hella\", \"mmlu\", \"piqa\"], \"scores\": {\"teacher\": [0.5, 0.8, 0.6, 1.0], \"s1\": [0.45, 0.8, 0.3, 0.7], \"s2\": [0.6, 0.4, 0.66, 0.9]}}' > s.json")

# ---- real runs: golden values computed by hand -------------------------------------------------
cli_case(winrate/csv-golden --rc 0 --tool winrate
  --jq "[.students[].name] == [\"s1\", \"s2\"] and .teacher == \"teacher\" and .target == 0.5 and .benchmarks == [\"arc\", \"hella\", \"mmlu\", \"piqa\"]"
  --jq ".students[0] | .alpha_star == 0.1 and .C_0 == 0.25 and .lossless == false and .a_b == {\"arc\": 0.1, \"hella\": 0, \"mmlu\": 0.5, \"piqa\": 0.3}"
  --jq ".students[0].curve == [[0, 0.25], [0.1, 0.5], [0.2, 0.5], [0.3, 0.75], [0.4, 0.75], [0.5, 1]]"
  --jq ".students[1] | .alpha_star == 0 and .C_0 == 0.5 and .lossless == true and .a_b == {\"arc\": 0, \"hella\": 0.5, \"mmlu\": 0, \"piqa\": 0.1}"
  --jq ".alpha_grid == {\"max\": 0.5, \"step\": 0.1, \"points\": 6} and .meta.tool == \"winrate\" and (.meta.inputs[0].sha256 | length) == 64"
  -- bash -c "${WR_CSV} && ${WR} s.csv --alpha-step 0.1")
# The default grid: 0, 0.005, ..., 0.5 (101 points, decimals as written).
cli_case(winrate/default-grid --rc 0 --tool winrate
  --jq ".alpha_grid.points == 101 and (.students[0].curve | length) == 101 and .students[0].curve[3] == [0.015, 0.25] and .students[0].curve[20] == [0.1, 0.5] and .students[0].curve[100] == [0.5, 1]"
  -- bash -c "${WR_CSV} && ${WR} s.csv")
# The JSON object form gives the same result as the CSV; so does the CSV on stdin.
cli_case(winrate/json-object-and-stdin-same-as-csv --rc 0 --tool winrate
  -- bash -c "${WR_CSV} && ${WR_JSON} && a=$(${WR} s.csv | jq -S 'del(.meta)') && b=$(${WR} s.json | jq -S 'del(.meta)') && c=$(${WR} - < s.csv | jq -S 'del(.meta)') && test -n \"$a\" && test \"$a\" = \"$b\" && test \"$a\" = \"$c\"")
# --teacher picks another column (the old teacher becomes a student); --target 0.75 takes the 3rd smallest.
# teacher = s2: "teacher" ties from 1/6, 0, 1/11, 0 -> 0.090909090909 (12 decimals); s1 from 0.25, 0, 6/11, 2/9 -> 0.25.
cli_case(winrate/teacher-and-target --rc 0 --file o.json
  --file-jq o.json "[.students[].name] == [\"teacher\", \"s1\"] and .teacher == \"s2\" and .target == 0.75"
  --file-jq o.json "(.students[0].alpha_star - 0.090909090909 | fabs) < 1e-15 and .students[0].C_0 == 0.5 and .students[0].lossless == false"
  --file-jq o.json ".students[1].alpha_star == 0.25 and (.students[1].a_b.mmlu - 0.545454545455 | fabs) < 1e-15"
  -- bash -c "${WR_CSV} && ${WR} s.csv --teacher s2 --target 0.75 -o o.json")
# A teacher score of 0 against a negative student never ties: a_b and alpha* null.
cli_case(winrate/never-ties --rc 0 --tool winrate
  --jq ".students[0] | .a_b == {\"a\": null, \"b\": 0} and .alpha_star == null and .C_0 == 0.5 and .lossless == false and .curve[-1] == [0.5, 0.5]"
  -- bash -c "printf 'benchmark,teacher,s\\na,0,-0.1\\nb,0,0\\n' > z.csv && ${WR} z.csv --target 1")
# The picture and the JSON together.
cli_case(winrate/plot --rc 0 --needs /usr/bin/gnuplot --tool winrate --file p.png --file o.json
  --file-jq o.json ".students[0].alpha_star == 0.1"
  -- bash -c "${WR_CSV} && ${WR} s.csv --plot p.png -o o.json && test \"$(head -c 4 p.png | tail -c 3)\" = PNG")

# ---- bad input: exit 1, one line, no output file, an existing output kept ---------------------
cli_case(winrate/missing-teacher --rc 1 --tool winrate --no-file o.json
  --stderr "^winrate: error: no teacher 'prof' among the models \\(teacher, s1, s2\\). name it with --teacher \\(s.csv\\)$"
  -- bash -c "${WR_CSV} && ${WR} s.csv --teacher prof -o o.json")
cli_case(winrate/missing-score-csv --rc 1 --tool winrate --no-file o.json
  --stderr "^winrate: error: empty cell in numeric column 's1' \\(m.csv, row 2, line 3\\)$"
  -- bash -c "printf 'benchmark,teacher,s1\\na,0.5,0.4\\nb,0.5,\\n' > m.csv && ${WR} m.csv -o o.json")
cli_case(winrate/missing-score-json --rc 1 --tool winrate --no-file o.json
  --stderr "^winrate: error: model 's' has 1 score.s. for 2 benchmarks \\(m.json: scores.s\\)$"
  -- bash -c "echo '{\"benchmarks\": [\"a\", \"b\"], \"scores\": {\"teacher\": [1, 2], \"s\": [1]}}' > m.json && ${WR} m.json -o o.json")
cli_case(winrate/null-score-json --rc 1 --tool winrate
  --stderr "^winrate: error: missing score of 's' \\(m.json: scores.s.1., benchmark 'b'\\)$"
  -- bash -c "echo '{\"benchmarks\": [\"a\", \"b\"], \"scores\": {\"teacher\": [1, 2], \"s\": [1, null]}}' > m.json && ${WR} m.json")
cli_case(winrate/non-numeric-score --rc 1 --tool winrate --no-file o.json
  --stderr "^winrate: error: not a number: 'abc' in column 's1' \\(n.csv, row 1, line 2\\)$"
  -- bash -c "printf 'benchmark,teacher,s1\\na,0.5,abc\\n' > n.csv && ${WR} n.csv -o o.json")
cli_case(winrate/nan-score --rc 1 --tool winrate --stderr "non-finite value nan in column 's1'"
  -- bash -c "printf 'benchmark,teacher,s1\\na,0.5,nan\\n' > n.csv && ${WR} n.csv")
cli_case(winrate/no-benchmarks-csv --rc 1 --tool winrate --no-file o.json --stderr "no data rows \\(h.csv\\)$"
  -- bash -c "printf 'benchmark,teacher,s1\\n' > h.csv && ${WR} h.csv -o o.json")
cli_case(winrate/no-benchmarks-json --rc 1 --tool winrate --stderr "^winrate: error: no benchmarks \\(e.json: benchmarks\\)$"
  -- bash -c "echo '{\"benchmarks\": [], \"scores\": {\"teacher\": []}}' > e.json && ${WR} e.json")
cli_case(winrate/negative-teacher --rc 1 --tool winrate --no-file o.json
  --stderr "^winrate: error: teacher score -0.5 on 'b' is negative: the relative tolerance \\(1 - alpha\\) A_T needs teacher scores >= 0 \\(t.csv, row 2, line 3, column 'teacher'\\)$"
  -- bash -c "printf 'benchmark,teacher,s1\\na,0.5,0.4\\nb,-0.5,0.1\\n' > t.csv && ${WR} t.csv -o o.json")
cli_case(winrate/only-teacher --rc 1 --tool winrate --stderr "no students: 'teacher' is the only model"
  -- bash -c "printf 'benchmark,teacher\\na,0.5\\n' > t.csv && ${WR} t.csv")
cli_case(winrate/duplicate-benchmark --rc 1 --tool winrate --stderr "benchmark 'a' appears twice \\(d.csv, row 2, line 3, column 'benchmark'\\)$"
  -- bash -c "printf 'benchmark,teacher,s\\na,0.5,0.4\\na,0.6,0.1\\n' > d.csv && ${WR} d.csv")
cli_case(winrate/unknown-json-key --rc 1 --tool winrate --stderr "unknown key \"score\""
  -- bash -c "echo '{\"benchmarks\": [\"a\"], \"score\": {\"teacher\": [1]}}' > k.json && ${WR} k.json")
cli_case(winrate/missing-file --rc 1 --stderr "cannot read file" --no-file o.json -- ${WR} absent.csv -o o.json)
# A failing run leaves the existing output as it was (run_case.sh checks existing.json).
cli_case(winrate/failure-keeps-existing-output --rc 1 --tool winrate --stderr "not a number"
  -- bash -c "printf 'benchmark,teacher,s1\\na,0.5,abc\\n' > n.csv && ${WR} n.csv -o existing.json")

# ---- usage errors: exit 2 ------------------------------------------------------------------------
cli_case(winrate/alpha-step-zero --rc 2 --no-file o.json --stderr "^winrate: error: must be > 0, got 0 \\(--alpha-step\\)$"
  -- ${WR} absent.csv --alpha-step 0 -o o.json)
cli_case(winrate/alpha-step-negative --rc 2 --stderr "must be > 0, got -0.1 \\(--alpha-step\\)$" -- ${WR} absent.csv --alpha-step -0.1)
cli_case(winrate/alpha-grid-too-fine --rc 2 --stderr "more than 1,000,001 points \\(--alpha-step\\)$" -- ${WR} absent.csv --alpha-max 10 --alpha-step 1e-8)
cli_case(winrate/alpha-max-negative --rc 2 --stderr "must be >= 0, got -1 \\(--alpha-max\\)$" -- ${WR} absent.csv --alpha-max -1)
cli_case(winrate/target-out-of-range --rc 2 --stderr "must be a number in \\(0, 1., got 1.5 \\(--target\\)$" -- ${WR} absent.csv --target 1.5)
cli_case(winrate/output-not-json --rc 2 --no-file o.csv --stderr "give a path ending in .json" -- ${WR} absent.csv -o o.csv)
cli_case(winrate/plot-not-png --rc 2 --no-file p.jpg --stderr "give a path ending in .png \\(--plot p.jpg\\)$" -- ${WR} absent.csv --plot p.jpg)
cli_case(winrate/no-scores --rc 2 --stderr "scores is required" -- ${WR})
cli_case(winrate/unknown-flag --rc 2 --stderr "--bogus" -- ${WR} absent.csv --bogus)
