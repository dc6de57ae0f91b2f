# The unlearning corpus of scripts/repro.d/unlearn.sh (issue 34): the chapters of book BOOK of
# kjv.tsv (one document each), with R copies of a block of N canaries (random LEN-word strings over
# the book's vocabulary, one TSV row and document each) placed after chapters spread evenly; no
# canary takes a validation slot (every VAL-th document: a one-verse filler document goes there).
# Writes the corpus to stdout, the N inserted canaries (one copy) to FORGET and N more from the
# same generator, never inserted, to NONMEM (the membership-inference non-members).
# usage: awk -v SEED=34 -v BOOK=Ge -v N=64 -v LEN=4 -v R=2 -v VAL=20 -v FORGET=f.tsv -v NONMEM=n.tsv \
#            -f unlearn_corpus.awk kjv.tsv kjv.tsv > corpus.tsv
BEGIN { FS = OFS = "\t"; srand(SEED) }
FNR == NR {
  split($1, a, ":"); book = a[1]; sub(/[0-9]+$/, "", book)
  if (book != BOOK) next
  if (a[1] != last) { nch++; last = a[1] }
  rows[nch] = rows[nch] $0 "\n"
  n = split(tolower($2), w, /[^a-z]+/)
  for (i = 1; i <= n; i++) if (length(w[i]) >= 3 && !(w[i] in seen)) { seen[w[i]] = 1; words[++nw] = w[i] }
  next
}
END {
  for (c = 1; c <= 2 * N; c++) {
    s = ""
    for (k = 1; k <= LEN; k++) s = s (k > 1 ? " " : "") words[1 + int(rand() * nw)]
    can[c] = s
  }
  for (c = 1; c <= N; c++) print "Cn" c ":1", can[c] > FORGET
  for (c = N + 1; c <= 2 * N; c++) print "Cn" c ":1", can[c] > NONMEM
  for (r = 1; r <= R; r++) at[int(r * nch / (R + 1))] = r
  doc = 0
  for (ch = 1; ch <= nch; ch++) {
    printf "%s", rows[ch]; doc++
    if (ch in at)
      for (c = 1; c <= N; c++) {
        if ((doc + 1) % VAL == 0) { print "Fill" doc ":1", "And it came to pass."; doc++ }
        print "Cn" c "r" at[ch] ":1", can[c]; doc++
      }
  }
}
