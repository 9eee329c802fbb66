#!/usr/bin/env bash
# Builds a real Debian disk image from Debian's packages, for scripts/os-install-demo.sh and for
# anyone who wants an image Tinkerbell's actions can install:
#
#   - an MBR partition table (syslinux's boot code) with one bootable ext4 root partition from
#     1 MiB, labelled `root`;
#   - Debian (bookworm by default) made by mmdebstrap: the Debian kernel (linux-image-amd64) and
#     its initramfs (/vmlinuz and /initrd.img, as Debian links them), systemd, cloud-init,
#     openssh-server, ifupdown with a DHCP client (cloud-init's fallback network), sudo, growpart
#     (cloud-guest-utils: cloud-init grows the root partition and file system to the disk);
#   - extlinux in /boot/extlinux booting that kernel with `root=UUID=<root> console=ttyS0`,
#     so the disk boots on its own as well as by kexec from the OSIE;
#   - no cloud-init datasource configured: the installing Template writes one (Hegel's URL);
#     without it cloud-init finds none and stays off. No password for any user: SSH with the
#     keys cloud-init installs.
#
# The image is compressed with zstd (frames carrying the content size, so image2disk refuses a
# disk that is too small before writing) and cached in ${TINK_IMAGE_CACHE:-/var/cache/tinkerbell-rs},
# keyed by the candidate versions of the packages it is made from and this script: a new kernel or
# cloud-init in the archive makes a new image, an unchanged archive reuses the cached one.
#
#   sudo bash scripts/debian-image.sh [--suite bookworm] [--print-path]
#
# Prints the image's path on the last line of its output. Root: mmdebstrap's root mode, a loop
# device and a mount for extlinux.
set -euo pipefail
cd "$(dirname "$0")/.."
suite=bookworm
while [ $# -gt 0 ]; do
  case "$1" in
    --suite) suite=${2:-}; shift 2 || { echo "error: --suite needs a name" >&2; exit 2; } ;;
    *) echo "usage: $0 [--suite NAME]" >&2; exit 2 ;;
  esac
done
cache="${TINK_IMAGE_CACHE:-/var/cache/tinkerbell-rs}"
say() { echo "debian-image: $*" >&2; }
[ "$(id -u)" = 0 ] || { say "run as root (mmdebstrap, loop device, mount)"; exit 1; }
for tool in mmdebstrap extlinux mkfs.ext4 sfdisk losetup zstd; do
  command -v "$tool" >/dev/null || { say "missing $tool: run scripts/install-deps.sh"; exit 1; }
done
mbr=/usr/lib/syslinux/mbr/mbr.bin
[ -f "$mbr" ] || { say "missing $mbr (syslinux-common): run scripts/install-deps.sh"; exit 1; }

packages="systemd-sysv udev kmod linux-image-amd64 initramfs-tools cloud-init cloud-guest-utils openssh-server ifupdown isc-dhcp-client iproute2 netbase sudo ca-certificates"
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
mirror="${mirror:-http://deb.debian.org/debian}"

# The cache key: the archive's candidate version of every package named above (their
# dependencies move with them), the suite and this script.
versions() { apt-cache policy $packages 2>/dev/null | awk '/^[^ ]/ {p=$1} /Candidate:/ {print p, $2}'; }
if versions | grep -q '(none)' || [ -z "$(versions)" ]; then
  apt-get update -qq >/dev/null 2>&1 || true
fi
if versions | grep -q '(none)'; then
  say "the package lists name no candidate for: $(versions | awk '$2 == "(none)" {print $1}' | tr '\n' ' ')"
  exit 1
fi
key=$( { echo "$suite"; versions; cat "$0"; } | sha256sum | cut -c1-16)
image="$cache/debian-$suite-$key.raw.zst"
if [ -s "$image" ] && [ -s "$image.sha256" ]; then
  say "cached: $image"
  echo "$image"
  exit 0
fi
mkdir -p "$cache"

work=$(mktemp -d /tmp/tink-debian-image.XXXXXX)
mnt="$work/mnt"
loop=""
cleanup() {
  set +e
  mountpoint -q "$mnt" && umount "$mnt"
  [ -n "$loop" ] && losetup -d "$loop"
  rm -rf "$work"
}
trap cleanup EXIT

say "mmdebstrap $suite from $mirror ($packages)"
root="$work/root"
mkdir -p "$root"
# Debian's own hook points: no documentation, no man pages, no apt lists in the image.
mmdebstrap --mode=root --variant=apt --include="$(echo $packages | tr ' ' ',')" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  --customize-hook='echo debian > "$1"/etc/hostname' \
  --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*' \
  --customize-hook='printf "# the image has no locales package: C.UTF-8 is always there\nlocale: C.UTF-8\n" > "$1"/etc/cloud/cloud.cfg.d/01_tinkerbell_image.cfg' \
  "$suite" "$root" "$mirror" >"$work/mmdebstrap.log" 2>&1 \
  || { tail -n 30 "$work/mmdebstrap.log" >&2; say "mmdebstrap failed"; exit 1; }
# SSH host keys are made on the machine's first boot (cloud-init's ssh module), never shared
# between machines installed from this image.
[ -e "$root/vmlinuz" ] && [ -e "$root/initrd.img" ] || { say "the root has no /vmlinuz or /initrd.img"; exit 1; }

uuid=$(cat /proc/sys/kernel/random/uuid)
cat > "$root/etc/fstab" <<EOF
UUID=$uuid / ext4 errors=remount-ro 0 1
EOF
mkdir -p "$root/boot/extlinux"
cat > "$root/boot/extlinux/extlinux.conf" <<EOF
DEFAULT debian
TIMEOUT 0
SERIAL 0 115200
LABEL debian
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND root=UUID=$uuid ro console=tty0 console=ttyS0,115200
EOF

# The root file system: its contents plus a quarter and 256 MiB free, in 4 MiB steps. ext4
# without 64bit and metadata_csum, which extlinux cannot read.
used=$(du -sxm "$root" | awk '{print $1}')
part_mb=$(( (used + used / 4 + 256 + 3) / 4 * 4 ))
say "root file system: $used MiB used, partition $part_mb MiB"
part="$work/root.ext4"
truncate -s "${part_mb}M" "$part"
mkfs.ext4 -q -F -L root -U "$uuid" -O ^64bit,^metadata_csum -d "$root" "$part"
rm -rf "$root"
loop=$(losetup -f --show "$part")
mkdir -p "$mnt"
mount "$loop" "$mnt"
extlinux --install "$mnt/boot/extlinux" >/dev/null 2>&1 || { say "extlinux --install failed"; exit 1; }
umount "$mnt"
losetup -d "$loop"
loop=""

disk="$work/disk.raw"
truncate -s $((part_mb + 1))M "$disk"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$disk"
dd if="$mbr" of="$disk" bs=440 count=1 conv=notrunc status=none
dd if="$part" of="$disk" bs=1M seek=1 conv=notrunc,sparse status=none
rm -f "$part"
say "compressing $((part_mb + 1)) MiB with zstd"
zstd -q -T0 -6 "$disk" -o "$work/image.zst"
sha=$(sha256sum "$work/image.zst" | awk '{print $1}')
mv "$work/image.zst" "$image"
echo "$sha" > "$image.sha256"
# Older images of this suite are replaced: the cache keeps one per suite.
find "$cache" -maxdepth 1 -name "debian-$suite-*.raw.zst*" ! -name "debian-$suite-$key.raw.zst*" -delete
say "$image ($(du -m "$image" | awk '{print $1}') MiB, sha256 $sha)"
echo "$image"
