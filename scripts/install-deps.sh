#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine (run as root):
#   nats-server     real NATS JetStream for the bus, server, agent and controller tests
#   mold            the linker .cargo/config.toml selects
#   busybox-static  the static busybox the test kit packs into local action images
# Docker must already be installed and running; tests that need it fail when it does not answer,
# unless TINK_SKIP_DOCKER_TESTS=1 is set.
set -euo pipefail
need=()
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
command -v mold >/dev/null 2>&1 || need+=(mold)
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || need+=(busybox-static)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" file >/dev/null
fi
command -v kubectl >/dev/null 2>&1 || echo "warning: kubectl not found; the kubectl-driven conformance tests need it" >&2
