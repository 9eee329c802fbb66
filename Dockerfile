# tinkerbell-rs: one image with every binary (tink-controller, tink-server, tink-webhook, hegel,
# tink-netboot, tink-agent, tinkctl, kube-lite, tink-console, tink-bmc-controller); each
# Deployment or compose service picks its command.
#
#   docker build -t tinkerbell-rs/tinkerbell:0.1.0 .
#       builds from source in the `build` stage (rust:<ver>-slim-bookworm) and copies the release
#       binaries onto debian:bookworm-slim (the default, last stage: `image`).
#   docker build --target prebuilt --build-arg BIN_DIR=target/docker-bin -t ... .
#       the same runtime stage with binaries built on the host (a Debian 12 / glibc 2.36 host):
#       what CI does (scripts/images.sh), where no image can be pulled and the base is made with
#       debootstrap. Stages are ordered so that the legacy builder never reaches `build` for it.
# Only syntax the classic builder understands (Debian's docker.io 20.10 has no BuildKit).

ARG RUST_VERSION=1.89
ARG DEBIAN_SUITE=bookworm

FROM debian:${DEBIAN_SUITE}-slim AS runtime
# Only the CA certificates (the Kubernetes client loads the system roots even for a cluster
# with its own CA) and ipmitool (tink-bmc-controller's IPMI provider runs it, as bmclib does)
# are added. 65532 is the conventional "nonroot" uid; the Kubernetes manifests run it with a
# read-only root.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates ipmitool \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin
ENV TINK_LOG_FORMAT=json
WORKDIR /
USER 65532:65532

FROM runtime AS prebuilt
ARG BIN_DIR=target/docker-bin
COPY ${BIN_DIR}/ /usr/local/bin/

FROM rust:${RUST_VERSION}-slim-${DEBIAN_SUITE} AS build
WORKDIR /src
COPY . .
# .cargo/config.toml asks for the mold linker; the image's default linker is used here.
RUN rm -f .cargo/config.toml \
 && cargo build --release --locked \
      -p tink-controller -p tink-server -p tink-webhook -p hegel -p tink-netboot -p tink-agent -p tinkctl \
      -p kube-lite -p tink-console -p tink-bmc-controller \
 && mkdir /out \
 && cp target/release/tink-controller target/release/tink-server target/release/tink-webhook \
      target/release/hegel target/release/tink-netboot target/release/tink-agent target/release/tinkctl target/release/kube-lite \
      target/release/tink-console target/release/tink-bmc-controller /out/

FROM runtime AS image
COPY --from=build /out/ /usr/local/bin/
