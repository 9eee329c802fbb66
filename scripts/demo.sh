#!/usr/bin/env bash
# Brings up the development stack on this machine and runs the sample workflow to Succeeded:
#   kube-lite (the project's Kubernetes-compatible API server for tests and local use), a
#   nats-server with JetStream, tink-server, tink-controller and one tink-agent, all as local
#   processes on loopback, plus a locally built busybox action image in the machine's Docker.
# Then it applies deploy/crds and deploy/examples/demo.yaml and waits for the Workflow.
#
#   bash scripts/demo.sh            run the demo, stop the stack at the end
#   KEEP=1 bash scripts/demo.sh     leave the stack running (prints how to reach it and stop it)
# The demo's actions only print, so the agent runs them unprivileged (some sandboxes, this
# project's CI among them, cannot start privileged containers); TINK_DEMO_PRIVILEGED=true
# runs them privileged as real provisioning actions need.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash scripts/install-deps.sh
docker info >/dev/null 2>&1 || { echo "error: the Docker engine does not answer" >&2; exit 1; }

echo "== building the stack"
cargo build -q -p kube-lite -p tink-server -p tink-controller -p tink-agent
bin="$root/target/debug"

work=$(mktemp -d /tmp/tink-demo.XXXXXX)
pids=()
cleanup() {
  status=$?
  if [ "${KEEP:-}" = 1 ] && [ $status -eq 0 ]; then
    echo "stack left running (work dir $work); stop it with: kill ${pids[*]}"
    return
  fi
  if [ $status -ne 0 ] && [ -n "${DEMO_KEEP_LOGS:-}" ]; then cp -r "$work" "$DEMO_KEEP_LOGS"; fi
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ $status -ne 0 ]; then
    echo "== demo failed; last log lines:" >&2
    for log in "$work"/*.log; do echo "--- $log" >&2; tail -n 15 "$log" >&2; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # url
  for _ in $(seq 1 100); do curl -fsS "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "error: $1 did not become ready" >&2; return 1
}

echo "== action image tink-demo/busybox:latest (docker import, no registry)"
if ! docker image inspect tink-demo/busybox:latest >/dev/null 2>&1; then
  rootfs="$work/rootfs"; mkdir -p "$rootfs/bin" "$rootfs/tmp"
  cp /bin/busybox "$rootfs/bin/busybox"
  for applet in $("$rootfs/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
  done
  tar -C "$rootfs" -c . | docker import - tink-demo/busybox:latest >/dev/null
fi

nats_port=$(free_port); grpc_port=$(free_port); api_port=$(free_port)
server_admin=$(free_port); controller_admin=$(free_port); agent_admin=$(free_port)
export KUBECONFIG="$work/kubeconfig" NATS_URL="nats://127.0.0.1:$nats_port" RUST_LOG=info

echo "== nats-server -js on :$nats_port"
nats-server -js -a 127.0.0.1 -p "$nats_port" -sd "$work/nats" >"$work/nats.log" 2>&1 & pids+=($!)
echo "== kube-lite on :$api_port"
"$bin/kube-lite" --listen "127.0.0.1:$api_port" --kubeconfig "$KUBECONFIG" >"$work/kube-lite.log" 2>&1 & pids+=($!)
for _ in $(seq 1 100); do [ -s "$KUBECONFIG" ] && kubectl version >/dev/null 2>&1 && break; sleep 0.2; done
kubectl apply -f deploy/crds/ >/dev/null
kubectl create namespace tink-system >/dev/null

echo "== tink-server on :$grpc_port, tink-controller, tink-agent 02:00:00:00:00:01"
"$bin/tink-server" --listen "127.0.0.1:$grpc_port" --admin-addr "127.0.0.1:$server_admin" \
  --replica-id server-0 >"$work/server.log" 2>&1 & pids+=($!)
wait_http "http://127.0.0.1:$server_admin/readyz"
"$bin/tink-controller" --admin-addr "127.0.0.1:$controller_admin" --replica-id controller-0 \
  >"$work/controller.log" 2>&1 & pids+=($!)
wait_http "http://127.0.0.1:$controller_admin/readyz"
mkdir -p "$work/agent"
"$bin/tink-agent" --agent-id 02:00:00:00:00:01 --server "127.0.0.1:$grpc_port" \
  --admin-addr "127.0.0.1:$agent_admin" --work-dir "$work/agent" \
  --privileged "${TINK_DEMO_PRIVILEGED:-false}" >"$work/agent.log" 2>&1 & pids+=($!)

echo "== kubectl apply -f deploy/examples/demo.yaml"
kubectl apply -f deploy/examples/demo.yaml
if ! kubectl -n tink-demo wait workflow/provision-machine-1 \
  --for=jsonpath='{.status.state}'=Succeeded --timeout=120s; then
  kubectl -n tink-demo get workflow provision-machine-1 -o yaml >&2 || true
  exit 1
fi
kubectl -n tink-demo get workflows -o wide
kubectl -n tink-demo get workflow provision-machine-1 \
  -o jsonpath='{range .status.actions[*]}{.rendered.name}{"\t"}{.state}{"\n"}{end}'
echo "== kubectl describe: the Workflow's Events"
kubectl -n tink-demo describe workflow provision-machine-1 | sed -n '/^Events:/,$p'
echo "== what the actions printed (agent log)"
sed 's/\x1b\[[0-9;]*m//g' "$work/agent.log" | grep -o '\[tink-demo/provision-machine-1/.*' || true
echo "demo: workflow provision-machine-1 Succeeded"
