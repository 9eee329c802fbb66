#!/usr/bin/env bash
# Builds the tinkerbell-rs image where no image can be pulled (CI):
#   1. debian:bookworm-slim, unless the engine has it: made with debootstrap (minbase) from the
#      machine's Debian mirror and `docker import`ed under that name, so the Dockerfile is the
#      one users build unchanged. The root file system tarball is cached in
#      ${TINK_IMAGE_CACHE:-/var/cache/tinkerbell-rs} for 7 days (debootstrap checked the
#      archive signatures when it was made; a stale or partial tarball is rebuilt).
#   2. the binaries, built on this host (Debian 12, the base's glibc), copied to
#      target/docker-bin, and `docker build --target prebuilt` (no Rust image needed).
# The image is tagged ${TINK_IMAGE:-tinkerbell-rs/tinkerbell:0.1.0}.
#   PROFILE=release bash scripts/images.sh   for release binaries (default: the debug build the
#                                            tests already made, which keeps CI short)
#   bash scripts/images.sh --actions-only      only the action images (tinkerbell/actions/*)
set -euo pipefail
actions_only=false
case "${1:-}" in
  "") ;;
  --actions-only) actions_only=true ;;
  *) echo "usage: $0 [--actions-only]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
image="${TINK_IMAGE:-tinkerbell-rs/tinkerbell:0.1.0}"
base="debian:bookworm-slim"
cache="${TINK_IMAGE_CACHE:-/var/cache/tinkerbell-rs}"
profile="${PROFILE:-debug}"

if ! docker image inspect "$base" >/dev/null 2>&1; then
  tarball="$cache/debian-bookworm-minbase.tar"
  if [ ! -s "$tarball" ] || [ -n "$(find "$tarball" -mtime +7 2>/dev/null)" ]; then
    command -v debootstrap >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
    mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
    mirror="${mirror:-http://deb.debian.org/debian}"
    echo "== debootstrap bookworm (minbase) from $mirror"
    root=$(mktemp -d /tmp/tink-rootfs.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
    # What the slim image leaves out: apt lists, caches, docs.
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*
    mkdir -p "$cache"
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
  fi
  echo "== docker import $tarball as $base"
  docker import --change 'CMD ["bash"]' "$tarball" "$base" >/dev/null
fi

flag=(); [ "$profile" = release ] && flag=(--release)
target="$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/$profile"
if ! $actions_only; then
echo "== binaries ($profile)"
cargo build -q "${flag[@]}" -p tink-controller -p tink-server -p tink-webhook -p hegel -p tink-netboot -p tink-agent -p tinkctl -p kube-lite -p tink-console -p tink-bmc-controller
rm -rf target/docker-bin && mkdir -p target/docker-bin
for b in tink-controller tink-server tink-webhook hegel tink-netboot tink-agent tinkctl kube-lite tink-console tink-bmc-controller; do
  cp "$target/$b" target/docker-bin/
done
strip --strip-debug target/docker-bin/* 2>/dev/null || true

echo "== docker build --target prebuilt -t $image"
docker build -q --target prebuilt --build-arg BIN_DIR=target/docker-bin -t "$image" . >/dev/null
rm -rf target/docker-bin
docker run --rm "$image" /usr/local/bin/tinkctl --version
# The BMC controller and the ipmitool its IPMI provider runs.
docker run --rm "$image" /usr/local/bin/tink-bmc-controller --version
docker run --rm "$image" ipmitool -V
fi

# The actions (docs/actions.md): one static tink-actions binary (musl, when the target and
# musl-gcc are installed; else the host build on the Debian base) and one image per action,
# named the way Tinkerbell's are (quay.io/tinkerbell/actions/image2disk:latest ->
# tinkerbell/actions/image2disk:latest), so a published template needs only its registry host
# changed once the demos push them to their registry.
actions_tag="${TINK_ACTIONS_TAG:-latest}"
# build_image TAG DIR: docker build, once more when the engine fails: its classic builder now and
# then loses a layer it just wrote ("failed to get layer ...: layer does not exist", seen here
# while other builds ran), which a second build does not repeat.
build_image() {
  docker build -q -t "$1" "$2" >/dev/null 2>"$2.err" && return 0
  echo "   docker build $1 failed ($(tail -n 1 "$2.err")); once more" >&2
  docker build -q -t "$1" "$2" >/dev/null
}
echo "== actions (tinkerbell/actions/*:$actions_tag)"
ctx=$(mktemp -d /tmp/tink-actions-image.XXXXXX)
if rustup target list --installed 2>/dev/null | grep -qx x86_64-unknown-linux-musl && command -v musl-gcc >/dev/null 2>&1; then
  cargo build -q --release --target x86_64-unknown-linux-musl -p tink-actions
  cp "$(dirname "$target")/x86_64-unknown-linux-musl/release/tink-actions" "$ctx/"
  actions_base=scratch
else
  echo "   (no musl target or musl-gcc: the host build on $base)"
  cargo build -q "${flag[@]}" -p tink-actions
  cp "$target/tink-actions" "$ctx/"
  actions_base="$base"
fi
strip "$ctx/tink-actions" 2>/dev/null || true
# One layer: the binary, a world-writable /tmp and the public roots (Debian's ca-certificates
# bundle) for https:// image URLs; a private CA is given to an action with CA_CERT.
mkdir -p "$ctx/root/usr/local/bin" "$ctx/root/tmp" "$ctx/root/etc/ssl/certs"
chmod 1777 "$ctx/root/tmp"
mv "$ctx/tink-actions" "$ctx/root/usr/local/bin/tink-actions"
[ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$ctx/root/etc/ssl/certs/"
printf 'FROM %s\nCOPY root /\n' "$actions_base" > "$ctx/Dockerfile"
build_image "tinkerbell/actions/tink-actions:$actions_tag" "$ctx"
rm -rf "$ctx/root"
for a in image2disk oci2disk qemuimg2disk archive2disk writefile cexec kexec grub2disk; do
  printf 'FROM tinkerbell/actions/tink-actions:%s\nENTRYPOINT ["/usr/local/bin/tink-actions", "%s"]\n' "$actions_tag" "$a" > "$ctx/Dockerfile"
  if [ "$a" = qemuimg2disk ]; then
    # qemu-img converts qcow2 and the other formats: the host's (Debian's qemu-utils) with the
    # libraries it links, so the image needs no package manager.
    rm -rf "$ctx/qemu" && mkdir -p "$ctx/qemu/usr/bin"
    qemu_img=$(command -v qemu-img) || { echo "error: qemu-img missing (qemu-utils): run scripts/install-deps.sh" >&2; exit 1; }
    cp "$qemu_img" "$ctx/qemu/usr/bin/qemu-img"
    for lib in $(ldd "$qemu_img" | awk '/=> \// {print $3} /^\t\/lib/ {print $1}'); do
      mkdir -p "$ctx/qemu$(dirname "$lib")"
      cp -L "$lib" "$ctx/qemu$lib"
    done
    echo "COPY qemu /" >> "$ctx/Dockerfile"
  fi
  build_image "tinkerbell/actions/$a:$actions_tag" "$ctx"
  # The older quay.io/tinkerbell-actions/<name> path of many published templates.
  docker tag "tinkerbell/actions/$a:$actions_tag" "tinkerbell-actions/$a:$actions_tag"
done
rm -rf "$ctx" "$ctx.err"
docker run --rm --entrypoint /usr/local/bin/tink-actions "tinkerbell/actions/image2disk:$actions_tag" --version
