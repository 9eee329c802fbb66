#!/usr/bin/env bash
# Boot files served fast (issue 34): netboot's HTTP and TFTP servers beside nginx (sendfile) and
# tftpd-hpa on the same file, in one run (services/netboot/benches/serve.rs; BENCHMARKS.md).
#
#   bash scripts/bench-boot-serving.sh [CLIENTS [ROUNDS]]     (default 100 clients, 3 rounds)
#
# Installs Debian's nginx and tftpd-hpa when missing (as root) without starting their system
# services: a policy-rc.d refuses every start during the install, and the units are stopped and
# disabled afterwards, so nothing listens on ports 80 or 69. The bench starts both itself, on
# loopback ports, with its own config in a temp dir, and stops them when it ends.
# Environment: BENCH_FILE_MIB (size of the generated file when target/netboot-demo has no
# initramfs; default 40).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v in.tftpd >/dev/null 2>&1 || [ -x /usr/sbin/in.tftpd ] || need+=(tftpd-hpa)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing ${need[*]}: run as root to install them, or install them yourself" >&2
  else
    policy=/usr/sbin/policy-rc.d
    had_policy=0
    if [ -e "$policy" ]; then had_policy=1; cp -p "$policy" "$policy.bench-save"; fi
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    restore() {
      if [ "$had_policy" = 1 ]; then mv -f "$policy.bench-save" "$policy"; else rm -f "$policy"; fi
    }
    trap restore EXIT
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
    restore
    trap - EXIT
    for unit in nginx tftpd-hpa; do
      if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
        systemctl disable --now "$unit" >/dev/null 2>&1 || true
      fi
      if [ -x "/etc/init.d/$unit" ]; then "/etc/init.d/$unit" stop >/dev/null 2>&1 || true; fi
    done
  fi
fi
if command -v ss >/dev/null 2>&1 && ss -lntu | awk '{print $5}' | grep -Eq ':(80|69)$'; then
  echo "note: something listens on port 80 or 69 (not started by this script)" >&2
fi

export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
exec nice -n "${BENCH_NICE:-19}" cargo bench -p tink-netboot --bench serve -- "$@"
