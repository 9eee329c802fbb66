#!/usr/bin/env bash
# Where does a guest stop under this machine's KVM? (issue 34, item 4; the evidence table is in
# osie/README.md, "KVM on this machine kind".) Boots, one VM at a time, a series of small guests
# under KVM (and a few under TCG as controls), each for a bounded time, and records for each:
# whether the marker line KVM-PROBE-OK reached the serial console, after how many seconds, the
# last serial line, the firmware's debug port (0x402), QEMU's -d guest_errors,cpu_reset log, and,
# for a guest still there at the deadline or stopped by a KVM internal error, the QEMU monitor's
# `info status`, `info registers` and `x/4i $pc`, taken twice a second apart (halted, looping, or
# stuck on one instruction?).
#
#   sudo bash scripts/kvm-probe.sh [--only REGEX] [--list]
#
# The guests:
#   - mb: a small multiboot kernel assembled here (binutils) that prints a line per step of what
#     a Linux boot does first: 32-bit protected mode (S1), long mode (S2), a jump to the top
#     2 GiB of the address space where x86-64 Linux links itself, 0xffffffff80000000 + phys
#     (S3), an exception through its own IDT (S4: int3 or ud2), then the marker and an exit
#     through isa-debug-exit; or, instead of S3/S4, a loop of 2^24 iterations that times the
#     guest's speed.
#   - Debian kernels (apt-get download, unpacked with dpkg-deb into target/kvm-probe/cache, never
#     installed): linux-image-amd64 (the OSIE's), linux-image-cloud-amd64, and the oldest
#     linux-image-amd64 the package lists hold (bookworm's point release), with an initramfs of
#     busybox-static whose /init prints the marker and powers off. Booted by SeaBIOS, OVMF
#     (-kernel through fw_cfg and the EFI stub) or qboot (microvm), on several CPU models,
#     irqchip modes and kernel parameters; and the OSIE's kernel as a vmlinux ELF through QEMU's
#     PVH loader (no decompressor), with 120-300 s to show how far it gets.
#   - firmware alone (no kernel): does SeaBIOS / OVMF itself run and print under KVM?
#
# A whole run takes about 30 minutes (the three PVH probes 12 of them); --only picks probes.
# Output: target/kvm-probe/runs/NAME/{serial.log,debugcon.log,qemu.log,qemu-d.log,monitor.txt,
# cmd,result.tsv}, the latest line of every probe run so far in target/kvm-probe/results.tsv
# (also printed), the host's new kvm messages in target/kvm-probe/host-dmesg.txt and its KVM
# module facts in target/kvm-probe/host.txt. Needs root (/dev/kvm, apt-get download) and the
# Debian packages qemu-system-x86, ovmf, busybox-static, cpio, binutils, bc, python3.
# Environment: KVM_PROBE_TIMEOUT (seconds per probe without its own, default 40).
set -euo pipefail
cd "$(dirname "$0")/.."
only=""
list=false
while [ $# -gt 0 ]; do
  case "$1" in
    --only) only=$2; shift 2 ;;
    --list) list=true; shift ;;
    *) echo "usage: $0 [--only REGEX] [--list]" >&2; exit 2 ;;
  esac
done
say() { echo "kvm-probe: $*" >&2; }
work=$(pwd)/target/kvm-probe
cache=$work/cache
mkdir -p "$cache" "$work/runs"
for tool in qemu-system-x86_64 busybox cpio as ld bc file python3 dpkg-deb apt-get; do
  command -v "$tool" >/dev/null || { say "missing $tool (apt-get install qemu-system-x86 ovmf busybox-static cpio binutils bc file python3)"; exit 1; }
done
ovmf_code=/usr/share/OVMF/OVMF_CODE_4M.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS_4M.fd

# The probes: NAME|GUEST|FIRMWARE|MACHINE|CPU|EXTRA QEMU FLAGS|KERNEL PARAMETERS[|SECONDS]
# GUEST: mb (the multiboot test), none (firmware only), or a kernel key (amd64, cloud, amd64old;
# amd64pvh is amd64's vmlinux ELF, decompressed here, which QEMU boots through PVH: no
# decompressor). SECONDS overrides KVM_PROBE_TIMEOUT.
# FIRMWARE: seabios, ovmf, qboot (microvm's default). ACCEL comes from the name: tcg-* is TCG.
base="console=ttyS0 earlyprintk=ttyS0,keep panic=-1"
probes=(
  # Control: the probe itself works (TCG).
  "tcg-amd64-seabios-pc|amd64|seabios|pc|qemu64||$base"
  "tcg-mb-seabios-pc|mb|seabios|pc|qemu64||a"
  "tcg-mb-seabios-pc-loop|mb|seabios|pc|qemu64||l"
  # The firmware alone under KVM.
  "fw-seabios-pc|none|seabios|pc|kvm64||"
  "fw-ovmf-q35|none|ovmf|q35|kvm64||"
  # The bare CPU modes under KVM, step by step.
  "mb-seabios-pc|mb|seabios|pc|kvm64||a"
  "mb-seabios-pc-int3|mb|seabios|pc|kvm64||i"
  "mb-seabios-pc-ud2|mb|seabios|pc|kvm64||u"
  "mb-seabios-pc-loop|mb|seabios|pc|kvm64||l"
  "mb-seabios-pc-max|mb|seabios|pc|max||a"
  # The OSIE's kernel (and others) under KVM.
  "tcg-amd64pvh-pvh-pc|amd64pvh|seabios|pc|qemu64||$base"
  "amd64pvh-pvh-pc-kvm64|amd64pvh|seabios|pc|kvm64||$base|120"
  "amd64pvh-pvh-pc-kvm64-nocx16|amd64pvh|seabios|pc|kvm64,-cx16||$base|300"
  "amd64pvh-pvh-pc-kvm64-nocx16-noxsave|amd64pvh|seabios|pc|kvm64,-cx16||$base noxsave|300"
  "amd64-seabios-pc-host|amd64|seabios|pc|host||$base"
  "amd64-seabios-pc-hostnoarch|amd64|seabios|pc|host,-arch-capabilities||$base"
  "amd64-seabios-pc-kvm64|amd64|seabios|pc|kvm64||$base"
  "amd64-seabios-pc-qemu64|amd64|seabios|pc|qemu64||$base"
  "amd64-seabios-pc-max|amd64|seabios|pc|max||$base"
  "amd64-seabios-q35-kvm64|amd64|seabios|q35|kvm64||$base"
  "amd64-qboot-microvm-kvm64|amd64|qboot|microvm|kvm64||$base"
  "amd64-ovmf-q35-kvm64|amd64|ovmf|q35|kvm64||$base"
  "amd64-ovmf-pc-kvm64|amd64|ovmf|pc|kvm64||$base"
  "amd64-seabios-pc-kvm64-irqoff|amd64|seabios|pc|kvm64|-accel kvm,kernel-irqchip=off|$base"
  "amd64-seabios-pc-kvm64-irqsplit|amd64|seabios|pc|kvm64|-accel kvm,kernel-irqchip=split|$base"
  "amd64-seabios-pc-kvm64-params1|amd64|seabios|pc|kvm64||$base nokaslr noapic no-kvmclock clocksource=tsc tsc=unstable mitigations=off"
  "amd64-seabios-pc-kvm64-params2|amd64|seabios|pc|kvm64||$base nokaslr lapic idle=poll nopti nosmp"
  "cloud-seabios-pc-kvm64|cloud|seabios|pc|kvm64||$base"
  "cloud-ovmf-q35-kvm64|cloud|ovmf|q35|kvm64||$base"
  "cloud-qboot-microvm-kvm64|cloud|qboot|microvm|kvm64||$base"
  "amd64old-seabios-pc-kvm64|amd64old|seabios|pc|kvm64||$base"
)
if $list; then printf '%s\n' "${probes[@]}"; exit 0; fi
[ -w /dev/kvm ] || { say "/dev/kvm is not writable (run as root on a host with KVM)"; exit 1; }

# kernel_pkg KEY: the versioned linux-image package for KEY.
kernel_pkg() {
  case "$1" in
    amd64) apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}' ;;
    cloud) apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}' ;;
    # The oldest linux-image-amd64 the package lists still hold (the bookworm point release
    # before the security updates).
    amd64old)
      local v
      v=$(apt-cache madison linux-image-amd64 2>/dev/null | awk '{print $3}' | sort -V | head -1)
      [ -n "$v" ] && apt-cache show "linux-image-amd64=$v" 2>/dev/null \
        | awk -F'[ ,]+' '/^Depends:/ {for (i=2;i<=NF;i++) if ($i ~ /^linux-image-[0-9]/) {print $i; exit}}' ;;
  esac
}
# kernel_path KEY: the vmlinuz of KEY, downloaded and unpacked into the cache when missing.
kernel_path() {
  local pkg ver root
  if [ "$1" = amd64pvh ]; then
    local z
    z=$(kernel_path amd64) || return 1
    if [ ! -f "$z.vmlinux" ]; then
      python3 - "$z" "$z.vmlinux" <<'EOF'
import lzma, sys
d = open(sys.argv[1], "rb").read()
i = d.find(b"\xfd7zXZ\x00")
out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(d[i:])
assert out[:4] == b"\x7fELF", "no ELF in the xz payload"
open(sys.argv[2], "wb").write(out)
EOF
    fi
    echo "$z.vmlinux"
    return 0
  fi
  pkg=$(kernel_pkg "$1")
  if [ -z "$pkg" ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    pkg=$(kernel_pkg "$1")
  fi
  [ -n "$pkg" ] || { say "cannot resolve the kernel package for $1"; return 1; }
  ver=${pkg#linux-image-}
  root=$cache/$pkg
  if [ ! -f "$root/boot/vmlinuz-$ver" ]; then
    say "fetching $pkg"
    rm -rf "$root" && mkdir -p "$root"
    (cd "$cache" && rm -f "$pkg"_*.deb && apt-get download -q "$pkg" >/dev/null 2>&1) || { say "apt-get download $pkg failed"; return 1; }
    dpkg-deb --fsys-tarfile "$cache/$pkg"_*.deb | tar -x -C "$root" ./boot
  fi
  echo "$root/boot/vmlinuz-$ver"
}

# The initramfs: busybox-static and an /init that prints the marker and powers off.
initrd=$cache/probe-initrd.cpio.gz
if [ ! -f "$initrd" ]; then
  file -L "$(command -v busybox)" | grep -q 'statically linked' || { say "busybox is not static (install busybox-static)"; exit 1; }
  d=$cache/initrd-root
  rm -rf "$d" && mkdir -p "$d"/{bin,proc,sys,dev}
  cp "$(command -v busybox)" "$d/bin/busybox"
  ln -s busybox "$d/bin/sh"
  cat > "$d/init" <<'EOF'
#!/bin/sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
up=$(/bin/busybox cut -d' ' -f1 /proc/uptime)
cs=$(/bin/busybox cat /sys/devices/system/clocksource/clocksource0/current_clocksource)
echo "KVM-PROBE-OK kernel $(/bin/busybox uname -r) uptime ${up}s clocksource $cs" > /dev/console
/bin/busybox poweroff -f
EOF
  chmod +x "$d/init"
  (cd "$d" && find . | cpio -o -H newc --quiet | gzip -9) > "$initrd"
fi

# The multiboot test kernel. The cmdline's last character picks the steps after long mode:
# 'a' the jump to the top 2 GiB then int3 through the IDT, 'i' int3 through the IDT, 'u' ud2
# (#UD) through the IDT, 'l' a loop of 2^24 iterations (no IDT), to time the guest's speed.
mb=$cache/mbtest.elf
if [ ! -f "$mb" ]; then
  cat > "$cache/mbtest.S" <<'EOF'
	.set COM1, 0x3f8
	.macro puts32 s
	mov $\s, %esi
	call puts32
	.endm
	.macro puts64 s
	lea \s(%rip), %rsi
	call puts64
	.endm
	.section .text
	.code32
	.align 4
mbh:	.long 0x1BADB002, 0, -0x1BADB002
	.globl _start
_start:
	cli
	mov $stack_top, %esp
	xor %eax, %eax
	testl $4, (%ebx)		# multiboot info: cmdline present?
	jz 1f
	mov 16(%ebx), %esi		# QEMU passes "KERNEL-PATH APPEND": take its last character
3:	lodsb
	test %al, %al
	jnz 3b
	movzbl -2(%esi), %eax
1:	mov %eax, mode
	puts32 m1
	# Page tables: identity map of the first 1 GiB (2 MiB pages), and the same 1 GiB again
	# at 0xffffffff80000000 (PML4[511], PDPT[510]), where Linux runs.
	mov $pd, %edi
	xor %ecx, %ecx
2:	mov %ecx, %eax
	shl $21, %eax
	or $0x83, %eax
	mov %eax, (%edi,%ecx,8)
	movl $0, 4(%edi,%ecx,8)
	inc %ecx
	cmp $512, %ecx
	jne 2b
	movl $pd+3, pdpt_lo
	movl $pd+3, pdpt_hi+510*8
	movl $pdpt_lo+3, pml4
	movl $pdpt_hi+3, pml4+511*8
	mov $pml4, %eax
	mov %eax, %cr3
	mov %cr4, %eax
	or $0x20, %eax			# PAE
	mov %eax, %cr4
	mov $0xC0000080, %ecx		# EFER.LME
	rdmsr
	or $0x100, %eax
	wrmsr
	mov %cr0, %eax
	or $0x80000001, %eax		# PG|PE
	mov %eax, %cr0
	lgdt gdtr
	ljmp $0x08, $lm64
puts32:
	mov $COM1, %dx
1:	lodsb
	test %al, %al
	jz 2f
	out %al, %dx
	jmp 1b
2:	ret

	.code64
lm64:
	mov $0x10, %ax
	mov %ax, %ds
	mov %ax, %es
	mov %ax, %ss
	puts64 m2
	cmpb $'l', mode(%rip)
	je loop
	cmpb $'a', mode(%rip)
	jne idt
	movabs $0xffffffff80000000, %rax
	lea top(%rip), %rbx
	add %rbx, %rax
	jmp *%rax
top:	puts64 m3
	movabs $0xffffffff80000000, %rax
	lea idt(%rip), %rbx
	sub %rax, %rbx
	jmp *%rbx
loop:	mov $0x1000000, %ecx		# 2^24 iterations of dec+jnz: how fast does the guest run?
1:	dec %ecx
	jnz 1b
	puts64 m6
	jmp done
idt:	lea int3h(%rip), %rax		# IDT vectors 3 (#BP) and 6 (#UD): 64-bit interrupt gates
	lea idt64+3*16(%rip), %rdi
	call gate
	lea ud2h(%rip), %rax
	lea idt64+6*16(%rip), %rdi
	call gate
	lidt idtr(%rip)
	cmpb $'u', mode(%rip)
	je 1f
	int3
	jmp 2f
1:	ud2
2:
done:	puts64 m5
	mov $0xf4, %dx			# isa-debug-exit
	mov $0x10, %al
	out %al, %dx
3:	hlt
	jmp 3b
int3h:	puts64 m4
	iretq
ud2h:	puts64 m7
	addq $2, (%rsp)
	iretq
gate:	mov %ax, (%rdi)
	movw $0x08, 2(%rdi)
	movw $0x8e00, 4(%rdi)
	shr $16, %rax
	mov %ax, 6(%rdi)
	shr $16, %rax
	mov %eax, 8(%rdi)
	ret
puts64:
	mov $COM1, %dx
1:	lodsb
	test %al, %al
	jz 2f
	out %al, %dx
	jmp 1b
2:	ret

	.section .data
	.align 8
gdt:	.quad 0, 0x00af9a000000ffff, 0x00cf92000000ffff
gdtr:	.word 23
	.long gdt
	.align 8
idtr:	.word 256*16-1
	.long idt64, 0
mode:	.long 0
m1:	.asciz "S1 32-bit protected mode\r\n"
m2:	.asciz "S2 long mode, identity-mapped low address\r\n"
m3:	.asciz "S3 long mode at 0xffffffff80000000+ (top 2 GiB, where Linux runs)\r\n"
m4:	.asciz "S4 int3 delivered through the guest's IDT\r\n"
m5:	.asciz "KVM-PROBE-OK multiboot test\r\n"
m6:	.asciz "S5 2^24 loop iterations done\r\n"
m7:	.asciz "S4 #UD (ud2) delivered through the guest's IDT\r\n"
	.section .bss
	.align 4096
pml4:	.skip 4096
pdpt_lo: .skip 4096
pdpt_hi: .skip 4096
pd:	.skip 4096
idt64:	.skip 4096
	.skip 8192
stack_top:
EOF
  as --32 -o "$cache/mbtest.o" "$cache/mbtest.S"
  ld -m elf_i386 -Ttext 0x100000 -o "$mb" "$cache/mbtest.o"
fi

# monitor SOCK CMD...: each monitor command's answer.
monitor() {
  python3 - "$@" <<'EOF'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.settimeout(1.0)
def rd():
    buf = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            buf += d
    except socket.timeout:
        pass
    return buf.decode(errors="replace")
rd()
for c in sys.argv[2:]:
    if c == "sleep":
        time.sleep(1)
        continue
    s.send((c + "\n").encode())
    time.sleep(0.3)
    print("=== " + c)
    print(rd().replace("\r", ""))
EOF
}

# last_serial FILE: the last non-empty line of a serial log, without terminal escapes.
last_serial() {
  sed 's/\x1b[[0-9;?]*[A-Za-z]//g; s/\x1bc//g' "$1" 2>/dev/null | tr -d '\r' | grep -a . | tail -1 | cut -c1-100 || true
}

# regs FILE: the VM status, RIP (EIP) of both `info registers`, CPL, CR0, EFER, HLT from FILE.
regs() {
  awk '/^[RE]IP=/ {for (i=1;i<=NF;i++) if ($i ~ /^[RE]IP=/) rip=substr($i,5); if ($0 ~ /HLT=1/) h=1}
       /^CS =/ {cs=$3}
       /^CR0=/ {split($1,a,"="); cr0=a[2]}
       /^EFER=/ {split($1,a,"="); efer=a[2]}
       /CPL=/ {for (i=1;i<=NF;i++) if ($i ~ /^CPL=/) cpl=$i}
       /^[RE]IP=/ && n++ == 0 {rip1=rip}
       /^VM status:/ {st=$0; sub(/^VM status: /, "", st)}
       END {printf "%s, RIP=%s then %s, %s CR0=%s EFER=%s%s", st, rip1, rip, cpl, cr0, efer, (h ? " HLT" : "")}' "$1" 2>/dev/null || true
}

: > "$work/results.tsv.new"
printf 'name\tguest\tfirmware\tmachine\tcpu\textra\tparams\tresult\tsecs\tdetail\n' > "$work/results.tsv.new"
dmesg_start=$(dmesg 2>/dev/null | wc -l)
for p in "${probes[@]}"; do
  IFS='|' read -r name guest fw machine cpu extra params ptmo <<<"$p"
  if [ -n "$only" ] && ! [[ $name =~ $only ]]; then continue; fi
  tmo=${ptmo:-${KVM_PROBE_TIMEOUT:-40}}
  run=$work/runs/$name
  rm -rf "$run" && mkdir -p "$run"
  accel=(-accel kvm)
  [[ $name == tcg-* ]] && accel=(-accel tcg)
  # shellcheck disable=SC2206
  [ -n "$extra" ] && accel=($extra)
  args=("${accel[@]}" -machine "$machine" -cpu "$cpu" -m 512 -smp 1 -nographic -no-reboot -nic none
    -serial "file:$run/serial.log" -monitor "unix:$run/mon.sock,server=on,wait=off"
    -d guest_errors,cpu_reset -D "$run/qemu-d.log")
  if [ "$machine" != microvm ]; then
    args+=(-chardev "file,id=dbg,path=$run/debugcon.log" -device isa-debugcon,iobase=0x402,chardev=dbg
      -device isa-debug-exit,iobase=0xf4,iosize=0x04)
  fi
  case "$fw" in
    ovmf)
      cp "$ovmf_vars" "$run/vars.fd"
      args+=(-drive "if=pflash,format=raw,readonly=on,file=$ovmf_code" -drive "if=pflash,format=raw,file=$run/vars.fd") ;;
  esac
  case "$guest" in
    none) ;;
    mb) args+=(-kernel "$mb" -append "$params") ;;
    *) k=$(kernel_path "$guest") || continue
       args+=(-kernel "$k" -initrd "$initrd" -append "$params") ;;
  esac
  echo "qemu-system-x86_64 ${args[*]}" > "$run/cmd"
  start=$(date +%s.%N)
  nice -n 10 timeout $((tmo + 30)) qemu-system-x86_64 "${args[@]}" </dev/null >"$run/qemu.log" 2>&1 &
  qpid=$!
  result="" secs="" detail=""
  while kill -0 "$qpid" 2>/dev/null; do
    el=$(echo "$(date +%s.%N) - $start" | bc)
    if grep -aq KVM-PROBE-OK "$run/serial.log" 2>/dev/null; then
      [ -n "$secs" ] || secs=$(printf '%.1f' "$el")
    fi
    # KVM stopped the guest (QEMU pauses it and prints "KVM internal error"): no need to wait.
    ierr=false
    grep -aq 'KVM internal error' "$run/qemu.log" 2>/dev/null && ierr=true
    if $ierr || [ "$(echo "$el > $tmo" | bc)" = 1 ]; then
      $ierr && sleep 1 && secs=$(printf '%.1f' "$el")
      if [ -S "$run/mon.sock" ]; then
        monitor "$run/mon.sock" "info status" "info registers" "x/4i \$pc" sleep "info registers" "x/4i \$pc" "info cpus" \
          > "$run/monitor.txt" 2>&1 || true
        monitor "$run/mon.sock" quit >/dev/null 2>&1 || true
      fi
      sleep 1
      kill "$qpid" 2>/dev/null || true
      result=timeout
      break
    fi
    sleep 0.3
  done
  rc=0
  wait "$qpid" || rc=$?
  if grep -aq KVM-PROBE-OK "$run/serial.log" 2>/dev/null; then
    [ -n "$secs" ] || secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
    result=MARKER
    detail=$(grep -a -m1 KVM-PROBE-OK "$run/serial.log" | tr -d '\r')
  elif [ "$result" = timeout ]; then
    [ -n "$secs" ] || secs=$tmo
    grep -aq 'KVM internal error' "$run/qemu.log" && result=kvm-internal-error
    detail="$(regs "$run/monitor.txt"); last serial: $(last_serial "$run/serial.log")"
  else
    secs=$(printf '%.1f' "$(echo "$(date +%s.%N) - $start" | bc)")
    if grep -aq 'Triple fault\|triple fault' "$run/qemu-d.log" "$run/qemu.log" 2>/dev/null; then
      result=triple-fault
    elif [ "$rc" -ne 0 ]; then
      result="exit-$rc"
    else
      result=exited
    fi
    detail="$(grep -a -v 'warning: host doesn' "$run/qemu.log" | grep -a . | tail -1 | cut -c1-140 || true); last serial: $(last_serial "$run/serial.log")"
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$guest" "$fw" "$machine" "$cpu" "$extra" "$params" "$result" "$secs" "$detail" \
    | tee "$run/result.tsv"
done
# results.tsv: the latest result of every probe run so far (an --only run keeps the others').
for p in "${probes[@]}"; do
  f=$work/runs/${p%%|*}/result.tsv
  [ -f "$f" ] && cat "$f" >> "$work/results.tsv.new"
done
mv "$work/results.tsv.new" "$work/results.tsv"
dmesg 2>/dev/null | tail -n +"$((dmesg_start + 1))" | grep -i -E 'kvm|pvm' > "$work/host-dmesg.txt" || true
{
  echo "host kernel: $(uname -r); KVM module(s): $(ls /sys/module | grep -E '^kvm' | tr '\n' ' ')"
  grep -o -w -E 'svm|vmx|hypervisor' /proc/cpuinfo | sort -u | tr '\n' ' '; echo "(CPU flags among svm/vmx/hypervisor)"
  for f in /sys/module/kvm_pvm/parameters/*; do [ -e "$f" ] && echo "$(basename "$f")=$(cat "$f")"; done
} > "$work/host.txt" 2>/dev/null || true
say "results: $work/results.tsv, host: $work/host.txt, new host kernel messages: $work/host-dmesg.txt"
