#!/usr/bin/env bash
# CI: compose.yaml with locally built images runs the demo workflow to Succeeded.
#   1. scripts/images.sh builds tinkerbell-rs/tinkerbell:0.1.0 (debootstrap base, no pulls);
#   2. NATS: no image can be pulled, so unless NATS_IMAGE is given or nats:2.10-alpine is
#      present, a local one is made from the same base and Debian's nats-server binary;
#   3. docker-compose up, then `tinkctl demo` from the host against the compose kube-lite;
#   4. docker-compose down -v (logs printed on failure).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v docker-compose >/dev/null 2>&1 || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null; }
bash scripts/install-deps.sh
bash scripts/images.sh

if [ -z "${NATS_IMAGE:-}" ]; then
  if docker image inspect nats:2.10-alpine >/dev/null 2>&1; then
    export NATS_IMAGE=nats:2.10-alpine
  else
    export NATS_IMAGE=tinkerbell-rs/nats-local:latest
    ctx=$(mktemp -d /tmp/tink-nats-image.XXXXXX)
    cp "$(command -v nats-server)" "$ctx/nats-server"
    printf 'FROM debian:bookworm-slim\nCOPY nats-server /usr/local/bin/nats-server\n' > "$ctx/Dockerfile"
    docker build -q -t "$NATS_IMAGE" "$ctx" >/dev/null
    rm -rf "$ctx"
  fi
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export TINK_COMPOSE_API_PORT=$(free_port) TINK_COMPOSE_GRPC_PORT=$(free_port) TINK_COMPOSE_HEGEL_PORT=$(free_port) TINK_COMPOSE_CONSOLE_PORT=$(free_port)
project="tinkci$$"
compose=(docker-compose -p "$project" -f compose.yaml)
work=$(mktemp -d /tmp/tink-compose.XXXXXX)
cleanup() {
  status=$?
  if [ $status -ne 0 ]; then "${compose[@]}" logs --no-color --tail=30 >&2 || true; fi
  "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  rm -rf "$work"
  exit $status
}
trap cleanup EXIT

echo "== docker-compose up (project $project, API on 127.0.0.1:$TINK_COMPOSE_API_PORT)"
"${compose[@]}" up -d
cat > "$work/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: compose, cluster: {server: "http://127.0.0.1:$TINK_COMPOSE_API_PORT"}}]
contexts: [{name: compose, context: {cluster: compose, user: compose}}]
current-context: compose
users: [{name: compose, user: {token: kube-lite}}]
KC
for _ in $(seq 1 120); do
  kubectl --kubeconfig "$work/kubeconfig" get crd workflows.tinkerbell.org >/dev/null 2>&1 && break
  sleep 0.5
done
kubectl --kubeconfig "$work/kubeconfig" get crd workflows.tinkerbell.org >/dev/null
"${compose[@]}" ps
target="$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
echo "== tinkctl demo against the compose stack"
"$target/debug/tinkctl" demo --kubeconfig "$work/kubeconfig"
echo "compose: demo workflow Succeeded"
echo "== the web console shows it"
ns=$(kubectl --kubeconfig "$work/kubeconfig" get workflows -A -o jsonpath='{.items[0].metadata.namespace}')
wf=$(kubectl --kubeconfig "$work/kubeconfig" get workflows -A -o jsonpath='{.items[0].metadata.name}')
page="$work/console.html"
for _ in $(seq 1 60); do
  curl -sSf -o "$page" -H 'Authorization: Bearer kube-lite' \
    "http://127.0.0.1:$TINK_COMPOSE_CONSOLE_PORT/workflows/$ns/$wf" 2>/dev/null \
    && grep -q 'id="wf-state">Succeeded<' "$page" && break
  sleep 0.5
done
grep -q 'id="wf-state">Succeeded<' "$page" || { echo "the console does not show $ns/$wf Succeeded" >&2; exit 1; }
echo "compose: the console shows $ns/$wf Succeeded"
echo "== the BMC controller runs and leads"
holder=""
for _ in $(seq 1 60); do
  holder=$(kubectl --kubeconfig "$work/kubeconfig" -n tink-system get lease tink-bmc-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
  [ "$holder" = bmc-0 ] && break
  sleep 0.5
done
[ "$holder" = bmc-0 ] || { echo "the BMC controller does not hold its Lease (holder: '$holder')" >&2; exit 1; }
echo "compose: the BMC controller leads (Lease tink-system/tink-bmc-controller held by $holder)"
