#!/usr/bin/env bash
# Builds the OSIE (osie/build.sh) and makes a versioned release of it: DIR/VERSION/ with
# vmlinuz-ARCH, initramfs-ARCH, osie.json and SHA256SUMS (`tinkctl osie release`, which does the
# release step and is tested on its own; osie/README.md, "Versioned releases").
#
#   bash osie/release.sh [--out DIR] [--version V] [--arch x86_64|aarch64] [--no-build] [-- BUILD.SH ARGS]
#
# --out       where release folders go (default target/osie-releases)
# --version   the release version (default: `git describe --always --dirty` and the kernel
#             version, e.g. c55ca67-linux-6.1.0-56)
# --arch      the build's architecture (x86_64, built into target/osie; aarch64, built into
#             target/osie-arm64: osie/build.sh --arch aarch64). Both of one commit and kernel
#             version go to the same release folder.
# --no-build  release what that folder already holds (build.sh's last output)
# after --     arguments for osie/build.sh (--agent, --ca-cert, ...; not --out)
#
# The build needs root (see osie/build.sh); the release step does not. An existing release with
# other content is never overwritten.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/osie-releases
version=""
arch=x86_64
build=true
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --no-build) build=false; shift ;;
    --) shift; break ;;
    *) echo "usage: $0 [--out DIR] [--version V] [--arch x86_64|aarch64] [--no-build] [-- BUILD.SH ARGS]" >&2; exit 2 ;;
  esac
done
say() { echo "osie/release.sh: $*" >&2; }
case "$arch" in
  x86_64) from=target/osie ;;
  aarch64) from=target/osie-arm64 ;;
  *) say "--arch: $arch is not x86_64 or aarch64"; exit 2 ;;
esac
if $build; then
  bash osie/build.sh --arch "$arch" --out "$from" "$@"
fi
args=(osie release --from "$from" --out "$out" --arch "$arch")
[ -n "$version" ] && args+=(--version "$version")
dir=$(cargo run -q -p tinkctl -- "${args[@]}")
say "release $dir:"
cat "$dir/SHA256SUMS" >&2
echo "$dir"
