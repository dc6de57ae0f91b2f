#!/usr/bin/env bash
# Regenerates the small generated tables in data/scaling/ (committed; this documents how
# they were made).  Each is drawn from a published law with a fixed awk seed; none is real
# training data.  Run from the repository root: bash data/make_fixtures.sh
set -euo pipefail
out=data/scaling

# Chinchilla law (Hoffmann et al. 2022 fit: E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28)
# on a 6 x 8 grid of N, D, with +-0.5% uniform multiplicative noise.
awk 'BEGIN { srand(2022); OFS=",";
  print "name,params,tokens,loss";
  split("7e7 1.5e8 4e8 1e9 3e9 1e10", N, " "); split("5e9 1e10 2e10 5e10 1e11 2e11 5e11 1e12", D, " ");
  for (i = 1; i <= 6; i++) for (j = 1; j <= 8; j++) {
    l = 1.69 + 406.4 / N[i]^0.34 + 410.7 / D[j]^0.28;
    printf "run%d_%d,%s,%s,%.6f\n", i, j, N[i], D[j], l * (1 + (rand() - 0.5) * 0.01) } }' > $out/chinchilla_synthetic.csv

# Data-constrained law (Muennighoff et al. 2023 published parameters) on runs with 1-40 epochs.
awk 'function dc(n, d, u,   A, B, E, al, be, rd, rn, G, RD, UN, RN) {
    A = exp(6.255414); B = exp(7.3049974); E = exp(0.6254804); al = 0.3526596; be = 0.3526596;
    rd = 15.387756; rn = 5.309743; G = ((al * A) / (be * B))^(1 / (al + be));
    RD = d / u - 1; if (RD < 0) RD = 0;
    UN = (u * G)^(be / al) * G; if (n < UN) UN = n; RN = n / UN - 1; if (RN < 0) RN = 0;
    return E + A / (UN + UN * rn * (1 - exp(-RN / rn)))^al + B / (u + u * rd * (1 - exp(-RD / rd)))^be }
  BEGIN { srand(2023);
  print "name,params,tokens,unique_tokens,loss";
  split("1e8 4e8 1e9 2.8e9 8.7e9", N, " "); split("1 2 4 8 16 40", EP, " "); split("1e9 4e9 1e10", U, " ");
  for (i = 1; i <= 5; i++) for (k = 1; k <= 3; k++) for (j = 1; j <= 6; j++) {
    d = U[k] * EP[j]; l = dc(N[i], d, U[k]);
    printf "dc%d_%d_%d,%s,%.6g,%s,%.6f\n", i, k, j, N[i], d, U[k], l * (1 + (rand() - 0.5) * 0.004) } }' > $out/data_constrained_synthetic.csv

# InfoLaw with the paper's reported constants (theta=0.922, a=0.140, b=0.018, alpha=3.7373,
# beta=0.0441): 9 sizes x 3 recipes (HQ/MQ/LQ), K = 72 N tokens, source S = 2e11 tokens,
# bucket shares 0.05,0.15,0.2,0.2,0.2,0.2; +-0.2% noise.
awk 'BEGIN { srand(2026); OFS=",";
  print "name,params,tokens,source_tokens,w0,w1,w2,w3,w4,w5,loss";
  split("252e6 350e6 450e6 550e6 650e6 800e6 950e6 1.1e9 1.2e9", N, " ");
  split("0.05 0.15 0.2 0.2 0.2 0.2", SH, " ");
  R[1] = "0.30 0.30 0.20 0.10 0.05 0.05"; R[2] = "0.10 0.20 0.25 0.20 0.15 0.10"; R[3] = "0.02 0.08 0.15 0.25 0.25 0.25";
  split("HQ MQ LQ", RN, " ");
  for (i = 1; i <= 9; i++) for (r = 1; r <= 3; r++) {
    split(R[r], W, " "); K = 72 * N[i]; S = 2e11; lam = 0.140 * log(N[i]) + 0.018; info = 0;
    for (d = 1; d <= 6; d++) { kd = W[d] * K; md = kd; if (SH[d] * S < md) md = SH[d] * S;
      info += exp(-0.922 * (d - 1)) * md * log(K) * (1 - exp(-lam * (kd / md) / log(K))) }
    l = 3.7373 * info^(-0.0441);
    printf "%s_%s,%s,%.6g,%s,%s,%s,%s,%s,%s,%s,%.6f\n", RN[r], N[i], N[i], K, S, W[1], W[2], W[3], W[4], W[5], W[6], l * (1 + (rand() - 0.5) * 0.004) } }' > $out/infolaw_synthetic.csv
echo "wrote $out/chinchilla_synthetic.csv $out/data_constrained_synthetic.csv $out/infolaw_synthetic.csv"

# Mixture sweep: 3 domains, 40 mixtures (exponential draws normalised to the simplex, some
# weights zeroed), losses from Ye et al.'s law L_i = c_i + k_i exp(sum_j t_ij h_j) with
# c = (1.8, 0.9, 2.2), k = (1.2, 1.5, 0.9), t = [[-2.0, 0.3, 0.2], [0.1, -3.0, 0.4], [0.3, 0.2, -1.5]]
# and +-0.2% noise; N = 100 (M params), D = 10 (B tokens) for every run.
awk 'BEGIN { srand(2025);
  split("1.8 0.9 2.2", C, " "); split("1.2 1.5 0.9", Kk, " ");
  split("-2.0 0.3 0.2 0.1 -3.0 0.4 0.3 0.2 -1.5", T, " ");
  print "index,h_web,h_code,h_books,loss_web,loss_code,loss_books";
  for (r = 0; r < 40; r++) {
    s = 0; for (j = 1; j <= 3; j++) { w[j] = (rand() < 0.1) ? 0 : -log(1 - rand()); s += w[j] }
    if (s == 0) { w[1] = 1; s = 1 }
    for (j = 1; j <= 3; j++) w[j] = w[j] / s;
    printf "%d,%.6f,%.6f,%.6f", r, w[1], w[2], w[3];
    for (i = 1; i <= 3; i++) { e = 0; for (j = 1; j <= 3; j++) e += T[(i - 1) * 3 + j] * w[j];
      printf ",%.6f", (C[i] + Kk[i] * exp(e)) * (1 + (rand() - 0.5) * 0.004) }
    printf "\n" } }' > $out/mixture_synthetic.csv
echo "wrote $out/mixture_synthetic.csv"
