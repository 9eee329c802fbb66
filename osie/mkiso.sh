#!/usr/bin/env bash
# Makes the OSIE ISO tink-netboot serves for virtual-media boot (`/iso/<mac>/hook.iso`): a
# BIOS + UEFI hybrid (grub-mkrescue: GRUB for i386-pc and x86_64-efi, written by xorriso) holding
# the kernel, the initramfs and a GRUB config whose `linux` line is the kernel-parameter
# placeholder: the marker, then spaces up to a fixed length. tink-netboot overwrites that region
# per machine with its kernel parameters (padded with spaces), so the ISO's size and layout never
# change (docs/netboot-iso.md, services/netboot/src/iso.rs). Unpatched, the kernel just gets the
# marker as one unknown parameter.
#
#   bash osie/mkiso.sh --kernel VMLINUZ --initramfs INITRAMFS --out FILE.iso [--placeholder-bytes N]
#
# --placeholder-bytes  length of the region, marker included (default 1792: x86 Linux keeps 2047
#                      bytes of command line, and GRUB adds `BOOT_IMAGE=/vmlinuz ` before it)
#
# Needs Debian's grub-common, grub-pc-bin, grub-efi-amd64-bin, xorriso and mtools.
set -euo pipefail
# The marker tink-netboot looks for (its --iso-placeholder-marker default): it must occur once
# in the whole ISO.
marker="tink_iso_params=TINKERBELL_ISO_KERNEL_PARAMS_PLACEHOLDER"
kernel="" initramfs="" out="" size=1792
usage() { echo "usage: $0 --kernel VMLINUZ --initramfs INITRAMFS --out FILE.iso [--placeholder-bytes N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --kernel) kernel=$2; shift 2 ;;
    --initramfs) initramfs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --placeholder-bytes) size=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$kernel" ] && [ -n "$initramfs" ] && [ -n "$out" ] || usage
say() { echo "osie/mkiso.sh: $*" >&2; }
for tool in grub-mkrescue xorriso mformat; do
  command -v "$tool" >/dev/null || { say "missing $tool: run scripts/install-deps.sh"; exit 1; }
done
for dir in /usr/lib/grub/i386-pc /usr/lib/grub/x86_64-efi; do
  [ -d "$dir" ] || { say "missing $dir (Debian grub-pc-bin / grub-efi-amd64-bin): run scripts/install-deps.sh"; exit 1; }
done
case "$size" in ''|*[!0-9]*) say "--placeholder-bytes must be a number"; exit 2 ;; esac
[ "$size" -gt "${#marker}" ] || { say "--placeholder-bytes must be more than the marker's ${#marker} bytes"; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/iso/boot/grub"
cp "$kernel" "$work/iso/vmlinuz"
cp "$initramfs" "$work/iso/initramfs"
pad=$(printf '%*s' "$((size - ${#marker}))" '')
# No menu: boot at once. The region ends at the end of its line: the marker and the spaces after
# it, nothing else.
cat > "$work/iso/boot/grub/grub.cfg" <<CFG
set timeout=0
set timeout_style=hidden
menuentry "Tinkerbell OSIE" {
  linux /vmlinuz ${marker}${pad}
  initrd /initramfs
}
CFG
grub-mkrescue -o "$work/out.iso" "$work/iso" -- -volid TINK_OSIE >"$work/mkrescue.log" 2>&1 \
  || { cat "$work/mkrescue.log" >&2; say "grub-mkrescue failed"; exit 1; }
n=$(grep -c -a -F "$marker" "$work/out.iso" || true)
[ "$n" = 1 ] || { say "the marker occurs $n times in the ISO (must be once)"; exit 1; }
mv "$work/out.iso" "$out"
say "$out ($(du -h "$out" | cut -f1)), placeholder of $size bytes"
