#!/usr/bin/env bash
# Every figure under docs/figures, from runs on this machine: the runs' JSON lines go to
# docs/bench/*.jsonl, then `tailstream bench plot` draws them. About 20 minutes on 2 cores.
#   cargo build --release -p tailstream && benches/scripts/figures.sh
# SKIP_RUNS=1 only redraws from the JSON already there.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tailstream}
mkdir -p docs/bench docs/figures
if [ -z "${SKIP_RUNS:-}" ]; then
  # Throughput vs producers and Q (R = 0, 64 KiB batches).
  : > docs/bench/throughput.jsonl
  for producers in 1 2 4; do
    for logs in 1 2 4; do
      "$BIN" bench produce --producers "$producers" --logs "$logs" --records 40000000 --json \
        >> docs/bench/throughput.jsonl
    done
  done
  # Throughput and CPU vs R, one-sided vs RPC (2 producers, 64 KiB batches), with the floor.
  : > docs/bench/replication.jsonl
  for replicas in 0 1 2 3; do
    for mode in one-sided rpc; do
      [ "$replicas" = 0 ] && [ "$mode" = rpc ] && continue
      # Enough records for several seconds past the 2 s warm-up (R = 0 runs ~2x faster).
      records=$([ "$replicas" = 0 ] && echo 60000000 || echo 30000000)
      "$BIN" bench produce --producers 2 --records "$records" --replicas "$replicas" \
        --replication "$mode" --json >> docs/bench/replication.jsonl
    done
  done
  # Latency vs offered load.
  benches/scripts/latency-table.sh > docs/bench/latency.jsonl
  # Recovery time vs data size (R = 2).
  : > docs/bench/recovery.jsonl
  for records in 1000000 4000000 10000000; do
    "$BIN" bench recovery --records "$records" --no-verify --json >> docs/bench/recovery.jsonl
  done
fi
"$BIN" bench plot docs/bench/*.jsonl --out docs/figures
