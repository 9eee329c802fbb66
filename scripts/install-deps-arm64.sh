#!/usr/bin/env bash
# Installs what the arm64 OSIE needs on a Debian x86-64 machine (run as root); only the arm64
# row of scripts/osie-matrix.sh (full) uses it, never .ci/run:
#   gcc-aarch64-linux-gnu   the cross C compiler and linker (with libc6-dev-arm64-cross): tink-agent for aarch64 (ring's C
#                           parts, the final link) and iPXE's arm64 snp.efi (osie/ipxe-arm64.sh)
#   liblzma-dev, dpkg-dev   iPXE's host tools (zbin) and unpacking Debian's ipxe source package
#   qemu-system-arm         qemu-system-aarch64, the arm64 machine (TCG)
#   qemu-efi-aarch64        AAVMF, the arm64 UEFI firmware
#   the Rust target aarch64-unknown-linux-gnu (rustup)
# The arm64 kernel, busybox and Docker engine are unpacked from Debian's arm64 packages by
# osie/build.sh --arch aarch64 (mmdebstrap --variant=extract), not installed.
set -euo pipefail
need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
# its C library headers and objects (a recommendation of the compiler, not a dependency)
[ -f /usr/aarch64-linux-gnu/include/stdio.h ] || need+=(libc6-dev-arm64-cross)
[ -f /usr/include/lzma.h ] || need+=(liblzma-dev)
command -v dpkg-source >/dev/null 2>&1 || need+=(dpkg-dev)
command -v qemu-system-aarch64 >/dev/null 2>&1 || need+=(qemu-system-arm)
[ -f /usr/share/AAVMF/AAVMF_CODE.fd ] || need+=(qemu-efi-aarch64)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing (arm64 OSIE): ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
  echo "adding the Rust target aarch64-unknown-linux-gnu"
  rustup target add aarch64-unknown-linux-gnu
fi
