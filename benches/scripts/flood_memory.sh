#!/usr/bin/env bash
# What a broker keeps after a flood of connections (issue 23, item 7), with and without the
# allocator trim (`listeners.memory_trim_interval_ms`), side by side in one run: a one-broker
# `dev` cluster; the broker's RSS idle, with COUNT connections per port (client RPC and Kafka)
# from 127.0.0.2-254 each holding the start of a request (benches/scripts/flood.py), and
# SETTLE seconds after they closed. Then what the trim costs the produce path: `bench
# produce` closed loop, R = 0, one broker, with and without it, alternating, ROUNDS rounds
# (records/s and broker CPU per GiB; THROUGHPUT=0 skips this part).
# Loopback only; every step is bounded.
# Usage: benches/scripts/flood_memory.sh [path/to/tailstream] [count per port] [rounds]
set -euo pipefail
T=${1:-target/release/tailstream}
COUNT=${2:-1100}
ROUNDS=${3:-3}
SETTLE=${SETTLE:-25}
HERE=$(cd "$(dirname "$0")" && pwd)
rss_mib() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }

for trim in 0 10000; do
  dir=$(mktemp -d)
  cat > "$dir/tailstream.toml" <<TOML
[listeners]
memory_trim_interval_ms = $trim
TOML
  (cd "$dir" && exec timeout 600 "$T" dev --brokers 1 --config tailstream.toml > dev.log 2>&1) &
  dev=$!
  for _ in $(seq 150); do grep -q "logs in" "$dir/dev.log" 2>/dev/null && break; sleep 0.2; done
  broker=$(pgrep -f "^$T .*broker --rpc-addr" | head -1)
  rpc=$(grep -o "broker-0 ([^)]*) rpc [0-9.:]*" "$dir/dev.log" | awk '{print $4}')
  sleep 3
  idle=$(rss_mib "$broker")
  peak=$idle
  for round in $(seq "$ROUNDS"); do
    timeout 120 python3 "$HERE/flood.py" 8 "$COUNT" "$rpc" 127.0.0.1:9092 > "$dir/flood.log" &
    flood=$!
    for _ in $(seq 40); do
      now=$(rss_mib "$broker"); [ "$now" -gt "$peak" ] && peak=$now
      sleep 0.25
    done
    wait "$flood" || true
  done
  sleep "$SETTLE"
  settled=$(rss_mib "$broker")
  echo "memory_trim_interval_ms=$trim: broker RSS idle ${idle} MiB, peak during $ROUNDS floods of $COUNT connections per port ${peak} MiB, ${SETTLE} s after ${settled} MiB ($(tail -2 "$dir/flood.log" | head -1))"
  kill -INT "$dev" 2>/dev/null || true
  wait "$dev" 2>/dev/null || true
  rm -rf "$dir"
done

[ "${THROUGHPUT:-1}" = 0 ] && exit 0
for round in $(seq "$ROUNDS"); do
  for trim in 0 10000; do
    conf=$(mktemp)
    printf '[listeners]\nmemory_trim_interval_ms = %s\n' "$trim" > "$conf"
    line=$(timeout 400 "$T" bench produce --config "$conf" --records 10000000 --warmup-s 1 \
      --producers 2 --replicas 0 --brokers 1 --json)
    rm -f "$conf"
    echo "round $round memory_trim_interval_ms=$trim: $(echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f records/s, p50 %s us, broker %.3f s/GiB" % (r["records_per_sec"], r["p50_us"], r["cpu_seconds_per_gib"]))')"
  done
done
