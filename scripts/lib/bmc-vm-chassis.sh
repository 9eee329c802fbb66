#!/bin/sh
# ipmi_sim's chassis_control program for the BMC-powered VM of scripts/netboot-demo.sh --bmc ipmi
# (scripts/lib/bmc-vm.sh writes the folder it works in and starts ipmi_sim with BMC_VM_DIR set).
#
# OpenIPMI's ipmi_sim answers IPMI over LAN and hands the chassis to this program:
#   get power boot        prints "power:1" (QEMU runs) or "power:0", "boot:<device>"
#   set boot pxe          stores the boot device (`ipmitool chassis bootdev pxe`)
#   set power 1           powers on: starts QEMU with the boot device the BMC holds, as a
#                         one-time boot (`-boot once=n,order=nc` for pxe: SeaBIOS ignores IPMI
#                         boot flags, so the BMC's flag becomes QEMU's own one-time boot)
#   set power 0           hard off: QEMU is killed
#   set reset 1           hard reset (QMP system_reset), set shutdown 1: ACPI power button
# (ipmi_sim's `startcmd` would manage the VM process itself, but with a startcmd the simulator
# answers no boot options: a chassis_control program is the only way it stores them, and it
# then owns power too.)
#
# The machine's own firmware order is network, then disk (`order=nc`): a machine whose netboot
# is turned off gets a lease without boot information and falls through to its disk.
#
# Every change is logged in $BMC_VM_DIR/events.log; each power-on writes serial-<n>.log.
set -u
d=${BMC_VM_DIR:?BMC_VM_DIR is not set}
pidf="$d/qemu.pid"

log() { echo "$(date -u +%H:%M:%S) $*" >> "$d/events.log"; }
qemu_pid() {
  [ -f "$pidf" ] || return 1
  p=$(cat "$pidf" 2>/dev/null)
  [ -n "$p" ] && kill -0 "$p" 2>/dev/null && tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | grep -q qemu-system \
    && echo "$p"
}
qmp() { # one QMP command on QEMU's monitor socket
  python3 - "$d/qmp.sock" "$1" <<'PY'
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
f = s.makefile("rw")
f.readline()
for cmd in ("qmp_capabilities", sys.argv[2]):
    f.write(json.dumps({"execute": cmd}) + "\n"); f.flush()
    while True:
        r = json.loads(f.readline())
        if "return" in r or "error" in r:
            break
    if "error" in r:
        sys.exit(f"{cmd}: {r['error']}")
PY
}
power_on() {
  if qemu_pid >/dev/null; then return 0; fi
  n=$(( $(cat "$d/power-ons" 2>/dev/null || echo 0) + 1 ))
  echo "$n" > "$d/power-ons"
  boot=$(cat "$d/boot" 2>/dev/null || echo none)
  case "$boot" in
    pxe) spec="once=n,order=nc" ;;
    disk) spec="once=c,order=nc" ;;
    cdrom) spec="once=d,order=nc" ;;
    *) spec="order=nc" ;;
  esac
  log "power on #$n: the BMC holds boot device '$boot': qemu -boot $spec"
  rm -f "$pidf"
  # -daemonize: QEMU is running (or has failed) when this returns; ipmi_sim waits for us.
  if ! "$d/qemu.sh" "$spec" "$d/../serial-$n.log" >"$d/qemu-$n.log" 2>&1 </dev/null; then
    log "power on #$n failed: $(tail -n 3 "$d/qemu-$n.log" | tr '\n' ' ')"
    return 1
  fi
  log "power on #$n: QEMU pid $(cat "$pidf" 2>/dev/null)"
}
power_off() {
  p=$(qemu_pid) || return 0
  log "power off: QEMU pid $p killed"
  kill "$p" 2>/dev/null
  i=0
  while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  kill -9 "$p" 2>/dev/null
  rm -f "$pidf"
}

op=${1:-}; [ $# -gt 0 ] && shift
case "$op" in
get)
  for k in "$@"; do
    case "$k" in
      power) if qemu_pid >/dev/null; then echo "power:1"; else echo "power:0"; fi ;;
      boot) echo "boot:$(cat "$d/boot" 2>/dev/null || echo none)" ;;
      *) echo "$k:$(cat "$d/$k" 2>/dev/null || echo 0)" ;;
    esac
  done ;;
set)
  while [ $# -ge 2 ]; do
    k=$1; v=$2; shift 2
    echo "$k=$v" >> "$d/requests"
    case "$k" in
      power) if [ "$v" = 1 ]; then power_on || exit 1; else power_off; fi ;;
      boot) printf '%s' "$v" > "$d/boot"; log "boot device set: $v" ;;
      reset)
        if qemu_pid >/dev/null; then log "reset"; qmp system_reset || exit 1; fi ;;
      shutdown)
        if qemu_pid >/dev/null; then log "ACPI power button"; qmp system_powerdown || exit 1; fi ;;
      *) printf '%s' "$v" > "$d/$k" ;;
    esac
  done ;;
*) echo "usage: $0 get KEY... | set KEY VALUE..." >&2; exit 2 ;;
esac
