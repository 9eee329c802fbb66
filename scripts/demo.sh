#!/usr/bin/env bash
# README's first command: on a fresh Debian machine with Docker running (as root for the package
# installs), installs what the stack needs, builds it, starts the development stack with
# `tinkctl dev up` (every service its own process on loopback) and runs `tinkctl demo`: the
# sample Hardware, OSIE, Template and Workflow (deploy/examples/demo.yaml), whose actions run in
# locally built containers sharing a volume, followed to Succeeded. The stack is stopped at the
# end unless KEEP=1 (then it prints how to use it and stop it).
#   TINK_DEV_DATA_DIR   where the stack keeps its state and logs (default: a temporary directory)
#   DEMO_KEEP_LOGS=DIR  on failure, copy the stack's logs there
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
docker info >/dev/null 2>&1 || { echo "error: the Docker engine does not answer (the agent runs the actions there)" >&2; exit 1; }

echo "== building the stack"
cargo build -q -p kube-lite -p tink-webhook -p tink-server -p tink-controller -p hegel -p tink-console -p tink-agent -p tinkctl
tinkctl="$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/tinkctl"

data="${TINK_DEV_DATA_DIR:-$(mktemp -d /tmp/tink-dev.XXXXXX)}"
cleanup() {
  status=$?
  if [ "${KEEP:-}" = 1 ] && [ $status -eq 0 ]; then return; fi
  if [ $status -ne 0 ]; then
    echo "== demo failed; last log lines:" >&2
    for log in "$data"/logs/*.log; do [ -f "$log" ] && { echo "--- $log" >&2; tail -n 15 "$log" >&2; }; done
    [ -n "${DEMO_KEEP_LOGS:-}" ] && cp -r "$data/logs" "$DEMO_KEEP_LOGS"
  fi
  "$tinkctl" dev down --data-dir "$data" >/dev/null || true
  [ -n "${TINK_DEV_DATA_DIR:-}" ] || rm -rf "$data"
}
trap cleanup EXIT

echo "== tinkctl dev up --data-dir $data"
"$tinkctl" dev up --data-dir "$data"
echo "== tinkctl demo"
"$tinkctl" demo --kubeconfig "$data/kubeconfig"
echo "== tinkctl workflow logs: the actions' output, through a server under Kubernetes RBAC"
( . "$data/env" && "$tinkctl" workflow logs provision-machine-1 -n tink-demo --kubeconfig "$data/kubeconfig" )
echo "== kubectl describe: the Workflow's Events"
kubectl --kubeconfig "$data/kubeconfig" -n tink-demo describe workflow provision-machine-1 | sed -n '/^Events:/,$p'
if [ "${KEEP:-}" = 1 ]; then
  echo "stack left running: . $data/env; stop it with: $tinkctl dev down --data-dir $data"
fi
