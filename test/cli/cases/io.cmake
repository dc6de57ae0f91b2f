# ---- io: gzip input (read through bimetric-index, whose vector files may be .csv.gz) -------------
set(GZ_BIX $<TARGET_FILE:bimetric-index>)
# A whole .csv.gz, and the same table as two concatenated gzip members, read as the plain CSV.
cli_case(io/gzip-csv-one-and-two-members
  --rc 0 --file-jq a.json ".data.items == 40 and .data.true_dim == 4" --file-jq b.json ".data.items == 40"
  -- bash -c "gzip -c ${FX}/ann_small.csv > a.csv.gz && (head -n 20 ${FX}/ann_small.csv | gzip -c && tail -n +21 ${FX}/ann_small.csv | gzip -c) > b.csv.gz && ${GZ_BIX} a.csv.gz -o a.h5 -q > a.json && ${GZ_BIX} b.csv.gz -o b.h5 -q > b.json && h5diff -q a.h5 b.h5 /index/neighbors /index/neighbors")
# Truncated (the last 8 bytes, CRC-32 and length, cut off, or cut at 200 bytes): exit 1, the file named, no output.
cli_case(io/gzip-truncated-trailer --rc 1 --stderr "truncated gzip file .*\\(t.csv.gz\\)" --no-file i.h5 --tool bimetric-index
  -- bash -c "gzip -c ${FX}/ann_small.csv > a.csv.gz && head -c $(( $(stat -c %s a.csv.gz) - 8 )) a.csv.gz > t.csv.gz && ${GZ_BIX} t.csv.gz -o i.h5")
cli_case(io/gzip-truncated-200-bytes --rc 1 --stderr "truncated gzip file .*\\(t.csv.gz\\)" --no-file i.h5 --tool bimetric-index
  -- bash -c "cat ${FX}/ann_small.csv ${FX}/ann_small.csv ${FX}/ann_small.csv ${FX}/ann_small.csv ${FX}/ann_small.csv ${FX}/ann_small.csv | gzip -c > a.csv.gz && head -c 200 a.csv.gz > t.csv.gz && ${GZ_BIX} t.csv.gz -o i.h5")
# A changed CRC-32 byte, and a .gz name on a file that is not gzip.
cli_case(io/gzip-bad-crc --rc 1 --stderr "corrupt gzip data.*\\(c.csv.gz\\)" --no-file i.h5 --tool bimetric-index
  -- bash -c "gzip -c ${FX}/ann_small.csv > c.csv.gz && n=$(stat -c %s c.csv.gz) && head -c 4 /dev/zero | dd of=c.csv.gz bs=1 seek=$((n - 8)) conv=notrunc status=none && ${GZ_BIX} c.csv.gz -o i.h5")
cli_case(io/gzip-not-gzip --rc 1 --stderr "not gzip data.*\\(p.csv.gz\\)" --no-file i.h5 --tool bimetric-index
  -- bash -c "cp ${FX}/ann_small.csv p.csv.gz && ${GZ_BIX} p.csv.gz -o i.h5")
