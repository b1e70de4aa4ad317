#!/usr/bin/env bash
# What the project needs beyond a Rust toolchain, installed the same way everywhere:
# - to build the `rdma` feature: libibverbs, librdmacm (and their providers), libclang
#   (async-rdma's bindings are generated at build time);
# - to run the rdma functional test on real verbs: qemu (from bookworm-backports, which
#   coexists with the preinstalled qemu-utils) and a static busybox, for
#   ../shared/tools/rdma-vm/rxe-vm.sh;
# - to run Kafka's own clients against the Kafka listener (cli/tests/cluster/kafka_clients.rs and
#   kafka_delivery.rs): kcat (librdkafka) from Debian, and kafka-python and confluent-kafka
#   (pinned; its wheel carries a current librdkafka) in a virtualenv at target/kafka-venv;
# - to load the coordinator's web console in a browser (cli/tests/cluster/console.rs): chromium;
# - to cut network partitions between the processes of a test cluster (`bench chaos`'s
#   partition faults, cli/tests/cluster/recovery.rs): nftables, iproute2 and util-linux's `unshare`;
# - to keep the coordinator's state on etcd: etcd-server (tests start a local three-member
#   etcd), protobuf-compiler and libprotobuf-dev (the etcd-client crate compiles etcd's
#   protocol with protoc, which needs the well-known types: without them, Debian's protoc fails).
# Idempotent: installs only what is missing. Debian bookworm (what CI runs on).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

base=(libibverbs-dev librdmacm-dev ibverbs-providers libclang1-14 libclang-common-14-dev busybox-static kcat chromium nftables iproute2 util-linux etcd-server protobuf-compiler libprotobuf-dev)
missing=()
for pkg in "${base[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
  need_qemu=1
else
  need_qemu=0
fi
# kafka-python wants a Python 3 that can make virtualenvs; Debian's needs python3-venv.
KAFKA_PYTHON_VERSION=3.0.12
CONFLUENT_KAFKA_VERSION=2.16.1
venv="$(cd "$(dirname "$0")/.." && pwd)/target/kafka-venv"
need_venv=0
if ! "$venv/bin/python" -c "import kafka, confluent_kafka, sys; sys.exit(kafka.__version__ != '$KAFKA_PYTHON_VERSION' or confluent_kafka.version()[0] != '$CONFLUENT_KAFKA_VERSION')" >/dev/null 2>&1; then
  need_venv=1
  if ! python3 -c "import venv, ensurepip" >/dev/null 2>&1; then
    for pkg in python3 python3-venv; do
      dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
  fi
fi
make_kafka_venv() {
  [ $need_venv -eq 1 ] || return 0
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q "kafka-python==$KAFKA_PYTHON_VERSION" \
    "confluent-kafka==$CONFLUENT_KAFKA_VERSION"
}
if [ ${#missing[@]} -eq 0 ] && [ $need_qemu -eq 0 ]; then
  make_kafka_venv
  exit 0
fi
# A private source list that adds bookworm-backports to the machine's own sources.
apt_dir=$(mktemp -d)
trap 'rm -rf "$apt_dir"' EXIT
cp /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list "$apt_dir/" 2>/dev/null || true
if [ -s /etc/apt/sources.list ]; then cp /etc/apt/sources.list "$apt_dir/main.list"; fi
cat > "$apt_dir/backports.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
apt_opts=(-o "Dir::Etc::sourceparts=$apt_dir" -o "Dir::Etc::sourcelist=/dev/null" -q)
$SUDO apt-get "${apt_opts[@]}" update >/dev/null
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ $need_qemu -eq 1 ]; then
  $SUDO apt-get "${apt_opts[@]}" install -y --no-install-recommends -t bookworm-backports qemu-system-x86 >/dev/null
fi
make_kafka_venv
