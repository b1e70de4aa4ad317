#!/usr/bin/env bash
# What TLS costs, side by side in one run: `tailstream bench produce` (closed loop, native
# client, 2 producers, 100 B records) at R = 0 (one broker) and R = 3 (four brokers, one-sided),
# each without and with `--tls` (TLS on every client and peer connection; the one-sided write
# path stays plain and is authenticated by its ticket), alternating, ROUNDS rounds. Prints each
# run, then per R the TLS / plain ratios of the medians: records/s and CPU per GiB of the
# brokers, the primary, one backup and the client. Loopback only; every run is bounded.
# Usage: benches/scripts/tls_overhead.sh [path/to/tailstream] [rounds]
set -euo pipefail
T=${1:-target/release/tailstream}
ROUNDS=${2:-2}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$ROUNDS"); do
  for replicas in 0 3; do
    brokers=$([ "$replicas" = 0 ] && echo 1 || echo 4)
    for tls in "" "--tls"; do
      line=$(timeout 400 "$T" bench produce --records 15000000 --warmup-s 1 --producers 2 \
        --replicas "$replicas" --brokers "$brokers" --json $tls)
      echo "$line" >> "$out"
      echo "round $round R=$replicas ${tls:-plain}: $(echo "$line" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("%.0f records/s, brokers %s s/GiB, client %s s/GiB" % (r["records_per_sec"], r["cpu_seconds_per_gib"], r["client_cpu_seconds_per_gib"]))')"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
fields = ["records_per_sec", "cpu_seconds_per_gib", "primary_cpu_seconds_per_gib",
          "backup_cpu_seconds_per_gib", "client_cpu_seconds_per_gib"]
for replicas in (0, 3):
    print(f"R={replicas}: TLS / plain (medians of {len(runs) // 4} runs each)")
    for field in fields:
        def median(tls):
            values = [r[field] for r in runs if r["replicas"] == replicas and r["tls"] == tls and r[field] is not None]
            return statistics.median(values) if values else None
        plain, tls = median(False), median(True)
        if plain and tls:
            print(f"  {field:32} plain {plain:12.3f}  tls {tls:12.3f}  ratio {tls / plain:.2f}")
        else:
            print(f"  {field:32} not measured in this run")
PY
