#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (FUZZ_SECONDS each, default 8) and prints the
# edges (libFuzzer's `cov:`) each reached. Installs what it needs: a nightly toolchain
# (minimal profile) and cargo-fuzz. Starts from the committed corpus in fuzz/corpus/<target>
# and never writes back to it (new inputs go to a scratch copy), so the committed corpus
# changes only when someone minimises and commits it on purpose:
#   cargo +nightly fuzz cmin <target> fuzz/corpus/<target>
# Any crash fails the script and leaves the reproducing input in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-8}
CARGO_FUZZ_VERSION=0.13.2

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

targets=(frames messages nic record_batch segment produce kafka_request)
cd fuzz
cargo +nightly fuzz build --release
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tailstream-fuzz-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
summary=()
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target" "corpus/$target"
  cp -r "corpus/$target/." "$scratch/$target/" 2>/dev/null || true
  log="$scratch/$target.log"
  if ! cargo +nightly fuzz run --release "$target" "$scratch/$target" -- \
      -max_total_time="$SECONDS_EACH" -max_len=8192 -rss_limit_mb=2048 -print_final_stats=1 \
      >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $target failed; the input is in fuzz/artifacts/$target/" >&2
    exit 1
  fi
  edges=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  summary+=("$(printf '%-13s %6s edges  %10s runs in %ss' "$target" "${edges:-?}" "${runs:-?}" "$SECONDS_EACH")")
done
printf 'fuzz: %s\n' "${summary[@]}"
