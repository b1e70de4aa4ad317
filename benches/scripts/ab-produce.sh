#!/usr/bin/env bash
# Side-by-side produce throughput of two `tailstream` binaries (e.g. before and after a change
# on the hot path), alternating A and B so that drift of the machine hits both equally.
# Prints each run, then the median records/s and broker CPU per GiB of each, and B / A.
#   benches/scripts/ab-produce.sh OLD_BINARY NEW_BINARY [RUNS] -- [bench produce flags]
set -euo pipefail
A=$1; B=$2; RUNS=${3:-5}
shift 3 || true
[ "${1:-}" = "--" ] && shift
FLAGS=("$@")
[ ${#FLAGS[@]} -eq 0 ] && FLAGS=(--producers 2 --batch-bytes 65536 --records 20000000)
out=$(mktemp)
for run in $(seq "$RUNS"); do
  for side in A B; do
    bin=$A; [ "$side" = B ] && bin=$B
    "$bin" bench produce "${FLAGS[@]}" --json | sed "s/^/$side /" | tee -a "$out" >&2
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = {"A": [], "B": []}
for line in open(sys.argv[1]):
    side, body = line.split(" ", 1)
    runs[side].append(json.loads(body))
def med(side, key):
    return statistics.median(r[key] for r in runs[side])
for key in ("records_per_sec", "cpu_seconds_per_gib"):
    a, b = med("A", key), med("B", key)
    print(f"{key}: A {a:.4g}  B {b:.4g}  B/A {b / a:.3f}  (medians of {len(runs['A'])} runs)")
PY
rm -f "$out"
