#!/usr/bin/env bash
# A machine nobody declared enrolls itself, waits for approval, then is provisioned (issue 30):
#
#   1. a network namespace with the bridge (10.99.0.1/24) and a second namespace on it playing
#      the site's own DHCP server (busybox udhcpd on 10.99.0.2, leasing 10.99.0.100-150);
#   2. the stack with discovery on (`tinkctl dev up --discovery-osie discovery-osie`): servers
#      take enrollments, the controller creates discovered Hardware, Hegel serves unknown MACs
#      the discovery OSIE, tink-netboot runs as proxy DHCP (boot information only);
#   3. a QEMU machine with a MAC no Hardware owns and an SMBIOS serial ($TINK_ENROLL_SERIAL,
#      random when unset) PXE-boots: its address from udhcpd, its boot file and script from
#      tink-netboot and Hegel; the OSIE's agent, refused a stream, reports its inventory to enroll;
#   4. checks: the Hardware `discovery-<mac>` appears with that serial, the VM's disk and NIC,
#      not approved, and no Workflow; a Workflow for it is refused by admission; a spoofed
#      enrollment of the machine's MAC (`tinkctl agent enroll`, another inventory, no
#      credentials) is refused and changes nothing;
#   5. inventory on request (`tinkctl hardware inventory --refresh`): the running agent answers;
#   6. approval (`tinkctl hardware approve`, after setting its disk); no Workflow is written by
#      hand: the WorkflowRuleSet applied before the machine booted (issue 31: product name and a
#      disk of at least 1 GiB) did not fire while the machine was unapproved (its enrollment
#      inventory, then its agent's, on the Hardware) and fires once it is approved; its
#      Workflow writes the demo image to the disk and reboots it; the disk is checked after the
#      VM stopped.
#
# Each check prints one line `CHECK <what>: ok`. Reuses the plain netboot demo's OSIE, CA,
# action image and accelerator choice:
#
#   sudo bash scripts/enroll-demo.sh [--reuse DIR]     (DIR default target/netboot-demo)
#   sudo bash scripts/netboot-demo.sh --enroll [--reuse DIR]   (the same)
#
# Environment: TINK_NETBOOT_OUT (output folder, default target/netboot-demo-enroll),
# TINK_ENROLL_SERIAL, TINK_NETBOOT_TIMEOUT (seconds for each boot, default 600).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
reuse="$repo/target/netboot-demo"
while [ $# -gt 0 ]; do
  case "$1" in
    --reuse) reuse=${2:-}; shift 2 || { echo "error: --reuse needs a folder" >&2; exit 2; } ;;
    *) echo "usage: $0 [--reuse DIR]" >&2; exit 2 ;;
  esac
done
reuse=$(cd "$reuse" 2>/dev/null && pwd) || { echo "error: no folder $reuse: run scripts/netboot-demo.sh first (its OSIE, CA and action image are reused)" >&2; exit 2; }
for f in stack/pki/ca.crt files/vmlinuz files/initramfs files/disk.img.gz registry accel; do
  [ -e "$reuse/$f" ] || { echo "error: $reuse/$f missing (run scripts/netboot-demo.sh into it first)" >&2; exit 2; }
done
out="${TINK_NETBOOT_OUT:-$repo/target/netboot-demo-enroll}"
[ "$out" != "$reuse" ] || { echo "error: --reuse names the output folder itself" >&2; exit 2; }
timeout_s="${TINK_NETBOOT_TIMEOUT:-600}"
ns="tinken$$"
site_ns="tinksite$$"
# The netboot demo's addresses: its certificates (made for 10.99.0.1) serve here.
bridge_ip=10.99.0.1
site_ip=10.99.0.2
vm_mac=52:54:00:e0:11:01
serial="${TINK_ENROLL_SERIAL:-ENROLL-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')}"
registry_port=5000
bins="$repo/target/debug"
hw_name="discovery-${vm_mac//:/-}"
# shellcheck source=lib/demo-vm.sh
. "$repo/scripts/lib/demo-vm.sh"

[ "$(id -u)" = 0 ] || { echo "error: run as root (network namespaces, tap devices, DHCP port 67)" >&2; exit 1; }

pids=()
ok=0
cleanup() {
  set +e
  if [ "$ok" != 1 ]; then
    echo "== FAILED in stage: $stage_name"
    for f in "$out"/serial-*.log; do
      [ -f "$f" ] || continue
      echo "--- last lines of $f"
      console_text "$f" | grep -av '^\s*$' | tail -n 40
    done
    for c in netboot hegel server-0 server-1 controller-0 controller-1 webhook; do
      f="$out/stack/logs/$c.log"
      [ -f "$f" ] || continue
      echo "--- last lines of $f"
      tail -n 25 "$f"
    done
    for f in "$out/udhcpd.log" "$out/registry.log"; do
      [ -f "$f" ] && { echo "--- last lines of $f"; tail -n 15 "$f"; }
    done
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ -f "$out/stack/state.json" ]; then
    ip netns exec "$ns" "$bins/tinkctl" dev down --data-dir "$out/stack" >/dev/null 2>&1
  fi
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$site_ns" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  [ "$ok" = 1 ] || guest_crash_exit "$out"/serial-*.log
}
trap cleanup EXIT
check() { echo "   CHECK $1: ok"; }
fail() { echo "error: $*" >&2; exit 1; }
hw_json() { nsx kubectl get hardware "$hw_name" -n default -o "jsonpath=$1" 2>/dev/null || true; }

stage "build the binaries"
cargo build -q -p tinkctl -p kube-lite -p tink-webhook -p tink-controller -p tink-server -p hegel -p tink-agent -p tink-netboot
for tool in qemu-system-x86_64 qemu-img docker-registry mtype busybox; do
  command -v "$tool" >/dev/null || fail "$tool missing: run scripts/install-deps.sh"
done
rm -rf "$out"
mkdir -p "$out"

stage "network namespace, bridge, tap, and the site's DHCP server (udhcpd on $site_ip)"
demo_netns "$bridge_ip"
ip netns add "$site_ns"
ip -n "$site_ns" link set lo up
ip -n "$ns" link add vsite-br type veth peer name vsite netns "$site_ns"
ip -n "$ns" link set vsite-br master br0 up
ip -n "$site_ns" addr add "$site_ip/24" dev vsite
ip -n "$site_ns" link set vsite up
cat > "$out/udhcpd.conf" <<EOF
start 10.99.0.100
end 10.99.0.150
interface vsite
lease_file $out/udhcpd.leases
pidfile $out/udhcpd.pid
option subnet 255.255.255.0
option router $bridge_ip
option lease 3600
EOF
: > "$out/udhcpd.leases"
ip netns exec "$site_ns" busybox udhcpd -f "$out/udhcpd.conf" >"$out/udhcpd.log" 2>&1 &
pids+=($!)

stage "the stack on $bridge_ip with discovery on (tinkctl dev up --discovery-osie)"
export TINK_DEV_DISCOVERY_OSIE=discovery-osie
# The action image comes from the registry on the bridge (plain HTTP): every OSIE script says
# so, the discovery OSIE's included.
export TINK_HEGEL_EXTRA_KERNEL_PARAMS="insecure_registries=$bridge_ip:$registry_port"
demo_stack "$bridge_ip"
cmp -s "$reuse/stack/pki/ca.crt" "$out/stack/pki/ca.crt" || fail "the stack's CA is not the reused one"
cp "$reuse/files/vmlinuz" "$reuse/files/initramfs" "$reuse/files/disk.img.gz" "$files/"
accel=$(cat "$reuse/accel")
case "$accel" in
  kvm) qemu_accel=(-accel kvm -cpu host) ;;
  *) qemu_accel=(-accel tcg) ;;
esac
cp -a "$reuse/registry" "$out/registry"
demo_registry "$out/registry" "$bridge_ip:$registry_port" tink/actions

stage "the discovery OSIE and a Template (no Hardware for the machine)"
cat > "$out/objects.yaml" <<EOF
apiVersion: tinkerbell.org/v1alpha2
kind: OSIE
metadata: {name: discovery-osie, namespace: default}
spec:
  kernelUrl: $TINK_NETBOOT_URL/vmlinuz
  initrdUrl: $TINK_NETBOOT_URL/initramfs
---
apiVersion: tinkerbell.org/v1alpha2
kind: Template
metadata: {name: install-demo-os, namespace: default}
spec:
  actions:
    - name: stream-image
      image: $bridge_ip:$registry_port/tink/actions:demo
      cmd: /usr/local/bin/image2disk
      timeout: 300s
      env:
        IMG_URL: "{{ .image_url }}"
        DEST_DISK: "{{ index .Hardware.Disks 0 }}"
    - name: reboot
      image: $bridge_ip:$registry_port/tink/actions:demo
      cmd: /usr/local/bin/power
      args: [reboot]
      timeout: 60s
---
apiVersion: tinkerbell.org/v1alpha2
kind: WorkflowRuleSet
metadata: {name: enroll-rule, namespace: default}
spec:
  rules:
    - name: enroll-demo-vm
      match:
        product.name: {equals: enroll-demo}
        blockDevices: {count: {min: 1}, where: {sizeBytes: {min: 1073741824}}}
  workflow:
    templateRef: {name: install-demo-os}
    templateData:
      image_url: $TINK_NETBOOT_URL/disk.img.gz
    timeout: 15m
EOF
nsx kubectl apply -f "$out/objects.yaml" >/dev/null
[ -z "$(nsx kubectl get hardware -A -o name 2>/dev/null)" ] || fail "a Hardware exists before the machine enrolled"
check "no Hardware names $vm_mac before it boots"
# What the machine's iPXE will fetch (tink-netboot hands it this URL): the discovery OSIE.
nsx curl -sf "$HEGEL_URL/ipxe/script/$vm_mac/auto.ipxe" > "$out/discovery.ipxe" || fail "Hegel serves no script for the unknown MAC"
grep -q "worker_id=$vm_mac" "$out/discovery.ipxe" || fail "the discovery script does not name the machine"
grep -q "$TINK_NETBOOT_URL/vmlinuz" "$out/discovery.ipxe" || fail "the discovery script does not boot the discovery OSIE"
check "Hegel serves the unknown MAC the discovery OSIE's script"
cat > "$out/workflow.yaml" <<EOF
apiVersion: tinkerbell.org/v1alpha2
kind: Workflow
metadata: {name: install-enrolled, namespace: default}
spec:
  hardwareRef: {name: $hw_name}
  templateRef: {name: install-demo-os}
  templateData:
    image_url: $TINK_NETBOOT_URL/disk.img.gz
  timeout: 15m
EOF

stage "the unknown machine boots: proxy DHCP, discovery OSIE, enrollment ($accel, serial $serial)"
qemu-img create -q -f qcow2 "$out/disk.qcow2" 1G
ip netns exec "$ns" timeout "$timeout_s" qemu-system-x86_64 "${qemu_accel[@]}" -m 2048 -smp 2 \
  -nographic -no-reboot -boot order=nc -smbios "type=1,manufacturer=tinkerbell-rs,product=enroll-demo,serial=$serial" \
  -drive file="$out/disk.qcow2",format=qcow2,if=virtio \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac="$vm_mac" \
  -serial file:"$out/serial-1.log" -monitor none -display none </dev/null >"$out/qemu-1.log" 2>&1 &
qemu=$!
pids+=($qemu)
boot_start=$(date +%s)
deadline=$((boot_start + timeout_s))
until [ "$(hw_json '{.status.attributes.inBand.product.serialNumber}')" = "$serial" ]; do
  kill -0 "$qemu" 2>/dev/null || fail "the machine stopped before it enrolled"
  [ "$(date +%s)" -lt "$deadline" ] || fail "no Hardware $hw_name with serial $serial after ${timeout_s}s"
  sleep 2
done
echo "   enrolled $(($(date +%s) - boot_start)) s after the machine started"

stage "the discovered Hardware"
nsx kubectl get hardware -n default -o wide | sed 's/^/   /'
nsx kubectl get hardware "$hw_name" -n default -o yaml > "$out/discovered.yaml"
sed 's/^/   | /' "$out/discovered.yaml"
check "Hardware $hw_name exists with the SMBIOS serial $serial"
[ "$(hw_json '{.metadata.labels.tinkerbell\.org/discovered}')" = true ] || fail "no discovered label"
[ "$(hw_json '{.spec.discovery.approved}')" = false ] || fail "spec.discovery.approved is not false"
check "labelled discovered, spec.discovery.approved false"
address=$(hw_json '{.spec.discovery.address}')
case "$address" in 10.99.0.1[0-5][0-9]) ;; *) fail "its address is '$address', not a lease of the site's DHCP server" ;; esac
[ "$(hw_json "{.spec.networkInterfaces['$vm_mac'].dhcp.ip}")" = "$address" ] || fail "its interface does not carry its address"
check "its interface $vm_mac with the address the site's DHCP server leased ($address)"
disks=$(hw_json '{.status.attributes.inBand.blockDevices[*].name}')
disk_size=$(hw_json '{.status.attributes.inBand.blockDevices[?(@.name=="vda")].sizeBytes}')
[ "$disk_size" = 1073741824 ] || fail "no 1 GiB disk vda in its inventory (disks: $disks, size '$disk_size')"
check "its disk from QEMU: vda, $disk_size bytes"
nics=$(hw_json '{.status.attributes.inBand.networkInterfaces[*].ports[*].mac}')
case " $nics " in *" $vm_mac "*) ;; *) fail "its inventory's NICs ($nics) do not include $vm_mac" ;; esac
check "its NIC from QEMU: $vm_mac"
[ -z "$(nsx kubectl get workflows -A -o name 2>/dev/null)" ] || fail "a Workflow exists for a machine nobody approved"
check "no Workflow"
# The enrollment's inventory is marked as such; the agent reports again, authenticated, once its
# stream opens (the session token comes with the discovered Hardware).
wait_until=$(($(date +%s) + 90))
until [ "$(hw_json '{.status.inventorySource}')" = Agent ]; do
  [ "$(date +%s)" -lt "$wait_until" ] || fail "status.inventorySource is '$(hw_json '{.status.inventorySource}')', not Agent, 90 s after enrolling"
  sleep 1
done
check "its agent's authenticated report replaced the enrollment's (status.inventorySource Agent)"

stage "before approval: no Workflow admitted, a spoofed agent changes nothing"
if nsx kubectl apply -f "$out/workflow.yaml" >"$out/refused.txt" 2>&1; then
  fail "a Workflow for the unapproved machine was admitted"
fi
sed 's/^/   /' "$out/refused.txt"
grep -q "approv" "$out/refused.txt" || fail "the refusal does not say the machine waits for approval"
check "a Workflow for the unapproved machine is refused by admission"
rv_before=$(hw_json '{.metadata.resourceVersion}')
# Another machine claims this one's MAC with its own inventory and no credentials (what an
# unknown machine's agent sends to enroll): refused, since a Hardware owns the MAC now.
if nsx env RUST_BACKTRACE=0 "$bins/tinkctl" agent enroll "$vm_mac" --root "$repo/crates/inventory/tests/fixtures/machine-a" \
  --server "${TINK_SERVER%%,*}" --tls-ca "$out/stack/pki/ca.crt" >"$out/spoof.txt" 2>&1; then
  cat "$out/spoof.txt"; fail "the spoofed enrollment of $vm_mac was taken"
fi
grep -m1 . "$out/spoof.txt" | cut -c1-240 | sed 's/^/   spoof: /' 
grep -q "is known" "$out/spoof.txt" || fail "the spoofed enrollment was refused for another reason"
sleep 2
[ "$(hw_json '{.metadata.resourceVersion}')" = "$rv_before" ] || fail "the spoofed agent changed the Hardware"
[ "$(hw_json '{.status.attributes.inBand.product.serialNumber}')" = "$serial" ] || fail "the serial changed"
check "a spoofed enrollment of the known MAC left its Hardware unchanged (resourceVersion $rv_before)"

stage "inventory on request: the running agent reports again"
if ! nsx env RUST_BACKTRACE=0 "$bins/tinkctl" hardware inventory "$hw_name" -n default --refresh --timeout 120s \
  >"$out/inventory.json" 2>"$out/inventory.err"; then
  cat "$out/inventory.err"; fail "the agent did not answer the inventory request"
fi
sed 's/^/   /' "$out/inventory.err"
request=$(hw_json '{.status.inventoryRequest}')
[ -n "$request" ] || fail "no status.inventoryRequest"
grep -q "request $request" "$out/inventory.err" || fail "status.inventoryRequest ($request) is not the request tinkctl made"
grep "\"$serial\"" "$out/inventory.json" >/dev/null || fail "the fresh inventory lacks the serial $serial"
wait_until=$(($(date +%s) + 30))
while [ -n "$(hw_json '{.metadata.annotations.tinkerbell\.org/inventory-request}')" ]; do
  [ "$(date +%s)" -lt "$wait_until" ] || fail "the answered request's annotation stayed"
  sleep 1
done
check "inventory on request: the agent answered request $request; the annotation is gone"

stage "approval, then the rule's Workflow: the image written to its disk"
nsx kubectl patch hardware "$hw_name" -n default --type merge -p '{"spec":{"storageDevices":["/dev/vda"]}}' >/dev/null
nsx "$bins/tinkctl" hardware approve "$hw_name" -n default | sed 's/^/   /'
[ "$(hw_json '{.spec.discovery.approved}')" = true ] || fail "not approved"
check "approved"
# The WorkflowRuleSet fires once the machine is approved and its agent's authenticated
# inventory is on the Hardware.
rule_wf="enroll-rule-$hw_name-g1"
until nsx kubectl get workflow "$rule_wf" -n default >/dev/null 2>&1; do
  kill -0 "$qemu" 2>/dev/null || fail "the machine stopped before the rule set created its Workflow"
  [ "$(date +%s)" -lt "$deadline" ] || fail "no Workflow $rule_wf from the WorkflowRuleSet after ${timeout_s}s"
  sleep 1
done
[ "$(hw_json '{.status.inventorySource}')" = Agent ] || fail "the rule fired without an authenticated inventory"
[ "$(nsx kubectl get workflow "$rule_wf" -n default -o jsonpath='{.metadata.labels.tinkerbell\.org/rule}')" = enroll-rule ] || fail "the Workflow does not carry the rule label"
[ "$(nsx kubectl get workflows -n default -o name | wc -l)" = 1 ] || fail "more than one Workflow for the machine"
check "the WorkflowRuleSet created $rule_wf (no hand-written Workflow), after the machine's authenticated agent reported"
state=""
while kill -0 "$qemu" 2>/dev/null; do
  state=$(nsx kubectl get workflow "$rule_wf" -n default -o jsonpath='{.status.state}' 2>/dev/null || true)
  case "$state" in Failed|Canceled) break ;; esac
  guest_kernel_crash "$out/serial-1.log" >/dev/null && fail "the machine's kernel crashed while the workflow is ${state:-Pending}"
  sleep 2
done
wait "$qemu" || fail "QEMU ended with status $? (timeout ${timeout_s}s?)"
state=$(nsx kubectl get workflow "$rule_wf" -n default -o jsonpath='{.status.state}')
[ "$state" = Succeeded ] || fail "the workflow is $state after the machine stopped"
check "the Workflow Succeeded and the machine rebooted"
qemu-img convert -O raw "$out/disk.qcow2" "$out/disk.raw"
got_marker=$(mtype -i "$out/disk.raw@@1M" ::marker.txt)
rm -f "$out/disk.raw"
echo "   marker.txt on its disk: $got_marker"
case "$got_marker" in "tinkerbell-rs demo image"*) ;; *) fail "the disk holds no demo image marker" ;; esac
check "its disk holds the demo image"

ok=1
summary
echo "enroll demo: an unknown machine enrolled, waited for approval, and was provisioned (logs in $out)"
