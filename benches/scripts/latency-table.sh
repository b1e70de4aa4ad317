#!/usr/bin/env bash
# The latency table of issue 9: for R = 0 and R = 3 (one-sided and RPC), first the saturated
# throughput (closed loop), then open-loop runs at 10 %, 50 % and 90 % of it, latency counted
# from each record's scheduled send. 100-byte records, 1 producer, 1 streamlet of 4 logs,
# linger 0 in open loop. One JSON object per line (the saturated runs too).
#   cargo build --release -p tailstream && benches/scripts/latency-table.sh > docs/bench/latency.jsonl
set -euo pipefail
BIN=${BIN:-target/release/tailstream}
DURATION=${DURATION:-5}
for config in "0 one-sided" "3 one-sided" "3 rpc"; do
  set -- $config
  replicas=$1 mode=$2
  records=$([ "$replicas" = 0 ] && echo 60000000 || echo 30000000)
  saturated=$("$BIN" bench produce --producers 1 --records "$records" --replicas "$replicas" \
    --replication "$mode" --json)
  echo "$saturated"
  rate=$(python3 -c 'import json,sys; print(int(json.loads(sys.argv[1])["records_per_sec"]))' "$saturated")
  for percent in 10 50 90; do
    "$BIN" bench produce --producers 1 --replicas "$replicas" --replication "$mode" \
      --rate $((rate * percent / 100)) --duration-s "$DURATION" --json
  done
done
