#!/usr/bin/env bash
# Builds the OSIE (osie/build.sh) and makes a versioned release of it: DIR/VERSION/ with
# vmlinuz-ARCH, initramfs-ARCH, osie.json and SHA256SUMS (`tinkctl osie release`, which does the
# release step and is tested on its own; osie/README.md, "Versioned releases").
#
#   bash osie/release.sh [--out DIR] [--version V] [--arch x86_64] [--no-build] [-- BUILD.SH ARGS]
#
# --out       where release folders go (default target/osie-releases)
# --version   the release version (default: `git describe --always --dirty` and the kernel
#             version, e.g. c55ca67-linux-6.1.0-56)
# --arch      the build's architecture (x86_64; aarch64 once build.sh builds an arm64 OSIE)
# --no-build  release what target/osie already holds (build.sh's last output)
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
    *) echo "usage: $0 [--out DIR] [--version V] [--arch x86_64] [--no-build] [-- BUILD.SH ARGS]" >&2; exit 2 ;;
  esac
done
say() { echo "osie/release.sh: $*" >&2; }
if [ "$arch" != x86_64 ] && $build; then
  say "osie/build.sh builds x86_64 only: release an $arch build with --no-build (its output in target/osie)"
  exit 2
fi
if $build; then
  bash osie/build.sh --out target/osie "$@"
fi
args=(osie release --from target/osie --out "$out" --arch "$arch")
[ -n "$version" ] && args+=(--version "$version")
dir=$(cargo run -q -p tinkctl -- "${args[@]}")
say "release $dir:"
cat "$dir/SHA256SUMS" >&2
echo "$dir"
