#!/usr/bin/env bash
# A real operating system installed end to end: Debian 12 with cloud-init, configured by Hegel.
#
#   1. a Debian disk image from Debian's packages (scripts/debian-image.sh; cached in
#      /var/cache/tinkerbell-rs), served by the stack's file server;
#   2. the stack in a network namespace on a bridge (tinkctl dev up, as scripts/netboot-demo.sh),
#      Debian's docker-registry holding Tinkerbell-compatible action images
#      (tinkerbell/actions/{image2disk,writefile,cexec,kexec}, scripts/images.sh);
#   3. a Hardware in Tinkerbell's v1alpha1 form (as existing users have them: the public SSH key in
#      metadata.instance.ssh_keys, the user-data in userData) with the machine's OSIE set after
#      conversion, the Template deploy/examples/debian-bookworm.yaml and a Workflow;
#   4. a QEMU machine with an empty disk PXE-boots the OSIE; the agent streams the image, writes
#      cloud-init's datasource config (Hegel's URL), sets the hostname in a chroot and kexecs
#      into the installed kernel once the workflow's success is stored;
#   5. the installed Debian boots; its own cloud-init (Ec2 datasource, IMDSv2 token from Hegel)
#      sets the hostname, installs the key and runs the user-data, which writes the nonce to a
#      file and phones home to a listener of this script;
#   6. checks: the workflow Succeeded, the phone-home's hostname and instance are the Hardware's,
#      then logs in over SSH with the generated key and prints `installed OS:` lines (uname -a,
#      cloud-init status, the nonce file); any failed check exits non-zero.
#
#   sudo bash scripts/os-install-demo.sh [--reuse DIR]
#
# --reuse DIR: the output folder of scripts/netboot-demo.sh (the plain run in .ci/run): its
# stack CA, the OSIE built for that CA and the accelerator choice are reused.
# Environment: TINK_OS_DEMO_OUT (output folder, default target/os-install-demo),
# TINK_OS_DEMO_NONCE (the nonce; random when unset), TINK_NETBOOT_ACCEL (kvm or tcg),
# TINK_OS_DEMO_TIMEOUT (seconds for install and first boot, default 1500).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
reuse=""
while [ $# -gt 0 ]; do
  case "$1" in
    --reuse) reuse=${2:-}; shift 2 || { echo "error: --reuse needs a folder" >&2; exit 2; } ;;
    *) echo "usage: $0 [--reuse DIR]" >&2; exit 2 ;;
  esac
done
if [ -n "$reuse" ]; then
  reuse=$(cd "$reuse" 2>/dev/null && pwd) || { echo "error: --reuse: no folder $reuse" >&2; exit 2; }
  for f in stack/pki/ca.crt files/vmlinuz files/initramfs accel; do
    [ -e "$reuse/$f" ] || { echo "error: --reuse: $reuse/$f missing (run scripts/netboot-demo.sh into it first)" >&2; exit 2; }
  done
fi
out="${TINK_OS_DEMO_OUT:-$repo/target/os-install-demo}"
[ "$out" != "$reuse" ] || { echo "error: --reuse names the output folder itself" >&2; exit 2; }
timeout_s="${TINK_OS_DEMO_TIMEOUT:-1500}"
nonce="${TINK_OS_DEMO_NONCE:-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')}"
ns="tinkos$$"
# The netboot demo's addresses: with --reuse its certificates (made for 10.99.0.1) serve here.
bridge_ip=10.99.0.1
vm_ip=10.99.0.20
vm_mac=52:54:00:0b:5e:01
vm_name=os-demo
registry="$bridge_ip:5000"
phone_port=8099
bins="$repo/target/debug"
actions="image2disk writefile cexec kexec"
# shellcheck source=lib/demo-vm.sh
. "$repo/scripts/lib/demo-vm.sh"

[ "$(id -u)" = 0 ] || { echo "error: run as root (network namespaces, tap devices, DHCP port 67, mmdebstrap)" >&2; exit 1; }

pids=()
ok=0
kctl() { nsx env KUBECONFIG="$out/stack/kubeconfig" kubectl -n os-demo "$@"; }
cleanup() {
  set +e
  if [ "$ok" != 1 ]; then
    echo "== FAILED in stage: $stage_name"
    for f in "$out"/serial-*.log; do
      [ -f "$f" ] || continue
      echo "--- last lines of $f"
      console_text "$f" | grep -av '^\s*$' | tail -n 60
    done
    for c in netboot hegel server-0 server-1 controller-0; do
      f="$out/stack/logs/$c.log"
      [ -f "$f" ] && { echo "--- last lines of $f"; tail -n 25 "$f"; }
    done
    [ -f "$out/phone-home.log" ] && { echo "--- phone-home listener"; tail -n 10 "$out/phone-home.log"; }
    if [ -f "$out/stack/env" ]; then
      echo "--- workflow"
      kctl get workflow install-debian -o yaml 2>/dev/null | sed -n '/^status:/,$p' | head -60
    fi
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  if [ -f "$out/stack/state.json" ]; then
    ip netns exec "$ns" "$bins/tinkctl" dev down --data-dir "$out/stack" >/dev/null 2>&1
  fi
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
  [ "$ok" = 1 ] || guest_crash_exit "$out"/serial-*.log
}
trap cleanup EXIT

stage "build the binaries"
cargo build -q -p tinkctl -p kube-lite -p tink-webhook -p tink-controller -p tink-server -p hegel -p tink-agent -p tink-netboot
for tool in qemu-system-x86_64 qemu-img docker-registry ssh ssh-keygen; do
  command -v "$tool" >/dev/null || { echo "error: $tool missing: run scripts/install-deps.sh" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out"

stage "the Debian image (scripts/debian-image.sh; cached)"
image=$(bash scripts/debian-image.sh | tail -n 1)
image_sha=$(cat "$image.sha256")
echo "   $image ($(du -m "$image" | awk '{print $1}') MiB)"

stage "the action images (tinkerbell/actions/*)"
missing=""
for a in $actions; do
  docker image inspect "tinkerbell/actions/$a:latest" >/dev/null 2>&1 || missing="$missing $a"
done
if [ -n "$missing" ]; then
  echo "   not in the engine:$missing: scripts/images.sh --actions-only"
  bash scripts/images.sh --actions-only
fi
pairs=()
for a in $actions; do pairs+=("tinkerbell/actions/$a:latest=tinkerbell/actions/$a:latest"); done
demo_push "$out/registry" "${pairs[@]}"

stage "network namespace, bridge and tap"
demo_netns "$bridge_ip"

stage "the stack on $bridge_ip (tinkctl dev up)"
demo_stack "$bridge_ip"
# The image beside the OSIE: a hard link when the cache is on the same file system.
ln "$image" "$files/debian.raw.zst" 2>/dev/null || cp "$image" "$files/debian.raw.zst"

if [ -n "$reuse" ]; then
  stage "OSIE: reused from $reuse"
  cmp -s "$reuse/stack/pki/ca.crt" "$out/stack/pki/ca.crt" || { echo "error: the stack's CA is not the reused one" >&2; exit 1; }
  cp "$reuse/files/vmlinuz" "$reuse/files/initramfs" "$files/"
  accel=$(cat "$reuse/accel")
else
  stage "OSIE (osie/build.sh, the stack's CA)"
  bash osie/build.sh --out "$repo/target/osie" --ca-cert "$out/stack/pki/ca.crt"
  cp "$repo/target/osie/vmlinuz" "$repo/target/osie/initramfs" "$files/"
  accel=$(demo_accel "$out/kvm-probe.log" "$files/vmlinuz")
fi
accel="${TINK_NETBOOT_ACCEL:-$accel}"
case "$accel" in
  kvm) qemu_accel=(-accel kvm -cpu host) ;;
  *) qemu_accel=(-accel tcg) ;;
esac
echo "   QEMU accelerator: $accel"
demo_registry "$out/registry" "$registry" tinkerbell/actions/image2disk

stage "SSH key, nonce and the phone-home listener"
ssh-keygen -q -t ed25519 -N '' -C "os-install-demo" -f "$out/id_ed25519"
pubkey=$(cat "$out/id_ed25519.pub")
echo "$nonce" > "$out/nonce.expected"
echo "   nonce $nonce"
# cloud-init's phone_home module POSTs a form: instance_id, hostname, the host keys.
cat > "$out/phone-home.py" <<'EOF'
import http.server, json, sys, urllib.parse
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        form = urllib.parse.parse_qs(self.rfile.read(n).decode("utf-8", "replace"))
        rec = {"path": self.path, "from": self.client_address[0], **{k: v[0] for k, v in form.items()}}
        with open(sys.argv[2], "a") as f:
            f.write(json.dumps(rec) + "\n")
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok\n")
    def log_message(self, *a):
        sys.stderr.write("phone-home: %s\n" % (a[0] % a[1:]))
http.server.HTTPServer((sys.argv[1], int(sys.argv[3])), H).serve_forever()
EOF
ip netns exec "$ns" python3 "$out/phone-home.py" "$bridge_ip" "$out/phone-home.jsonl" "$phone_port" >"$out/phone-home.log" 2>&1 &
pids+=($!)

stage "Hardware (v1alpha1), OSIE, Template and Workflow"
userdata="#cloud-config
# tinkerbell-rs os-install-demo
write_files:
  - path: /var/lib/tink-os-demo/nonce
    permissions: '0644'
    content: |
      $nonce
runcmd:
  - [sh, -c, 'echo \"tink-os-demo: user-data ran\" > /dev/console']
phone_home:
  url: http://$bridge_ip:$phone_port/phone-home/\$INSTANCE_ID
  post: [instance_id, hostname, pub_key_ed25519]
  tries: 10"
cat > "$out/objects.yaml" <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: os-demo}
---
apiVersion: tinkerbell.org/v1alpha2
kind: OSIE
metadata: {name: test-osie, namespace: os-demo}
spec:
  kernelUrl: $TINK_NETBOOT_URL/vmlinuz
  initrdUrl: $TINK_NETBOOT_URL/initramfs
---
apiVersion: tinkerbell.org/v1alpha1
kind: Hardware
metadata: {name: $vm_name, namespace: os-demo}
spec:
  disks: [{device: /dev/vda}]
  interfaces:
    - dhcp:
        mac: "$vm_mac"
        hostname: $vm_name
        ip: {address: $vm_ip, netmask: 255.255.255.0, gateway: $bridge_ip}
        lease_time: 3600
        arch: x86_64
      netboot:
        allowPXE: true
        allowWorkflow: true
        osie:
          kernelParams: ["insecure_registries=$registry"]
  metadata:
    instance:
      id: $vm_name-0001
      hostname: $vm_name
      ssh_keys: ["$pubkey"]
  userData: |
$(printf '%s\n' "$userdata" | sed 's/^/    /')
---
EOF
sed 's/^metadata:$/metadata:\n  namespace: os-demo/' deploy/examples/debian-bookworm.yaml >> "$out/objects.yaml"
cat >> "$out/objects.yaml" <<EOF
---
apiVersion: tinkerbell.org/v1alpha2
kind: Workflow
metadata: {name: install-debian, namespace: os-demo}
spec:
  hardwareRef: {name: $vm_name}
  templateRef: {name: debian-bookworm}
  templateData:
    registry: $registry
    image_url: $TINK_NETBOOT_URL/debian.raw.zst
    hegel_url: $HEGEL_URL
  timeout: 30m
EOF
nsx env KUBECONFIG="$out/stack/kubeconfig" kubectl apply -f "$out/objects.yaml" >/dev/null
# v1alpha1 has no OSIE reference (its per-interface OSIE URLs have no v1alpha2 home): set it on
# the converted object, as `tinkctl migrate` does. The v1alpha1 metadata stays in the annotation.
kctl patch hardware "$vm_name" --type merge -p '{"spec":{"osie":{"osieRef":{"name":"test-osie"}}}}' >/dev/null
kctl get hardware "$vm_name" -o jsonpath='   Hardware {.metadata.name}: OSIE {.spec.osie.osieRef.name}, kernel params {.spec.osie.kernelParams}{"\n"}'

wf_state() { kctl get workflow install-debian -o jsonpath='{.status.state}' 2>/dev/null || true; }

stage "install: PXE, OSIE, image2disk, writefile, cexec, kexec ($accel)"
qemu-img create -q -f qcow2 "$out/disk.qcow2" 4G
ip netns exec "$ns" timeout "$timeout_s" qemu-system-x86_64 "${qemu_accel[@]}" -m 2048 -smp 2 \
  -nographic -no-reboot -boot order=nc \
  -drive file="$out/disk.qcow2",format=qcow2,if=virtio,cache=unsafe \
  -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
  -device virtio-net-pci,netdev=n0,mac="$vm_mac" \
  -serial file:"$out/serial-1.log" -monitor none -display none </dev/null >"$out/qemu-1.log" 2>&1 &
qemu=$!
pids+=($qemu)
boot_start=$(date +%s)
deadline=$((boot_start + timeout_s))
state=""
while :; do
  state=$(wf_state)
  case "$state" in Succeeded) break ;; Failed|Canceled|Timeout) echo "error: the workflow is $state" >&2; exit 1 ;; esac
  kill -0 "$qemu" 2>/dev/null || { echo "error: the machine stopped while the workflow is ${state:-Pending}" >&2; exit 1; }
  guest_kernel_crash "$out/serial-1.log" >/dev/null && { echo "error: the machine's kernel crashed while the workflow is ${state:-Pending}" >&2; exit 1; }
  [ "$(date +%s)" -lt "$deadline" ] || { echo "error: the workflow is still ${state:-Pending}" >&2; exit 1; }
  sleep 2
done
installed_at=$(date +%s)
echo "   workflow: $state, $((installed_at - boot_start)) s after the machine started"
kctl get workflow install-debian \
  -o jsonpath='{range .status.actions[*]}   action {.rendered.name}: {.state}, started {.startedAt}, last change {.lastTransitioned}{"\n"}{end}' 2>/dev/null || true

stage "first boot of the installed Debian: cloud-init from Hegel, phone home"
until [ -s "$out/phone-home.jsonl" ]; do
  kill -0 "$qemu" 2>/dev/null || { echo "error: the machine stopped before it phoned home" >&2; exit 1; }
  [ "$(date +%s)" -lt "$deadline" ] || { echo "error: no phone-home within ${timeout_s}s of the machine's start" >&2; exit 1; }
  sleep 2
done
phoned_at=$(date +%s)
# The last kernel that started is the installed one (kexec'd from the OSIE).
console_text "$out/serial-1.log" | grep -a "Linux version" | tail -n 1 | sed 's/.*\(Linux version [^ ]*\).*/   after kexec: \1/' || true
echo "   phoned home $((phoned_at - installed_at)) s after the workflow succeeded"
python3 - "$out/phone-home.jsonl" "$vm_name" "$vm_name-0001" "$vm_ip" <<'EOF'
import json, sys
rec = json.loads(open(sys.argv[1]).readline())
want = {"hostname": sys.argv[2], "instance_id": sys.argv[3], "from": sys.argv[4], "path": "/phone-home/" + sys.argv[3]}
bad = [f"{k}={rec.get(k)!r} (want {v!r})" for k, v in want.items() if rec.get(k) != v]
print("   phone-home: " + ", ".join(f"{k}={rec.get(k)}" for k in want))
if bad:
    sys.exit("error: the phone-home does not match the Hardware: " + "; ".join(bad))
EOF

stage "log in over SSH with the Hardware's key"
ssh_opts=(-i "$out/id_ed25519" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o ConnectTimeout=10 -o BatchMode=yes)
login=""
for _ in $(seq 1 30); do
  if nsx ssh "${ssh_opts[@]}" "debian@$vm_ip" true 2>"$out/ssh.err"; then login=ok; break; fi
  sleep 3
done
[ -n "$login" ] || { cat "$out/ssh.err" >&2; echo "error: cannot log in as debian@$vm_ip with the Hardware's key" >&2; exit 1; }
nsx ssh "${ssh_opts[@]}" "debian@$vm_ip" \
  'echo "installed OS: $(uname -a)"; echo "installed OS: hostname $(hostname)"; echo "installed OS: cloud-init $(cloud-init status --wait 2>/dev/null | tail -n 1)"; echo "installed OS: datasource $(cat /run/cloud-init/cloud-id 2>/dev/null)"; echo "installed OS: root file system $(df -h --output=size / | tail -n 1 | tr -d " ") (grown to the disk by cloud-init)"; echo "installed OS: nonce $(cat /var/lib/tink-os-demo/nonce)"' \
  | tee "$out/installed-os.txt"
grep -q "^installed OS: hostname $vm_name\$" "$out/installed-os.txt" || { echo "error: the installed OS's hostname is not $vm_name" >&2; exit 1; }
if ! grep -q "^installed OS: cloud-init status: done\$" "$out/installed-os.txt"; then
  # What went wrong, from the machine's own records.
  nsx ssh "${ssh_opts[@]}" "debian@$vm_ip" 'cloud-init status --long; sudo grep -a -A4 "WARNING\|ERROR\|Traceback" /var/log/cloud-init.log | tail -n 60' >&2 || true
  echo "error: cloud-init did not finish cleanly" >&2
  exit 1
fi
grep -q "^installed OS: nonce $nonce\$" "$out/installed-os.txt" || { echo "error: the nonce file does not hold $nonce" >&2; exit 1; }

stage "power off"
nsx ssh "${ssh_opts[@]}" "debian@$vm_ip" 'sudo systemctl poweroff' >/dev/null 2>&1 || true
for _ in $(seq 1 60); do kill -0 "$qemu" 2>/dev/null || break; sleep 2; done
if kill -0 "$qemu" 2>/dev/null; then kill "$qemu"; fi
# The installed disk is the largest file of the run (over 1 GiB): not kept after success.
rm -f "$out/disk.qcow2"

ok=1
summary
echo "   install $((installed_at - boot_start)) s, first boot to phone-home $((phoned_at - installed_at)) s"
echo "os-install demo: Debian installed with Tinkerbell's actions and configured by its own cloud-init from Hegel (logs in $out)"
