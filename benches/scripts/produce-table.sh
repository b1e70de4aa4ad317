#!/usr/bin/env bash
# The produce table of issue 2: 100-byte records, P = 1, 2, 4 producers, Q = 1, 2, 4 logs,
# batches of 4 KiB, 64 KiB and 1 MiB; one broker started per run; one JSON object per line.
#   cargo build --release -p tailstream && benches/scripts/produce-table.sh > table.jsonl
set -euo pipefail
BIN=${BIN:-target/release/tailstream}
RECORDS=${RECORDS:-5000000}
for batch in 4096 65536 1048576; do
  for producers in 1 2 4; do
    for logs in 1 2 4; do
      "$BIN" bench produce --producers "$producers" --logs "$logs" --batch-bytes "$batch" \
        --record-bytes 100 --records "$RECORDS" --json
    done
  done
done
