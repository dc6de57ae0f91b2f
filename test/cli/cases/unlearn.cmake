# ---- lm-train --trajectory / --unlearn-requests and lmcleaner-unlearn (issue 34) -----------------------
set(UNLEARN $<TARGET_FILE:lmcleaner-unlearn>)
# The tiny KJV model of nn.cmake trained with plain SGD (the paper's setting: no clipping, no decay,
# cosine from 0.1 to 0.01), one thread; under a second for 60 steps.
set(UL_BASE "${LMTRAIN} ${KJVX} --column 2 --doc-column 1 --val-every 5 --vocab-size 512 --d-model 32 --n-layers 2 --n-heads 4 --n-kv-heads 2 --d-ff 88 --n-ctx 64 --batch 4 --lr 0.1 --warmup 0 --threads 1 --weight-decay 0 --clip 0")
set(UL_TRAIN "${UL_BASE} --optimizer sgd")
# The recorded run most cases unlearn from: 60 steps, a checkpoint every 20 (ckpt-0/20/40/60).
set(UL_RUN60 "${UL_TRAIN} --steps 60 --trajectory T --trajectory-every 20 -o m.h5 -q > log.jsonl")
# A shorter one for the refusals.
set(UL_RUN20 "${UL_TRAIN} --steps 20 --trajectory T --trajectory-every 10 -o m.h5 -q > /dev/null")
set(UL "${UNLEARN} T ${KJVX} --threads 1 -q")
# The tensors compared bitwise between two checkpoints (each piped to h5diff -q, which exits 1 on any
# difference, so xargs fails).
set(UL_TENSORS "printf '%s\\n' token_embd.weight blk.0.attn_q.weight blk.0.attn_norm.weight blk.1.ffn_down.weight output_norm.weight output.weight")

# (a) The store and bit-identical replay.  The store holds ckpt-0/20/40/60, trajectory.json and one
# steps.jsonl line per step 0..59; the summary's byte count is the directory's.  Recording changes
# nothing (the same run without --trajectory gives the same weights).  With ckpt-60 removed,
# --method none must rebuild theta[60] by replaying steps 40..59 from ckpt-40 (each replayed step's
# loss checked against the recorded one), and --at 50 rebuilds theta[50], which lm-train --stop-at 50
# of the same run wrote: both bitwise.
cli_case(lmcleaner-unlearn/trajectory-store-and-bitwise-replay
  --rc 0 --file n60.h5 --file n50.h5
  --file-jq n60.json ".method == \"none\" and .tau == 60 and .deleted_steps == [5] and .metrics.forget_window_loss > 0"
  --file-jq n50.json ".tau == 50"
  --file-jq T/trajectory.json ".format == \"icmlkit-trajectory\" and .checkpoint_every == 20 and .train_options.optimizer == \"sgd\" and .windows == 344 and .seq_len == 64 and (.corpus.sha256 | length) == 64"
  --file-jq log.json ".[-1].summary.trajectory.checkpoint_every == 20 and .[-1].summary.steps == 60"
  -- bash -c "${UL_RUN60} && jq -s . log.jsonl > log.json && test \"$(ls T | paste -sd, -)\" = ckpt-00000000.h5,ckpt-00000020.h5,ckpt-00000040.h5,ckpt-00000060.h5,steps.jsonl,trajectory.json && test $(wc -l < T/steps.jsonl) = 60 && jq -s -e '([.[].step] == [range(60)]) and all(.windows | length == 4) and all(.clipped | not) and .[0].lr == 0.1' T/steps.jsonl > /dev/null && test $(jq -s '.[-1].summary.trajectory.bytes' log.jsonl) = $(cat T/* | wc -c) && ${UL_TRAIN} --steps 60 -o plain.h5 -q > /dev/null && ${UL_TRAIN} --steps 60 --stop-at 50 -o p50.h5 -q > /dev/null && rm T/ckpt-00000060.h5 && ${UL} --method none --steps 5 -o n60.h5 > n60.json && ${UL} --method none --steps 5 --at 50 -o n50.h5 > n50.json && ${UL_TENSORS} | xargs -I{} h5diff -q m.h5 plain.h5 /{} /{} && ${UL_TENSORS} | xargs -I{} h5diff -q m.h5 n60.h5 /{} /{} && ${UL_TENSORS} | xargs -I{} h5diff -q p50.h5 n50.h5 /{} /{} && ! h5diff -q n50.h5 n60.h5 /output.weight /output.weight")

# (b) One deleted batch (step 30 of 60, tau = the end): retrain replays 31..59 from theta[30] with
# step 30 a no-op; doing nothing leaves a distance > 0 to it; LMCleaner with the exact Hessian in
# double, K = infinity and no noise removes most of it (< 0.3x none's), the Gauss-Newton product
# too (< none's).  Deleting the last step (59) is exact for any K: theta[60] - u[59] = theta[59].
cli_case(lmcleaner-unlearn/lmcleaner-exact-and-ggn-approach-retrain
  --rc 0 --file c.h5 --file r.h5
  --file-jq d.json ".none > 0 and .exact < 0.3 * .none and .ggn < .none and .last == 0"
  --file-jq r.json ".method == \"retrain\" and .steps_taken == 30 and .deleted_steps == [30] and .deleted_windows == 4 and .flop_vs_retrain == 1"
  --file-jq c.json ".certificate.kind == \"none\" and .certificate.epsilon == null and .certificate.deleted == [{\"k_used\": 29, \"step\": 30, \"truncated\": false, \"u_norm\": .certificate.deleted[0].u_norm}] and .products == 29 and .K == \"inf\" and .certificate.hvp == \"exact\" and .certificate.hvp_precision == \"double\""
  -- bash -c "${UL_RUN60} && ${UL} --steps 30 --method retrain -o r.h5 > r.json && ${UL} --steps 30 --method none -o n.h5 --reference r.h5 > n.json && ${UL} --steps 30 -K inf --hvp exact --hvp-precision double --noise none -o c.h5 --reference r.h5 > c.json && ${UL} --steps 30 -K inf --hvp ggn --hvp-precision double --noise none --no-probe -o g.h5 --reference r.h5 > g.json && ${UL} --steps 59 --method retrain -o r59.h5 > /dev/null && ${UL} --steps 59 -K 0 --noise none --no-probe -o c59.h5 --reference r59.h5 > c59.json && jq -n --slurpfile n n.json --slurpfile c c.json --slurpfile g g.json --slurpfile l c59.json '{none: $n[0].metrics.distance_to_reference, exact: $c[0].metrics.distance_to_reference, ggn: $g[0].metrics.distance_to_reference, last: $l[0].metrics.distance_to_reference}' > d.json")

# (c) The truncation window K (exact products in double, no noise): the distance to retrain shrinks
# from K = 0 to K = 16 and K = infinity, and the truncation error e_K = ||theta_K - theta_inf||
# (--reference the K = infinity model; a second --reference gives the distance to retrain) falls
# with K and fits log e_K = a + K log gamma (least squares over K = 0, 1, 4, 16) with gamma < 1.
set(UL_SWEEP "${UL} --steps 30 --hvp exact --hvp-precision double --noise none --no-probe")
cli_case(lmcleaner-unlearn/truncation-error-decays-geometrically
  --rc 0
  --file-jq k.json ".e[0] > .e[1] and .e[1] > .e[2] and .e[2] > .e[3] and .e[3] > 0"
  --file-jq k.json ".gamma > 0 and .gamma < 1 and .d16 < .d0 and .dinf < .d16"
  -- bash -c "${UL_RUN60} && ${UL} --steps 30 --method retrain -o r.h5 > /dev/null && ${UL_SWEEP} -K inf -o kinf.h5 --reference r.h5 > kinf.json && ${UL_SWEEP} -K 0 -o k.h5 --reference kinf.h5 --reference r.h5 > k0.json && ${UL_SWEEP} -K 1 -o k.h5 --reference kinf.h5 > k1.json && ${UL_SWEEP} -K 4 -o k.h5 --reference kinf.h5 > k4.json && ${UL_SWEEP} -K 16 -o k.h5 --reference kinf.h5 --reference r.h5 > k16.json && jq -s '{K: [.[1:][] | .K], e: [.[1:][] | .metrics.distances[\"kinf.h5\"]], dinf: .[0].metrics.distances[\"r.h5\"], d0: .[1].metrics.distances[\"r.h5\"], d16: .[4].metrics.distances[\"r.h5\"]}' kinf.json k0.json k1.json k4.json k16.json | jq '(.K | add / length) as $mk | (.e | map(log) | add / length) as $my | . + {gamma: (([range(4) as $i | (.K[$i] - $mk) * ((.e[$i] | log) - $my)] | add) / ([.K[] | (. - $mk) * (. - $mk)] | add) | exp)}' > k.json")

# (d) Phase 4.  With gamma and C_lin given (K = 4): certified; Delta = (C_lin + gamma^4 / (1 - gamma))
# ||u||; subspace sigma_par = 2 Delta / eps sqrt(2 ln(2.5 / delta)), sigma_perp = beta sigma_par; the
# draw's per-part RMS near the sigmas (k = 20: within 0.8..1.25), and the noise actually added,
# measured independently as the distance to the same correction without noise, has the norm
# sqrt(k sigma_par^2 + (p - k) sigma_perp^2) (isotropic: sigma sqrt(p), sigma = Delta / eps
# sqrt(2 ln(1.25 / delta))) within 5 %.  Estimated constants: empirical; --substitute-norm: substitute
# (Delta = ||v||); --noise none: none.
set(UL_K4 "${UL} --steps 30 -K 4")
cli_case(lmcleaner-unlearn/noise-and-certificate-labels
  --rc 0 --file s.h5 --file i.h5
  --file-jq s.json ".certificate as $c | $c.kind == \"certified\" and $c.noise == \"subspace\" and $c.rank == 20 and $c.gamma_source == \"supplied\" and $c.c_lin_source == \"supplied\" and $c.epsilon == 1 and $c.delta == 1e-5"
  --file-jq s.json ".certificate as $c | (($c.sensitivity / ((0.1 + (0.9 * 0.9 * 0.9 * 0.9) / 0.1) * $c.deleted[0].u_norm) - 1) | fabs) < 1e-12 and (($c.sigma_par / (2 * $c.sensitivity * ((2 * ((2.5 / 1e-5) | log)) | sqrt)) - 1) | fabs) < 1e-12 and (($c.sigma_perp / (0.1 * $c.sigma_par) - 1) | fabs) < 1e-12"
  --file-jq s.json ".certificate as $c | ($c.noise_rms_par / $c.sigma_par) > 0.8 and ($c.noise_rms_par / $c.sigma_par) < 1.25 and ($c.noise_rms_perp / $c.sigma_perp) > 0.8 and ($c.noise_rms_perp / $c.sigma_perp) < 1.25"
  --file-jq s.json ".certificate as $c | (.metrics.distance_to_reference / ((20 * $c.sigma_par * $c.sigma_par + (.n_params - 20) * $c.sigma_perp * $c.sigma_perp) | sqrt)) as $r | $r > 0.95 and $r < 1.05"
  --file-jq i.json ".certificate as $c | $c.kind == \"certified\" and $c.noise == \"isotropic\" and $c.sigma_par == $c.sigma_perp and (($c.sigma_par / ($c.sensitivity * ((2 * ((1.25 / 1e-5) | log)) | sqrt)) - 1) | fabs) < 1e-12 and ($c.noise_rms_par / $c.sigma_par) > 0.8 and ($c.noise_rms_par / $c.sigma_par) < 1.25"
  --file-jq i.json ".certificate as $c | (.metrics.distance_to_reference / ($c.sigma_par * (.n_params | sqrt))) as $r | $r > 0.95 and $r < 1.05"
  --file-jq e.json ".certificate.kind == \"empirical\" and .certificate.gamma_source == \"estimated\" and .certificate.c_lin_source == \"estimated\" and .certificate.gamma < 1 and .certificate.noise == \"subspace\" and .certificate.rank == 100"
  --file-jq u.json ".certificate.kind == \"substitute\" and .certificate.sensitivity == .certificate.v_norm and .certificate.sigma_par > 0"
  --file-jq z.json ".certificate.kind == \"none\" and .certificate.epsilon == null and .certificate.sigma_par == 0 and .certificate.noise_norm == 0 and .certificate.deleted[0].k_used == 4 and .certificate.deleted[0].truncated"
  -- bash -c "${UL_RUN60} && ${UL_K4} --noise none -o z.h5 > z.json && ${UL_K4} --noise subspace --noise-rank 20 --epsilon 1 --c-lin 0.1 --gamma 0.9 --reference z.h5 -o s.h5 | jq --argjson p $(jq -s '.[-1].summary.n_params' log.jsonl) '. + {n_params: $p}' > s.json && ${UL_K4} --noise isotropic --epsilon 1 --c-lin 0.1 --gamma 0.9 --reference z.h5 -o i.h5 | jq --argjson p $(jq -s '.[-1].summary.n_params' log.jsonl) '. + {n_params: $p}' > i.json && ${UL_K4} --no-eval --noise subspace -o e.h5 > e.json && ${UL_K4} --no-eval --noise subspace --substitute-norm -o u.h5 > u.json && ! h5diff -q s.h5 z.h5 /output.weight /output.weight")

# (e) The baselines on theta[60] for the batch of step 30: gradient ascent raises the forget windows'
# loss above the model's as trained; negrad+ and finetune run and write a model with finite metrics.
cli_case(lmcleaner-unlearn/baselines
  --rc 0 --file ga.h5 --file ng.h5 --file ft.h5
  --file-jq b.json ".ga.metrics.forget_window_loss > .none.metrics.forget_window_loss"
  --file-jq b.json "[.ga, .ng, .ft] | all(.baseline_steps == 5 and .baseline_lr == 0.1 and .flop > 0 and ([.metrics[]] | all(type == \"number\")))"
  --file-jq b.json ".ng.flop == 2 * .ft.flop and .ft.metrics.retain_loss < .none.metrics.retain_loss"
  -- bash -c "${UL_RUN60} && ${UL} --steps 30 --method none -o n.h5 > n.json && ${UL} --steps 30 --method gradient-ascent --baseline-steps 5 --baseline-lr 0.1 -o ga.h5 > ga.json && ${UL} --steps 30 --method negrad+ --baseline-steps 5 --baseline-lr 0.1 -o ng.h5 > ng.json && ${UL} --steps 30 --method finetune --baseline-steps 5 --baseline-lr 0.1 -o ft.h5 > ft.json && jq -n --slurpfile n n.json --slurpfile a ga.json --slurpfile g ng.json --slurpfile f ft.json '{none: $n[0], ga: $a[0], ng: $g[0], ft: $f[0]}' > b.json")

# (f) Membership inference: forget Genesis 3 and 4 (whole chapters, matched to training documents;
# a 90-step run covers every window of them), non-members Genesis 5 and 10 (held out): the AUC lies
# in [0, 1] for the model as trained and for retrain, whose loss on the forgotten chapters is higher.
cli_case(lmcleaner-unlearn/membership-inference
  --rc 0
  --file-jq n.json ".forget_documents == 2 and .metrics.nonmember_documents == 2 and .metrics.mia_auc >= 0 and .metrics.mia_auc <= 1 and .deleted_windows > 40"
  --file-jq r.json ".forget_documents == 2 and .metrics.mia_auc >= 0 and .metrics.mia_auc <= 1"
  --file-jq l.json ".retrain > .none"
  -- bash -c "${UL_TRAIN} --steps 90 --trajectory T --trajectory-every 30 -o m.h5 -q > /dev/null && grep -E '^Ge[34]:' ${KJVX} > forget.tsv && grep -E '^Ge(5|10):' ${KJVX} > non.tsv && ${UL} --forget forget.tsv --nonmembers non.tsv --method none -o n.h5 > n.json && ${UL} --forget forget.tsv --nonmembers non.tsv --method retrain -o r.h5 > r.json && jq -n --slurpfile n n.json --slurpfile r r.json '{none: $n[0].metrics.forget_loss, retrain: $r[0].metrics.forget_loss}' > l.json")

# (g) Bad input: one line on stderr, exit 1 (bad data) or 2 (usage), no model written.
cli_case(lmcleaner-unlearn/document-never-trained-on --rc 1 --tool lmcleaner-unlearn --no-file o.h5
  --stderr "25 of the 25 windows to forget were never trained on in the first 1 steps"
  -- bash -c "${UL_RUN20} && ${UL} --at 1 --documents 0 -o o.h5")
cli_case(lmcleaner-unlearn/epsilon-zero --rc 2 --stderr "epsilon must be a positive number.*--epsilon" --no-file o.h5
  -- ${UNLEARN} T ${KJVX} --steps 3 --epsilon 0 -o o.h5)
cli_case(lmcleaner-unlearn/delta-one --rc 2 --stderr "delta must lie in \\(0, 1\\).*--delta" --no-file o.h5
  -- ${UNLEARN} T ${KJVX} --steps 3 --delta 1 -o o.h5)
cli_case(lmcleaner-unlearn/not-a-trajectory --rc 1 --stderr "no trajectory.json: not a trajectory store" --no-file o.h5
  -- ${UNLEARN} ${FX} ${KJVX} --steps 3 -o o.h5)
cli_case(lmcleaner-unlearn/trajectory-is-a-file --rc 1 --stderr "not a trajectory directory" --no-file o.h5
  -- ${UNLEARN} ${KJVX} ${KJVX} --steps 3 -o o.h5)
cli_case(lmcleaner-unlearn/at-beyond-the-end --rc 1 --tool lmcleaner-unlearn --stderr "--at 21 is beyond the trajectory's 20 steps" --no-file o.h5
  -- bash -c "${UL_RUN20} && ${UL} --at 21 --steps 3 -o o.h5")
cli_case(lmcleaner-unlearn/forget-text-not-in-corpus --rc 1 --tool lmcleaner-unlearn --stderr "the text \"not a verse of Genesis\" is not a training document" --no-file o.h5
  -- bash -c "${UL_RUN20} && echo 'Zz1:1	not a verse of Genesis' > z.tsv && ${UL} --forget z.tsv -o o.h5")
cli_case(lmcleaner-unlearn/another-corpus --rc 1 --tool lmcleaner-unlearn --stderr "not the corpus the run trained on" --no-file o.h5
  -- bash -c "${UL_RUN20} && head -n 500 ${KJVX} > k.tsv && ${UNLEARN} T k.tsv --steps 3 -o o.h5")
cli_case(lmcleaner-unlearn/output-not-h5 --rc 2 --tool lmcleaner-unlearn --stderr "\\.h5 checkpoint.*-o" --no-file o.json
  -- bash -c "${UL_RUN20} && ${UL} --steps 3 -o o.json")
# A store that no longer covers the window (ckpt-0 removed: step 3 cannot be rebuilt).
cli_case(lmcleaner-unlearn/trajectory-does-not-cover-the-step --rc 1 --tool lmcleaner-unlearn --stderr "no checkpoint at or before step 3" --no-file o.h5
  -- bash -c "${UL_RUN20} && rm T/ckpt-00000000.h5 && ${UL} --steps 3 --method retrain -o o.h5")
# A recorded loss that replay does not reproduce (steps.jsonl edited): refused, not silently replayed
# (theta[15] is rebuilt from ckpt-10 through steps 10..14).
cli_case(lmcleaner-unlearn/tampered-step-record --rc 1 --tool lmcleaner-unlearn --stderr "replaying step 14 gives loss .* the trajectory recorded" --no-file o.h5
  -- bash -c "${UL_RUN20} && jq -c 'if .step == 14 then .loss += 0.001 else . end' T/steps.jsonl > s.jsonl && mv s.jsonl T/steps.jsonl && ${UL} --steps 3 --at 15 --method none -o o.h5")

# (h) Online mode.  Requests present when the run starts are read at the first step boundary, before
# step 0: nothing is trained yet, so each is logged (step 0, no deleted step, no lag, every window
# untrained) and its windows are never drawn: no batch of steps.jsonl holds a window of documents 2
# or 3 (Genesis 3 and 4), which the same run without requests trains on.  The windows of a document
# are those whose inputs or targets touch its stream positions (trajectory.json's doc_starts).
set(UL_REQS "echo '{\"id\": \"r1\", \"documents\": [2], \"K\": 4, \"hvp\": \"fisher\", \"noise\": \"isotropic\", \"epsilon\": 1, \"c_lin\": 0.1, \"gamma\": 0.9}' > req.jsonl && echo '{\"id\": \"r2\", \"documents\": [3]}' >> req.jsonl")
set(UL_HITS "jq -s --slurpfile t T/trajectory.json '($t[0].doc_starts) as $d | ($t[0].seq_len) as $S | [range($t[0].windows) | select(. * $S + $S >= $d[2] and . * $S < $d[4])] as $gone | {gone: ($gone | length), hits: ([.[].windows[] | select([.] | inside($gone))] | length), drawn: ([.[].windows[]] | length)}' T/steps.jsonl")
cli_case(lm-train/unlearn-requests-at-start
  --rc 0 --file m.h5
  --file-jq ev.json "length == 2 and ([.[].request] == [\"r1\", \"r2\"]) and all(.step == 0 and .deleted_steps == [] and .lag == [] and .requeued == 0 and .untrained_windows == .windows) and ([.[].windows] == [23, 22])"
  --file-jq hits.json ".online.gone == 44 and .online.hits == 0 and .online.drawn == 240 and .plain.hits > 0"
  --file-jq log.json ".[-1].summary.steps == 60 and .[-1].summary.finished and .[-1].summary.trajectory.bytes > 0"
  -- bash -c "${UL_REQS} && ${UL_TRAIN} --steps 60 --trajectory T --trajectory-every 20 --unlearn-requests req.jsonl -o m.h5 -q > log.jsonl && jq -s . log.jsonl > log.json && jq -s '[.[] | select(.event == \"unlearn\")]' log.jsonl > ev.json && ${UL_HITS} > online.json && rm -r T && ${UL_TRAIN} --steps 60 --trajectory T --trajectory-every 20 -o p.h5 -q > /dev/null && ${UL_HITS} > plain.json && jq -n --slurpfile o online.json --slurpfile p plain.json '{online: $o[0], plain: $p[0]}' > hits.json")
# Requests held until a step boundary ("at_step"): r1 (document 2, K = 4, Fisher, no noise) applied
# after 30 steps and r2 (the batch of step 33, K = inf, exact, certified isotropic noise) after 45.
# r1's deleted steps are exactly the steps < 30 whose batch holds a window of document 2 (computed
# here from steps.jsonl and doc_starts), with lag 30 - tz; its windows are never drawn again and
# the other windows of those batches are re-queued: steps 30..37 train on exactly them.  The
# corrected states are ckpt-30 and ckpt-45 (corrections.jsonl): the live weights at 30 moved by
# the correction's norm from those of the same run without requests (lm-train --stop-at 30), the
# correction equals lmcleaner-unlearn's offline one for the same steps bit for bit (the same
# trajectory prefix, the same walk), and the run's final weights are rebuilt bitwise by replay from
# ckpt-30 through the correction at 45 (ckpt-40 and ckpt-60 removed).  Composition over the one
# request with noise: basic epsilon 1, advanced 1 + sqrt(2 ln(1 / 1e-5)).
set(UL_ATREQS "echo '{\"id\": \"r1\", \"documents\": [2], \"K\": 4, \"hvp\": \"fisher\", \"noise\": \"none\", \"at_step\": 30}' > req.jsonl && echo '{\"id\": \"r2\", \"steps\": [33], \"K\": \"inf\", \"hvp\": \"exact\", \"noise\": \"isotropic\", \"epsilon\": 1, \"c_lin\": 0.1, \"gamma\": 0.9, \"at_step\": 45}' >> req.jsonl")
set(UL_R1 "jq -s --slurpfile t T/trajectory.json '($t[0].doc_starts) as $d | ($t[0].seq_len) as $S | [range($t[0].windows) | select(. * $S + $S >= $d[2] and . * $S < $d[3])] as $gone | . as $st | [$st[0:30][] | select([.windows[] | [.] | inside($gone)] | any) | .step] as $del | {gone: ($gone | length), del: $del, late_hits: ([$st[30:][].windows[] | select([.] | inside($gone))] | length), requeue: ([$del[] as $s | $st[$s].windows[] | select([.] | inside($gone) | not)] | unique), next32: ([$st[30:38][].windows[]] | sort)}' T/steps.jsonl")
cli_case(lm-train/unlearn-requests-at-step-correct-the-live-run
  --rc 0 --file m.h5 --file T/ckpt-00000030.h5 --file T/ckpt-00000045.h5
  --file-jq ev.json "length == 2 and ([.[].request] == [\"r1\", \"r2\"]) and ([.[].step] == [30, 45]) and .[1].deleted_steps == [33] and .[1].lag == [12] and .[1].certificate.kind == \"certified\" and .[0].certificate.kind == \"none\" and (.[0].composed_epsilon == null)"
  --file-jq ev.json ".[1].composed_epsilon_basic == 1 and ((.[1].composed_epsilon - (1 + (2 * (1e5 | log) | sqrt))) | fabs) < 1e-12 and .[0].requeued == 32 and .[0].windows == 23 and (.[0].certificate.deleted | all(.k_used == ([4, 29 - .step] | min)))"
  --file-jq r1.json ".ev.deleted_steps == .want.del and .ev.lag == [.want.del[] | 30 - .] and .want.gone == 23 and .want.late_hits == 0 and (.want.requeue | length) == 32 and .want.next32 == .want.requeue and .ev.untrained_windows > 0"
  --file-jq r1.json "((.moved / .ev.correction_norm) - 1 | fabs) < 1e-6"
  --file-jq log.json ".[-1].summary.unlearn_requests == 2 and .[-1].summary.steps == 60"
  -- bash -c "${UL_ATREQS} && ${UL_TRAIN} --steps 60 --trajectory T --trajectory-every 20 --unlearn-requests req.jsonl -o m.h5 -q > log.jsonl && jq -s . log.jsonl > log.json && jq -s '[.[] | select(.event == \"unlearn\")]' log.jsonl > ev.json && test \"$(jq -r .step T/corrections.jsonl | paste -sd, -)\" = 30,45 && ${UL_R1} > want.json && ${UL_TRAIN} --steps 60 --stop-at 30 -o p30.h5 -q > /dev/null && ${UL} --steps 0 --at 30 --method none -o x30.h5 --reference p30.h5 > x30.json && jq -n --slurpfile e ev.json --slurpfile w want.json --slurpfile x x30.json '{ev: $e[0][0], want: $w[0], moved: $x[0].metrics.distance_to_reference}' > r1.json && ${UL_TRAIN} --steps 60 --trajectory P --trajectory-every 20 -o p.h5 -q > /dev/null && ${UNLEARN} P ${KJVX} --threads 1 -q --at 30 --steps $(jq -r '.[0].deleted_steps | join(\",\")' ev.json) -K 4 --hvp fisher --noise none -o off.h5 > /dev/null && ${UL_TENSORS} | xargs -I{} h5diff -q off.h5 T/ckpt-00000030.h5 /{} /{} && rm T/ckpt-00000040.h5 T/ckpt-00000060.h5 && ${UL} --steps 0 --method none -o x60.h5 > /dev/null && ${UL_TENSORS} | xargs -I{} h5diff -q m.h5 x60.h5 /{} /{}")
# ... and lmcleaner-unlearn on that store finds nothing of document 2 trained on.
cli_case(lm-train/unlearn-requests-then-unlearn-refuses --rc 1 --tool lmcleaner-unlearn --stderr "23 of the 23 windows to forget were never trained on in the first 60 steps" --no-file o.h5
  -- bash -c "${UL_REQS} && ${UL_TRAIN} --steps 60 --trajectory T --trajectory-every 20 --unlearn-requests req.jsonl -o m.h5 -q > /dev/null && ${UL} --documents 2 -o o.h5")
cli_case(lm-train/unlearn-request-names-nothing --rc 1 --tool lm-train --stderr "the request names nothing to delete \\(.*req.jsonl, line 1\\)" --no-file m.h5
  -- bash -c "echo '{\"id\": \"r0\"}' > req.jsonl && ${UL_TRAIN} --steps 20 --trajectory T --unlearn-requests req.jsonl -o m.h5 -q")

# (i) What a trajectory cannot record or continue.
cli_case(lm-train/unlearn-trajectory-refuses-adam-mini --rc 2 --tool lm-train --stderr "not --optimizer adam-mini.*--trajectory" --no-file m.h5 --no-file T
  -- bash -c "exec ${UL_BASE} --optimizer adam-mini --steps 20 --trajectory T -o m.h5")
cli_case(lm-train/unlearn-trajectory-refuses-resume --rc 2 --tool lm-train --stderr "not --resume.*--trajectory" --no-file m.h5 --no-file T
  -- bash -c "exec ${UL_TRAIN} --steps 20 --trajectory T --resume -o m.h5")
cli_case(lm-train/unlearn-requests-need-trajectory --rc 2 --tool lm-train --stderr "give --trajectory DIR.*--unlearn-requests" --no-file m.h5
  -- bash -c "echo '{\"documents\": [1]}' > req.jsonl && exec ${UL_TRAIN} --steps 20 --unlearn-requests req.jsonl -o m.h5")
cli_case(lm-train/unlearn-trajectory-every-needs-trajectory --rc 2 --tool lm-train --stderr "--trajectory-every needs --trajectory" --no-file m.h5
  -- bash -c "exec ${UL_TRAIN} --steps 20 --trajectory-every 5 -o m.h5")
# An output never replaces an input or lands in the trajectory it reads (a newcomer's finding:
# -o over a checkpoint of the store, --certificate over steps.jsonl); the store stays intact.
cli_case(lmcleaner-unlearn/outputs-never-overwrite-inputs
  --rc 0
  -- bash -c "${UL_RUN20} && cp T/steps.jsonl s0 && cp T/ckpt-00000020.h5 c0 && ! ${UL} --steps 5 --method none -o T/ckpt-00000020.h5 2> e1 && ! ${UL} --steps 5 -K 2 --noise none --no-eval --certificate T/steps.jsonl -o c.h5 2> e2 && ! ${UL} --steps 5 --method none -o ${KJVX}.h5 --reference ${KJVX}.h5 2> e3 && grep -q 'would write into the trajectory' e1 && grep -q 'would write into the trajectory' e2 && cmp -s s0 T/steps.jsonl && cmp -s c0 T/ckpt-00000020.h5 && test ! -e c.h5")
