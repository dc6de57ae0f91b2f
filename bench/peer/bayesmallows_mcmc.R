# Peer for bench/rank_mallows.sh: BayesMallows (ocbe-uio/BayesMallows, built from its public
# repository) Metropolis-Hastings on a complete rank matrix, footrule, leap size 1.
# Usage: Rscript bayesmallows_mcmc.R LIB_DIR RANKS.csv NMC BURNIN ALPHA_FIXED|estimate MARGINALS_OUT.csv
# With a fixed alpha: alpha_jump = nmc - 1 (BayesMallows needs alpha_jump < nmc) and
# alpha_prop_sd = 1e-12, so alpha stays at alpha_init (one negligible update).
# Prints one JSON object: seconds (elapsed) and cpu_seconds (user + system) of compute_mallows,
# iterations, alpha_mean; writes the rho marginals (item,rank,probability) to MARGINALS_OUT.
args <- commandArgs(trailingOnly = TRUE)
suppressMessages(library(BayesMallows, lib.loc = args[1]))
m <- as.matrix(read.csv(args[2], header = FALSE))
nmc <- as.integer(args[3])
burnin <- as.integer(args[4])
fixed <- args[5] != "estimate"
alpha0 <- if (fixed) as.numeric(args[5]) else 1
set.seed(1)
opts <- if (fixed) set_compute_options(nmc = nmc, burnin = burnin, alpha_jump = nmc - 1L, alpha_prop_sd = 1e-12) else
  set_compute_options(nmc = nmc, burnin = burnin)
t <- system.time(fit <- compute_mallows(setup_rank_data(rankings = m), compute_options = opts,
                                        initial_values = set_initial_values(alpha_init = alpha0),
                                        progress_report = set_progress_report(verbose = FALSE)))
rho <- fit$rho[fit$rho$iteration > burnin, ]
n <- ncol(m)
idx <- as.integer(gsub("\\D", "", as.character(rho$item)))  # "Item 3" or "V3" -> 3
out <- c("item,rank,probability")
for (i in seq_len(n)) {
  v <- rho$value[idx == i]
  for (r in seq_len(n)) out <- c(out, sprintf("%d,%d,%.10g", i, r, mean(v == r)))
}
writeLines(out, args[6])
a <- fit$alpha$value[fit$alpha$iteration > burnin]
cat(sprintf('{"seconds": %.6f, "cpu_seconds": %.6f, "iterations": %d, "alpha_mean": %.6f}\n', t[["elapsed"]],
            t[["user.self"]] + t[["sys.self"]], nmc, mean(a)))
