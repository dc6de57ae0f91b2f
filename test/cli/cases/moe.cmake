# ---- latentmoe-cost (issue 31): LatentMoE's analytic cost model --------------------------------
set(MOECOST $<TARGET_FILE:latentmoe-cost>)
# The paper's worked numbers (section 3, Qwen3-235B on GB200, one matrix per expert as it counts):
# t_exp >= 1418 tokens per expert and a communication/computation ratio of 9.04.
cli_case(latentmoe-cost/paper-worked-numbers --rc 0
  --jq "(.rows | length) == 1 and (.rows[0].roof_tokens * 10 | round) == 14188 and (.rows[0].comm_comp_ratio * 100 | round) == 904"
  --jq ".meta.tool == \"latentmoe-cost\" and .meta.config.d == 4096"
  -- ${MOECOST} --cost-matrices 1 --variants standard)
# Table 3's 95B model (32 layers, N 128, K 6, S 2, m 2688, relu2, l 1024): eff 2.852B fewer active
# parameters (8.47B -> 5.62B published), acc and eff 0.319B more in total.
cli_case(latentmoe-cost/table3-deltas --rc 0
  --jq "[.rows[] | .variant] == [\"standard\", \"eff\", \"acc\"] and (.rows[1].active_params_delta / 1e6 | round) == -2852"
  --jq "(.rows[2].active_params_delta / 1e6 | round) == 319 and (.rows[2].total_params_delta / 1e6 | round) == 319 and .rows[2].top_k == 24"
  -- ${MOECOST} --preset latentmoe-95b --latent 1024)
# A --config file, overridden by a flag; CSV out with its provenance sidecar.
cli_case(latentmoe-cost/config-file-and-flags --rc 0 --file c.csv --file c.csv.meta.json
  --file-jq c.csv.meta.json ".meta.config.d == 256 and .meta.config.experts == 8 and .meta.config.top_k == 4 and .meta.config.latent == 64"
  -- bash -c "echo '{\"d\": 256, \"experts\": 8, \"top_k\": 2, \"m\": 512, \"layers\": 4, \"expert\": \"swiglu\", \"latent\": 64}' > cfg.json && ${MOECOST} --config cfg.json --top-k 4 -o c.csv && test $(wc -l < c.csv) = 4")
# --sweep: one row per value and variant, and the picture.
cli_case(latentmoe-cost/sweep-plot --rc 0 --needs /usr/bin/gnuplot --file s.png
  --file-jq s.json "(.rows | length) == 12 and ([.rows[] | .alpha] | unique) == [1, 2, 4, 8] and ([.rows[] | select(.variant == \"eff\") | .experts]) == [64, 128, 256, 512]"
  -- bash -c "${MOECOST} --preset latentmoe-16b --sweep alpha=1,2,4,8 --plot s.png -o s.json && test \"$(head -c 4 s.png | tail -c 3)\" = PNG")
cli_case(latentmoe-cost/alpha-n-not-whole --rc 2 --no-file o.json
  --stderr "^latentmoe-cost: error: alpha x N = 1.3653333333333333 x 128 = 174.76266666666666 is not a whole number of experts. choose l so that d / l x N is one \\(--latent\\)$"
  -- ${MOECOST} --latent 3000 -o o.json)
cli_case(latentmoe-cost/top-k-above-n --rc 2 --stderr "^latentmoe-cost: error: K must lie in .1, N = 128. \\(got 200\\) \\(--top-k\\)$" --no-file o.json
  -- ${MOECOST} --top-k 200 -o o.json)
cli_case(latentmoe-cost/config-unknown-key --rc 1 --tool latentmoe-cost --stderr "^latentmoe-cost: error: unknown key \"dmodel\" \\(cfg.json\\)$" --no-file o.json
  -- bash -c "echo '{\"dmodel\": 256}' > cfg.json && ${MOECOST} --config cfg.json -o o.json")
cli_case(latentmoe-cost/config-fractional-count --rc 1 --tool latentmoe-cost --stderr "^latentmoe-cost: error: \"experts\" must be a whole number \\(got 8.5\\) \\(cfg.json\\)$" --no-file o.json
  -- bash -c "echo '{\"experts\": 8.5}' > cfg.json && ${MOECOST} --config cfg.json -o o.json")
cli_case(latentmoe-cost/config-missing --rc 1 --stderr "^latentmoe-cost: error: .*nope.json" --no-file o.json
  -- ${MOECOST} --config nope.json -o o.json)
cli_case(latentmoe-cost/plot-needs-sweep --rc 2 --stderr "^latentmoe-cost: error: --plot draws a sweep. give --sweep latent=... or alpha=... \\(--plot\\)$" --no-file p.png
  -- ${MOECOST} --plot p.png)
cli_case(latentmoe-cost/sweep-bad-value --rc 2 --stderr "^latentmoe-cost: error: --sweep: 'x' is not a positive number \\(--sweep\\)$"
  -- ${MOECOST} --sweep latent=512,x)
cli_case(latentmoe-cost/negative-width --rc 2 --stderr "^latentmoe-cost: error: d must be a positive number \\(got -5\\) \\(--d\\)$"
  -- ${MOECOST} --d -5)

# ---- moe / latent-moe models (issue 31): lm-init makes them, the CPU engine runs them -----------
set(MOE_EVAL $<TARGET_FILE:lm-eval>)
set(MOE_TRAIN $<TARGET_FILE:lm-train>)
set(MOE_CONV $<TARGET_FILE:lm-convert>)
set(MOE_MK "${TOKTRAIN} ${FX}/genesis.txt --chunk-lines 3 --vocab-size 400 -o t.model -q && ${LMINIT} --tokenizer t.model --preset tiny --n-ctx 64")
# A latent-moe model: the checkpoint records the routed FFN and the active weights; lm-eval scores
# it on the CPU engine (random weights: about ln 400 = 6.0 nats per token).
cli_case(lm-init/latent-moe-model --rc 0 --file m.h5
  --file-jq r.json ".device == \"cpu\" and .tokens == 300 and .loss > 5.5 and .loss < 6.5"
  -- bash -c "${MOE_MK} --moe latent --experts 8 --top-k 4 --latent 16 --d-expert 32 --d-shared 16 --router sigmoid -o m.h5 -q && h5dump -a moe_d_latent m.h5 | grep -q '(0): 16' && h5dump -a block_types m.h5 | grep -q 'latent-moe,latent-moe' && ${MOE_EVAL} m.h5 ${FX}/genesis.txt --max-tokens 300 -q > r.json")
cli_case(lm-init/moe-flag-needs-moe --rc 2 --stderr "^lm-init: error: --experts needs --moe standard or latent \\(--experts\\)$" --no-file m.h5
  -- ${LMINIT} --vocab-size 64 --experts 4 -o m.h5)
cli_case(lm-init/moe-top-k-above-experts --rc 2 --stderr "^lm-init: error: --top-k 9 exceeds --experts 8 \\(--top-k\\)$" --no-file m.h5
  -- ${LMINIT} --vocab-size 64 --moe standard --top-k 9 -o m.h5)
cli_case(lm-init/moe-latent-needs-latent --rc 2 --stderr "^lm-init: error: --latent needs --moe latent \\(--latent\\)$" --no-file m.h5
  -- ${LMINIT} --vocab-size 64 --moe standard --latent 16 -o m.h5)
# lm-train trains a latent-moe model from scratch (--moe) and resumes it bit for bit across a stop;
# the engine's held-out loss of the checkpoint (lm-eval) is the trainer's own (the same arithmetic).
set(MOE_TRAIN_SMALL "${MOE_TRAIN} ${FX}/kjv_genesis_1-20.tsv --column 2 --doc-column 1 --val-every 5 --vocab-size 512 --d-model 32 --n-layers 2 --n-heads 4 --n-kv-heads 2 --d-ff 88 --n-ctx 64 --batch 4 --lr 3e-3 --warmup 10 --threads 1 --steps 40 --eval-every 40 --moe latent --experts 8 --top-k 4 --latent 8 --d-expert 32 --router sigmoid")
cli_case(lm-train/moe-latent-trains-and-resumes --rc 0
  --file-jq r.json ".first > .last and .last < 5.4 and .same and (.eval - .val | fabs) < 1e-9 and .moe.aux_loss >= 0.99 and (.moe.layers | length) == 2 and ([.moe.layers[] | .load | add] | map(. - 1 | fabs < 1e-9) | all) and .moe.layers[0].entropy > 0.5 and .moe.layers[0].dropped_tokens == 0"
  -- bash -c "${MOE_TRAIN_SMALL} -o m.h5 -q > log.jsonl && ${MOE_TRAIN_SMALL} --stop-at 20 -o r.h5 -q > /dev/null && ${MOE_TRAIN_SMALL} --resume -o r.h5 -q > /dev/null && a=$(h5dump -d blk.1.ffn_up_exps.weight m.h5 | tail -n +3 | md5sum) && b=$(h5dump -d blk.1.ffn_up_exps.weight r.h5 | tail -n +3 | md5sum) && ${MOE_EVAL} m.h5 ${FX}/kjv_genesis_1-20.tsv --column 2 --doc-column 1 --val-every 5 --split val -q > e.json && jq -s --argjson e \"$(jq .loss e.json)\" --argjson same \"$([ \"$a\" = \"$b\" ] && echo true || echo false)\" '{first: ([.[] | select(.train_loss)][0].train_loss), last: ([.[] | select(.train_loss)][-1].train_loss), moe: ([.[] | select(.moe)][-1].moe), val: ([.[] | select(.summary)][0].summary.val_loss), eval: $e, same: $same}' log.jsonl > r.json")
cli_case(lm-train/moe-adamw-only --rc 2 --tool lm-train --stderr "^lm-train: error: a model with moe blocks trains with AdamW only for now \\(got --optimizer foam\\) \\(--optimizer\\)$" --no-file o.h5
  -- bash -c "${MOE_TRAIN_SMALL} --optimizer foam -o o.h5")
cli_case(lm-train/moe-flags-conflict-with-init --rc 2 --tool lm-train --stderr "^lm-train: error: --moe conflicts with --init \\(--moe\\)$" --no-file o.h5
  -- bash -c "${MOE_MK} -o m.h5 -q && ${MOE_TRAIN} ${FX}/genesis.txt --init m.h5 --moe standard --steps 2 -o o.h5 -q")
# GGUF and Hugging Face output of moe models: a Mixtral (standard, softmax, renormalised, no
# shared expert) under llama.cpp's llama architecture and transformers' MixtralForCausalLM names;
# any other (here latent-moe, sigmoid, shared, relu2, unnormalised, scaled) under icmlkit-moe /
# icmlkit_moe.  Either way h5 -> gguf -> h5 and h5 -> hf -> gguf -> h5 keep every tensor and
# every moe setting (test/peer/hf_mixtral.py checks the Mixtral against transformers itself).
set(MOE_SAME "bash ${CMAKE_CURRENT_SOURCE_DIR}/h5_same.sh m.h5 g.h5 h.h5 -- -a block_types -a moe_n_experts -a moe_top_k -a moe_d_expert -a moe_d_shared -a moe_d_latent -a moe_act -a moe_router -a moe_norm_topk -a moe_routed_scaling -d blk.0.ffn_gate_inp.weight -d blk.1.ffn_up_exps.weight -d blk.1.ffn_down_exps.weight -d output.weight")
cli_case(lm-convert/moe-mixtral-formats --rc 0 --file-jq hf/config.json ".model_type == \"mixtral\" and .num_local_experts == 8 and .num_experts_per_tok == 2"
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && ${MOE_CONV} m.h5 -o m.gguf -q && grep -q 'llama.expert_count' m.gguf && ${MOE_CONV} m.gguf -o g.h5 -q && ${MOE_CONV} m.h5 -o hf -q && grep -aq 'model.layers.1.block_sparse_moe.experts.7.w2.weight' hf/model.safetensors && ${MOE_CONV} hf -o hg.gguf -q && ${MOE_CONV} hg.gguf -o h.h5 -q && ${MOE_SAME}")
cli_case(lm-convert/moe-latent-formats --rc 0 --file-jq hf/config.json ".model_type == \"icmlkit_moe\" and .block_types == [\"latent-moe\", \"latent-moe\"] and .scoring_func == \"sigmoid\" and .latent_size == 16 and .routed_scaling_factor == 2.5 and .norm_topk_prob == false"
  -- bash -c "${MOE_MK} --moe latent --latent 16 --d-shared 16 --router sigmoid --expert-act relu2 --no-norm-topk --routed-scaling 2.5 -o m.h5 -q && ${MOE_CONV} m.h5 -o m.gguf -q && grep -q 'icmlkit-moe.expert_count' m.gguf && ! grep -q 'llama.expert_count' m.gguf && ${MOE_CONV} m.gguf -o g.h5 -q && ${MOE_CONV} m.h5 -o hf -q && grep -aq 'model.layers.1.mlp.experts.7.up_proj.weight' hf/model.safetensors && grep -aq 'model.layers.0.mlp.latent_down_proj.weight' hf/model.safetensors && grep -aq 'model.layers.0.mlp.gate.e_score_correction_bias' hf/model.safetensors && ${MOE_CONV} hf -o hg.gguf -q && ${MOE_CONV} hg.gguf -o h.h5 -q && ${MOE_SAME}")
cli_case(lm-eval/moe-hf-config-lacks-block-types --rc 1 --tool lm-eval --stderr "^lm-eval: error: config.json 'block_types' must list num_hidden_layers block types \\(.*hf/config.json\\)$"
  -- bash -c "${MOE_MK} --moe latent --latent 16 -o m.h5 -q && ${MOE_CONV} m.h5 -o hf -q && jq 'del(.block_types)' hf/config.json > c && mv c hf/config.json && ${MOE_EVAL} hf ${FX}/genesis.txt")
cli_case(lm-eval/mixtral-sliding-window --rc 1 --tool lm-eval --stderr "^lm-eval: error: sliding_window attention is not supported \\(set it to null\\) \\(.*hf/config.json\\)$"
  -- bash -c "${MOE_MK} --moe standard -o m.h5 -q && ${MOE_CONV} m.h5 -o hf -q && jq '.sliding_window = 4096' hf/config.json > c && mv c hf/config.json && ${MOE_EVAL} hf ${FX}/genesis.txt")
# Refusals found by a newcomer: a resume with another shape (the same command with --resume is fine),
# the load-balancing flags on a dense model, MoE keys in --config.
cli_case(lm-train/moe-resume-other-experts --rc 2 --tool lm-train --stderr "^lm-train: error: --d-shared 16 differs from the checkpoint's 0 \\(a resumed run keeps the checkpoint's shape\\) \\(--d-shared\\)$"
  -- bash -c "${MOE_TRAIN_SMALL} --stop-at 2 -o r.h5 -q > /dev/null && ${MOE_TRAIN_SMALL} --resume --d-shared 16 -o r.h5 -q")
cli_case(lm-train/moe-aux-on-dense --rc 2 --stderr "^lm-train: error: --moe-aux-loss needs a model with moe blocks .*\\(--moe-aux-loss\\)$" --no-file o.h5
  -- ${MOE_TRAIN} ${FX}/kjv_genesis_1-20.tsv --column 2 --vocab-size 512 --steps 2 --moe-aux-loss 0.5 -o o.h5)
cli_case(lm-train/config-moe-key --rc 1 --tool lm-train --stderr "^lm-train: error: 'moe_n_experts': a mixture-of-experts shape is given with the --moe flags .*\\(c.json\\)$" --no-file o.h5
  -- bash -c "echo '{\"d_model\": 32, \"moe_n_experts\": 4}' > c.json && ${MOE_TRAIN} ${FX}/kjv_genesis_1-20.tsv --column 2 --vocab-size 512 --config c.json --steps 2 -o o.h5")
# Token dropping (--moe-capacity-factor): a factor of 0.5 drops at least half of each window's
# routed entries (cap = ceil(0.5 x rows x K / E) per expert and forward call); the held-out loss
# (no dropping) is still the engine's.
cli_case(lm-train/moe-capacity-drops --rc 0
  --file-jq r.json "(.moe.layers | map(.dropped_tokens >= 0.5 * 10 * 4 * 64 * 4) | all) and (.eval - .val | fabs) < 1e-9 and .opts.moe_capacity_factor == 0.5"
  -- bash -c "${MOE_TRAIN} ${FX}/kjv_genesis_1-20.tsv --column 2 --doc-column 1 --val-every 5 --vocab-size 512 --d-model 32 --n-layers 2 --n-heads 4 --n-kv-heads 2 --d-ff 88 --n-ctx 64 --batch 4 --threads 1 --steps 10 --log-every 10 --moe latent --experts 8 --top-k 4 --latent 8 --d-expert 32 --moe-capacity-factor 0.5 -o m.h5 -q > log.jsonl && ${MOE_EVAL} m.h5 ${FX}/kjv_genesis_1-20.tsv --column 2 --doc-column 1 --val-every 5 --split val -q > e.json && jq -s --argjson e \"$(jq .loss e.json)\" '{moe: ([.[] | select(.moe)][-1].moe), val: ([.[] | select(.summary)][0].summary.val_loss), opts: ([.[] | select(.meta)][0].meta.options), eval: $e}' log.jsonl > r.json")
cli_case(lm-train/moe-capacity-negative --rc 2 --tool lm-train --stderr "^lm-train: error: the capacity factor must be >= 0 \\(got -1. 0 = no limit\\) \\(--moe-capacity-factor\\)$" --no-file o.h5
  -- bash -c "${MOE_TRAIN_SMALL} --moe-capacity-factor -1 -o o.h5")
