# A virtual machine powered by its BMC, for scripts/netboot-demo.sh --bmc redfish|ipmi (sourced).
#
# The VM starts powered off; only its emulated BMC turns it on, in the demo's network namespace:
#   redfish  sushy-tools' libvirt driver (TLS with this run's CA, an auth file) in front of a
#            libvirtd and virtlogd started by hand (scripts/lib/bmc-vm-libvirtd.sh: no systemd,
#            a private mount namespace). The domain's NIC is on the demo's bridge and its own
#            boot order is the disk; sushy's boot override (a PATCH of Boot) rewrites the
#            domain's per-device order, network first then disk, and ComputerSystem.Reset
#            starts and stops the domain. sushy-tools keeps the override (it documents that
#            libvirt has only "Continuous"): every later boot tries the network first and, once
#            netboot is off, falls through to the disk.
#   ipmi     OpenIPMI's ipmi_sim (lanplus, an admin user) whose chassis is
#            scripts/lib/bmc-vm-chassis.sh: power on starts QEMU with the boot device the BMC
#            holds as QEMU's one-time boot (`-boot once=n,order=nc` for pxe), power off kills
#            it, power status is whether it runs.
# Either way the VM runs without -no-reboot: the workflow's last action reboots it and it
# comes back through the network (refused once netboot is off) to its disk.
#
# Expects from the caller: ns, out, bridge_ip, vm_mac, qemu_accel (array), accel, repo, nsx.
# Sets bmc_kind, bmc_dir, bmc_host, bmc_port, bmc_user, bmc_password.

bmc_user=admin
bmc_password="bmc-$(head -c 9 /dev/urandom | base64 | tr -d '/+=')"
bmc_dir=""
bmc_kind=""
bmc_pids=()
sushy_venv=/opt/sushy-tools
bmc_seabios=/usr/share/seabios/bios-256k.bin
bmc_domain=demo-vm

# bmc_vm_prepare KIND: checks the tools, makes the BMC's folder and (Redfish) its certificate,
# and exports what the stack's BMC controller needs (its CA file; BMCs only on the bridge's
# network). Before `tinkctl dev up`.
bmc_vm_prepare() {
  bmc_kind=$1
  bmc_dir="$out/bmc"
  mkdir -p "$bmc_dir"
  case "$bmc_kind" in
    redfish)
      for tool in libvirtd virtlogd virsh openssl unshare; do
        command -v "$tool" >/dev/null || { echo "error: $tool missing: run scripts/install-deps.sh" >&2; return 1; }
      done
      [ -x "$sushy_venv/bin/sushy-emulator" ] && "$sushy_venv/bin/python3" -c 'import libvirt' 2>/dev/null \
        || { echo "error: sushy-tools with libvirt-python missing in $sushy_venv: run scripts/install-deps.sh" >&2; return 1; }
      bmc_host=$bridge_ip
      bmc_port=8443
      (
        cd "$bmc_dir"
        printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:%s\n' "$bmc_host" > leaf.ext
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=netboot demo BMC CA" 2>/dev/null
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout key.pem -out leaf.csr -subj "/CN=$bmc_host" 2>/dev/null
        openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 -extfile leaf.ext 2>/dev/null
      ) || { echo "error: cannot make the BMC's certificate" >&2; return 1; }
      export TINK_BMC_CA_FILE="$bmc_dir/ca.pem"
      ;;
    ipmi)
      for tool in ipmi_sim ipmitool; do
        command -v "$tool" >/dev/null || { echo "error: $tool missing: run scripts/install-deps.sh" >&2; return 1; }
      done
      bmc_host=$bridge_ip
      bmc_port=6230
      ;;
    *) echo "error: --bmc takes redfish or ipmi, not '$bmc_kind'" >&2; return 1 ;;
  esac
  export TINK_BMC_ALLOWED_NETWORKS="${bridge_ip%.*}.0/24"
  # The Machine's power state refreshed often enough to be watched during the run.
  export TINK_BMC_POWER_POLL_SECONDS=5
}

# bmc_vm_start DISK: the VM on DISK (qcow2), powered off, behind its BMC; returns when the BMC
# answers (and reports the VM off).
bmc_vm_start() {
  local disk=$1
  case "$bmc_kind" in
    redfish) bmc_vm_start_redfish "$disk" ;;
    ipmi) bmc_vm_start_ipmi "$disk" ;;
  esac
}

bmc_virsh() { ip netns exec "$ns" virsh -q -c "qemu:///system?socket=$bmc_dir/libvirt/run/libvirt-sock" "$@"; }

bmc_vm_start_redfish() {
  local disk=$1 i domtype=qemu cpu=""
  ip netns exec "$ns" unshare -m --propagation private sh "$repo/scripts/lib/bmc-vm-libvirtd.sh" "$bmc_dir/libvirt" \
    "$repo/target/bmc-vm-libvirt-cache" >"$bmc_dir/libvirtd.out" 2>&1 &
  bmc_pids+=($!)
  for i in $(seq 1 100); do
    bmc_virsh version >/dev/null 2>&1 && break
    sleep 0.2
  done
  bmc_virsh version >/dev/null || { echo "error: libvirtd did not start:" >&2; cat "$bmc_dir/libvirtd.out" "$bmc_dir/libvirt/log/libvirtd.log" >&2 2>/dev/null; return 1; }
  if [ "$accel" = kvm ]; then domtype=kvm; cpu="<cpu mode='host-passthrough'/>"; fi
  cat > "$bmc_dir/domain.xml" <<EOF
<domain type='$domtype'>
  <name>$bmc_domain</name>
  <memory unit='MiB'>2048</memory>
  <vcpu>2</vcpu>
  $cpu
  <os><type arch='x86_64' machine='pc'>hvm</type><loader type='rom' readonly='yes'>$bmc_seabios</loader><boot dev='hd'/></os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>$(command -v qemu-system-x86_64)</emulator>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='$disk'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='bridge'>
      <source bridge='br0'/>
      <mac address='$vm_mac'/>
      <model type='virtio'/>
    </interface>
    <serial type='file'><source path='$out/serial-1.log'/><target port='0'/></serial>
    <console type='file'><source path='$out/serial-1.log'/><target type='serial' port='0'/></console>
  </devices>
</domain>
EOF
  bmc_virsh define "$bmc_dir/domain.xml" >/dev/null || return 1
  # sushy-tools accepts only bcrypt entries in its auth file.
  "$sushy_venv/bin/python3" -c 'import bcrypt, sys; print(sys.argv[1] + ":" + bcrypt.hashpw(sys.argv[2].encode(), bcrypt.gensalt(5)).decode())' \
    "$bmc_user" "$bmc_password" > "$bmc_dir/htpasswd"
  mkdir -p "$bmc_dir/sushy-state"
  cat > "$bmc_dir/emulator.conf" <<EOF
SUSHY_EMULATOR_LISTEN_IP = '$bmc_host'
SUSHY_EMULATOR_LISTEN_PORT = $bmc_port
SUSHY_EMULATOR_SSL_CERT = '$bmc_dir/cert.pem'
SUSHY_EMULATOR_SSL_KEY = '$bmc_dir/key.pem'
SUSHY_EMULATOR_AUTH_FILE = '$bmc_dir/htpasswd'
SUSHY_EMULATOR_STATE_DIR = '$bmc_dir/sushy-state'
SUSHY_EMULATOR_LIBVIRT_URI = 'qemu:///system?socket=$bmc_dir/libvirt/run/libvirt-sock'
# Legacy boot is SeaBIOS, named (libvirt finds no firmware descriptor for it here, and sushy
# writes a loader element for every boot mode PATCH).
SUSHY_EMULATOR_BOOT_LOADER_MAP = {'Legacy': {'x86_64': '$bmc_seabios'}, 'UEFI': {'x86_64': '/usr/share/OVMF/OVMF_CODE.fd'}}
EOF
  ip netns exec "$ns" "$sushy_venv/bin/sushy-emulator" --config "$bmc_dir/emulator.conf" >"$bmc_dir/sushy.log" 2>&1 &
  bmc_pids+=($!)
  for i in $(seq 1 100); do
    bmc_redfish_system >/dev/null 2>&1 && break
    sleep 0.2
  done
  bmc_redfish_system >/dev/null || { echo "error: sushy-emulator did not answer:" >&2; tail -n 20 "$bmc_dir/sushy.log" >&2; return 1; }
}

bmc_vm_start_ipmi() {
  local disk=$1
  # The chassis program's QEMU: $1 the -boot value, $2 the serial log.
  cat > "$bmc_dir/qemu.sh" <<EOF
#!/bin/sh
exec qemu-system-x86_64 ${qemu_accel[*]} -m 2048 -smp 2 -display none -monitor none \\
  -daemonize -pidfile "$bmc_dir/qemu.pid" -qmp "unix:$bmc_dir/qmp.sock,server=on,wait=off" \\
  -boot "\$1" \\
  -drive file="$disk",format=qcow2,if=virtio \\
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \\
  -device virtio-net-pci,netdev=n0,mac="$vm_mac" \\
  -serial file:"\$2"
EOF
  chmod +x "$bmc_dir/qemu.sh"
  cat > "$bmc_dir/lan.conf" <<EOF
name "$bmc_domain"
set_working_mc 0x20
  startlan 1
    addr $bmc_host $bmc_port
    priv_limit admin
    allowed_auths_callback md5
    allowed_auths_user md5
    allowed_auths_operator md5
    allowed_auths_admin md5
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "$repo/scripts/lib/bmc-vm-chassis.sh"
  user 2 true "$bmc_user" "$bmc_password" admin 10 md5
EOF
  printf 'mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\nmc_enable 0x20\n' > "$bmc_dir/sim.emu"
  mkdir -p "$bmc_dir/sim-state"
  # The chassis program's folder, inherited by it through ipmi_sim.
  (cd "$bmc_dir" && BMC_VM_DIR="$bmc_dir" exec ip netns exec "$ns" ipmi_sim -c lan.conf -f sim.emu -s sim-state -n) \
    >"$bmc_dir/ipmi_sim.log" 2>&1 &
  bmc_pids+=($!)
  for i in $(seq 1 50); do
    bmc_ipmitool -N 1 -R 1 chassis power status >/dev/null 2>&1 && break
    sleep 0.2
  done
  bmc_ipmitool chassis power status >/dev/null || { echo "error: ipmi_sim did not answer:" >&2; tail -n 20 "$bmc_dir/ipmi_sim.log" >&2; return 1; }
}

bmc_ipmitool() { IPMITOOL_PASSWORD="$bmc_password" ip netns exec "$ns" ipmitool -I lanplus -C 3 -H "$bmc_host" -p "$bmc_port" -U "$bmc_user" -E "$@"; }
bmc_curl() { ip netns exec "$ns" curl -sf --cacert "$bmc_dir/ca.pem" -u "$bmc_user:$bmc_password" "$@"; }
# The Redfish System of the VM, as JSON (the emulator's only System).
bmc_redfish_system() {
  local base="https://$bmc_host:$bmc_port" member
  member=$(bmc_curl "$base/redfish/v1/Systems" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Members"][0]["@odata.id"])') || return 1
  bmc_curl "$base$member"
}

# bmc_vm_state: "power On, boot Pxe" as the emulator itself reports it (not through the stack):
# Redfish: the System's PowerState and Boot override; IPMI: chassis power status and the boot
# device selector of boot parameter 5.
bmc_vm_state() {
  case "$bmc_kind" in
    redfish)
      bmc_redfish_system | python3 -c '
import json, sys
s = json.load(sys.stdin)
b = s.get("Boot", {})
print("power %s, boot override %s (%s, %s)" % (s.get("PowerState"), b.get("BootSourceOverrideTarget"),
      b.get("BootSourceOverrideEnabled"), b.get("BootSourceOverrideMode")))'
      ;;
    ipmi)
      local power sel
      power=$(bmc_vm_power)
      sel=$(bmc_ipmitool chassis bootparam get 5 | sed -n 's/.*Boot Device Selector : //p')
      echo "power $power, boot device $sel"
      ;;
  esac
}

# bmc_vm_power: On or Off as the emulator reports it.
bmc_vm_power() {
  case "$bmc_kind" in
    redfish) bmc_redfish_system | python3 -c 'import json, sys; print(json.load(sys.stdin)["PowerState"])' ;;
    ipmi) bmc_ipmitool chassis power status | awk '{print $NF}' | sed 's/^on$/On/; s/^off$/Off/' ;;
  esac
}

# bmc_vm_qemu_pid: the VM's QEMU process, when it runs.
bmc_vm_qemu_pid() {
  local f
  case "$bmc_kind" in
    redfish) f="$bmc_dir/libvirt/run/qemu/$bmc_domain.pid" ;;
    ipmi) f="$bmc_dir/qemu.pid" ;;
  esac
  [ -f "$f" ] || return 1
  local p
  p=$(cat "$f" 2>/dev/null)
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q qemu-system && echo "$p"
}

# bmc_vm_boot_config: how the running QEMU boots: its -boot and bootindex options.
bmc_vm_boot_config() {
  local p
  p=$(bmc_vm_qemu_pid) || { echo "QEMU is not running"; return 1; }
  tr '\0' '\n' < "/proc/$p/cmdline" | grep -E '^(once|order|strict)=|bootindex' \
    | sed -E 's/.*"driver":"([^"]*)".*"bootindex":([0-9]+).*/\1 bootindex=\2/' | paste -sd ' ' -
}

# bmc_vm_objects NAMESPACE: the Machine and its auth Secret (YAML) for the stack.
bmc_vm_objects() {
  local nsname=$1 options
  case "$bmc_kind" in
    redfish) options="preferredOrder: [gofish]
      redfish: {port: $bmc_port}" ;;
    ipmi) options="preferredOrder: [ipmitool]
      ipmitool: {port: $bmc_port, cipherSuite: \"3\"}" ;;
  esac
  cat <<EOF
apiVersion: v1
kind: Secret
metadata: {name: demo-vm-bmc, namespace: $nsname}
type: kubernetes.io/basic-auth
stringData:
  username: $bmc_user
  password: $bmc_password
---
apiVersion: bmc.tinkerbell.org/v1alpha1
kind: Machine
metadata: {name: demo-vm, namespace: $nsname}
spec:
  connection:
    host: $bmc_host
    port: $bmc_port
    authSecretRef: {name: demo-vm-bmc, namespace: $nsname}
    insecureTLS: false
    providerOptions:
      $options
EOF
}

# bmc_vm_log: what the emulator side did (for the end of a run, or a failure). Never fails.
bmc_vm_log() {
  bmc_vm_log_lines 2>/dev/null || true
}
bmc_vm_log_lines() {
  case "$bmc_kind" in
    redfish)
      sed 's/\x1b\[[0-9;]*m//g' "$bmc_dir/sushy.log" 2>/dev/null | grep -aE '"(PATCH|POST) ' | tail -n 20
      # libvirtd's own errors about this domain (not its start-up complaints: no DBus, no dnsmasq, no DMI)
      grep -a -E ' error : ' "$bmc_dir/libvirt/log/libvirtd.log" 2>/dev/null \
        | grep -av -E 'dnsmasq|DBus|system bus|DMI|dmidecode|udevGetDMIData' | tail -n 5 ;;
    ipmi) cat "$bmc_dir/events.log" 2>/dev/null ;;
  esac
}

# bmc_vm_stop: the VM off and the emulator stopped (idempotent; for the cleanup trap).
bmc_vm_stop() {
  [ -n "$bmc_dir" ] || return 0
  local p
  # (|| true throughout: this runs in EXIT traps, perhaps under set -e)
  if [ "$bmc_kind" = redfish ] && [ -S "$bmc_dir/libvirt/run/libvirt-sock" ]; then
    bmc_virsh destroy "$bmc_domain" >/dev/null 2>&1 || true
    bmc_virsh undefine "$bmc_domain" >/dev/null 2>&1 || true
  fi
  if p=$(bmc_vm_qemu_pid); then kill "$p" 2>/dev/null || true; fi
  for p in "${bmc_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${bmc_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  bmc_pids=()
}
