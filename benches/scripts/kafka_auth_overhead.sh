#!/usr/bin/env bash
# What authentication and access control cost a Kafka producer, side by side in one run: the
# same kcat produce (acks=all, 1.8 M records of 100 B, one broker, R = 0) against a `tailstream
# dev` cluster without authentication, then with SCRAM-SHA-256 and an access control rule.
# Three runs each; prints seconds per run. Loopback only; bounded (each run is one file).
# Usage: benches/scripts/kafka_auth_overhead.sh [path/to/tailstream]
set -euo pipefail
T=${1:-target/release/tailstream}
work=$(mktemp -d)
trap 'pkill -f "tailstream --config $work" || true; rm -rf "$work"' EXIT
python3 -c "
with open('$work/records', 'w') as f:
    for i in range(1800000): f.write('%099d\n' % i)
"
printf '[kafka]\nsasl_mechanisms = []\n' > "$work/plain.toml"
printf '[kafka]\nsasl_mechanisms = ["SCRAM-SHA-256"]\n' > "$work/sasl.toml"
run() {
  local config=$1; shift
  rm -rf "$work/data"
  "$T" --config "$config" dev --brokers 1 --data-dir "$work/data" > "$work/dev.log" 2>&1 &
  local dev=$!
  sleep 6
  "$T" --config "$config" user create alice --password s3cret > /dev/null
  "$T" --config "$config" acl add --principal User:alice --operation write --topic bench > /dev/null
  "$T" --config "$config" acl add --principal User:alice --operation create --cluster > /dev/null
  sleep 6 # brokers list the rules every 5 s
  for r in 1 2 3; do
    local start end
    start=$(date +%s.%N)
    timeout 120 kcat -P -b 127.0.0.1:9092 -t bench -X acks=all -X linger.ms=5 "$@" < "$work/records"
    end=$(date +%s.%N)
    echo "$(basename "$config" .toml) run $r: $(echo "$end - $start" | bc) s for 1,800,000 x 100 B"
  done
  kill "$dev"; wait "$dev" 2>/dev/null || true
  sleep 1
}
run "$work/plain.toml"
run "$work/sasl.toml" -X security.protocol=SASL_PLAINTEXT -X sasl.mechanisms=SCRAM-SHA-256 \
  -X sasl.username=alice -X sasl.password=s3cret
