#!/usr/bin/env bash
# The replication table of issue 3: 100-byte records, R = 0..3, one-sided vs RPC replication,
# batches of 4 KiB, 64 KiB and 1 MiB; 2 producers, 1 streamlet of 4 logs; a fresh cluster of
# max(R + 1, 1) broker processes per run; 2 s warm-up, then measured. One JSON object per line.
#   cargo build --release -p tailstream && benches/scripts/replication-table.sh > table.jsonl
set -euo pipefail
BIN=${BIN:-target/release/tailstream}
for batch in 4096 65536 1048576; do
  case $batch in 4096) records=${RECORDS_SMALL:-10000000} ;; *) records=${RECORDS:-30000000} ;; esac
  for replicas in 0 1 2 3; do
    for mode in one-sided rpc; do
      "$BIN" bench produce --producers 2 --logs 4 --batch-bytes "$batch" --record-bytes 100 \
        --records "$records" --replicas "$replicas" --replication "$mode" --json
    done
  done
done
