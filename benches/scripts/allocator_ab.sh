#!/usr/bin/env bash
# The system allocator (the default build) against jemalloc (`--features jemalloc`), side by
# side in one run, on the same machine and load:
#   1. throughput: `bench produce` closed loop, R = 0 (one broker) and R = 3 (four brokers),
#      records/s and broker CPU per GiB;
#   2. memory after a burst: a one-broker `dev` cluster, idle RSS of the broker, then a burst
#      (8 producers, 256 KiB batches, 1 KiB records), RSS right after, then the burst's stream
#      deleted and, 20 s later, RSS again: how much of the burst's heap the process keeps.
# Builds both binaries (release) first. Loopback only; every run is bounded.
# Usage: benches/scripts/allocator_ab.sh [records for the burst]
set -euo pipefail
BURST=${1:-3000000}
# SKIP_BUILD=1: use the two binaries a previous run left in /tmp.
if [ -z "${SKIP_BUILD:-}" ]; then
  cargo build --release -p tailstream --bin tailstream --features jemalloc >/dev/null 2>&1
  cp target/release/tailstream /tmp/tailstream-jemalloc
  cargo build --release -p tailstream --bin tailstream >/dev/null 2>&1
  cp target/release/tailstream /tmp/tailstream-system-malloc
fi

rss_mib() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

for alloc in system-malloc jemalloc; do
  T=/tmp/tailstream-$alloc
  for replicas in 0 3; do
    brokers=$([ "$replicas" = 0 ] && echo 1 || echo 4)
    line=$(timeout 400 "$T" bench produce --records 15000000 --warmup-s 1 --producers 2 \
      --replicas "$replicas" --brokers "$brokers" --no-floor --json)
    echo "$alloc R=$replicas: $(echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f records/s, broker %.3f s/GiB, p50 %s us" % (r["records_per_sec"], r["cpu_seconds_per_gib"], r["p50_us"]))')"
  done
  dir=$(mktemp -d)
  (cd "$dir" && exec timeout 300 "$T" dev --brokers 1 > dev.log 2>&1) &
  dev=$!
  for _ in $(seq 100); do grep -q "running" "$dir/dev.log" 2>/dev/null && break; sleep 0.2; done
  broker=$(pgrep -f "^$T broker" | head -1)
  export TAILSTREAM_COORDINATOR=127.0.0.1:7400
  sleep 3
  idle=$(rss_mib "$broker")
  "$T" bench produce --join "$TAILSTREAM_COORDINATOR" --records "$BURST" --record-bytes 1000 \
    --batch-bytes 262144 --producers 8 --replicas 0 --warmup-s 0.5 --no-floor > /dev/null
  after=$(rss_mib "$broker")
  for name in $("$T" stream list --json | python3 -c 'import json,sys; print(" ".join(json.loads(l)["name"] for l in sys.stdin if l.strip()))'); do
    "$T" stream delete "$name" > /dev/null
  done
  sleep 20
  settled=$(rss_mib "$broker")
  echo "$alloc burst: broker RSS idle ${idle} MiB, after the burst ${after} MiB, 20 s after its stream was deleted ${settled} MiB"
  kill -INT "$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
  rm -rf "$dir"
done
