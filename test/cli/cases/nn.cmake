# ---- lm-train / lm-eval ---------------------------------------------------------------------------
set(LMTRAIN $<TARGET_FILE:lm-train>)
set(LMEVAL $<TARGET_FILE:lm-eval>)
# Genesis 1-20 from kjv.tsv (public domain): 20 chapters; --val-every 5 holds out chapters 5, 10, 15, 20.
set(KJVX ${FX}/kjv_genesis_1-20.tsv)
set(TRAIN_SMALL ${LMTRAIN} ${KJVX} --column 2 --doc-column 1 --val-every 5 --vocab-size 512 --d-model 32 --n-layers 2 --n-heads 4 --n-kv-heads 2 --d-ff 88 --n-ctx 64 --batch 4 --lr 3e-3 --warmup 10 --threads 1)
string(REPLACE ";" " " TRAIN_SMALL_STR "${TRAIN_SMALL}")

# A short seeded run: the validation loss (held-out chapters) falls far below its starting value
# log(512) = 6.24 nats (a random model with std 0.02 predicts ~uniformly), and keeps falling
# between the evaluations at steps 50 and 200.
cli_case(lm-train/kjv-excerpt-validation-loss-drops
  --rc 0 --file m.h5 --file m.best.h5
  --jq ".meta.tool == \"lm-train\" and .meta.n_params > 0 and .meta.val_tokens > 1000"
  --file-jq log.json "[.[] | select(.val_loss)] | (.[0].step == 50) and (.[-1].step == 200) and (.[-1].val_loss < .[0].val_loss - 0.3) and (.[-1].val_loss < 4.2)"
  --file-jq log.json "[.[] | select(.step)] | all(has(\"tokens\") and has(\"train_loss\") and has(\"lr\") and has(\"grad_norm\") and has(\"tokens_per_s\"))"
  --file-jq log.json ".[-1].summary.steps == 200 and .[-1].summary.tokens == 51200 and .[-1].summary.finished"
  --file-jq ex.json ".val_loss == .best and .tokens > 1000"
  -- bash -c "${TRAIN_SMALL_STR} --steps 200 --eval-every 50 -o m.h5 --export ship.h5 -q > log.jsonl && h5dump -a dtype -d blk.0.attn_q.weight ship.h5 | grep -q bf16 && ! h5dump -n ship.h5 | grep -q /train && ${LMEVAL} ship.h5 ${KJVX} --column 2 --doc-column 1 --val-every 5 --split val --threads 1 -q | jq --argjson b \"$(jq -s '[.[] | select(.val_loss)] | min_by(.val_loss) | .val_loss' log.jsonl)\" '{val_loss: .loss, best: $b, tokens}' > ex0.json && jq '{val_loss: (.val_loss*100|round), best: (.best*100|round), tokens}' ex0.json > ex.json && head -1 log.jsonl && jq -s . log.jsonl > log.json")
# lm-eval on the held-out chapters reproduces the trainer's last validation loss, and perplexity = exp(loss).
cli_case(lm-eval/val-split-matches-trainer
  --rc 0 --file-jq e.json ".split == \"val\" and .tokens > 1000 and ((.perplexity | log) - .loss | fabs) < 1e-9 and .meta.tool == \"lm-eval\""
  -- bash -c "${TRAIN_SMALL_STR} --steps 30 --eval-every 30 -o m.h5 -q > log.jsonl && ${LMEVAL} m.h5 ${KJVX} --column 2 --doc-column 1 --val-every 5 --split val -o e.json -q && jq --argjson v \"$(jq -s '.[-1].summary.val_loss' log.jsonl)\" '(.loss - $v | fabs) < 1e-9' e.json | grep -q true")
cli_case(lm-eval/plain-text-file
  --rc 0 --jq ".tokens > 1000 and .documents == 1 and .loss > 0 and .split == \"all\""
  -- bash -c "${TRAIN_SMALL_STR} --steps 5 -o m.h5 -q > /dev/null && ${LMEVAL} m.h5 ${FX}/genesis.txt --seq-len 32 --threads 1")
# Resume: 20 steps straight == 10 steps, stop, resume, 10 steps — every tensor and AdamW moment bitwise.
cli_case(lm-train/resume-bitwise
  --rc 0 --file a.h5 --file b.h5
  -- bash -c "${TRAIN_SMALL_STR} --steps 20 --eval-every 10 -o a.h5 -q > /dev/null && ${TRAIN_SMALL_STR} --steps 20 --eval-every 10 --stop-at 10 -o b.h5 -q > /dev/null && test $(h5dump -a /train/step b.h5 | grep -c '(0): 10') = 1 && ${TRAIN_SMALL_STR} --steps 20 --eval-every 10 --resume -o b.h5 -q > /dev/null && printf '%s\\n' token_embd.weight blk.0.attn_q.weight blk.1.ffn_down.weight blk.1.attn_norm.weight output.weight train/optim/m/output.weight train/optim/v/blk.0.attn_k.weight | xargs -I{} h5diff -q a.h5 b.h5 /{} /{} && h5dump -a /train/step b.h5 | grep -q '(0): 20'")
cli_case(lm-train/resume-changed-option --rc 1 --stderr "option clip is 0.5 here but 1.0 in the checkpoint" --tool lm-train
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 -o m.h5 -q > /dev/null && ${TRAIN_SMALL_STR} --steps 4 --clip 0.5 --resume -o m.h5 -q")
cli_case(lm-train/init-from-lm-init-and-generate
  --rc 0 --file m.h5
  -- bash -c "$<TARGET_FILE:tokenizer-train> ${KJVX} --column 2 --vocab-size 512 -o t.model -q && $<TARGET_FILE:lm-init> --tokenizer t.model --preset tiny --n-ctx 64 -o i.h5 -q && ${LMTRAIN} ${KJVX} --init i.h5 --steps 3 --batch 2 -o m.h5 -q > log.jsonl && $<TARGET_FILE:lm-generate> m.h5 --prompt 'And God' -n 5 -q > g.txt && test -s g.txt")
# The fast kernels (blocked GEMM, flash attention, vectorised layers) and the v1 reference ones
# train the same model: per-step losses within 0.02 nats over 30 steps (float rounding only; a
# wrong gradient drifts by more within a few steps), and the log reports the model-FLOP
# utilisation against the GEMM rate measured in the run.
cli_case(lm-train/fast-and-reference-kernels-agree
  --rc 0 --file-jq gap.json ".n == 30 and .gap < 0.02 and .mfu > 0 and .mfu < 1.5 and .gemm > 0 and .kernels == [\"fast\", \"reference\"]"
  -- bash -c "${TRAIN_SMALL_STR} --steps 30 --eval-every 0 --log-every 1 --kernels fast -o f.h5 -q > f.jsonl && ${TRAIN_SMALL_STR} --steps 30 --eval-every 0 --log-every 1 --kernels reference -o r.h5 -q > r.jsonl && jq -s --slurpfile r r.jsonl '([.[] | select(.step)] | map(.train_loss)) as $f | ([$r[] | select(.step)] | map(.train_loss)) as $g | {n: ($f | length), gap: ([range(0; $f | length)] | map(($f[.] - $g[.]) | fabs) | max), mfu: (.[-1].summary.mfu), gemm: (.[-1].summary.gemm_gflops), kernels: [.[0].meta.train_kernels, $r[0].meta.train_kernels]}' f.jsonl > gap.json")

# ---- bad input --------------------------------------------------------------------------------------
cli_case(lm-train/unknown-kernels --rc 2 --stderr "--kernels" --no-file m.h5 --tool lm-train
  -- ${LMTRAIN} ${FX}/genesis.txt --vocab-size 300 --steps 2 --kernels blas -o m.h5)
cli_case(lm-train/nan-loss-keeps-last-good-checkpoint --rc 1 --stderr "non-finite training .* at step [0-9]+. the last good checkpoint is step [0-9]+" --tool lm-train --file m.h5
  -- bash -c "${LMTRAIN} ${FX}/genesis.txt --vocab-size 400 --d-model 32 --n-layers 1 --n-heads 2 --n-kv-heads 1 --d-ff 64 --n-ctx 32 --batch 2 --steps 100 --lr 1e30 --warmup 0 --clip 0 --checkpoint-every 1 --threads 1 -o m.h5 -q > /dev/null || ( r=$? && ${LMEVAL} m.h5 ${FX}/genesis.txt -q > /dev/null && exit $r )")
cli_case(lm-train/empty-corpus --rc 1 --stderr "empty corpus" --no-file m.h5 --tool lm-train
  -- bash -c "touch empty.txt && ${LMTRAIN} empty.txt --vocab-size 400 --steps 2 -o m.h5")
cli_case(lm-train/vocab-larger-than-corpus --rc 1 --stderr "larger than the corpus supports" --no-file m.h5
  -- ${LMTRAIN} ${FX}/genesis.txt --vocab-size 20000 --steps 2 -o m.h5)
cli_case(lm-train/context-larger-than-model --rc 1 --stderr "larger than the model allows \\(n_ctx = 64\\)" --no-file m2.h5 --tool lm-train
  -- bash -c "${TRAIN_SMALL_STR} --steps 1 -o m.h5 -q > /dev/null && ${LMTRAIN} ${KJVX} --init m.h5 --seq-len 128 --steps 2 -o m2.h5")
cli_case(lm-train/unwritable-output --rc 1 --stderr "output directory does not exist" --no-file m.h5
  -- ${LMTRAIN} ${FX}/genesis.txt --vocab-size 400 --steps 2 -o nodir/m.h5)
cli_case(lm-train/too-little-text --rc 1 --stderr "fewer than one window" --no-file m.h5
  -- ${LMTRAIN} ${FX}/genesis.txt --vocab-size 400 --n-ctx 100000 --steps 2 -o m.h5)
cli_case(lm-train/no-steps --rc 2 --stderr "give --steps or --tokens" --no-file m.h5 -- ${LMTRAIN} ${FX}/genesis.txt --vocab-size 300 -o m.h5)
cli_case(lm-train/missing-column --rc 1 --stderr "fewer than 3 tab-separated fields \\(.*, line 1\\)" --no-file m.h5
  -- ${LMTRAIN} ${KJVX} --column 3 --vocab-size 400 --steps 2 -o m.h5)
cli_case(lm-eval/context-larger-than-model --rc 2 --stderr "larger than the model allows" --tool lm-eval
  -- bash -c "${TRAIN_SMALL_STR} --steps 1 -o m.h5 -q > /dev/null && ${LMEVAL} m.h5 ${FX}/genesis.txt --seq-len 65")
cli_case(lm-eval/no-tokenizer --rc 1 --stderr "no tokenizer" --tool lm-eval
  -- bash -c "$<TARGET_FILE:lm-init> --preset tiny -o i.h5 -q && ${LMEVAL} i.h5 ${FX}/genesis.txt")

# ---- the real KJV (../shared/data; skipped when absent) ------------------------------------------------
# --doc-column 1 groups the 31,102 verses into the 1,189 chapters; every 20th chapter (59) is validation.
cli_case(lm-eval/kjv-chapter-split --needs ${SHARED}/corpus/kjv.tsv
  --rc 0 --file-jq v.json ".documents == 59 and .split == \"val\" and .tokens == 2000" --file-jq t.json ".documents == 1130 and .tokens == 500"
  -- bash -c "${TRAIN_SMALL_STR} --steps 2 -o m.h5 -q > /dev/null && ${LMEVAL} m.h5 ${SHARED}/corpus/kjv.tsv --column 2 --doc-column 1 --val-every 20 --split val --max-tokens 2000 --threads 1 -o v.json -q && ${LMEVAL} m.h5 ${SHARED}/corpus/kjv.tsv --column 2 --doc-column 1 --val-every 20 --split train --max-tokens 500 --threads 1 -o t.json -q")
# Shape from a JSON config, length from --tokens (ceil(1000 / (4 x 64)) = 4 steps); the checkpoint has the shape.
cli_case(lm-train/json-config-and-token-budget
  --rc 0 --file-jq log.json ".[-1].summary.steps == 4 and .[-1].summary.tokens == 1024 and .[0].meta.n_params > 0"
  -- bash -c "echo '{\"d_model\": 24, \"n_layers\": 1, \"n_heads\": 3, \"n_kv_heads\": 1, \"d_ff\": 40, \"n_ctx\": 64, \"tied\": true, \"rope_style\": \"interleaved\"}' > cfg.json && ${LMTRAIN} ${KJVX} --column 2 --doc-column 1 --vocab-size 512 --config cfg.json --batch 4 --tokens 1000 --threads 1 -o m.h5 -q > log.jsonl && jq -s . log.jsonl > log.json && h5dump -a d_model -a tied -a rope_style m.h5 | grep -c -E '\\(0\\): (24|1|\"interleaved\")' | grep -q 3")

# Forgetting --resume does not throw a run away: -o with training state is refused (and kept) unless --overwrite.
cli_case(lm-train/existing-run-not-overwritten --rc 2 --stderr "already holds a training run: --resume continues it, --overwrite replaces it" --tool lm-train
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 -o m.h5 -q > /dev/null && cp m.h5 keep.h5 && (${TRAIN_SMALL_STR} --steps 4 -o m.h5 -q || (rc=$? && cmp -s m.h5 keep.h5 && exit $rc || exit 9))")
cli_case(lm-train/overwrite-replaces-run --rc 0
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 -o m.h5 -q > /dev/null && ${TRAIN_SMALL_STR} --steps 6 --overwrite -o m.h5 -q > /dev/null && h5dump -a /train/step m.h5 | grep -q '(0): 6'")
cli_case(lm-train/resume-longer-run-explained --rc 1 --stderr "option steps is 6 here but 4 in the checkpoint. the step count \\(set by --steps or --tokens\\) fixes the learning-rate schedule, so it cannot change on resume \\(to train longer, start a new run with --init from the checkpoint\\)" --tool lm-train
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 -o m.h5 -q > /dev/null && ${TRAIN_SMALL_STR} --steps 6 --resume -o m.h5 -q")
cli_case(lm-train/resume-finished-run --rc 0 --stderr "already finished .step 4 of 4.*no steps trained in this call" --tool lm-train
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 -o m.h5 -q > /dev/null && ${TRAIN_SMALL_STR} --steps 4 --resume -o m.h5 2>&1 > /dev/null | tr '\\n' ' ' >&2")
# ---- lm-train: resume checks the corpus; counts in scientific notation ----------------------------
string(REPLACE "${KJVX}" "other.tsv" TRAIN_OTHER_STR "${TRAIN_SMALL_STR}")
# The checkpoint records the corpus SHA-256 (/train corpus_sha256); resuming on another corpus
# (one word changed) is refused with one line, leaving the checkpoint and the log as they were.
cli_case(lm-train/resume-different-corpus --rc 1 --stderr "resume: the corpus differs from the one the checkpoint was trained on.*\\(other.tsv\\)" --tool lm-train
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 --stop-at 2 -o m.h5 --log l.jsonl -q && h5dump -a /train/corpus_sha256 m.h5 | grep -q $(sha256sum ${KJVX} | cut -c1-64) && cp m.h5 keep.h5 && cp l.jsonl keep.jsonl && sed 's/God/Gods/' ${KJVX} > other.tsv && (${TRAIN_OTHER_STR} --steps 4 --resume -o m.h5 --log l.jsonl -q || (rc=$? && cmp -s m.h5 keep.h5 && cmp -s l.jsonl keep.jsonl && exit $rc || exit 9))")
# --allow-corpus-change continues on it (and records the new corpus); the same corpus resumes silently.
cli_case(lm-train/resume-allow-corpus-change
  --rc 0 --file m.h5
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 --stop-at 2 -o m.h5 -q > /dev/null && sed 's/God/Gods/' ${KJVX} > other.tsv && ${TRAIN_OTHER_STR} --steps 4 --resume --allow-corpus-change -o m.h5 -q > /dev/null && h5dump -a /train/step m.h5 | grep -q '(0): 4' && h5dump -a /train/corpus_sha256 m.h5 | grep -q $(sha256sum other.tsv | cut -c1-64)")
# --tokens 1.024e3 = 1024 tokens = 4 steps of 4 windows x 64 tokens.
cli_case(lm-train/tokens-scientific-notation
  --rc 0 --file-jq log.json ".[-1].summary.steps == 4 and .[-1].summary.tokens == 1024"
  -- bash -c "${TRAIN_SMALL_STR} --tokens 1.024e3 --eval-tokens 1e3 --eval-every 2e0 -o m.h5 -q > l.jsonl && jq -s . l.jsonl > log.json")
cli_case(lm-train/tokens-not-whole --rc 2 --stderr "must be a whole number, got 2.5 \\(--tokens\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --tokens 2.5 -o m.h5)
cli_case(lm-train/steps-out-of-range --rc 2 --stderr "must be an integer in 1\\.\\.1099511627776, got 1e20 \\(--steps\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 1e20 -o m.h5)
cli_case(nn/eval-reads-gzip-corpus
  --rc 0 --file-jq b.json ".tokens > 100 and .loss > 0"
  -- bash -c "$<TARGET_FILE:tokenizer-train> ${FX}/genesis.txt --chunk-lines 3 --vocab-size 400 -o t.model -q && $<TARGET_FILE:lm-init> --tokenizer t.model --preset tiny --n-ctx 64 -o m.h5 -q && gzip -c ${FX}/genesis.txt > g.txt.gz && $<TARGET_FILE:lm-eval> m.h5 ${FX}/genesis.txt -q > a.json && $<TARGET_FILE:lm-eval> m.h5 g.txt.gz -q > b.json && test $(jq .loss a.json) = $(jq .loss b.json) && test $(jq .tokens a.json) = $(jq .tokens b.json)")

# ---- lm-train: --resume with --overwrite is a usage error, alone (no "ignored with --resume" warnings first) ----
cli_case(lm-train/resume-and-overwrite-usage-error-alone --rc 2 --stderr "^lm-train: error: give --resume or --overwrite, not both$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 4 --resume --overwrite -o m.h5)
# ---- lm-eval --max-tokens N scores exactly the first N predicted tokens ----------------------------
# Truth: the same corpus cut to its first 5 rows (documents) scores T = 111 tokens in 3 windows of
# --seq-len 40; the whole file with --max-tokens T must give the same tokens and the same loss
# (bitwise: the same windows).  And --max-tokens 100 reports 100 tokens in one window.
set(LO_KJV7M ${PROJECT_SOURCE_DIR}/data/models/kjv7m.h5)
cli_case(lm-eval/max-tokens-exact
  --rc 0 --file-jq all.json ".[0].tokens == 111 and .[1].tokens == .[0].tokens and .[1].loss == .[0].loss and .[1].windows == 3"
  --file-jq all.json ".[2].tokens == 100 and .[2].windows == 1"
  -- bash -c "head -n 5 ${KJVX} > k5.tsv && ${LMEVAL} ${LO_KJV7M} k5.tsv --column 2 --seq-len 40 -q > a.json && ${LMEVAL} ${LO_KJV7M} ${KJVX} --column 2 --seq-len 40 --max-tokens $(jq .tokens a.json) -q > b.json && ${LMEVAL} ${LO_KJV7M} ${KJVX} --column 2 --max-tokens 100 -q > c.json && jq -s . a.json b.json c.json > all.json")
# --log in a missing directory fails before the corpus is read (here the corpus is missing too).
cli_case(lm-train/log-dir-checked-first --rc 1 --stderr "^lm-train: error: output directory does not exist \\(nodir\\)$" --no-file m.h5
  -- ${LMTRAIN} missing.txt --vocab-size 400 --steps 2 -o m.h5 --log nodir/l.jsonl)

# LayerSkip's early-exit loss (issue 28): with exits after block 1 of 2 in every step (curriculum
# all) and sum_l weights, the objective is 1/4 of the exit's loss + 3/4 of the final layer's in
# every logged window (cumsum(1, 2) = 1, 3 normalised), and the options are part of the run.
cli_case(lm-train/exit-loss-objective
  --rc 0 --file m.h5
  --file-jq log.json "[.[] | select(.step)] | length > 0 and all(((.objective - (0.25 * .exit_losses[\"1\"] + 0.75 * .train_loss)) | fabs) < 1e-9 and (.exit_losses | keys) == [\"1\"])"
  -- bash -c "${TRAIN_SMALL_STR} --steps 10 --eval-every 10 --exit-loss 1 --exit-curriculum all -o m.h5 -q > log.jsonl && jq -s . log.jsonl > log.json && h5dump -a /train/options m.h5 | grep -q exit_loss")
cli_case(lm-train/exit-options-need-exit-loss --rc 2 --stderr "^lm-train: error: --exit-every needs --exit-loss > 0 \\(--exit-every\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 4 --exit-every 2 -o m.h5)
cli_case(lm-train/resume-without-exit-loss --rc 1 --stderr "trained with the early-exit loss. pass the same options: --exit-loss 0.5 --exit-every 1 --exit-curriculum rot --exit-weights sum_l" --tool lm-train
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 --eval-every 2 --stop-at 2 --exit-loss 0.5 -o m.h5 -q > /dev/null && ${TRAIN_SMALL_STR} --steps 4 --eval-every 2 --resume -o m.h5 -q")

# FOAM (issue 29): state counted from the buffers.  The TRAIN_SMALL shape (vocab 512, d_model 32,
# 2 layers, K/V width 16, d_ff 88) at level 2: unfolded embedding, head and norms 16384 + 16384 +
# 160 floats, folded matrices per layer 32x8 + 16x8 + 16x8 + 32x8 + 88x8 + 88x8 + 32x22 = 2880;
# (38688 floats) x 2 moments x 4 bytes = 309504; AdamW's state is twice the trainable bytes (55968
# floats); Adam-mini's is m (55968) + one v per row of embedding and head (512 + 512), per head of
# q and k (4 + 2), per row of v, o, gate, up, down (16 + 32 + 88 + 88 + 32) per layer, one per norm
# (5): 55968 + 1553 floats = 230084 bytes.
cli_case(lm-train/optimizer-state-bytes
  --rc 0 --file-jq s.json ".[0].optimizer_state_bytes == 309504 and .[0].optimizer == \"foam\" and .[1].optimizer_state_bytes == 2 * .[1].trainable_bytes and .[0].trainable_bytes == .[1].trainable_bytes and .[1].trainable_bytes == 223872 and .[2].optimizer_state_bytes == 230084 and .[0].peak_rss_bytes > 0"
  -- bash -c "${TRAIN_SMALL_STR} --steps 3 --optimizer foam --foam-level 2 -o f.h5 -q | tail -1 > f.json && ${TRAIN_SMALL_STR} --steps 3 -o a.h5 -q | tail -1 > a.json && ${TRAIN_SMALL_STR} --steps 3 --optimizer adam-mini -o m.h5 -q | tail -1 > m.json && jq -s 'map(.summary)' f.json a.json m.json > s.json")
cli_case(lm-train/foam-level-too-large --rc 2 --stderr "^lm-train: error: fold level 6 makes blocks of 64 entries, wider than blk.0.attn_q.weight \\(32 columns\\) \\(--foam-level\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --optimizer foam --foam-level 6 -o m.h5)
cli_case(lm-train/foam-flags-need-foam --rc 2 --stderr "^lm-train: error: --foam-level needs --optimizer foam \\(--foam-level\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --foam-level 1 -o m.h5)
cli_case(lm-train/galore-flags-need-galore --rc 2 --stderr "^lm-train: error: --galore-rank needs --optimizer galore \\(--galore-rank\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --galore-rank 4 -o m.h5)
# POET-X (issue 29): the memory of the paper's formula from the buffers (W0 mn frozen, (m + n)(b - 1)/2
# Q entries per matrix trained with two moments: 23040 and 4088 floats here, embedding, head and
# norms 32928), and the checkpoint holds the effective weights: lm-eval scores it as the run did.
cli_case(lm-train/poet-x-trains --rc 0
  --file-jq s.json ".summary.optimizer == \"poet-x\" and .summary.frozen_bytes == 92160 and .summary.trainable_bytes == 148064 and .summary.optimizer_state_bytes == 296128"
  -- bash -c "${TRAIN_SMALL_STR} --steps 6 --eval-every 6 --optimizer poet-x --poet-block 8 --poet-merge-every 4 --poet-lr 3e-3 -o p.h5 -q | tail -1 > s.json && ${LMEVAL} p.h5 ${KJVX} --column 2 --doc-column 1 --val-every 5 --split val -o e.json -q && jq --argjson v \"$(jq .summary.val_loss s.json)\" '(.loss - $v | fabs) < 1e-6' e.json | grep -q true")
cli_case(lm-train/poet-block-does-not-divide --rc 2 --stderr "^lm-train: error: POET-X block size 16 does not divide blk.0.ffn_gate.weight \\[88, 32\\]. sizes that divide every matrix: 2, 4, 8 \\(--poet-block\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --optimizer poet-x --poet-block 16 -o m.h5)
cli_case(lm-train/poet-x-refuses-reference-kernels --rc 2 --stderr "^lm-train: error: --kernels reference runs the v1 trainer's arithmetic, which has no POET-X path .* \\(--kernels\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --optimizer poet-x --poet-block 8 --kernels reference -o m.h5)
cli_case(lm-train/poet-flags-need-poet --rc 2 --stderr "^lm-train: error: --poet-block needs --optimizer poet-x \\(--poet-block\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --poet-block 8 -o m.h5)
# Sparse training (issue 30): SMET at d = 0.25 on every attention/MLP matrix (1024, 512, 512, 1024,
# 2816 x 3 entries per layer, 23040 in the two: exactly a quarter of each active), topology updates after steps 3 and 6
# with pruned = regrown in each of the 14 matrices, probe losses at u - 1 and u + 1 .. u + 2, the
# Adam state of the sparse matrices at a quarter (+ index and step per active entry: 16 bytes
# each) and dense elsewhere (embedding, head, norms: 32928 floats, 8 bytes each).
cli_case(lm-train/sparse-smet-trains --rc 0
  --file-jq r.json ".s.sparse.density == 0.25 and .s.sparse.active_weights == 5760 and .s.optimizer_state_bytes == 5760 * 16 + 32928 * 8 and .topo == [3, 6] and .layers == [14, 14] and .balanced and .probes == [2, 4, 5, 7, 8] and .s.steps == 8"
  -- bash -c "${TRAIN_SMALL_STR} --steps 8 --eval-every 8 --sparse smet --density 0.25 --update-every 3 --probe-steps 2 -o s.h5 -q > log.jsonl && jq -s '{s: (.[] | select(.summary) | .summary), topo: [.[] | select(.event == \"topology\") | .step], layers: [.[] | select(.event == \"topology\") | .layers | length], balanced: ([.[] | select(.event == \"topology\") | .layers[] | .pruned == .regrown and .pruned > 0 and .density == 0.25] | all), probes: [.[] | select(.event == \"probe\") | .step]}' log.jsonl > r.json")
# static: the control probes at its --update-every / --probe-steps (u - 1, u, u + 1 ..), no topology line.
cli_case(lm-train/sparse-static-control-probes --rc 0
  --file-jq r.json ".probes == [[2, -1], [3, 0], [4, 1], [5, -1], [6, 0], [7, 1], [8, 2]] and .topo == 0"
  -- bash -c "${TRAIN_SMALL_STR} --steps 8 --eval-every 8 --sparse static --density 0.25 --update-every 3 --probe-steps 2 -o s.h5 -q > log.jsonl && jq -s '{probes: [.[] | select(.event == \"probe\") | [.step, .since_update]], topo: ([.[] | select(.event == \"topology\")] | length)}' log.jsonl > r.json")
# --probe-control: a probe_control line per update (u = 3, 6) with --probe-steps losses, the run itself
# unchanged (the same last loss and held-out loss as without it).
cli_case(lm-train/sparse-probe-control --rc 0
  --file-jq r.json ".c == [[3, 2], [6, 2]] and .a == .b"
  -- bash -c "${TRAIN_SMALL_STR} --steps 8 --eval-every 8 --sparse set --density 0.25 --update-every 3 --probe-steps 2 --probe-control -o c.h5 -q > c.jsonl && ${TRAIN_SMALL_STR} --steps 8 --eval-every 8 --sparse set --density 0.25 --update-every 3 --probe-steps 2 -o p.h5 -q > p.jsonl && jq -n --slurpfile c c.jsonl --slurpfile p p.jsonl '{c: [$c[] | select(.event == \"probe_control\") | [.step, (.probe_loss | length)]], a: [$c[] | select(.summary) | .summary | .train_loss, .val_loss], b: [$p[] | select(.summary) | .summary | .train_loss, .val_loss]}' > r.json")
cli_case(lm-train/sparse-probe-control-static --rc 2 --stderr "^lm-train: error: --probe-control needs a topology that changes \\(--sparse set, rigl or smet\\) \\(--probe-control\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --sparse static --probe-control -o m.h5)
cli_case(lm-train/sparse-probe-control-window --rc 2 --stderr "^lm-train: error: --probe-control pairs the 5 probe steps after an update with its control: they must lie in .1, --update-every 5. so that the next update does not fall inside the window \\(--probe-steps\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --sparse set --density 0.5 --update-every 5 --probe-steps 5 --probe-control -o m.h5)
cli_case(lm-train/sparse-density-out-of-range --rc 2 --stderr "^lm-train: error: the density must lie in \\(0, 1. \\(got 1.5\\) \\(--density\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --sparse smet --density 1.5 -o m.h5)
cli_case(lm-train/sparse-update-every-zero --rc 2 --stderr "^lm-train: error: the topology update interval must be >= 1 step \\(got 0\\) \\(--update-every\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --sparse set --update-every 0 -o m.h5)
cli_case(lm-train/sparse-needs-adamw --rc 2 --stderr "^lm-train: error: --sparse rigl trains with AdamW .*--optimizer foam has no sparse state \\(--sparse\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --sparse rigl --optimizer foam -o m.h5)
cli_case(lm-train/sparse-flags-need-sparse --rc 2 --stderr "^lm-train: error: --density needs --sparse static, set, rigl or smet \\(--density\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --density 0.5 -o m.h5)
cli_case(lm-train/sparse-block-does-not-divide --rc 2 --stderr "^lm-train: error: sparse block size 48 does not divide blk.0.attn_q.weight .32, 32. \\(1024 entries\\), so its density could not be exact. sizes that divide every matrix: 1, 2, 4, 8, 16, 32, 64, 128, 256 \\(--sparse-block\\)$" --no-file m.h5
  -- ${TRAIN_SMALL} --steps 3 --sparse set --sparse-block 48 -o m.h5)
# A resume with another density names that setting and the flags the checkpoint was trained with.
cli_case(lm-train/sparse-resume-other-density --rc 1 --tool lm-train --stderr "^lm-train: error: resume: sparse option density is 0.4 here but 0.5 in the checkpoint \\(it was trained with --sparse set --density 0.5 --update-every 100 --prune-rate 0.2 --prune-rate-min 0.005 --prune-schedule cosine\\) \\(s.h5\\)$"
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 --stop-at 2 --sparse set --density 0.5 -o s.h5 -q > /dev/null && ${TRAIN_SMALL_STR} --steps 4 --resume --sparse set --density 0.4 -o s.h5 -q")
# A sparse checkpoint resumed without --sparse is refused (exit 1), naming the options to pass.
cli_case(lm-train/sparse-resumed-dense --rc 1 --tool lm-train --stderr "^lm-train: error: resume: the checkpoint was trained sparse \\(--sparse set --density 0.5 --update-every 100 --prune-rate 0.2 --prune-rate-min 0.005 --prune-schedule cosine\\). pass the same sparse options \\(s.h5\\)$"
  -- bash -c "${TRAIN_SMALL_STR} --steps 4 --stop-at 2 --sparse set --density 0.5 -o s.h5 -q > /dev/null && ${TRAIN_SMALL_STR} --steps 4 --resume -o s.h5 -q")
cli_case(lm-train/galore-trains --rc 0 --file m.h5
  --jq ".summary.optimizer == \"galore\" and .summary.steps == 6 and .summary.train_loss < 6.3"
  -- bash -c "${TRAIN_SMALL_STR} --steps 6 --optimizer galore --galore-rank 8 --galore-gap 3 -o m.h5 -q | tail -1")
