#!/usr/bin/env bash
# Runs the rdma backend's functional test on real verbs: soft-RoCE (rdma_rxe) inside a VM,
# with ../shared/tools/rdma-vm/rxe-vm.sh. Builds the test binary here, runs it in the VM with
# TAILSTREAM_RDMA_TEST=required (so a missing device fails instead of skipping).
# Needs what .ci/install-rdma-deps.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
VM=../shared/tools/rdma-vm/rxe-vm.sh
if [ ! -f "$VM" ]; then
  echo "rdma-test: $VM not found (it comes with ../shared)" >&2
  exit 1
fi
# Built with the same profile and workspace-wide feature set as the test suite, so only what the
# rdma feature changes is compiled again (the workspace's tokio features include async-rdma's
# `full` set for the same reason).
binary=$(cargo test --workspace --features tailstream-broker/rdma --test rdma --profile ci --locked --no-run \
  --message-format=json 2>/dev/null |
  sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$binary" ]; then
  echo "rdma-test: building the test binary failed" >&2
  cargo test --workspace --features tailstream-broker/rdma --test rdma --profile ci --locked --no-run
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/tailstream-rdma-XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$binary" "$work/rdma-test"
cat > "$work/run.sh" <<SCRIPT
set -e
export TAILSTREAM_RDMA_TEST=required
# Scratch directories (the backups' buffers) in the VM's tmpfs, not on the shared filesystem.
export TMPDIR=/run
export RUST_BACKTRACE=1
$work/rdma-test --nocapture --test-threads 1
SCRIPT
# The VM script needs root (it boots a kernel with the host's filesystem shared into it).
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo --preserve-env=RXE_VM_TIMEOUT,RXE_VM_CACHE"; fi
RXE_VM_TIMEOUT=${RXE_VM_TIMEOUT:-600} $SUDO sh "$VM" "$work" "$work/run.sh"
