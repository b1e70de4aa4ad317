#!/usr/bin/env bash
# What native client authentication costs, side by side in one run: `tailstream bench produce`
# (closed loop, native client, 2 producers, 100 B records, R = 0 on one broker, where a
# per-request cost shows most) without and with `--authenticate` (every connection
# authenticates with SCRAM as a user that is no super user, and every produce is checked
# against the rule that allows it), alternating, ROUNDS rounds. Prints each run, then the
# authenticated / open ratios of the medians: records/s, latency and CPU per GiB of the broker
# and the client. Loopback only; every run is bounded.
# Usage: benches/scripts/auth_overhead.sh [path/to/tailstream] [rounds] [records] [more bench args]
# (e.g. "--batch-bytes 4096": smaller batches, more requests per record, so a per-request
# cost weighs more)
set -euo pipefail
T=${1:-target/release/tailstream}
ROUNDS=${2:-3}
RECORDS=${3:-10000000}
MORE=${4:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$ROUNDS"); do
  for auth in "" "--authenticate"; do
    line=$(timeout 400 "$T" bench produce --records "$RECORDS" --warmup-s 1 --producers 2 \
      --replicas 0 --brokers 1 --json $auth $MORE)
    echo "$line" >> "$out"
    echo "round $round ${auth:-open}: $(echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f records/s, p50 %s us, broker %s s/GiB, client %s s/GiB" % (r["records_per_sec"], r["p50_us"], r["cpu_seconds_per_gib"], r["client_cpu_seconds_per_gib"]))')"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
fields = [("records/s", lambda r: r["records_per_sec"]),
          ("latency p50 us", lambda r: r["p50_us"]),
          ("latency p99 us", lambda r: r["p99_us"]),
          ("broker cpu s/GiB", lambda r: r["cpu_seconds_per_gib"]),
          ("client cpu s/GiB", lambda r: r["client_cpu_seconds_per_gib"])]
print(f"authenticated / open (medians of {len(runs) // 2} runs each)")
for name, get in fields:
    def median(auth):
        values = [get(r) for r in runs if r["authenticated"] == auth and get(r) is not None]
        return statistics.median(values) if values else None
    open_, auth = median(False), median(True)
    if open_ and auth:
        print(f"  {name:18} open {open_:12.3f}  authenticated {auth:12.3f}  ratio {auth / open_:.3f}")
    else:
        print(f"  {name:18} not measured in this run")
PY
