#!/usr/bin/env bash
# A virtual machine provisioned end to end, the way a bare-metal machine is:
#
#   1. a network namespace with a bridge (10.99.0.1/24) and a tap device for the machine;
#   2. the stack on the bridge's address (`tinkctl dev up --machine-ip --netboot-interface`:
#      kube-lite, NATS, webhook, controllers, servers, Hegel, tink-netboot) and Debian's
#      docker-registry holding the locally built action image;
#   3. a QEMU machine with an empty virtio disk and the network first in its boot order: its
#      iPXE ROM gets a lease and Hegel's script URL from tink-netboot, boots the OSIE
#      (osie/build.sh) whose agent runs the Workflow: write a disk image to /dev/vda, write a
#      file into its partition, reboot (the agent's power contract; QEMU runs with -no-reboot,
#      so the reboot stops it);
#   4. checks: the Workflow is Succeeded; the disk holds the image's partition and marker and the
#      file (read with qemu-img and mtools after the VM stopped);
#   5. the VM boots from that disk: its OS takes a lease, fetches user-data from Hegel and prints
#      it on the serial console, which must match the Hardware's spec.instance.userdata.
#
# Each stage prints its duration. On failure the serial consoles, the DHCP/TFTP (netboot),
# Hegel, server, controller and registry logs are printed, so the output says where the chain
# broke; everything stays in the output folder.
#
#   sudo bash scripts/netboot-demo.sh            (root: namespaces, taps, ports 67 and 69)
#
# Environment: TINK_NETBOOT_OUT (output folder, default target/netboot-demo),
# TINK_NETBOOT_ACCEL (kvm or tcg; default: kvm when a probe kernel boots under it, else tcg),
# TINK_NETBOOT_TIMEOUT (seconds for the provisioning boot, default 600).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
out="${TINK_NETBOOT_OUT:-$repo/target/netboot-demo}"
timeout_s="${TINK_NETBOOT_TIMEOUT:-600}"
ns="tinknb$$"
bridge_ip=10.99.0.1
vm_ip=10.99.0.10
vm_mac=52:54:00:be:ef:01
registry_port=5000
push_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
bins="$repo/target/debug"

t0=$(date +%s)
stage_name=""
stage_start=$t0
stages=()
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
summary() {
  stage ""
  echo "== stages"
  printf '   %s\n' "${stages[@]}"
  echo "   total $(($(date +%s) - t0)) s"
}

[ "$(id -u)" = 0 ] || { echo "error: run as root (network namespaces, tap devices, DHCP port 67)" >&2; exit 1; }

pids=()
ok=0
nsx() { ip netns exec "$ns" "$@"; }
# A serial log as text: no carriage returns or terminal control sequences.
console_text() { tr -d '\r' < "$1" | sed -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g'; }
cleanup() {
  set +e
  if [ "$ok" != 1 ]; then
    echo "== FAILED in stage: $stage_name"
    for f in "$out"/serial-*.log; do
      [ -f "$f" ] || continue
      echo "--- last lines of $f"
      console_text "$f" | grep -av '^\s*$' | tail -n 40
    done
    for c in netboot hegel server-0 server-1 controller-0 controller-1; do
      f="$out/stack/logs/$c.log"
      [ -f "$f" ] || continue
      echo "--- last lines of $f"
      tail -n 25 "$f"
    done
    for f in "$out/registry.log" "$out/registry-push.log"; do
      [ -f "$f" ] && { echo "--- last lines of $f"; tail -n 10 "$f"; }
    done
    if [ -f "$out/stack/env" ]; then
      echo "--- workflow"
      ip netns exec "$ns" env KUBECONFIG="$out/stack/kubeconfig" kubectl get workflow -n netboot-demo -o yaml 2>/dev/null | sed -n '/^status:/,$p' | head -60
    fi
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ -f "$out/stack/state.json" ]; then
    ip netns exec "$ns" "$bins/tinkctl" dev down --data-dir "$out/stack" >/dev/null 2>&1
  fi
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
}
trap cleanup EXIT

stage "build the binaries"
cargo build -q -p tinkctl -p kube-lite -p tink-webhook -p tink-controller -p tink-server -p hegel -p tink-agent -p tink-netboot
for tool in qemu-system-x86_64 qemu-img docker-registry mtype sfdisk; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing: run scripts/install-deps.sh" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out"
osie="$repo/target/osie"

stage "network namespace, bridge and tap"
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" link add br0 type bridge
ip -n "$ns" addr add "$bridge_ip/24" dev br0
ip -n "$ns" link set br0 up
ip -n "$ns" tuntap add dev tap0 mode tap
ip -n "$ns" link set tap0 master br0
ip -n "$ns" link set tap0 up

stage "the stack on $bridge_ip (tinkctl dev up)"
files="$out/files"
mkdir -p "$files"
# Hegel's kernel consoles: the VM's first serial port (Smee's default, tty0 and ttyS1, leaves a
# QEMU serial log empty).
NO_COLOR=1 TINK_HEGEL_CONSOLES="ttyS0,115200" nsx "$bins/tinkctl" dev up --data-dir "$out/stack" --bin-dir "$bins" --machine-ip "$bridge_ip" \
  --netboot-interface br0 --netboot-files-dir "$files" --no-agent --privileged-actions \
  >"$out/dev-up.log" 2>&1 || { cat "$out/dev-up.log"; exit 1; }
# shellcheck disable=SC1091
. "$out/stack/env"
echo "   Hegel $HEGEL_URL, servers $TINK_SERVER, files $TINK_NETBOOT_URL"

stage "OSIE and disk image (osie/build.sh, the stack's CA)"
bash osie/build.sh --out "$osie" --ca-cert "$out/stack/pki/ca.crt"
cp "$osie/vmlinuz" "$osie/initramfs" "$osie/disk.img.gz" "$files/"

stage "choose the accelerator"
accel="${TINK_NETBOOT_ACCEL:-}"
if [ -z "$accel" ]; then
  accel=tcg
  if [ -w /dev/kvm ]; then
    # Some hosts (nested virtualisation) open /dev/kvm but never run a Linux kernel under it:
    # boot the kernel without a root file system and wait for its panic.
    timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256 -nographic -no-reboot \
      -kernel "$osie/vmlinuz" -append "console=ttyS0 panic=-1" >"$out/kvm-probe.log" 2>&1 || true
    if grep -aq "Kernel panic" "$out/kvm-probe.log"; then accel=kvm; fi
  fi
fi
case "$accel" in
  kvm) qemu_accel=(-accel kvm -cpu host) ;;
  *) qemu_accel=(-accel tcg) ;;
esac
echo "   QEMU accelerator: $accel"

stage "action image into docker-registry"
img_root=$(mktemp -d)
mkdir -p "$img_root/bin" "$img_root/usr/local/bin" "$img_root/tmp" "$img_root/mnt"
cp "$(command -v busybox)" "$img_root/bin/busybox"
for a in sh wget gunzip dd sync blockdev ls tr mount umount mkdir printf wc sleep echo cat; do
  ln -s busybox "$img_root/bin/$a"
done
cp osie/actions/* "$img_root/usr/local/bin/"
tar -C "$img_root" -c . | docker import --change 'ENV PATH=/usr/local/bin:/bin' - tink-netboot-demo/actions:latest >/dev/null
rm -rf "$img_root"
mkdir -p "$out/registry"
cat > "$out/registry-push.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $out/registry}}
http: {addr: 127.0.0.1:$push_port}
EOF
sed "s|127.0.0.1:$push_port|$bridge_ip:$registry_port|" "$out/registry-push.yml" > "$out/registry.yml"
# Pushed from the host's engine through a registry on the host's loopback (an insecure
# registry there is allowed by default), then served in the namespace from the same storage.
docker-registry serve "$out/registry-push.yml" >"$out/registry-push.log" 2>&1 &
push_pid=$!
for i in $(seq 1 50); do curl -sf "http://127.0.0.1:$push_port/v2/" >/dev/null && break; sleep 0.2; done
docker tag tink-netboot-demo/actions:latest "127.0.0.1:$push_port/tink/actions:demo"
docker push -q "127.0.0.1:$push_port/tink/actions:demo" >/dev/null
docker rmi "127.0.0.1:$push_port/tink/actions:demo" >/dev/null
kill "$push_pid"; wait "$push_pid" 2>/dev/null || true
# `ip netns exec` itself, not the nsx function: a backgrounded function is a subshell, and
# killing it at the end would leave the registry running.
ip netns exec "$ns" docker-registry serve "$out/registry.yml" >"$out/registry.log" 2>&1 &
pids+=($!)
for i in $(seq 1 50); do nsx curl -sf "http://$bridge_ip:$registry_port/v2/tink/actions/tags/list" >/dev/null && break; sleep 0.2; done
nsx curl -sf "http://$bridge_ip:$registry_port/v2/tink/actions/tags/list"; echo

stage "Hardware, OSIE, Template and Workflow"
userdata="#cloud-config
hostname: demo-vm
# provisioned by tinkerbell-rs $(date -u +%Y-%m-%dT%H:%M:%SZ)"
cat > "$out/objects.yaml" <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: netboot-demo}
---
apiVersion: tinkerbell.org/v1alpha2
kind: OSIE
metadata: {name: test-osie, namespace: netboot-demo}
spec:
  kernelUrl: $TINK_NETBOOT_URL/vmlinuz
  initrdUrl: $TINK_NETBOOT_URL/initramfs
---
apiVersion: tinkerbell.org/v1alpha2
kind: Hardware
metadata: {name: demo-vm, namespace: netboot-demo}
spec:
  networkInterfaces:
    "$vm_mac":
      dhcp:
        ip: $vm_ip
        netmask: 255.255.255.0
        gateway: $bridge_ip
        hostname: demo-vm
        leaseTime: 3600
  osie:
    osieRef: {name: test-osie}
    kernelParams: ["insecure_registries=$bridge_ip:$registry_port"]
  storageDevices: [/dev/vda]
  instance:
    userdata: |
$(printf '%s\n' "$userdata" | sed 's/^/      /')
---
apiVersion: tinkerbell.org/v1alpha2
kind: Template
metadata: {name: install-demo-os, namespace: netboot-demo}
spec:
  actions:
    - name: stream-image
      image: $bridge_ip:$registry_port/tink/actions:demo
      cmd: /usr/local/bin/image2disk
      timeout: 300s
      env:
        IMG_URL: "{{ .image_url }}"
        DEST_DISK: "{{ index .Hardware.Disks 0 }}"
    - name: write-config
      image: $bridge_ip:$registry_port/tink/actions:demo
      cmd: /usr/local/bin/writefile
      timeout: 120s
      env:
        PARTITION: "{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"
        DEST_PATH: tinkerbell.cfg
        CONTENTS: "hegel_url={{ .hegel_url }}"
    - name: reboot
      image: $bridge_ip:$registry_port/tink/actions:demo
      cmd: /usr/local/bin/power
      args: [reboot]
      timeout: 60s
---
apiVersion: tinkerbell.org/v1alpha2
kind: Workflow
metadata: {name: install-demo-vm, namespace: netboot-demo}
spec:
  hardwareRef: {name: demo-vm}
  templateRef: {name: install-demo-os}
  templateData:
    image_url: $TINK_NETBOOT_URL/disk.img.gz
    hegel_url: $HEGEL_URL
  timeout: 15m
EOF
nsx kubectl apply -f "$out/objects.yaml" >/dev/null
printf '%s\n' "$userdata" > "$out/userdata.expected"

stage "provisioning boot: PXE, OSIE, workflow, reboot ($accel)"
qemu-img create -q -f qcow2 "$out/disk.qcow2" 1G
ip netns exec "$ns" timeout "$timeout_s" qemu-system-x86_64 "${qemu_accel[@]}" -m 2048 -smp 2 \
  -nographic -no-reboot -boot order=nc \
  -drive file="$out/disk.qcow2",format=qcow2,if=virtio \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac="$vm_mac" \
  -serial file:"$out/serial-1.log" -monitor none -display none </dev/null >"$out/qemu-1.log" 2>&1 &
qemu=$!
pids+=($qemu)
boot_start=$(date +%s.%N)
state=""
while kill -0 "$qemu" 2>/dev/null; do
  state=$(nsx kubectl get workflow install-demo-vm -n netboot-demo -o jsonpath='{.status.state}' 2>/dev/null || true)
  case "$state" in Failed|Canceled) break ;; esac
  sleep 2
done
if kill -0 "$qemu" 2>/dev/null; then
  echo "error: the workflow ended $state while the machine runs" >&2
  exit 1
fi
wait "$qemu" || { echo "error: QEMU ended with status $? (timeout ${timeout_s}s?)" >&2; exit 1; }
state=$(nsx kubectl get workflow install-demo-vm -n netboot-demo -o jsonpath='{.status.state}')
echo "   workflow: $state"
[ "$state" = Succeeded ] || { echo "error: the workflow is $state after the machine stopped" >&2; exit 1; }
console_text "$out/serial-1.log" | grep -a "tink-osie:" | awk 'NR <= 12 {print "   " $0}' || true
nsx kubectl get workflow install-demo-vm -n netboot-demo \
  -o jsonpath='{range .status.actions[*]}   action {.rendered.name}: {.state}, started {.startedAt}, last change {.lastTransitioned}{"\n"}{end}' 2>/dev/null || true

boot_end=$(date +%s.%N)
# Where the provisioning boot's time went, from the services' own timestamps.
since_boot() { # an RFC 3339 time -> seconds after the VM started
  [ -n "$1" ] || { echo "?"; return; }
  python3 -c 'import sys, datetime; t = datetime.datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).timestamp(); print(f"{t - float(sys.argv[2]):.1f}")' "$1" "$boot_start"
}
first_ts() { grep -ah "$1" "${@:2}" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' | awk '{print $1}' | sort | head -n 1; }
dhcp_at=$(first_ts "DHCP answered" "$out/stack/logs/netboot.log")
agent_at=$(first_ts "agent stream opened" "$out"/stack/logs/server-*.log)
first_action=$(nsx kubectl get workflow install-demo-vm -n netboot-demo -o jsonpath='{.status.actions[0].startedAt}')
last_action=$(nsx kubectl get workflow install-demo-vm -n netboot-demo -o jsonpath='{.status.actions[-1:].lastTransitioned}')
echo "   seconds after the VM started: first DHCP answer $(since_boot "$dhcp_at"), agent connected $(since_boot "$agent_at"), first action started $(since_boot "$first_action"), last action done $(since_boot "$last_action"), machine stopped $(python3 -c "print(f'{$boot_end - $boot_start:.1f}')")"

stage "the disk after the machine stopped (qemu-img, mtools)"
qemu-img convert -O raw "$out/disk.qcow2" "$out/disk.raw"
sfdisk -d "$out/disk.raw" | sed 's/^/   /'
got_marker=$(mtype -i "$out/disk.raw@@1M" ::marker.txt)
want_marker=$(cat "$osie/marker.txt")
[ "$got_marker" = "$want_marker" ] || { echo "error: marker.txt is '$got_marker', want '$want_marker'" >&2; exit 1; }
echo "   marker.txt: $got_marker"
got_cfg=$(mtype -i "$out/disk.raw@@1M" ::tinkerbell.cfg)
[ "$got_cfg" = "hegel_url=$HEGEL_URL" ] || { echo "error: tinkerbell.cfg is '$got_cfg'" >&2; exit 1; }
echo "   tinkerbell.cfg (written by the workflow): $got_cfg"
rm -f "$out/disk.raw"

stage "boot from the disk: user-data from Hegel"
nsx timeout 300 qemu-system-x86_64 "${qemu_accel[@]}" -m 512 -smp 1 \
  -nographic -no-reboot -boot order=c \
  -drive file="$out/disk.qcow2",format=qcow2,if=virtio \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac="$vm_mac" \
  -serial file:"$out/serial-2.log" -monitor none -display none </dev/null >"$out/qemu-2.log" 2>&1 \
  || { echo "error: the second boot did not power off in time" >&2; exit 1; }
console_text "$out/serial-2.log" | grep -a "installed-os:" | sed 's/^/   /'
console_text "$out/serial-2.log" | sed -n '/^--- user-data begin ---$/,/^--- user-data end ---$/p' \
  | sed '1d;$d' | sed '${/^$/d}' > "$out/userdata.got"
if ! diff -u "$out/userdata.expected" "$out/userdata.got"; then
  echo "error: the user-data printed by the installed OS differs from the Hardware's" >&2
  exit 1
fi
echo "   the installed OS printed the Hardware's user-data:"
sed 's/^/     | /' "$out/userdata.got"

ok=1
summary
echo "netboot demo: the machine was provisioned end to end (logs in $out)"
