#!/bin/sh
# virtlogd and libvirtd for the Redfish BMC-powered VM (scripts/lib/bmc-vm.sh), without systemd,
# inside the demo's network namespace (so libvirt's taps join the demo's bridge) and in a private
# mount namespace of their own: /etc/libvirt, /run/libvirt, /var/lib/libvirt, /var/cache/libvirt
# and /var/log/libvirt are this run's folders, so nothing of the host's libvirt is read or
# changed and a run leaves nothing behind. QEMU runs as root with no cgroups or security driver.
#   ip netns exec NS unshare -m --propagation private sh bmc-vm-libvirtd.sh DIR [CACHE]
# CACHE, when given, is /var/cache/libvirt instead of DIR/cache: libvirtd keeps there what it
# probed of the QEMU binary (several seconds at each start under TCG), revalidated by libvirt
# against the binary itself.
# The client side reaches it with qemu:///system?socket=DIR/run/libvirt-sock.
# SIGTERM stops both daemons (the domain is destroyed first by the caller).
set -eu
d=$1
cache=${2:-$1/cache}
mkdir -p "$cache"
for x in etc run lib cache log log/qemu; do mkdir -p "$d/$x"; done
cat > "$d/etc/qemu.conf" <<CONF
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
CONF
cat > "$d/etc/libvirtd.conf" <<CONF
unix_sock_group = "root"
unix_sock_rw_perms = "0700"
log_outputs = "3:file:$d/log/libvirtd.log"
CONF
cat > "$d/etc/virtlogd.conf" <<CONF
log_outputs = "3:file:$d/log/virtlogd.log"
CONF
for m in "$d/etc:/etc/libvirt" "$d/run:/run/libvirt" "$d/lib:/var/lib/libvirt" "$cache:/var/cache/libvirt" "$d/log:/var/log/libvirt"; do
  mkdir -p "${m#*:}"
  mount --bind "${m%%:*}" "${m#*:}"
done
virtlogd -f /etc/libvirt/virtlogd.conf -p /run/libvirt/virtlogd.pid &
vl=$!
libvirtd -f /etc/libvirt/libvirtd.conf -p /run/libvirt/libvirtd.pid &
lv=$!
trap 'kill $lv 2>/dev/null; wait $lv; kill $vl 2>/dev/null; wait $vl; exit 0' TERM INT
wait
