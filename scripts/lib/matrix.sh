# shellcheck shell=bash disable=SC2154 # ns, out and repo come from the caller
# Shared by scripts/osie-matrix.sh (and any run that boots QEMU machine models against the
# stack): the QEMU arguments of each emulated NIC and disk controller, the Linux driver each
# one needs and the disk device it shows up as, the action image, and the checks of one
# machine's run. Sourced after scripts/lib/demo-vm.sh; the caller sets `ns`, `out` and `repo`.

# matrix_nic_args MODEL NETDEV MAC BOOT: the -device arguments of a NIC. BOOT is "boot" for the
# NIC the machine boots from (first in the firmware's order), anything else for one that must
# not (no option ROM: it never offers a network boot).
matrix_nic_args() {
  local model=$1 netdev=$2 mac=$3 boot=$4 extra=""
  if [ "$boot" = boot ]; then extra=",bootindex=1"; else extra=",romfile="; fi
  echo "-device $model,netdev=$netdev,mac=$mac$extra"
}

# matrix_uefi_rom MODEL: the romfile= a NIC needs under OVMF. OVMF carries its own virtio-net
# driver (VirtioNetDxe) and network stack, so virtio-net runs without QEMU's option ROM, as
# scripts/netboot-demo.sh --uefi does; the emulated Intel, Realtek and VMware NICs have no
# driver in OVMF and keep QEMU's default ROM (Debian's ipxe-qemu efi-*.rom, which carries an
# EFI driver), the way a server's NIC brings its UEFI driver in its option ROM.
matrix_uefi_rom() {
  case "$1" in virtio-net-pci) echo ",romfile=" ;; *) echo "" ;; esac
}

# matrix_disk_args MODEL FILE: the -drive/-device arguments that attach FILE (qcow2) through the
# given controller model.
matrix_disk_args() {
  local model=$1 file=$2
  local drive="-drive file=$file,format=qcow2,if=none,id=disk0"
  case "$model" in
    virtio-blk) echo "$drive -device virtio-blk-pci,drive=disk0" ;;
    nvme) echo "$drive -device nvme,drive=disk0,serial=tinkmatrix0" ;;
    ahci) echo "$drive -device ich9-ahci,id=ahci0 -device ide-hd,drive=disk0,bus=ahci0.0" ;;
    megasas|lsi53c895a) echo "$drive -device $model,id=scsi0 -device scsi-hd,drive=disk0,bus=scsi0.0" ;;
    virtio-scsi) echo "$drive -device virtio-scsi-pci,id=scsi0 -device scsi-hd,drive=disk0,bus=scsi0.0" ;;
    *) echo "matrix_disk_args: unknown disk model $model" >&2; return 1 ;;
  esac
}

# matrix_disk_dev MODEL: the block device the OSIE sees for a machine's only disk.
matrix_disk_dev() {
  case "$1" in
    virtio-blk) echo /dev/vda ;;
    nvme) echo /dev/nvme0n1 ;;
    ahci|megasas|lsi53c895a|virtio-scsi) echo /dev/sda ;;
    *) return 1 ;;
  esac
}

# matrix_driver MODEL: the Linux module(s) that drive an emulated device, as an extended regular
# expression over module names (QEMU's rtl8139 is an RTL8139C+, which both 8139cp and 8139too
# name in their PCI ids; 8139cp takes it).
matrix_driver() {
  case "$1" in
    e1000) echo 'e1000' ;;
    e1000e) echo 'e1000e' ;;
    rtl8139) echo '8139cp|8139too' ;;
    vmxnet3) echo 'vmxnet3' ;;
    virtio-net-pci) echo 'virtio_net' ;;
    virtio-blk) echo 'virtio_blk' ;;
    nvme) echo 'nvme' ;;
    ahci) echo 'ahci' ;;
    megasas) echo 'megaraid_sas' ;;
    lsi53c895a) echo 'sym53c8xx' ;;
    virtio-scsi) echo 'virtio_scsi' ;;
    *) return 1 ;;
  esac
}
matrix_nic_models="e1000 e1000e rtl8139 vmxnet3 virtio-net-pci"
matrix_disk_models="virtio-blk nvme ahci megasas lsi53c895a virtio-scsi"

# matrix_modules SERIAL_LOG: the modules the OSIE reported loaded ("tink-osie: modules: ...").
matrix_modules() {
  console_text "$1" | sed -n 's/^tink-osie: modules: //p' | head -n 1
}

# matrix_check_modules MODULES NIC DISK [EXTRA_MODEL...]: the NIC's and the disk's drivers are
# among MODULES and the drivers of every other NIC and disk model (those the machine lacks) are
# not: the OSIE loads what the machine has, not a list. Prints what is wrong; status 1 if any.
matrix_check_modules() {
  local mods=" $1 " nic=$2 disk=$3 m re bad=0
  shift 3
  for m in "$nic" "$disk"; do
    re=$(matrix_driver "$m")
    if ! echo "$mods" | grep -qE " ($re) "; then
      echo "the driver of $m ($re) is not loaded"
      bad=1
    fi
  done
  for m in $matrix_nic_models $matrix_disk_models; do
    case " $nic $disk $* " in *" $m "*) continue ;; esac
    re=$(matrix_driver "$m")
    if echo "$mods" | grep -qE " ($re) "; then
      echo "the driver of $m ($re) is loaded on a machine without a $m"
      bad=1
    fi
  done
  return "$bad"
}

# matrix_action_image STORAGE [arm64 BUSYBOX]: the demo's actions (osie/actions, a static
# busybox) as the image tink/actions:demo in a registry storage folder (as
# scripts/netboot-demo.sh makes it); with arm64, on the given arm64 busybox as an arm64 image,
# tink/actions:demo-arm64 (built FROM scratch for that platform: nothing of it runs here).
matrix_action_image() {
  local img_root a platform="" tag=demo local_tag=tink-osie-matrix/actions:latest busybox
  busybox=$(command -v busybox)
  if [ "${2:-}" = arm64 ]; then
    platform=linux/arm64 tag=demo-arm64 local_tag=tink-osie-matrix/actions:arm64 busybox=$3
  fi
  img_root=$(mktemp -d)
  mkdir -p "$img_root/bin" "$img_root/usr/local/bin" "$img_root/tmp" "$img_root/mnt"
  cp "$busybox" "$img_root/bin/busybox"
  for a in sh wget gunzip dd sync blockdev ls tr mount umount mkdir printf wc sleep echo cat; do
    ln -s busybox "$img_root/bin/$a"
  done
  cp "$repo"/osie/actions/* "$img_root/usr/local/bin/"
  if [ -n "$platform" ]; then
    # docker import ignores --platform on a daemon without experimental features (the image would
    # say amd64); the classic builder's --platform sets it (FROM scratch: nothing runs).
    printf 'FROM scratch\nCOPY . /\nENV PATH=/usr/local/bin:/bin\n' \
      | DOCKER_BUILDKIT=0 docker build -q --platform "$platform" -f - -t "$local_tag" "$img_root" >/dev/null 2>"$out/action-image-$tag.log" \
      || { cat "$out/action-image-$tag.log" >&2; return 1; }
    [ "$(docker image inspect "$local_tag" --format '{{.Os}}/{{.Architecture}}')" = "$platform" ] \
      || { echo "error: $local_tag is not a $platform image" >&2; return 1; }
  else
    tar -C "$img_root" -c . | docker import --change 'ENV PATH=/usr/local/bin:/bin' - "$local_tag" >/dev/null
  fi
  rm -rf "$img_root"
  demo_push "$1" "$local_tag=tink/actions:$tag"
}

# matrix_osie_has_modalias INITRAMFS: whether an OSIE loads its drivers by modalias (a packed
# modules.alias and an init that runs the coldplug), i.e. was built by this osie/build.sh.
matrix_osie_has_modalias() {
  local list
  list=$(zstd -dc "$1" 2>/dev/null | cpio -it --quiet 2>/dev/null) || return 1
  echo "$list" | grep -E '^lib/modules/[^/]+/modules\.alias$' >/dev/null || return 1
  zstd -dc "$1" 2>/dev/null | cpio -i --quiet --to-stdout init 2>/dev/null | grep '^coldplug()' >/dev/null
}

# matrix_disk_marker DISK_IMG_GZ: the marker.txt of the demo disk image (its first partition).
matrix_disk_marker() {
  local raw
  raw=$(mktemp)
  gunzip -c "$1" > "$raw"
  mtype -i "$raw@@1M" ::marker.txt
  rm -f "$raw"
}

# matrix_tap NAME: another tap device on the namespace's bridge br0 (demo_netns made tap0).
matrix_tap() {
  ip -n "$ns" tuntap add dev "$1" mode tap
  ip -n "$ns" link set "$1" master br0
  ip -n "$ns" link set "$1" up
}
