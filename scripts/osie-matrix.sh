#!/usr/bin/env bash
# The OSIE on a matrix of machine models: QEMU machines with different NICs, disk controllers
# and firmware netboot the OSIE (osie/build.sh) from one stack, and on each the agent runs a
# Workflow that writes the demo disk image to the disk under test and a file into it, then
# reboots (QEMU runs with -no-reboot: the reboot ends it). Per machine model it checks:
#
#   - the Workflow Succeeded and the disk holds the image's marker and the written file
#     (qemu-img, mtools, after the machine stopped);
#   - the OSIE loaded the drivers of the machine's NIC and disk controller, by modalias, and
#     none of the drivers of the other models of the matrix (read from the serial log, where
#     osie/init prints /proc/modules's names): a virtio-only machine never loads megaraid_sas;
#   - on the row marked "unbound-e1000", which carries a second NIC (an e1000) whose driver the
#     kernel command line blacklists (module_blacklist=e1000, from the Hardware's
#     osie.kernelParams), that osie/init named its PCI id as lacking a driver, on the console and
#     by syslog (read back with `tinkctl hardware logs`).
#
# It prints one line per machine model and the modules the OSIE loaded there:
#
#   ROW nic=<model> disk=<model> fw=<bios|uefi> arch=<x86_64|aarch64> secs=<n> result=<PASS|FAIL>
#       modules: ...
#
# and exits non-zero when a row fails. Machines run two at a time (TINK_MATRIX_JOBS), each with
# its own tap on one bridge, its own Hardware and Workflow on one stack.
#
#   sudo bash scripts/osie-matrix.sh [--quick | --arm64] [--reuse DIR]
#
# The OSIE object names its files by architecture (vmlinuz-x86_64, initramfs-x86_64): Hegel's
# script loads each machine's by the architecture its firmware reports.
#
# --quick: four machines (NICs e1000, rtl8139, vmxnet3, e1000e; disks nvme, ahci, megasas,
#          virtio-scsi; one of them UEFI): the CI run. Without it, every NIC model (e1000,
#          e1000e, rtl8139, vmxnet3, virtio-net-pci) and disk model (virtio-blk, nvme, ahci,
#          megasas, lsi53c895a, virtio-scsi) at least once, BIOS and UEFI, and an arm64
#          machine (qemu-system-aarch64, TCG, AAVMF UEFI firmware; virtio NIC and disk) booting
#          the arm64 OSIE (osie/build.sh --arch aarch64, cached under target/osie-arm64) through
#          iPXE's arm64 snp.efi (osie/ipxe-arm64.sh) with an arm64 action image. Needs
#          scripts/install-deps-arm64.sh.
# --arm64: the arm64 machine alone.
# --reuse DIR: an earlier scripts/netboot-demo.sh output folder (target/netboot-demo in CI): its
#          stack CA, action image registry and accelerator choice are taken from there, and its
#          OSIE when that one loads drivers by modalias (made by this osie/build.sh); an older
#          OSIE is rebuilt here for the reused CA.
#
# Its own namespace (tinkmx<pid>) with its own bridge, so it runs beside a netboot demo; the
# bridge is 10.98.0.1/24, or with --reuse the reused run's address (its server certificates
# name it; inside this namespace it meets nothing of the other run's).
# Environment: TINK_MATRIX_OUT (output folder, default target/osie-matrix), TINK_MATRIX_JOBS
# (machines at once, default 2), TINK_MATRIX_TIMEOUT (seconds per machine, default 600),
# TINK_NETBOOT_ACCEL (kvm or tcg; default: as scripts/netboot-demo.sh decides).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
quick=false
arm64_only=false
reuse=""
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=true; shift ;;
    --arm64) arm64_only=true; shift ;;
    --reuse) reuse=${2:-}; shift 2 || { echo "error: --reuse needs a folder" >&2; exit 2; } ;;
    *) echo "usage: $0 [--quick | --arm64] [--reuse DIR]" >&2; exit 2 ;;
  esac
done
if [ -n "$reuse" ]; then
  reuse=$(cd "$reuse" 2>/dev/null && pwd) || { echo "error: --reuse: no folder $reuse" >&2; exit 2; }
  for f in stack/pki/ca.crt files/vmlinuz files/initramfs files/disk.img.gz registry; do
    [ -e "$reuse/$f" ] || { echo "error: --reuse: $reuse/$f missing (run scripts/netboot-demo.sh into it first)" >&2; exit 2; }
  done
fi
out="${TINK_MATRIX_OUT:-$repo/target/osie-matrix}"
[ "$out" != "$reuse" ] || { echo "error: --reuse names the output folder itself" >&2; exit 2; }
jobs="${TINK_MATRIX_JOBS:-2}"
timeout_s="${TINK_MATRIX_TIMEOUT:-600}"
ns="tinkmx$$"
bridge_ip=10.98.0.1
if [ -n "$reuse" ]; then
  bridge_ip=$(cat "$reuse/stack/pki/machine-ip" 2>/dev/null || true)
  [[ "$bridge_ip" =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "error: --reuse: $reuse/stack/pki/machine-ip names no IPv4 address" >&2; exit 2; }
fi
subnet=${bridge_ip%.*}
registry_port=5000
bins="$repo/target/debug"
ovmf_code=/usr/share/OVMF/OVMF_CODE.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS.fd
# shellcheck source=lib/demo-vm.sh
. "$repo/scripts/lib/demo-vm.sh"
# shellcheck source=lib/matrix.sh
. "$repo/scripts/lib/matrix.sh"

# The machine models: NIC, disk, firmware and what else the machine carries.
if $quick; then
  rows=(
    "e1000 nvme bios -"
    "rtl8139 ahci bios unbound-e1000"
    "vmxnet3 megasas bios -"
    "e1000e virtio-scsi uefi -"
  )
else
  rows=(
    "e1000 nvme bios -"
    "e1000e ahci bios -"
    "rtl8139 megasas bios unbound-e1000"
    "vmxnet3 lsi53c895a bios -"
    "virtio-net-pci virtio-scsi bios -"
    "virtio-net-pci virtio-blk uefi -"
    "e1000e nvme uefi -"
    "virtio-net-pci virtio-blk uefi arm64"
  )
fi
$arm64_only && rows=("virtio-net-pci virtio-blk uefi arm64")
arm64=false
case " ${rows[*]} " in *" arm64 "*) arm64=true ;; esac
aavmf_code=/usr/share/AAVMF/AAVMF_CODE.fd
aavmf_vars=/usr/share/AAVMF/AAVMF_VARS.fd

[ "$(id -u)" = 0 ] || { echo "error: run as root (network namespaces, tap devices, DHCP port 67)" >&2; exit 1; }
for tool in qemu-system-x86_64 qemu-img docker-registry mtype zstd cpio; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing: run scripts/install-deps.sh" >&2; exit 1; }
done
{ [ -f "$ovmf_code" ] && [ -f "$ovmf_vars" ]; } || { echo "error: $ovmf_code or $ovmf_vars missing (Debian ovmf): run scripts/install-deps.sh" >&2; exit 1; }
if $arm64; then
  for tool in qemu-system-aarch64 aarch64-linux-gnu-gcc mmdebstrap; do
    command -v "$tool" >/dev/null || { echo "error: $tool missing (the arm64 machine): run scripts/install-deps-arm64.sh" >&2; exit 1; }
  done
  [ -f "$aavmf_code" ] || { echo "error: $aavmf_code missing (Debian qemu-efi-aarch64): run scripts/install-deps-arm64.sh" >&2; exit 1; }
fi

pids=()
ok=0
cleanup() {
  set +e
  local f
  for f in "$out"/row-*/qemu.pid; do
    [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
  done
  if [ "$ok" != 1 ]; then
    echo "== FAILED in stage: $stage_name"
    for c in netboot hegel server-0 controller-0; do
      f="$out/stack/logs/$c.log"
      [ -f "$f" ] && { echo "--- last lines of $f"; tail -n 15 "$f"; }
    done
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
if $arm64; then cargo build -q -p tink-agent --target aarch64-unknown-linux-gnu; fi
rm -rf "$out"
mkdir -p "$out"

stage "network namespace $ns, bridge $bridge_ip/24 and a tap per machine"
demo_netns "$bridge_ip"
for i in "${!rows[@]}"; do matrix_tap "tap$((i + 1))"; done

stage "the stack on $bridge_ip (tinkctl dev up)"
demo_stack "$bridge_ip"
osie="$out/osie"
if [ -n "$reuse" ] && matrix_osie_has_modalias "$reuse/files/initramfs"; then
  stage "OSIE and disk image: reused from $reuse (it loads drivers by modalias)"
  cmp -s "$reuse/stack/pki/ca.crt" "$out/stack/pki/ca.crt" || { echo "error: the stack's CA is not the reused one" >&2; exit 1; }
  cp "$reuse/files/vmlinuz" "$reuse/files/initramfs" "$reuse/files/disk.img.gz" "$files/"
else
  stage "OSIE and disk image (osie/build.sh, the stack's CA)"
  [ -z "$reuse" ] || echo "   the OSIE of $reuse predates drivers by modalias: building one for its CA"
  # The kernel and firmware packages are cached where scripts/netboot-demo.sh's build keeps them.
  mkdir -p "$repo/target/osie/cache" "$osie"
  ln -sfn "$repo/target/osie/cache" "$osie/cache"
  bash osie/build.sh --out "$osie" --ca-cert "$out/stack/pki/ca.crt"
  cp "$osie/vmlinuz" "$osie/initramfs" "$osie/disk.img.gz" "$files/"
fi
# Tinkerbell's names by architecture, which Hegel's script picks by the machine's firmware.
ln -f "$files/vmlinuz" "$files/vmlinuz-x86_64"
ln -f "$files/initramfs" "$files/initramfs-x86_64"
if $arm64; then
  stage "arm64: OSIE (osie/build.sh --arch aarch64, the stack's CA) and iPXE (osie/ipxe-arm64.sh)"
  # Cached between runs: Debian's arm64 packages and iPXE's build. The OSIE itself is per CA.
  mkdir -p "$repo/target/osie-arm64/cache" "$out/osie-arm64"
  ln -sfn "$repo/target/osie-arm64/cache" "$out/osie-arm64/cache"
  bash osie/build.sh --arch aarch64 --out "$out/osie-arm64" --ca-cert "$out/stack/pki/ca.crt"
  bash osie/ipxe-arm64.sh --out "$repo/target/ipxe-arm64"
  cp "$out/osie-arm64/vmlinuz" "$files/vmlinuz-aarch64"
  cp "$out/osie-arm64/initramfs" "$files/initramfs-aarch64"
  cp "$repo/target/ipxe-arm64/snp.efi" "$files/snp.efi"
  echo "   arm64 kernel $(cat "$out/osie-arm64/kernel-version"), initramfs $(du -h "$files/initramfs-aarch64" | cut -f1), snp.efi $(du -h "$files/snp.efi" | cut -f1)"
fi
want_marker=$(matrix_disk_marker "$files/disk.img.gz")
echo "   initramfs $(du -h "$files/initramfs" | cut -f1), the disk image's marker: $want_marker"

stage "choose the accelerator"
accel="${TINK_NETBOOT_ACCEL:-}"
if [ -z "$accel" ] && [ -n "$reuse" ] && [ -f "$reuse/accel" ]; then accel=$(cat "$reuse/accel"); fi
[ -n "$accel" ] || accel=$(demo_accel "$out/kvm-probe.log" "$files/vmlinuz")
case "$accel" in
  kvm) qemu_accel="-accel kvm -cpu host" ;;
  *) qemu_accel="-accel tcg" ;;
esac
echo "   QEMU accelerator: $accel"

if [ -n "$reuse" ]; then
  stage "action image: the registry storage of $reuse"
  cp -a "$reuse/registry" "$out/registry"
else
  stage "action image into docker-registry"
  matrix_action_image "$out/registry"
fi
if $arm64; then
  # The same actions on arm64's busybox, as tink/actions:demo-arm64.
  matrix_action_image "$out/registry" arm64 "$out/osie-arm64/cache/arm64-root/bin/busybox"
fi
demo_registry "$out/registry" "$bridge_ip:$registry_port" tink/actions

stage "Hardware, Template and a Workflow per machine"
{
  cat <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: osie-matrix}
---
apiVersion: tinkerbell.org/v1alpha2
kind: OSIE
metadata: {name: osie, namespace: osie-matrix}
spec:
  kernelUrl: $TINK_NETBOOT_URL/vmlinuz-x86_64
  initrdUrl: $TINK_NETBOOT_URL/initramfs-x86_64
EOF
  for tag in demo $($arm64 && echo demo-arm64); do
    cat <<EOF
---
apiVersion: tinkerbell.org/v1alpha2
kind: Template
metadata: {name: write-disk-$tag, namespace: osie-matrix}
spec:
  actions:
    - name: stream-image
      image: $bridge_ip:$registry_port/tink/actions:$tag
      cmd: /usr/local/bin/image2disk
      timeout: 300s
      env:
        IMG_URL: "{{ .image_url }}"
        DEST_DISK: "{{ index .Hardware.Disks 0 }}"
    - name: write-config
      image: $bridge_ip:$registry_port/tink/actions:$tag
      cmd: /usr/local/bin/writefile
      timeout: 120s
      env:
        PARTITION: "{{ formatPartition ( index .Hardware.Disks 0 ) 1 }}"
        DEST_PATH: tinkerbell.cfg
        CONTENTS: "machine={{ .machine }}"
    - name: reboot
      image: $bridge_ip:$registry_port/tink/actions:$tag
      cmd: /usr/local/bin/power
      args: [reboot]
      timeout: 60s
EOF
  done
  for i in "${!rows[@]}"; do
    read -r nic disk fw extra <<<"${rows[$i]}"
    n=$((i + 1))
    params="\"insecure_registries=$bridge_ip:$registry_port\""
    [ "$extra" = unbound-e1000 ] && params="$params, \"module_blacklist=e1000\""
    tag=demo
    # arm64's virt board has a PL011 serial port; the last console= names /dev/console
    [ "$extra" = arm64 ] && { params="$params, \"console=ttyAMA0,115200\""; tag=demo-arm64; }
    cat <<EOF
---
apiVersion: tinkerbell.org/v1alpha2
kind: Hardware
metadata: {name: mx-$n, namespace: osie-matrix}
spec:
  networkInterfaces:
    "52:54:00:98:00:$(printf '%02x' "$n")":
      dhcp:
        ip: $subnet.$((10 + n))
        netmask: 255.255.255.0
        gateway: $bridge_ip
        hostname: mx-$n
        leaseTime: 3600
  osie:
    osieRef: {name: osie}
    kernelParams: [$params]
  storageDevices: [$(matrix_disk_dev "$disk")]
---
apiVersion: tinkerbell.org/v1alpha2
kind: Workflow
metadata: {name: write-disk-mx-$n, namespace: osie-matrix}
spec:
  hardwareRef: {name: mx-$n}
  templateRef: {name: write-disk-$tag}
  templateData:
    image_url: $TINK_NETBOOT_URL/disk.img.gz
    machine: "mx-$n $nic $disk $fw"
  timeout: 15m
EOF
  done
} > "$out/objects.yaml"
nsx kubectl apply -f "$out/objects.yaml" >/dev/null
echo "   ${#rows[@]} machines: $(printf '[%s] ' "${rows[@]}")"

# run_row N: boots machine N, waits for it to stop, checks it; writes row-N/result (the ROW line)
# and row-N/detail (the modules, and what failed).
run_row() {
  # A subshell of its own (run with &): no exit on the first failed check, no cleanup trap.
  set +e
  trap - EXIT
  local n=$1 nic disk fw extra dir mac wf state start end secs mods problems="" note="" arch=x86_64 qemu=qemu-system-x86_64
  read -r nic disk fw extra <<<"${rows[$((n - 1))]}"
  dir="$out/row-$n"
  mkdir -p "$dir"
  mac="52:54:00:98:00:$(printf '%02x' "$n")"
  wf="write-disk-mx-$n"
  qemu-img create -q -f qcow2 "$dir/disk.qcow2" 1G
  local args
  # shellcheck disable=SC2206,SC2207 # word lists built above and by scripts/lib/matrix.sh
  args=($qemu_accel -m 2048 -smp 1 -nographic -no-reboot -boot order=nc
    -netdev "tap,id=n0,ifname=tap$n,script=no,downscript=no"
    $(matrix_nic_args "$nic" n0 "$mac" boot)
    $(matrix_disk_args "$disk" "$dir/disk.qcow2")
    -serial "file:$dir/serial.log" -monitor none -display none -pidfile "$dir/qemu.pid")
  if [ "$extra" = arm64 ]; then
    # An arm64 server: QEMU's virt board, a Cortex-A57, UEFI (AAVMF, with its own virtio-net
    # driver: no option ROM); its firmware asks DHCP as ARM64 UEFI (architecture 11) and gets
    # snp.efi. TCG: KVM cannot run another architecture.
    arch=aarch64
    qemu=qemu-system-aarch64
    cp "$aavmf_vars" "$dir/AAVMF_VARS.fd"
    # shellcheck disable=SC2207
    args=(-M virt -cpu cortex-a57 -accel tcg -m 2048 -smp 2 -nographic -no-reboot
      -drive "if=pflash,format=raw,readonly=on,file=$aavmf_code" -drive "if=pflash,format=raw,file=$dir/AAVMF_VARS.fd"
      -netdev "tap,id=n0,ifname=tap$n,script=no,downscript=no"
      -device "virtio-net-pci,netdev=n0,mac=$mac,bootindex=1,romfile="
      $(matrix_disk_args "$disk" "$dir/disk.qcow2")
      -serial "file:$dir/serial.log" -monitor none -display none -pidfile "$dir/qemu.pid")
  elif [ "$fw" = uefi ]; then
    cp "$ovmf_vars" "$dir/OVMF_VARS.fd"
    args+=(-drive "if=pflash,format=raw,readonly=on,file=$ovmf_code" -drive "if=pflash,format=raw,file=$dir/OVMF_VARS.fd")
    args=("${args[@]/%bootindex=1/bootindex=1$(matrix_uefi_rom "$nic")}")
  fi
  if [ "$extra" = unbound-e1000 ]; then
    # shellcheck disable=SC2207
    args+=(-netdev "user,id=n1,restrict=on" $(matrix_nic_args e1000 n1 "52:54:00:98:01:$(printf '%02x' "$n")" noboot))
  fi
  echo "$qemu ${args[*]}" > "$dir/qemu.cmd"
  start=$(date +%s)
  ip netns exec "$ns" timeout "$timeout_s" "$qemu" "${args[@]}" </dev/null >"$dir/qemu.log" 2>&1 \
    || problems="QEMU ended with status $? (timeout ${timeout_s}s?); "
  end=$(date +%s)
  rm -f "$dir/qemu.pid"
  secs=$((end - start))
  # power-on to agent: QEMU's start to the servers' first stream from this machine's agent
  local ts agent_secs=""
  ts=$(grep -ah "agent stream opened agent_id=$mac" "$out"/stack/logs/server-*.log 2>/dev/null | awk '{print $1}' | sort | head -n 1)
  [ -n "$ts" ] && agent_secs=$(python3 -c "import datetime as d,sys; print(round(d.datetime.fromisoformat(sys.argv[1].replace('Z','+00:00')).timestamp() - $start, 1))" "$ts")
  state=$(nsx kubectl get workflow "$wf" -n osie-matrix -o jsonpath='{.status.state}' 2>/dev/null || true)
  [ "$state" = Succeeded ] || problems="${problems}the workflow is ${state:-without state}; "
  if [ "$state" = Succeeded ]; then
    qemu-img convert -O raw "$dir/disk.qcow2" "$dir/disk.raw"
    local got_marker got_cfg
    got_marker=$(mtype -i "$dir/disk.raw@@1M" ::marker.txt 2>/dev/null || true)
    got_cfg=$(mtype -i "$dir/disk.raw@@1M" ::tinkerbell.cfg 2>/dev/null || true)
    rm -f "$dir/disk.raw"
    [ "$got_marker" = "$want_marker" ] || problems="${problems}the disk's marker is '$got_marker'; "
    [ "$got_cfg" = "machine=mx-$n $nic $disk $fw" ] || problems="${problems}the disk's tinkerbell.cfg is '$got_cfg'; "
  fi
  rm -f "$dir/disk.qcow2"
  mods=$(matrix_modules "$dir/serial.log")
  if [ -z "$mods" ]; then
    problems="${problems}the OSIE printed no module list; "
  else
    local extra_models=""
    [ "$extra" = unbound-e1000 ] && extra_models=e1000
    # shellcheck disable=SC2086
    problems="$problems$(matrix_check_modules "$mods" "$nic" "$disk" $extra_models | sed 's/$/; /' | tr -d '\n')"
  fi
  if [ "$extra" = unbound-e1000 ]; then
    # osie/init names the NIC without a driver: on the console, and by syslog once the network is up.
    local want="no driver for PCI network controller [0-9a-f:.]+ 8086:100e \\(class 020000\\)"
    console_text "$dir/serial.log" | grep -E "$want" >/dev/null || problems="${problems}the console does not name the e1000 without a driver; "
    nsx "$bins/tinkctl" hardware logs "mx-$n" -n osie-matrix --tail 5000 >"$dir/syslog.txt" 2>&1 || true
    if grep -qE "$want" "$dir/syslog.txt"; then
      note="    by syslog (tinkctl hardware logs): $(grep -m1 -oE "$want" "$dir/syslog.txt")"
    else
      problems="${problems}syslog (tinkctl hardware logs mx-$n) does not name the e1000 without a driver; "
    fi
  fi
  local result=PASS
  [ -z "$problems" ] || result=FAIL
  {
    echo "    modules: ${mods:-none}"
    [ -z "$agent_secs" ] || echo "    agent connected ${agent_secs} s after power-on"
    console_text "$dir/serial.log" | sed -n 's/^tink-osie: \(drivers loaded by modalias in .*\)/    \1/p' | head -n 1
    [ -z "$note" ] || echo "$note"
    [ -z "$problems" ] || echo "    FAILED: $problems"
  } >> "$dir/detail"
  echo "ROW nic=$nic disk=$disk fw=$fw arch=$arch secs=$secs result=$result" > "$dir/result"
}

stage "the machines, $jobs at a time ($accel)"
# Only the rows' own processes are waited for: the registry runs in the background too.
row_pids=()
running_rows() { jobs -rp | grep -xF -f <(printf '%s\n' "${row_pids[@]:-none}") || true; }
for i in "${!rows[@]}"; do
  while running=$(running_rows) && [ "$(echo "$running" | grep -c .)" -ge "$jobs" ]; do
    # shellcheck disable=SC2086 # one pid a word
    wait -n $running 2>/dev/null || sleep 1
  done
  echo "   $(date -u +%H:%M:%S) machine mx-$((i + 1)): ${rows[$i]}"
  run_row $((i + 1)) &
  row_pids+=($!)
done
for p in "${row_pids[@]}"; do wait "$p" || true; done

stage "results"
failed=0
for i in "${!rows[@]}"; do
  dir="$out/row-$((i + 1))"
  if [ -f "$dir/result" ]; then
    cat "$dir/result"
    [ -f "$dir/detail" ] && cat "$dir/detail"
    grep -q 'result=PASS' "$dir/result" || failed=$((failed + 1))
  else
    read -r nic disk fw _ <<<"${rows[$i]}"
    echo "ROW nic=$nic disk=$disk fw=$fw arch=x86_64 secs=0 result=FAIL"
    echo "    FAILED: the row's run ended without a result"
    failed=$((failed + 1))
  fi
  if ! grep -q 'result=PASS' "$dir/result" 2>/dev/null && [ -f "$dir/serial.log" ]; then
    echo "    --- last lines of $dir/serial.log"
    console_text "$dir/serial.log" | grep -av '^\s*$' | tail -n 25 | sed 's/^/    /'
  fi
done
summary
if [ "$failed" -gt 0 ]; then
  echo "osie matrix: $failed of ${#rows[@]} machine models FAILED (logs in $out)"
  guest_crash_exit "$out"/row-*/serial.log
  exit 1
fi
ok=1
echo "osie matrix: all ${#rows[@]} machine models passed (logs in $out)"
