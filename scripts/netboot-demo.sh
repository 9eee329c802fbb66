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
#   5. the machine's boot log (kernel and OSIE init), forwarded by syslog to tink-netboot, is read
#      back with `tinkctl hardware logs`;
#      and the inventory its agent reported (CPU, memory, disks, NICs) is on the Hardware's status;
#   6. the VM boots from that disk: its OS takes a lease, fetches user-data from Hegel and prints
#      it on the serial console, which must match the Hardware's spec.instance.userdata.
#
# With --bmc redfish|ipmi the machine is powered by its BMC, as a rack is (scripts/lib/bmc-vm.sh):
#   3. the VM starts powered off behind an emulated BMC (Redfish: sushy-tools' libvirt driver in
#      front of a libvirtd started by hand; IPMI: OpenIPMI's ipmi_sim whose chassis program runs
#      QEMU); the Hardware names a bmc.tinkerbell.org Machine (spec.bmcRef, an auth Secret) and
#      starts with netboot off; the Workflow has bootOptions {toggleAllowNetboot: true,
#      bootMode: netboot}: the controller allows netboot and has the BMC controller set a
#      one-time PXE boot and power the machine on. Checked: the emulator reports it On with the
#      PXE boot before the workflow is dispatched;
#   4. the workflow Succeeded and the controller turned the Hardware's netboot off
#      (disableNetboot on its interfaces); the machine's reboot (no -no-reboot: the BMC owns
#      it) tries the network, gets a lease without boot information, and falls through to its
#      disk, whose OS prints the user-data from Hegel and powers off; the emulator reports Off;
#   5. the disk's contents, as in the plain run.
#
# With --uefi the machine has UEFI firmware (OVMF) instead of SeaBIOS: its own PXE client asks
# with architecture 7 (DHCP option 93), tink-netboot hands it ipxe.efi by TFTP, and the rest is the
# plain run (the Debian kernel boots by its EFI stub); the run checks a DHCP answer handed
# ipxe.efi, and ends after the disk check (the demo disk image boots with syslinux, BIOS only).
#
# Each stage prints its duration. On failure the serial consoles, the DHCP/TFTP (netboot),
# Hegel, server, controller and registry logs are printed, so the output says where the chain
# broke; everything stays in the output folder.
#
#   sudo bash scripts/netboot-demo.sh            (root: namespaces, taps, ports 67 and 69)
#   sudo bash scripts/netboot-demo.sh --bmc redfish|ipmi [--reuse DIR]
#   sudo bash scripts/netboot-demo.sh --uefi [--reuse DIR]
#   sudo bash scripts/netboot-demo.sh --enroll [--reuse DIR]   (scripts/enroll-demo.sh)
#
# --reuse DIR: the output folder of an earlier run (the plain one in .ci/run): its stack CA,
# the OSIE built for that CA, the action image's registry storage and the accelerator choice
# are taken from there instead of built again.
#
# Environment: TINK_NETBOOT_OUT (output folder, default target/netboot-demo, with --bmc
# target/netboot-demo-bmc-KIND, with --uefi target/netboot-demo-uefi),
# TINK_NETBOOT_ACCEL (kvm or tcg; default: kvm when a probe kernel boots under it, else tcg),
# TINK_NETBOOT_TIMEOUT (seconds for the provisioning boot, default 600).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
bmc=""
reuse=""
uefi=false
http_boot=false
# --enroll: an unknown machine enrolls itself (scripts/enroll-demo.sh, reusing a plain run).
for a in "$@"; do
  if [ "$a" = --enroll ]; then
    rest=()
    for b in "$@"; do [ "$b" = --enroll ] || rest+=("$b"); done
    exec bash "$repo/scripts/enroll-demo.sh" "${rest[@]}"
  fi
done
while [ $# -gt 0 ]; do
  case "$1" in
    --bmc) bmc=${2:-}; shift 2 || { echo "error: --bmc needs redfish or ipmi" >&2; exit 2; } ;;
    --reuse) reuse=${2:-}; shift 2 || { echo "error: --reuse needs a folder" >&2; exit 2; } ;;
    --uefi) uefi=true; shift ;;
    --uefi-http) uefi=true; http_boot=true; shift ;;
    *) echo "usage: $0 [--bmc redfish|ipmi | --uefi | --uefi-http | --enroll] [--reuse DIR]" >&2; exit 2 ;;
  esac
done
case "$bmc" in ""|redfish|ipmi) ;; *) echo "error: --bmc takes redfish or ipmi, not '$bmc'" >&2; exit 2 ;; esac
if $uefi && [ -n "$bmc" ]; then echo "error: --uefi and --bmc: one at a time" >&2; exit 2; fi
ovmf_code=/usr/share/OVMF/OVMF_CODE.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS.fd
if $uefi && { [ ! -f "$ovmf_code" ] || [ ! -f "$ovmf_vars" ]; }; then
  echo "error: --uefi: $ovmf_code or $ovmf_vars missing (Debian ovmf): run scripts/install-deps.sh" >&2; exit 1
fi
if $http_boot && ! command -v virt-fw-vars >/dev/null; then
  echo "error: --uefi-http: virt-fw-vars missing (PyPI virt-firmware): run scripts/install-deps.sh" >&2; exit 1
fi
if [ -n "$reuse" ]; then
  reuse=$(cd "$reuse" 2>/dev/null && pwd) || { echo "error: --reuse: no folder $reuse" >&2; exit 2; }
  for f in stack/pki/ca.crt files/vmlinuz files/initramfs files/disk.img.gz registry accel; do
    [ -e "$reuse/$f" ] || { echo "error: --reuse: $reuse/$f missing (run the plain demo into it first)" >&2; exit 2; }
  done
fi
if [ -n "$bmc" ]; then
  out="${TINK_NETBOOT_OUT:-$repo/target/netboot-demo-bmc-$bmc}"
elif $http_boot; then
  out="${TINK_NETBOOT_OUT:-$repo/target/netboot-demo-uefi-http}"
elif $uefi; then
  out="${TINK_NETBOOT_OUT:-$repo/target/netboot-demo-uefi}"
else
  out="${TINK_NETBOOT_OUT:-$repo/target/netboot-demo}"
fi
[ "$out" != "$reuse" ] || { echo "error: --reuse names the output folder itself" >&2; exit 2; }
# shellcheck source=lib/bmc-vm.sh
. "$repo/scripts/lib/bmc-vm.sh"
timeout_s="${TINK_NETBOOT_TIMEOUT:-600}"
ns="tinknb$$"
bridge_ip=10.99.0.1
vm_ip=10.99.0.10
vm_mac=52:54:00:be:ef:01
registry_port=5000
bins="$repo/target/debug"
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
    for c in netboot hegel server-0 server-1 controller-0 controller-1; do
      f="$out/stack/logs/$c.log"
      [ -f "$f" ] || continue
      echo "--- last lines of $f"
      tail -n 25 "$f"
    done
    for f in "$out/registry.log" "$out/registry-push.log"; do
      [ -f "$f" ] && { echo "--- last lines of $f"; tail -n 10 "$f"; }
    done
    if [ -n "$bmc" ]; then
      echo "--- the BMC ($bmc): what it did"
      bmc_vm_log
      for f in "$out/stack/logs/bmc-controller.log"; do
        [ -f "$f" ] && { echo "--- last lines of $f"; tail -n 25 "$f"; }
      done
      if [ -f "$out/stack/env" ]; then
        echo "--- BMC Jobs"
        ip netns exec "$ns" env KUBECONFIG="$out/stack/kubeconfig" kubectl get jobs.bmc.tinkerbell.org -n netboot-demo 2>/dev/null
      fi
    fi
    if [ -f "$out/stack/env" ]; then
      echo "--- workflow"
      ip netns exec "$ns" env KUBECONFIG="$out/stack/kubeconfig" kubectl get workflow -n netboot-demo -o yaml 2>/dev/null | sed -n '/^status:/,$p' | head -60
    fi
  fi
  bmc_vm_stop
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ -f "$out/stack/state.json" ]; then
    ip netns exec "$ns" "$bins/tinkctl" dev down --data-dir "$out/stack" >/dev/null 2>&1
  fi
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  [ "$ok" = 1 ] || guest_crash_exit "$out"/serial-*.log
}
trap cleanup EXIT

stage "build the binaries"
cargo build -q -p tinkctl -p kube-lite -p tink-webhook -p tink-controller -p tink-server -p hegel -p tink-agent -p tink-netboot \
  ${bmc:+-p tink-bmc-controller}
for tool in qemu-system-x86_64 qemu-img docker-registry mtype sfdisk; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing: run scripts/install-deps.sh" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out"
osie="$repo/target/osie"
if [ -n "$bmc" ]; then bmc_vm_prepare "$bmc"; fi

stage "network namespace, bridge and tap"
demo_netns "$bridge_ip"

stage "the stack on $bridge_ip (tinkctl dev up)"
demo_stack "$bridge_ip"

if [ -n "$reuse" ]; then
  stage "OSIE and disk image: reused from $reuse"
  cmp -s "$reuse/stack/pki/ca.crt" "$out/stack/pki/ca.crt" || { echo "error: the stack's CA is not the reused one" >&2; exit 1; }
  cp "$reuse/files/vmlinuz" "$reuse/files/initramfs" "$reuse/files/disk.img.gz" "$files/"
  cmp -s "$reuse/files/disk.img.gz" "$osie/disk.img.gz" || { echo "error: $osie changed since $reuse was made (its marker would not match)" >&2; exit 1; }
else
  stage "OSIE and disk image (osie/build.sh, the stack's CA)"
  bash osie/build.sh --out "$osie" --ca-cert "$out/stack/pki/ca.crt"
  cp "$osie/vmlinuz" "$osie/initramfs" "$osie/disk.img.gz" "$files/"
fi

stage "choose the accelerator"
accel="${TINK_NETBOOT_ACCEL:-}"
if [ -z "$accel" ] && [ -n "$reuse" ]; then accel=$(cat "$reuse/accel"); fi
[ -n "$accel" ] || accel=$(demo_accel "$out/kvm-probe.log" "$osie/vmlinuz")
case "$accel" in
  kvm) qemu_accel=(-accel kvm -cpu host) ;;
  *) qemu_accel=(-accel tcg) ;;
esac
echo "   QEMU accelerator: $accel"
echo "$accel" > "$out/accel"

if [ -n "$reuse" ]; then
  stage "action image: the registry storage of $reuse"
  cp -a "$reuse/registry" "$out/registry"
else
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
  demo_push "$out/registry" tink-netboot-demo/actions:latest=tink/actions:demo
fi
demo_registry "$out/registry" "$bridge_ip:$registry_port" tink/actions

hw_bmc=""
wf_boot=""
bmc_objects=""
iface_netboot=""
if [ -n "$bmc" ]; then
  stage "the VM, powered off, behind its BMC ($bmc)"
  qemu-img create -q -f qcow2 "$out/disk.qcow2" 1G
  bmc_vm_start "$out/disk.qcow2"
  state_now=$(bmc_vm_state)
  echo "   the emulator: $state_now"
  case "$state_now" in "power Off"*|"power off"*) ;; *) echo "error: the VM is not off at the start" >&2; exit 1 ;; esac
  ! bmc_vm_qemu_pid >/dev/null || { echo "error: QEMU runs before anyone powered the machine on" >&2; exit 1; }
  # The machine as a provisioned one is left: its netboot off; the Workflow's
  # toggleAllowNetboot turns it on for the run and off again after success.
  hw_bmc="  bmcRef: {name: demo-vm}"
  iface_netboot="      disableNetboot: true"
  wf_boot="  bootOptions: {toggleAllowNetboot: true, bootMode: netboot}"
  bmc_objects="$(bmc_vm_objects netboot-demo)
---"
fi

stage "Hardware, OSIE, Template and Workflow"
userdata="#cloud-config
hostname: demo-vm
# provisioned by tinkerbell-rs $(date -u +%Y-%m-%dT%H:%M:%SZ)"
cat > "$out/objects.yaml" <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: netboot-demo}
---
$bmc_objects
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
$iface_netboot
$hw_bmc
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
$wf_boot
EOF
nsx kubectl apply -f "$out/objects.yaml" >/dev/null
printf '%s\n' "$userdata" > "$out/userdata.expected"

wf_state() { nsx kubectl get workflow install-demo-vm -n netboot-demo -o jsonpath='{.status.state}' 2>/dev/null || true; }
hw_netboot_disabled() { # the Hardware's interface: true when netboot is off
  nsx kubectl get hardware demo-vm -n netboot-demo -o jsonpath="{.spec.networkInterfaces['$vm_mac'].disableNetboot}" 2>/dev/null || true
}
# What the provisioning boot did, and where its time went, from the services' own timestamps.
report_provisioning() {
  console_text "$out/serial-1.log" | grep -a "tink-osie:" | awk 'NR <= 12 {print "   " $0}' || true
  nsx kubectl get workflow install-demo-vm -n netboot-demo \
    -o jsonpath='{range .status.actions[*]}   action {.rendered.name}: {.state}, started {.startedAt}, last change {.lastTransitioned}{"\n"}{end}' 2>/dev/null || true
  local dhcp_at agent_at first_action last_action
  dhcp_at=$(first_ts "DHCP answered" "$out/stack/logs/netboot.log")
  agent_at=$(first_ts "agent stream opened" "$out"/stack/logs/server-*.log)
  first_action=$(nsx kubectl get workflow install-demo-vm -n netboot-demo -o jsonpath='{.status.actions[0].startedAt}')
  last_action=$(nsx kubectl get workflow install-demo-vm -n netboot-demo -o jsonpath='{.status.actions[-1:].lastTransitioned}')
  echo "   seconds after the VM started: first DHCP answer $(since_boot "$dhcp_at"), agent connected $(since_boot "$agent_at"), first action started $(since_boot "$first_action"), last action done $(since_boot "$last_action")$1"
}
since_boot() { # an RFC 3339 time -> seconds after the VM started
  [ -n "$1" ] || { echo "?"; return; }
  python3 -c 'import sys, datetime; t = datetime.datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).timestamp(); print(f"{t - float(sys.argv[2]):.1f}")' "$1" "$boot_start"
}
first_ts() { grep -ah "$1" "${@:2}" 2>/dev/null | sed 's/\x1b\[[0-9;]*m//g' | awk '{print $1}' | sort | head -n 1; }
check_disk() {
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
}
check_userdata() { # SERIAL_LOG: the installed OS printed the Hardware's user-data
  console_text "$1" | grep -a "installed-os:" | sed 's/^/   /'
  console_text "$1" | sed -n '/^--- user-data begin ---$/,/^--- user-data end ---$/p' \
    | sed '1d;$d' | sed '${/^$/d}' > "$out/userdata.got"
  if ! diff -u "$out/userdata.expected" "$out/userdata.got"; then
    echo "error: the user-data printed by the installed OS differs from the Hardware's" >&2
    exit 1
  fi
  echo "   the installed OS printed the Hardware's user-data:"
  sed 's/^/     | /' "$out/userdata.got"
}

if [ -z "$bmc" ]; then
# UEFI: OVMF (its own variable store per run); the network card first in its boot order and
# without QEMU's iPXE option ROM (romfile=), so the firmware's own PXE client (OVMF's
# VirtioNetDxe and network stack) asks with architecture 7 (option 93) and gets ipxe.efi by TFTP,
# as a server's UEFI does.
firmware=()
nic_boot=""
fw_name=BIOS
if $uefi; then
  cp "$ovmf_vars" "$out/OVMF_VARS.fd"
  firmware=(-drive if=pflash,format=raw,readonly=on,file="$ovmf_code" -drive if=pflash,format=raw,file="$out/OVMF_VARS.fd")
  nic_boot=",bootindex=1,romfile="
  fw_name="UEFI (OVMF)"
fi
if $http_boot; then
  # UEFI HTTP boot, as a BMC sets it (Redfish Boot.HttpBootUri): the firmware's next boot is an
  # HTTP boot option for ipxe.efi on tink-netboot's HTTP server; its DHCP asks as an HTTPClient.
  virt-fw-vars --input "$ovmf_vars" --output "$out/OVMF_VARS.fd" --set-boot-uri "$TINK_NETBOOT_URL/ipxe.efi" >"$out/virt-fw-vars.log" 2>&1 \
    || { cat "$out/virt-fw-vars.log"; echo "error: cannot write the HTTP boot option" >&2; exit 1; }
  fw_name="UEFI (OVMF) HTTP boot of $TINK_NETBOOT_URL/ipxe.efi"
fi
stage "provisioning boot: PXE, OSIE, workflow, reboot ($accel, $fw_name)"
qemu-img create -q -f qcow2 "$out/disk.qcow2" 1G
ip netns exec "$ns" timeout "$timeout_s" qemu-system-x86_64 "${qemu_accel[@]}" "${firmware[@]}" -m 2048 -smp 2 \
  -nographic -no-reboot -boot order=nc \
  -drive file="$out/disk.qcow2",format=qcow2,if=virtio \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac="$vm_mac$nic_boot" \
  -serial file:"$out/serial-1.log" -monitor none -display none </dev/null >"$out/qemu-1.log" 2>&1 &
qemu=$!
pids+=($qemu)
boot_start=$(date +%s.%N)
state=""
while kill -0 "$qemu" 2>/dev/null; do
  state=$(wf_state)
  case "$state" in Failed|Canceled) break ;; esac
  guest_kernel_crash "$out/serial-1.log" >/dev/null && { echo "error: the machine's kernel crashed while the workflow is ${state:-Pending}" >&2; exit 1; }
  sleep 2
done
if kill -0 "$qemu" 2>/dev/null; then
  echo "error: the workflow ended $state while the machine runs" >&2
  exit 1
fi
wait "$qemu" || { echo "error: QEMU ended with status $? (timeout ${timeout_s}s?)" >&2; exit 1; }
state=$(wf_state)
echo "   workflow: $state"
[ "$state" = Succeeded ] || { echo "error: the workflow is $state after the machine stopped" >&2; exit 1; }
boot_end=$(date +%s.%N)
report_provisioning ", machine stopped $(python3 -c "print(f'{$boot_end - $boot_start:.1f}')")"

stage "the machine's boot log, received by syslog (tinkctl hardware logs)"
# The OSIE forwards the kernel log and its init's messages to tink-netboot's receiver
# (syslog_host= from Hegel's script); they are read back the way an operator reads them.
nsx "$bins/tinkctl" hardware logs demo-vm -n netboot-demo --tail 2000 >"$out/boot-log.txt" 2>"$out/boot-log.err" \
  || { cat "$out/boot-log.err" >&2; echo "error: tinkctl hardware logs failed" >&2; exit 1; }
echo "   $(grep -c . "$out/boot-log.txt" || true) lines; the kernel's and init's first:"
grep -a -m1 "Linux version" "$out/boot-log.txt" | cut -c1-150 | sed 's/^/     /' || true
grep -a -m1 "tink-osie: starting tink-agent" "$out/boot-log.txt" | cut -c1-150 | sed 's/^/     /' || true
grep -aq "Linux version" "$out/boot-log.txt" || { echo "error: the kernel's log did not arrive by syslog" >&2; exit 1; }
grep -aq "tink-osie: starting tink-agent" "$out/boot-log.txt" || { echo "error: the OSIE init's messages did not arrive by syslog" >&2; exit 1; }

stage "the machine's inventory, reported by its agent (Hardware status)"
inv_macs=""
for _ in $(seq 1 15); do
  inv_macs=$(nsx kubectl get hardware demo-vm -n netboot-demo -o jsonpath='{.status.attributes.inBand.networkInterfaces[*].ports[*].mac}' 2>/dev/null || true)
  [ -n "$inv_macs" ] && break
  sleep 1
done
nsx kubectl get hardware demo-vm -n netboot-demo -o wide | sed 's/^/   /'
echo "   reported NIC MACs: ${inv_macs:-none}; CPU threads: $(nsx kubectl get hardware demo-vm -n netboot-demo -o jsonpath='{.status.attributes.inBand.cpu.totalThreads}')"
case " $inv_macs " in *" $vm_mac "*) ;; *) echo "error: the Hardware's inventory does not name the machine's NIC $vm_mac" >&2; exit 1 ;; esac

stage "the disk after the machine stopped (qemu-img, mtools)"
check_disk

if $http_boot; then
  # The firmware asked as an HTTPClient (architecture 16) and got ipxe.efi's URL; nothing was
  # booted by PXE (TFTP) instead.
  http_answers=$(grep -a "DHCP answered" "$out/stack/logs/netboot.log" | grep -c 'boot_file="\?http://[^ ]*/ipxe.efi' || true)
  tftp_answers=$(grep -a "DHCP answered" "$out/stack/logs/netboot.log" | grep -Ec 'boot_file="?(ipxe.efi|undionly.kpxe|snponly.efi)' || true)
  echo "   DHCP answers with ipxe.efi's HTTP URL (UEFI HTTP boot): $http_answers; with a TFTP boot file: $tftp_answers"
  [ "$http_answers" -gt 0 ] || { echo "error: no DHCP answer handed an HTTP boot URL" >&2; exit 1; }
  [ "$tftp_answers" = 0 ] || { echo "error: the machine fell back to PXE (TFTP)" >&2; exit 1; }
  echo "   (the demo disk image boots with syslinux, BIOS only: the UEFI run ends after the workflow)"
elif $uefi; then
  # The boot file tink-netboot chose from the firmware's architecture (option 93).
  efi_answers=$(grep -a "DHCP answered" "$out/stack/logs/netboot.log" | grep -c 'ipxe.efi' || true)
  echo "   DHCP answers that handed ipxe.efi (UEFI x86-64): $efi_answers"
  [ "$efi_answers" -gt 0 ] || { echo "error: no DHCP answer handed the UEFI iPXE" >&2; exit 1; }
  echo "   (the demo disk image boots with syslinux, BIOS only: the UEFI run ends after the workflow)"
else
stage "boot from the disk: user-data from Hegel"
nsx timeout 300 qemu-system-x86_64 "${qemu_accel[@]}" -m 512 -smp 1 \
  -nographic -no-reboot -boot order=c \
  -drive file="$out/disk.qcow2",format=qcow2,if=virtio \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac="$vm_mac" \
  -serial file:"$out/serial-2.log" -monitor none -display none </dev/null >"$out/qemu-2.log" 2>&1 \
  || { echo "error: the second boot did not power off in time" >&2; exit 1; }
check_userdata "$out/serial-2.log"
fi

else
stage "powered on through its BMC: a one-time PXE boot ($bmc)"
# Nobody but the BMC starts the VM: the controller's Job (bootOptions) through the BMC
# controller. Checked as soon as the emulator reports it on: the workflow is still Pending, or
# Scheduled at that very moment (the controller dispatches in the status write that records
# the Job completed, which needs the BMC to report the machine on), long before the OSIE's
# agent could connect.
deadline=$(($(date +%s) + 180))
until [ "$(bmc_vm_power 2>/dev/null)" = On ]; do
  state=$(wf_state)
  case "$state" in Failed|Canceled) echo "error: the workflow is $state before the machine was powered on" >&2; exit 1 ;; esac
  [ "$(date +%s)" -lt "$deadline" ] || { echo "error: the BMC did not report the machine on within 180 s" >&2; exit 1; }
  sleep 1
done
boot_start=$(date +%s.%N)
bmc_now=$(bmc_vm_state)
state=$(wf_state)
echo "   the emulator: $bmc_now"
echo "   QEMU boots with: $(bmc_vm_boot_config)"
echo "   workflow: ${state:-(no state yet)}; the Hardware's disableNetboot: $(hw_netboot_disabled)"
nsx kubectl get jobs.bmc.tinkerbell.org -n netboot-demo 2>/dev/null | sed 's/^/   /' || true
case "$bmc_now" in
  *"boot override Pxe"*|*"boot device Force PXE"*) ;;
  *) echo "error: the emulator holds no PXE boot for the machine: $bmc_now" >&2; exit 1 ;;
esac
case "$state" in ""|Pending|Scheduled) ;; *) echo "error: the workflow was $state when the machine was powered on" >&2; exit 1 ;; esac

stage "provisioning boot: PXE, OSIE, workflow ($accel, the BMC's VM)"
deadline=$(($(date +%s) + timeout_s))
state=""
while :; do
  state=$(wf_state)
  case "$state" in Succeeded) break ;; Failed|Canceled) echo "error: the workflow is $state" >&2; exit 1 ;; esac
  bmc_vm_qemu_pid >/dev/null || { echo "error: the machine stopped while the workflow is ${state:-Pending}" >&2; exit 1; }
  [ "$(date +%s)" -lt "$deadline" ] || { echo "error: the workflow is still ${state:-Pending} after ${timeout_s}s" >&2; exit 1; }
  sleep 2
done
echo "   workflow: $state"
report_provisioning ""
nsx kubectl get workflow install-demo-vm -n netboot-demo \
  -o jsonpath='{range .status.conditions[*]}   condition {.type}={.status} {.reason}{"\n"}{end}' 2>/dev/null || true

stage "after success: netboot off, the machine reboots itself to its disk"
# The controller turns netboot off; the workflow's last action rebooted the machine, whose
# firmware tries the network first: a lease without boot information, then its disk, whose
# OS prints the user-data and powers off.
deadline=$(($(date +%s) + 60))
until [ "$(hw_netboot_disabled)" = true ]; do
  [ "$(date +%s)" -lt "$deadline" ] || { echo "error: the Hardware's netboot is still on 60 s after the workflow succeeded" >&2; exit 1; }
  sleep 1
done
echo "   the Hardware's interface $vm_mac: disableNetboot: $(hw_netboot_disabled)"
deadline=$(($(date +%s) + 300))
while bmc_vm_qemu_pid >/dev/null; do
  [ "$(date +%s)" -lt "$deadline" ] || { echo "error: the installed OS did not power the machine off within 300 s" >&2; exit 1; }
  sleep 2
done
deadline=$(($(date +%s) + 30))
until [ "$(bmc_vm_power 2>/dev/null)" = Off ]; do
  [ "$(date +%s)" -lt "$deadline" ] || { echo "error: the BMC does not report the machine off after it powered off" >&2; exit 1; }
  sleep 1
done
echo "   the machine powered itself off; the emulator: $(bmc_vm_state)"
# Every DHCP answer since the workflow succeeded (the reboot's PXE ROM, then the installed
# OS) carries no boot information: netboot was refused.
succeeded_at=$(nsx kubectl get workflow install-demo-vm -n netboot-demo -o jsonpath='{.status.actions[-1:].lastTransitioned}')
grep -a "DHCP answered" "$out/stack/logs/netboot.log" | sed 's/\x1b\[[0-9;]*m//g' \
  | awk -v t="$succeeded_at" '$1 >= t' > "$out/dhcp-after-success.log" || true
with_boot=$(grep -av 'boot_file=""' "$out/dhcp-after-success.log" | grep -c . || true)
echo "   DHCP answers since the workflow succeeded: $(grep -c . "$out/dhcp-after-success.log" || true), with boot information: $with_boot"
[ "$with_boot" = 0 ] || { echo "error: the machine was offered a network boot after the workflow succeeded:" >&2; cat "$out/dhcp-after-success.log" >&2; exit 1; }
check_userdata "$out/serial-1.log"
echo "   what the BMC did:"
bmc_vm_log | sed 's/^/     /'

stage "the disk after the machine stopped (qemu-img, mtools)"
check_disk
fi

ok=1
summary
echo "netboot demo: the machine was provisioned end to end (logs in $out)"
