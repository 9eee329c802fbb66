#!/usr/bin/env bash
# Builds the test OSIE from Debian packages: the Debian kernel (linux-image-amd64) and an
# initramfs holding a static busybox, the Docker engine the agent drives (dockerd, containerd,
# runc from Debian's docker.io, containerd and runc packages), the NIC/disk/FAT drivers, and
# tink-agent, started by osie/init. Also the disk image the netboot demo's Workflow installs
# (disk.img.gz): an MBR partition table with one bootable FAT partition holding syslinux, the
# same kernel, a small initramfs (osie/target-init) and marker.txt.
#
#   bash osie/build.sh [--out DIR] [--agent PATH] [--ca-cert PEM] [--iso] [--kernel-only]
#
# --out          where vmlinuz, initramfs and disk.img.gz go (default target/osie)
# --agent        the tink-agent binary (default target/debug/tink-agent; built if missing)
# --ca-cert      the CA that signed the servers' certificates: the OSIE's only trusted root
#                (/etc/ssl/certs/ca-certificates.crt), for grpc_authority with tinkerbell_tls=true
# --iso          also osie.iso: the same kernel and initramfs as a BIOS + UEFI bootable ISO with
#                the kernel-parameter placeholder tink-netboot patches per machine (osie/mkiso.sh)
# --kernel-only  only DIR/vmlinuz and DIR/kernel-version (the ISO boot test's kernel)
#
# Run as root (apt-get download of the kernel package when it is not cached in DIR/cache).
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/osie
agent=target/debug/tink-agent
ca=""
iso=false
kernel_only=false
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --agent) agent=$2; shift 2 ;;
    --ca-cert) ca=$2; shift 2 ;;
    --iso) iso=true; shift ;;
    --kernel-only) kernel_only=true; shift ;;
    *) echo "usage: $0 [--out DIR] [--agent PATH] [--ca-cert PEM] [--iso] [--kernel-only]" >&2; exit 2 ;;
  esac
done
say() { echo "osie/build.sh: $*" >&2; }
if $kernel_only; then
  tools="depmod"
else
  tools="busybox dockerd containerd containerd-shim-runc-v2 runc kexec cpio depmod modprobe zstd sfdisk mformat mcopy syslinux"
  $iso && tools="$tools grub-mkrescue xorriso"
fi
for tool in $tools; do
  command -v "$tool" >/dev/null || { say "missing $tool: run scripts/install-deps.sh"; exit 1; }
done
if ! $kernel_only; then
  file -L "$(command -v busybox)" | grep -q 'statically linked' || { say "busybox is not static (install busybox-static)"; exit 1; }
  if [ ! -x "$agent" ]; then
    say "building tink-agent"
    cargo build -p tink-agent
  fi
fi
mkdir -p "$out/cache"
out=$(cd "$out" && pwd)

# The kernel: the package linux-image-amd64 depends on, unpacked (never installed).
resolve_kernel() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}'; }
kpkg=$(resolve_kernel)
if [ -z "$kpkg" ]; then
  apt-get update -qq >/dev/null 2>&1 || true
  kpkg=$(resolve_kernel)
fi
[ -n "$kpkg" ] || { say "cannot resolve linux-image-amd64 in the package lists"; exit 1; }
kver=${kpkg#linux-image-}
kroot="$out/cache/$kpkg"
if [ ! -f "$kroot/boot/vmlinuz-$kver" ]; then
  say "fetching $kpkg"
  rm -rf "$kroot" && mkdir -p "$kroot"
  (cd "$out/cache" && rm -f "$kpkg"_*.deb && apt-get download -q "$kpkg" >/dev/null 2>&1) \
    || { say "apt-get download $kpkg failed"; exit 1; }
  dpkg-deb -x "$out/cache/$kpkg"_*.deb "$kroot"
  depmod -b "$kroot" "$kver"
fi
cp "$kroot/boot/vmlinuz-$kver" "$out/vmlinuz"
if $kernel_only; then
  echo "$kver" > "$out/kernel-version"
  say "$out/vmlinuz, kernel $kver"
  exit 0
fi

# modules_for ROOT MODULE...: the .ko paths (relative to lib/modules) in load order.
modules_for() {
  local root=$1; shift
  for m in "$@"; do
    modprobe -d "$root" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
  done | sed "s|^$root/lib/modules/||" | awk '!seen[$0]++'
}

# pack_common DIR: busybox, the udhcpc script, the drivers listed in $modules.
pack_common() {
  local dir=$1
  mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,root,var/log,var/lib,lib/modules}
  cp "$(command -v busybox)" "$dir/bin/busybox"
  for a in $(busybox --list); do
    [ -e "$dir/bin/$a" ] || ln -s busybox "$dir/bin/$a"
  done
  cp osie/udhcpc.script "$dir/etc/udhcpc.script"
  : > "$dir/etc/modules.load"
  for rel in $(modules_for "$kroot" $modules); do
    mkdir -p "$dir/lib/modules/$(dirname "$rel")"
    cp "$kroot/lib/modules/$rel" "$dir/lib/modules/$rel"
    echo "$rel" >> "$dir/etc/modules.load"
  done
  echo "root:x:0:0:root:/root:/bin/sh" > "$dir/etc/passwd"
  echo "root:x:0:" > "$dir/etc/group"
  printf 'hosts: files dns\n' > "$dir/etc/nsswitch.conf"
  printf '127.0.0.1 localhost\n' > "$dir/etc/hosts"
}

# copy_bin DIR EXE DEST: a dynamically linked program with the libraries it needs.
copy_bin() {
  local dir=$1 exe=$2 dest=$3
  mkdir -p "$dir/$(dirname "$dest")"
  cp "$exe" "$dir/$dest"
  for lib in $(ldd "$exe" 2>/dev/null | awk '/=> \// {print $3} /^\t\/lib/ {print $1}'); do
    mkdir -p "$dir/$(dirname "$lib")"
    [ -e "$dir/$lib" ] || cp -L "$lib" "$dir/$lib"
  done
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root="$work/osie"
# ext4: the installed root of real OS images (writefile, cexec and kexec mount it).
modules="virtio_pci virtio_net virtio_blk e1000 vfat nls_cp437 nls_iso8859_1 nls_ascii ext4"
pack_common "$root"
cp osie/init "$root/init"
copy_bin "$root" "$agent" /usr/local/bin/tink-agent
strip "$root/usr/local/bin/tink-agent" 2>/dev/null || true
# kexec (kexec-tools): the agent's `kexec -e` after a kexec action loaded the installed kernel.
for exe in dockerd containerd containerd-shim-runc-v2 runc docker-init kexec; do
  p=$(command -v "$exe" || true)
  [ -n "$p" ] && copy_bin "$root" "$p" "/usr/bin/$exe"
done
mkdir -p "$root/etc/ssl/certs" "$root/etc/docker"
if [ -n "$ca" ]; then
  cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
fi
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | zstd -q -T0 -10 > "$out/initramfs"

# The installed OS of the demo: a disk image with an MBR (syslinux's boot code), one bootable
# FAT partition from 1 MiB holding syslinux, the kernel, its initramfs and marker.txt.
troot="$work/target"
modules="virtio_pci virtio_net virtio_blk vfat nls_cp437 nls_iso8859_1 nls_ascii"
pack_common "$troot"
cp osie/target-init "$troot/init"
(cd "$troot" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -9 > "$work/target.img"
part="$work/part.img"
disk="$work/disk.img"
truncate -s 63M "$part"
mformat -i "$part" -H 2048 -v TINKOS ::
cat > "$work/syslinux.cfg" <<CFG
DEFAULT linux
PROMPT 0
TIMEOUT 0
LABEL linux
  KERNEL vmlinuz
  INITRD initrd.img
  APPEND console=ttyS0,115200 quiet
CFG
echo "tinkerbell-rs demo image, built $(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$work/marker.txt"
mcopy -i "$part" "$out/vmlinuz" ::vmlinuz
mcopy -i "$part" "$work/target.img" ::initrd.img
mcopy -i "$part" "$work/syslinux.cfg" ::syslinux.cfg
mcopy -i "$part" "$work/marker.txt" ::marker.txt
syslinux --install "$part"
truncate -s 64M "$disk"
printf 'label: dos\nstart=2048, type=c, bootable\n' | sfdisk -q "$disk"
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$disk" bs=440 count=1 conv=notrunc status=none
dd if="$part" of="$disk" bs=1M seek=1 conv=notrunc status=none
gzip -9 -c "$disk" > "$out/disk.img.gz"
cp "$work/marker.txt" "$out/marker.txt"
echo "$kver" > "$out/kernel-version"
if $iso; then
  bash osie/mkiso.sh --kernel "$out/vmlinuz" --initramfs "$out/initramfs" --out "$out/osie.iso"
fi
say "$out/vmlinuz ($(du -h "$out/vmlinuz" | cut -f1)), $out/initramfs ($(du -h "$out/initramfs" | cut -f1)), $out/disk.img.gz ($(du -h "$out/disk.img.gz" | cut -f1)), kernel $kver"
