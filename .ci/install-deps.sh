#!/usr/bin/env bash
# What the project needs beyond a Rust toolchain, installed the same way everywhere:
# - to build the `rdma` feature: libibverbs, librdmacm (and their providers), libclang
#   (async-rdma's bindings are generated at build time);
# - to run the rdma functional test on real verbs: qemu (from bookworm-backports, which
#   coexists with the preinstalled qemu-utils) and a static busybox, for
#   ../shared/tools/rdma-vm/rxe-vm.sh.
# Idempotent: installs only what is missing. Debian bookworm (what CI runs on).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

base=(libibverbs-dev librdmacm-dev ibverbs-providers libclang1-14 libclang-common-14-dev busybox-static)
missing=()
for pkg in "${base[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ! command -v qemu-system-x86_64 >/dev/null 2>&1; then
  need_qemu=1
else
  need_qemu=0
fi
if [ ${#missing[@]} -eq 0 ] && [ $need_qemu -eq 0 ]; then
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
