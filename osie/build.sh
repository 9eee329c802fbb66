#!/usr/bin/env bash
# Builds the test OSIE from Debian packages: the Debian kernel (linux-image-amd64) and an
# initramfs holding a static busybox, the Docker engine the agent drives (dockerd, containerd,
# runc from Debian's docker.io, containerd and runc packages), the kernel's storage, network,
# USB keyboard/serial and file system drivers (osie_drivers below) with a depmod of them, whose
# modules.alias osie/init loads what the machine has by, the firmware those network drivers name
# (Debian's non-free-firmware component, through a private apt configuration), and tink-agent,
# started by osie/init. Also the disk image the netboot demo's Workflow installs
# (disk.img.gz): an MBR partition table with one bootable FAT partition holding syslinux, the
# same kernel, a small initramfs (osie/target-init) and marker.txt.
#
#   bash osie/build.sh [--arch x86_64|aarch64] [--out DIR] [--agent PATH] [--ca-cert PEM] [--iso] [--kernel-only]
#
# --arch         the OSIE's architecture (default x86_64). aarch64: Debian's arm64 kernel,
#                busybox and Docker engine, unpacked (never installed, nothing runs) from their
#                arm64 packages into DIR/cache/arm64-root by `mmdebstrap --variant=extract`, the
#                libraries of each program found by its ELF headers there; tink-agent
#                cross-built (cargo --target aarch64-unknown-linux-gnu, Debian's
#                gcc-aarch64-linux-gnu: scripts/install-deps-arm64.sh). Only vmlinuz and
#                initramfs: the demo disk image (syslinux) is x86's.
# --out          where vmlinuz, initramfs and disk.img.gz go (default target/osie)
# --agent        the tink-agent binary (default target/debug/tink-agent, or for aarch64
#                target/aarch64-unknown-linux-gnu/debug/tink-agent; built if missing)
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
arch=x86_64
agent=""
ca=""
iso=false
kernel_only=false
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --agent) agent=$2; shift 2 ;;
    --ca-cert) ca=$2; shift 2 ;;
    --iso) iso=true; shift ;;
    --kernel-only) kernel_only=true; shift ;;
    *) echo "usage: $0 [--arch x86_64|aarch64] [--out DIR] [--agent PATH] [--ca-cert PEM] [--iso] [--kernel-only]" >&2; exit 2 ;;
  esac
done
say() { echo "osie/build.sh: $*" >&2; }
# shellcheck source=osie/apt-private.sh
. osie/apt-private.sh
case "$arch" in
  x86_64) cross=false; rust_target="" ;;
  aarch64) cross=true; rust_target=aarch64-unknown-linux-gnu ;;
  *) say "--arch: $arch is not x86_64 or aarch64"; exit 2 ;;
esac
[ "$arch" = "$(uname -m)" ] || [ "$arch" = aarch64 ] || { say "--arch $arch: only an x86_64 host builds an x86_64 OSIE"; exit 2; }
if $cross; then
  $iso && { say "--iso: the ISO (GRUB for BIOS and x86-64 UEFI) is x86_64's"; exit 2; }
  tools="busybox mmdebstrap cpio depmod modprobe modinfo zstd readelf aarch64-linux-gnu-gcc aarch64-linux-gnu-strip"
  [ -n "$agent" ] || agent=target/$rust_target/debug/tink-agent
elif $kernel_only; then
  tools="depmod"
else
  tools="busybox dockerd containerd containerd-shim-runc-v2 runc kexec cpio depmod modprobe modinfo zstd sfdisk mformat mcopy syslinux"
  $iso && tools="$tools grub-mkrescue xorriso"
fi
[ -n "$agent" ] || agent=target/debug/tink-agent
for tool in $tools; do
  command -v "$tool" >/dev/null || { say "missing $tool: run scripts/install-deps.sh$($cross && echo " and scripts/install-deps-arm64.sh")"; exit 1; }
done
if ! $kernel_only; then
  $cross || file -L "$(command -v busybox)" | grep -q 'statically linked' || { say "busybox is not static (install busybox-static)"; exit 1; }
  if [ ! -x "$agent" ]; then
    say "building tink-agent${rust_target:+ for $rust_target}"
    cargo build -p tink-agent ${rust_target:+--target "$rust_target"}
  fi
  if $cross; then
    file -L "$agent" | grep -q 'ARM aarch64' || { say "$agent is not an aarch64 program"; exit 1; }
  fi
fi
mkdir -p "$out/cache"
out=$(cd "$out" && pwd)

# arm64: Debian's arm64 packages the OSIE takes its kernel and programs from, unpacked with
# their dependencies into one folder (no maintainer script runs: nothing of arm64 executes here).
arm64_pkgs="linux-image-arm64 busybox-static docker.io containerd runc tini kexec-tools"
sysroot=""
if $cross; then
  sysroot="$out/cache/arm64-root"
  if [ ! -f "$sysroot/.complete" ] || [ "$(cat "$sysroot/.complete")" != "$arm64_pkgs" ]; then
    suite=$(sed -n "s/^VERSION_CODENAME=//p" /etc/os-release)
    say "unpacking Debian $suite arm64: $arm64_pkgs"
    rm -rf "$sysroot"
    mmdebstrap --quiet --arch=arm64 --variant=extract --include="${arm64_pkgs// /,}" "$suite" "$sysroot" >"$out/cache/arm64-mmdebstrap.log" 2>&1 \
      || { tail -n 20 "$out/cache/arm64-mmdebstrap.log" >&2; say "mmdebstrap of the arm64 packages failed"; exit 1; }
    echo "$arm64_pkgs" > "$sysroot/.complete"
  fi
fi

# The kernel: the package linux-image-amd64 depends on, unpacked (never installed); arm64's is
# in the unpacked arm64 packages.
if $cross; then
  kver=$(find "$sysroot/boot" -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sed 's/^vmlinuz-//' | sort -V | tail -n 1)
  [ -n "$kver" ] || { say "no kernel in $sysroot/boot"; exit 1; }
  kroot=$sysroot
  [ -f "$kroot/lib/modules/$kver/.depmod-done" ] || { depmod -b "$kroot" "$kver" && touch "$kroot/lib/modules/$kver/.depmod-done"; }
else
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

# pack_base DIR: busybox (also as /sbin/modprobe, the kernel's module helper), the udhcpc
# script, users and name service files.
pack_base() {
  local dir=$1
  mkdir -p "$dir"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,run,tmp,root,var/log,var/lib,lib/modules}
  if $cross; then cp "$sysroot/bin/busybox" "$dir/bin/busybox"; else cp "$(command -v busybox)" "$dir/bin/busybox"; fi
  # the applets of Debian's busybox-static (the host's list: the same package, another arch)
  for a in $(busybox --list); do
    [ -e "$dir/bin/$a" ] || ln -s busybox "$dir/bin/$a"
  done
  ln -sf ../bin/busybox "$dir/sbin/modprobe"
  cp osie/udhcpc.script "$dir/etc/udhcpc.script"
  echo "root:x:0:0:root:/root:/bin/sh" > "$dir/etc/passwd"
  echo "root:x:0:" > "$dir/etc/group"
  printf 'hosts: files dns\n' > "$dir/etc/nsswitch.conf"
  printf '127.0.0.1 localhost\n' > "$dir/etc/hosts"
}

# pack_listed DIR MODULE...: the modules and their dependencies, in load order in
# /etc/modules.load, for init scripts that insmod a fixed list (the demo disk's OS).
pack_listed() {
  local dir=$1 rel
  shift
  : > "$dir/etc/modules.load"
  for rel in $(modules_for "$kroot" "$@"); do
    mkdir -p "$dir/lib/modules/$(dirname "$rel")"
    cp "$kroot/lib/modules/$rel" "$dir/lib/modules/$rel"
    echo "$rel" >> "$dir/etc/modules.load"
  done
}

# The OSIE's drivers, by what they drive (globs under lib/modules/KVER/kernel); osie/init loads
# the ones the machine's devices ask for (their modalias), so a driver here costs image size,
# never a load on a machine without its device.
osie_drivers=(
  # storage: SATA/PATA (ahci, ata_piix, ...), NVMe, virtio, SCSI disks and CD-ROMs, the SAS/RAID
  # HBAs of servers (Broadcom/LSI MegaRAID and SAS, HPE Smart Array and SmartPQI, Adaptec,
  # Intel isci, Marvell, PMC, Areca, 3ware, LSI Fusion MPT), the older SCSI HBA QEMU emulates
  # (sym53c8xx for lsi53c895a), VMware and Hyper-V disks, USB mass storage
  'drivers/ata/*.ko' drivers/nvme/host/nvme.ko drivers/block/virtio_blk.ko
  drivers/scsi/{sd_mod,sr_mod,sg,virtio_scsi,vmw_pvscsi,hv_storvsc,hpsa,3w-9xxx,3w-sas,3w-xxxx}.ko
  'drivers/scsi/'{megaraid,mpt3sas,mpi3mr,smartpqi,aacraid,sym53c8xx_2,isci,mvsas,pm8001,arcmsr}'/*.ko'
  drivers/scsi/megaraid.ko 'drivers/message/fusion/*.ko' 'drivers/usb/storage/*.ko'
  # network: every wired Ethernet driver of the kernel (Intel, Broadcom, Mellanox, Realtek, ...),
  # virtio, VMware, Hyper-V, USB Ethernet adapters
  'drivers/net/ethernet/**/*.ko' drivers/net/virtio_net.ko drivers/net/vmxnet3/vmxnet3.ko
  drivers/net/hyperv/hv_netvsc.ko 'drivers/net/usb/*.ko'
  # the bus drivers: virtio over PCI, USB host controllers, USB keyboards, USB serial adapters
  'drivers/virtio/*.ko' 'drivers/usb/host/*.ko' drivers/hid/usbhid/usbhid.ko drivers/hid/hid-generic.ko
  drivers/usb/serial/{usbserial,ftdi_sio,pl2303,cp210x,ch341}.ko
  # file systems the actions mount (installed roots: ext4, xfs; EFI partitions: vfat) and the
  # checksum ext4 and xfs ask the crypto API for
  fs/ext4/ext4.ko fs/xfs/xfs.ko fs/fat/vfat.ko fs/nls/nls_{cp437,iso8859-1,ascii,utf8}.ko
  crypto/crc32c_generic.ko
)
[ "$arch" = x86_64 ] && osie_drivers+=(arch/x86/crypto/crc32c-intel.ko)
# Loaded by osie/init whatever the hardware (no device asks for them).
osie_always="ext4 vfat nls_cp437 nls_iso8859_1 nls_ascii nls_utf8 crc32c_generic"

# pack_osie_drivers DIR: the modules osie_drivers names, their dependencies (modules.dep), the
# kernel's module lists and a depmod of the packed tree (modules.dep, modules.alias for busybox
# modprobe); the firmware files the packed network drivers name, from $fwroot. Prints the
# firmware the drivers name that no packed package has.
pack_osie_drivers() {
  local dir=$1 kmod="$kroot/lib/modules/$kver" rel f
  local dest="$dir/lib/modules/$kver"
  mkdir -p "$dest"
  (
    cd "$kmod/kernel"
    shopt -s globstar nullglob
    # shellcheck disable=SC2068 # the globs expand here, under lib/modules/KVER/kernel
    for f in ${osie_drivers[@]}; do echo "kernel/$f"; done
  ) | sort -u > "$work/selected"
  cut -d: -f1 "$kmod/modules.dep" > "$work/all"
  if grep -vxF -f "$work/all" "$work/selected" > "$work/unknown"; then
    if $cross; then
      # named for x86 servers' hardware (Intel isci, ...), not built for arm64
      say "not in arm64 kernel $kver (skipped): $(tr '\n' ' ' < "$work/unknown")"
      grep -xF -f "$work/all" "$work/selected" > "$work/known" || true
      mv "$work/known" "$work/selected"
    else
      say "osie_drivers names modules kernel $kver lacks: $(tr '\n' ' ' < "$work/unknown")"
      exit 1
    fi
  fi
  # modules.dep: "kernel/a.ko: kernel/dep1.ko kernel/dep2.ko" (every dependency, transitively).
  awk 'NR == FNR {want[$0] = 1; next}
       { sub(":", "", $1); if ($1 in want) for (i = 1; i <= NF; i++) print $i }' \
    "$work/selected" "$kmod/modules.dep" | sort -u > "$work/packed"
  while read -r rel; do
    mkdir -p "$dest/$(dirname "$rel")"
    cp "$kmod/$rel" "$dest/$rel"
  done < "$work/packed"
  cp "$kmod"/modules.{order,builtin,builtin.modinfo} "$dest/"
  depmod -b "$dir" "$kver"
  # Firmware: what the packed network drivers name (modinfo's firmware field).
  : > "$work/firmware-missing"
  grep -E '^kernel/drivers/net/' "$work/packed" | while read -r rel; do
    for f in $(modinfo -F firmware "$kmod/$rel"); do
      if [ -e "$fwroot/lib/firmware/$f" ]; then
        mkdir -p "$dir/lib/firmware/$(dirname "$f")"
        cp -L "$fwroot/lib/firmware/$f" "$dir/lib/firmware/$f"
      else
        echo "$(basename "$rel" .ko): $f" >> "$work/firmware-missing"
      fi
    done
  done
  say "$(wc -l < "$work/packed") modules ($(du -sh "$dest" | cut -f1)), firmware $(du -sh "$dir/lib/firmware" 2>/dev/null | cut -f1) in $(find "$dir/lib/firmware" -type f 2>/dev/null | wc -l) files"
  if [ -s "$work/firmware-missing" ]; then
    say "firmware the packed drivers name that $firmware_pkgs lack: $(cut -d: -f1 "$work/firmware-missing" | sort | uniq -c | awk '{printf "%s%s (%s)", sep, $2, $1; sep=", "}')"
  fi
}

# NIC firmware from Debian's non-free-firmware component, through a private apt configuration
# (its own sources list, package lists and cache under DIR/cache/firmware-apt): the host's apt
# sources stay as they are. Redistributable by Debian's terms; only the files the packed network
# drivers name are packed.
firmware_pkgs="firmware-bnx2 firmware-bnx2x firmware-realtek firmware-misc-nonfree firmware-qlogic firmware-netxen firmware-myricom"
fetch_firmware() {
  local apt="$out/cache/firmware-apt" suite
  fwroot="$out/cache/firmware-root"
  [ -f "$fwroot/.complete" ] && [ "$(cat "$fwroot/.complete")" = "$firmware_pkgs" ] && return 0
  suite=$(sed -n "s/^VERSION_CODENAME=//p" /etc/os-release)
  rm -rf "$apt" "$fwroot"
  mkdir -p "$fwroot"
  apt_private "$apt" "$suite" non-free-firmware || exit 1
  local opts=("${apt_opts[@]}")
  say "fetching $firmware_pkgs ($suite non-free-firmware)"
  apt-get "${opts[@]}" update -qq >/dev/null 2>&1 || { say "apt-get update of $suite non-free-firmware failed"; exit 1; }
  # shellcheck disable=SC2086 # a list of package names
  (cd "$apt/archives" && apt-get "${opts[@]}" download -q $firmware_pkgs >/dev/null 2>&1) \
    || { say "apt-get download $firmware_pkgs failed"; exit 1; }
  for deb in "$apt/archives"/*.deb; do dpkg-deb -x "$deb" "$fwroot"; done
  echo "$firmware_pkgs" > "$fwroot/.complete"
}

# copy_bin_cross DIR EXE DEST: an arm64 program (a path; symlinks followed) with the libraries
# it needs, found by the ELF headers (its interpreter and NEEDED entries, transitively) in the
# sysroot's library folders; ldd cannot run it here.
copy_bin_cross() {
  local dir=$1 exe=$2 dest=$3 todo lib found d
  mkdir -p "$dir/$(dirname "$dest")"
  cp -L "$exe" "$dir/$dest"
  todo=$(readelf -d "$exe" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  readelf -l "$exe" 2>/dev/null | grep -q 'program interpreter' && todo="$todo ld-linux-aarch64.so.1"
  while [ -n "${todo// /}" ]; do
    set -- $todo
    lib=$1; shift; todo="$*"
    found=""
    for d in lib/aarch64-linux-gnu usr/lib/aarch64-linux-gnu lib usr/lib; do
      [ -e "$sysroot/$d/$lib" ] && { found="$d/$lib"; break; }
    done
    [ -n "$found" ] || { say "$(basename "$exe") needs $lib, not in the arm64 packages"; exit 1; }
    [ -e "$dir/$found" ] && continue
    mkdir -p "$dir/$(dirname "$found")"
    cp -L "$sysroot/$found" "$dir/$found"
    todo="$todo $(readelf -d "$sysroot/$found" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  done
  # the interpreter where the program asks for it (/lib/ld-linux-aarch64.so.1)
  if [ -e "$dir/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1" ] && [ ! -e "$dir/lib/ld-linux-aarch64.so.1" ]; then
    ln -s aarch64-linux-gnu/ld-linux-aarch64.so.1 "$dir/lib/ld-linux-aarch64.so.1"
  fi
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
fetch_firmware
pack_base "$root"
pack_osie_drivers "$root"
echo "$osie_always" > "$root/etc/modules.always"
cp osie/init "$root/init"
if $cross; then
  # tink-agent links glibc dynamically: its libraries come from the arm64 packages too
  copy_bin_cross "$root" "$agent" /usr/local/bin/tink-agent
  aarch64-linux-gnu-strip "$root/usr/local/bin/tink-agent" 2>/dev/null || true
  for exe in usr/sbin/dockerd usr/bin/containerd usr/bin/containerd-shim-runc-v2 usr/bin/runc usr/bin/docker-init sbin/kexec; do
    [ -e "$sysroot/$exe" ] || { say "no $exe in the arm64 packages"; exit 1; }
    copy_bin_cross "$root" "$sysroot/$exe" "/usr/bin/$(basename "$exe")"
  done
else
copy_bin "$root" "$agent" /usr/local/bin/tink-agent
strip "$root/usr/local/bin/tink-agent" 2>/dev/null || true
# kexec (kexec-tools): the agent's `kexec -e` after a kexec action loaded the installed kernel.
for exe in dockerd containerd containerd-shim-runc-v2 runc docker-init kexec; do
  p=$(command -v "$exe" || true)
  [ -n "$p" ] && copy_bin "$root" "$p" "/usr/bin/$exe"
done
fi
mkdir -p "$root/etc/ssl/certs" "$root/etc/docker"
if [ -n "$ca" ]; then
  cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
fi
(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | zstd -q -T0 -10 > "$out/initramfs"
if $cross; then
  echo "$kver" > "$out/kernel-version"
  say "$out/vmlinuz ($(du -h "$out/vmlinuz" | cut -f1)), $out/initramfs ($(du -h "$out/initramfs" | cut -f1)), arm64 kernel $kver"
  exit 0
fi

# The installed OS of the demo: a disk image with an MBR (syslinux's boot code), one bootable
# FAT partition from 1 MiB holding syslinux, the kernel, its initramfs and marker.txt.
troot="$work/target"
pack_base "$troot"
pack_listed "$troot" virtio_pci virtio_net virtio_blk vfat nls_cp437 nls_iso8859_1 nls_ascii
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
