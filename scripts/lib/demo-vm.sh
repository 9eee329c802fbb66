# Shared by the VM runs (scripts/netboot-demo.sh, scripts/os-install-demo.sh): timed stages, serial
# logs as text, the namespace with a bridge and a tap for the machine, and Debian's
# docker-registry serving action images on the bridge. Sourced; the caller sets `ns` (the
# namespace's name) and `out` (its output folder) first.

demo_t0=$(date +%s)
stage_name=""
stage_start=$demo_t0
stages=()
# stage NAME: ends the current stage (printing its duration) and starts NAME.
stage() {
  local now
  now=$(date +%s)
  if [ -n "$stage_name" ]; then
    stages+=("$(printf '%-44s %4ss' "$stage_name" $((now - stage_start)))")
    echo "   done in $((now - stage_start)) s"
  fi
  stage_name="$1"
  stage_start=$now
  echo "== $(date -u +%H:%M:%S) $1"
}
# summary: every stage's duration and the total.
summary() {
  stage ""
  echo "== stages"
  printf '   %s\n' "${stages[@]}"
  echo "   total $(($(date +%s) - demo_t0)) s"
}

nsx() { ip netns exec "$ns" "$@"; }
# A serial log as text: no carriage returns or terminal control sequences.
console_text() { tr -d '\r' < "$1" | sed -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g'; }

# guest_kernel_crash LOG...: prints the first line of a kernel crash (oops, BUG, panic) in the
# machines' serial logs and succeeds, or fails when there is none. Under TCG an OSIE kernel once
# crashed in allocate_slab while dockerd made a cgroup (CI, 2026-11-28): a fault of the emulated
# machine, not of the stack. A run whose machine crashed says so and exits with
# guest_crash_status, which .ci/run answers by making that run once more (a real fault fails
# twice).
guest_crash_status=75
guest_kernel_crash() {
  serial_first 'Oops: |general protection fault|kernel BUG at|BUG: (unable to handle|kernel NULL)|Kernel panic - not syncing' "$@"
}
# serial_first REGEX LOG...: prints the first line matching REGEX in the serial logs and
# succeeds, or fails when none matches.
serial_first() {
  local re=$1 f
  shift
  for f in "$@"; do
    [ -f "$f" ] || continue
    console_text "$f" | grep -a -m1 -E "$re" && return 0
  done
  return 1
}
# guest_kernel_lockup LOG...: prints the first soft lockup report in the machines' serial logs
# and succeeds, or fails when there is none. Under TCG both CPUs of an OSIE once locked up for
# over 45 s in cgroup_mkdir while runc started the first action (CI rehearsal, 2026-11-29): the
# agent went quiet and the Workflow ended Failed. A lockup may also pass and the run succeed,
# so it is only a cause once the run has failed (guest_crash_exit), never a reason to stop one.
guest_kernel_lockup() {
  serial_first 'BUG: soft lockup' "$@"
}
# guest_crash_exit LOG...: in a run's EXIT trap after a failure: when a machine's kernel crashed
# or locked up, names it and exits with guest_crash_status.
guest_crash_exit() {
  local crash
  if crash=$(guest_kernel_crash "$@" || guest_kernel_lockup "$@"); then
    echo "== the machine's kernel crashed (an emulated machine's fault, not the stack's): $crash"
    exit "$guest_crash_status"
  fi
}

# demo_netns BRIDGE_IP: the namespace, its loopback, bridge br0 with BRIDGE_IP/24, tap0 on it.
demo_netns() {
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$ns" link add br0 type bridge
  ip -n "$ns" addr add "$1/24" dev br0
  ip -n "$ns" link set br0 up
  ip -n "$ns" tuntap add dev tap0 mode tap
  ip -n "$ns" link set tap0 master br0
  ip -n "$ns" link set tap0 up
}

# free_port: a free TCP port on the host's loopback.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# demo_push STORAGE LOCAL=REMOTE...: pushes local images into a registry storage folder, from the
# host's engine through a registry on the host's loopback (an insecure registry there is allowed
# by default); demo_registry serves the same storage in the namespace afterwards.
demo_push() {
  local storage=$1 port pid pair
  shift
  port=$(free_port)
  mkdir -p "$storage"
  cat > "$out/registry-push.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $storage}}
http: {addr: 127.0.0.1:$port}
EOF
  docker-registry serve "$out/registry-push.yml" >"$out/registry-push.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 50); do curl -sf "http://127.0.0.1:$port/v2/" >/dev/null && break; sleep 0.2; done
  for pair in "$@"; do
    docker tag "${pair%%=*}" "127.0.0.1:$port/${pair#*=}"
    docker push -q "127.0.0.1:$port/${pair#*=}" >/dev/null
    docker rmi "127.0.0.1:$port/${pair#*=}" >/dev/null
  done
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

# demo_registry STORAGE ADDR:PORT REPO: serves STORAGE in the namespace (pid appended to `pids`)
# and waits until REPO's tags are listed.
demo_registry() {
  cat > "$out/registry.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $1}}
http: {addr: $2}
EOF
  # `ip netns exec` itself, not the nsx function: a backgrounded function is a subshell, and
  # killing it at the end would leave the registry running.
  ip netns exec "$ns" docker-registry serve "$out/registry.yml" >"$out/registry.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 50); do nsx curl -sf "http://$2/v2/$3/tags/list" >/dev/null && break; sleep 0.2; done
  nsx curl -sf "http://$2/v2/$3/tags/list" || { echo "error: the registry on $2 does not list $3" >&2; return 1; }
  echo
}

# demo_accel OUT_FILE KERNEL: kvm when a probe kernel boots under it, else tcg (TINK_NETBOOT_ACCEL
# wins). Some hosts open /dev/kvm but never run a Linux kernel under it: this project's CI machines
# have PVM, where `-cpu host` aborts at once (osie/README.md, "KVM on this machine kind").
demo_accel() {
  local accel="${TINK_NETBOOT_ACCEL:-}"
  if [ -z "$accel" ]; then
    accel=tcg
    if [ -w /dev/kvm ]; then
      timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nographic -no-reboot \
        -kernel "$2" -append "console=ttyS0 panic=-1" >"$1" 2>&1 || true
      if grep -aq "Kernel panic" "$1"; then accel=kvm; fi
    fi
  fi
  echo "$accel"
}

# demo_stack BRIDGE_IP: the stack on the bridge (tinkctl dev up into $out/stack, files served from
# $out/files; with `reuse` set, the CA of that earlier run, which its OSIE trusts: dev up keeps
# certificates it finds), then its env sourced (HEGEL_URL, TINK_SERVER, TINK_NETBOOT_URL, ...).
demo_stack() {
  files="$out/files"
  mkdir -p "$files"
  if [ -n "${reuse:-}" ]; then
    mkdir -p "$out/stack"
    cp -a "$reuse/stack/pki" "$out/stack/pki"
  fi
  # Hegel's kernel consoles: the VM's first serial port (Smee's default, tty0 and ttyS1, leaves a
  # QEMU serial log empty).
  NO_COLOR=1 TINK_HEGEL_CONSOLES="ttyS0,115200" nsx "$bins/tinkctl" dev up --data-dir "$out/stack" --bin-dir "$bins" --machine-ip "$1" \
    --netboot-interface br0 --netboot-files-dir "$files" --no-agent --privileged-actions \
    >"$out/dev-up.log" 2>&1 || { cat "$out/dev-up.log"; exit 1; }
  # shellcheck disable=SC1091
  . "$out/stack/env"
  echo "   Hegel $HEGEL_URL, servers $TINK_SERVER, files $TINK_NETBOOT_URL"
}
