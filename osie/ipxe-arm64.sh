#!/usr/bin/env bash
# iPXE's arm64 UEFI network boot program, which tink-netboot hands to firmware that asks as ARM64
# UEFI (DHCP architecture 11) under the name snp.efi (Tinkerbell's; --boot-file-efi-arm64).
# Debian 12 (bookworm)'s ipxe binary package ships x86 programs only. By default this takes
# Debian 13 (trixie)'s: its ipxe package (architecture all, iPXE 1.21.1+git20250501) carries
# /usr/lib/ipxe/ipxe-arm64.efi, Debian's own arm64 EFI build of iPXE, which it fetches through a
# private apt configuration (a trixie main line, lists and downloads under DIR/cache/apt; checked
# with Debian's archive keyring; the host's apt configuration is neither read nor changed) and
# unpacks. Building bookworm's ipxe source package instead was tried: this machine's Debian
# mirror serves bookworm's Sources index and the .dsc, but answers 404 for both of its
# tarballs (ipxe_1.0.0+git-20190125.36a4c85.orig.tar.xz and its .debian.tar.xz), and trixie's
# and sid's ipxe tarballs alike.
#
# --source DIR builds iPXE from a source tree instead, with the cross compiler
# aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu: scripts/install-deps-arm64.sh):
# `make -C src CROSS=aarch64-linux-gnu- NO_WERROR=1 HOST_CFLAGS="-O2 -g" bin-arm64-efi/snp.efi`
# (why those two: at the make below). Checked with upstream's 36a4c85 (bookworm's base): it
# built in 96 s (165,856 bytes), PXE-booted under qemu-system-aarch64 with AAVMF and booted
# Debian's arm64 kernel. That version has no gzip image support (IMAGE_GZIP came in 2021), so a
# gzip'ed kernel would be refused; Debian 12's arm64 vmlinuz is the uncompressed Image (a
# PE/COFF EFI application), which both boot as it is.
#
#   bash osie/ipxe-arm64.sh [--out DIR] [--source DIR]
#
# --out     where snp.efi and source-version go (default target/ipxe-arm64). Cached: when
#           DIR/snp.efi exists and DIR/source-version names the same source, nothing is done.
# --source  an iPXE source tree (holding src/Makefile) to build; source-version is then
#           "tree:" and the tree's git commit (or its path).
#
# Run as root (apt-get). Paths are relative to the repository's root.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/ipxe-arm64
source_tree=""
suite=trixie
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --source) source_tree=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "osie/ipxe-arm64.sh: unknown argument $1 (usage: osie/ipxe-arm64.sh [--out DIR] [--source DIR])" >&2; exit 2 ;;
  esac
done
say() { echo "osie/ipxe-arm64.sh: $*" >&2; }

if [ -n "$source_tree" ]; then tools="aarch64-linux-gnu-gcc aarch64-linux-gnu-ld aarch64-linux-gnu-objcopy gcc make perl"; else tools="apt-get dpkg-deb file"; fi
for tool in $tools; do
  command -v "$tool" >/dev/null || { say "no $tool (scripts/install-deps-arm64.sh installs gcc-aarch64-linux-gnu, make, gcc)"; exit 1; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
jobs=$(nproc 2>/dev/null || echo 2)

if [ -n "$source_tree" ]; then
  [ -f "$source_tree/src/Makefile" ] || { say "--source $source_tree: no src/Makefile (not an iPXE source tree)"; exit 1; }
  source_tree=$(cd "$source_tree" && pwd)
  version="tree:$(git -C "$source_tree" rev-parse HEAD 2>/dev/null || echo "$source_tree")"
  if [ -f "$out/snp.efi" ] && [ "$(cat "$out/source-version" 2>/dev/null)" = "$version" ]; then
    say "$out/snp.efi is already built from ipxe $version"
    exit 0
  fi
else
  apt="$out/cache/apt"
  # shellcheck source=osie/apt-private.sh
  . osie/apt-private.sh
  apt_private "$apt" "$suite" main || exit 1
  opts=("${apt_opts[@]}")
  # the package index once a day at most (its own stamp: apt dates list files by the server's clock)
  if [ -z "$(find "$apt/updated" -mtime -1 2>/dev/null)" ]; then
    say "fetching the $suite main package index (private apt configuration in $apt)"
    if apt-get "${opts[@]}" update -qq >/dev/null 2>&1; then
      touch "$apt/updated"
    elif ls "$apt/lists"/*_Packages* >/dev/null 2>&1; then
      say "apt-get update of $suite main failed; using the previous index"
    else
      say "apt-get update of $suite main failed (is http://deb.debian.org/debian reachable?)"; exit 1
    fi
  fi
  version=$(apt-cache "${opts[@]}" show ipxe 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -n 1)
  [ -n "$version" ] || { say "no ipxe package in $suite main"; exit 1; }
  version="$suite ipxe $version"
  if [ -f "$out/snp.efi" ] && [ "$(cat "$out/source-version" 2>/dev/null)" = "$version" ]; then
    say "$out/snp.efi is already Debian's ipxe-arm64.efi of $version"
    exit 0
  fi
  rm -f "$apt/archives"/ipxe_*.deb
  (cd "$apt/archives" && apt-get "${opts[@]}" download -q ipxe >/dev/null 2>&1) \
    || { say "apt-get download ipxe ($suite) failed"; exit 1; }
  unpacked="$out/cache/ipxe-deb"
  rm -rf "$unpacked"
  dpkg-deb -x "$apt/archives"/ipxe_*.deb "$unpacked"
  [ -f "$unpacked/usr/lib/ipxe/ipxe-arm64.efi" ] || { say "$version has no /usr/lib/ipxe/ipxe-arm64.efi"; exit 1; }
  file -b "$unpacked/usr/lib/ipxe/ipxe-arm64.efi" | grep -q 'Aarch64' \
    || { say "ipxe-arm64.efi of $version is not an arm64 EFI program: $(file -b "$unpacked/usr/lib/ipxe/ipxe-arm64.efi")"; exit 1; }
  cp "$unpacked/usr/lib/ipxe/ipxe-arm64.efi" "$out/snp.efi"
  echo "$version" > "$out/source-version"
  rm -rf "$unpacked"
  say "$out/snp.efi ($(stat -c %s "$out/snp.efi") bytes): Debian's ipxe-arm64.efi of $version"
  exit 0
fi

work="$out/cache/build"
rm -rf "$work"
mkdir -p "$work"
say "copying the iPXE source tree $source_tree"
cp -a "$source_tree/." "$work/ipxe"
rm -rf "$work/ipxe/src/bin" "$work/ipxe/src/bin-"*
[ -f "$work/ipxe/src/Makefile" ] || { say "no src/Makefile in the ipxe source"; exit 1; }

# NO_WERROR=1: gcc 12 warns about things the 2019 sources do (-Waddress-of-packed-member).
# HOST_CFLAGS: iPXE's build tools (util/elf2efi64) run here, built by the host's gcc; versions of
# 2019 (bookworm's) add the target's workaround flags (-mabi=lp64) to the host compiler's when
# cross-building, which x86 gcc rejects. Set on the command line, it replaces the Makefile's.
say "building bin-arm64-efi/snp.efi (make -j$jobs CROSS=aarch64-linux-gnu- NO_WERROR=1; a few minutes)"
start=$(date +%s)
nice -n 19 make -C "$work/ipxe/src" -j"$jobs" CROSS=aarch64-linux-gnu- NO_WERROR=1 HOST_CFLAGS="-O2 -g" \
  bin-arm64-efi/snp.efi \
  > "$work/build.log" 2>&1 \
  || { grep -E ': error|\*\*\*' "$work/build.log" | tail -20 >&2; say "make bin-arm64-efi/snp.efi failed (log: $work/build.log)"; exit 1; }
cp "$work/ipxe/src/bin-arm64-efi/snp.efi" "$out/snp.efi"
echo "$version" > "$out/source-version"
rm -rf "$work/ipxe"
say "$out/snp.efi ($(stat -c %s "$out/snp.efi") bytes), ipxe $version, built in $(( $(date +%s) - start ))s"
