# ---- xlstm-distill (issue 35): hybrid xLSTM students of a llama teacher ------------------------
set(XLD $<TARGET_FILE:xlstm-distill>)
set(XL_WINRATE $<TARGET_FILE:winrate>)
# A tiny random teacher (n_ctx 1024: the recall benchmark's sequences reach 833 tokens) and its
# tokenizer; Genesis 1-20 as TSV (chapters Ge5, Ge10, Ge15, Ge20 held out).
set(XL_TEACHER "${TOKTRAIN} ${FX}/genesis.txt --chunk-lines 3 --vocab-size 400 -o t.model -q && ${LMINIT} --tokenizer t.model --preset tiny --n-ctx 1024 -o teacher.h5 -q")
set(XL_DATA "${FX}/kjv_genesis_1-20.tsv --column 2 --doc-column 1 --val-every 5")
set(XL_RUN "--seq-len 32 --batch 2 --threads 1")
set(XL_SMALL "${XL_RUN} --window 8 --sinks 2")
# Stages I and II write the student, its Stage I model and a log of both stages; two students
# merge (Stage III); --evaluate scores teacher and students on every benchmark, and winrate reads
# the table.  The student is mlstm-hybrid with the window asked for; the teacher agrees with itself.
cli_case(xlstm-distill/stages-merge-evaluate --rc 0
  --file-jq r.json ".types == \"mlstm-hybrid,mlstm-hybrid\" and .window == 8 and .stages == [1, 2] and .rows == 9 and .cols == [\"benchmark\", \"teacher\", \"a\", \"m\"] and .agree == \"1\" and .students == [\"a\", \"m\"]"
  -- bash -c "${XL_TEACHER} && ${XLD} teacher.h5 ${XL_DATA} ${XL_SMALL} --align-tokens 128 --kd-tokens 128 --log a.jsonl -o a.h5 -q && test -f a.stage1.h5 && ${XLD} teacher.h5 ${XL_DATA} ${XL_RUN} --init a.stage1.h5 --align-tokens 0 --kd-tokens 64 --books Ge1 --seed 3 -o b.h5 -q && ${XLD} --merge a.h5 --merge b.h5 --merge-weights 0.5,0.5 -o m.h5 -q && ${XLD} teacher.h5 ${XL_DATA} --evaluate a.h5 --evaluate m.h5 --group early:Ge5,Ge10 --group late:Ge15,Ge20 --bench-tokens 64 --threads 1 -o s.csv -q && ${XL_WINRATE} s.csv -o w.json && jq -n --arg types \"$(h5dump -a block_types a.h5 | grep -o 'mlstm-hybrid,mlstm-hybrid')\" --argjson window \"$(h5dump -a mlstm_window a.h5 | grep -o '(0): [0-9]*' | cut -d' ' -f2)\" --argjson stages \"$(jq -s '[.[].stage] | unique' a.jsonl)\" --argjson rows \"$(wc -l < s.csv)\" --argjson cols \"$(head -1 s.csv | jq -R 'split(\",\")')\" --arg agree \"$(grep ^agree_64 s.csv | cut -d, -f2)\" --argjson students \"$(jq '[.students[].name]' w.json)\" '{types: $types, window: $window, stages: $stages, rows: $rows, cols: $cols, agree: $agree, students: $students}' > r.json")
# Stage II resumes from its checkpoint: a finished run resumed trains nothing more and writes the same student.
cli_case(xlstm-distill/resume-finished --rc 0
  -- bash -c "${XL_TEACHER} && ${XLD} teacher.h5 ${XL_DATA} ${XL_SMALL} --align-tokens 0 --kd-tokens 128 -o a.h5 -q && cp a.h5 first.h5 && ${XLD} teacher.h5 ${XL_DATA} ${XL_SMALL} --align-tokens 0 --kd-tokens 128 --resume -o a.h5 -q && h5diff -d 0 first.h5 a.h5 blk.0.mlstm_fq.weight")
# Bad input: one line, nothing written.
cli_case(xlstm-distill/other-tokenizer --rc 1 --tool xlstm-distill --stderr "^xlstm-distill: error: its tokenizer differs from the teacher's: a student must share the teacher's vocabulary \\(os.h5\\)$" --no-file o.h5
  -- bash -c "${XL_TEACHER} && ${TOKTRAIN} ${FX}/genesis.txt --chunk-lines 3 --vocab-size 450 -o u.model -q && ${LMINIT} --tokenizer u.model --preset tiny --n-ctx 1024 -o other.h5 -q && ${XLD} other.h5 ${XL_DATA} ${XL_SMALL} --align-tokens 0 --kd-tokens 0 -o os.h5 -q && ${XLD} teacher.h5 ${XL_DATA} --init os.h5 -o o.h5")
cli_case(xlstm-distill/init-keeps-its-shape --rc 2 --tool xlstm-distill --stderr "^xlstm-distill: error: --window shapes a new student. --init's student keeps its own \\(--window\\)$" --no-file o.h5
  -- bash -c "${XL_TEACHER} && ${XLD} teacher.h5 ${XL_DATA} ${XL_SMALL} --align-tokens 0 --kd-tokens 0 -o a.h5 -q && ${XLD} teacher.h5 ${XL_DATA} --init a.h5 --window 4 -o o.h5")
cli_case(xlstm-distill/window-zero --rc 2 --stderr "^xlstm-distill: error: the window must be >= 1 token \\(got 0\\) \\(--window\\)$" --no-file o.h5
  -- ${XLD} ${FX}/genesis.txt ${FX}/genesis.txt --window 0 -o o.h5)
cli_case(xlstm-distill/merge-weights-not-one --rc 2 --tool xlstm-distill --stderr "^xlstm-distill: error: merge weights sum to 0.9, not 1 \\(--merge-weights\\)$" --no-file o.h5
  -- bash -c "${XL_TEACHER} && ${XLD} teacher.h5 ${XL_DATA} ${XL_SMALL} --align-tokens 0 --kd-tokens 0 -o a.h5 -q && ${XLD} --merge a.h5 --merge a.h5 --merge-weights 0.5,0.4 -o o.h5")
cli_case(xlstm-distill/student-as-teacher --rc 2 --tool xlstm-distill --stderr "^xlstm-distill: error: the teacher's block 0 is mlstm-hybrid: a student is distilled from llama blocks only$" --no-file o.h5
  -- bash -c "${XL_TEACHER} && ${XLD} teacher.h5 ${XL_DATA} ${XL_SMALL} --align-tokens 0 --kd-tokens 0 -o a.h5 -q && ${XLD} a.h5 ${XL_DATA} ${XL_SMALL} -o o.h5")
cli_case(xlstm-distill/gguf-output --rc 2 --tool lm-convert --stderr "^lm-convert: error: mlstm-hybrid blocks exist in the native HDF5 format only .*$" --no-file a.gguf
  -- bash -c "${XL_TEACHER} && ${XLD} teacher.h5 ${XL_DATA} ${XL_SMALL} --align-tokens 0 --kd-tokens 0 -o a.h5 -q && ${MOE_CONV} a.h5 -o a.gguf")
