#!/usr/bin/env bash
# Issue 14's harness in its short mode, so it cannot rot: the stack as separate processes
# (nats-server, kube-lite, the controller, two servers) and 200 simulated agents run 300
# three-action workflows at 50/s, then the event comparison for 2 s each. Fails when a
# workflow does not succeed or the harness fails.
#
# Builds with the dev profile by default, as scripts/test.sh and scripts/demo.sh do, so CI
# reuses their build (a release build of these packages adds several minutes on 2 cores);
# SCALE_PROFILE=release for figures. Extra arguments go to tink-scale.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${SCALE_PROFILE:-dev}"
dir=debug
[ "$profile" = release ] && dir=release
target="${CARGO_TARGET_DIR:-target}"
command -v nats-server >/dev/null || { echo "nats-server is missing: bash scripts/install-deps.sh" >&2; exit 1; }
cargo build -q --profile "$profile" -p kube-lite -p tink-controller -p tink-server -p tink-scale-bench --bins
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
# Two load generator processes, two source addresses and a 2 s measurement at rest, so the
# 100,000-agent options (issue 33) run here too.
"$target/$dir/tink-scale" --agents 200 --agents-per-process 120 --source-addresses 2 --idle-seconds 2 \
  --steps 50x300 --events-seconds 2 --events-connections 16 \
  --log-level warn --json "$json" "$@"
echo "scale (short): every workflow succeeded"
