#!/usr/bin/env bash
# The tink services across hosts under a seeded fault schedule (issue 32): runs
# services/controller/tests/partitions.rs (3-node NATS cluster, 2 controllers and 3 server
# replicas each in a network namespace of its own, simulated agents, faults drawn from the
# seed), then prints the FAULT lines, the history checker's report and the history's path.
#
#   scripts/fault-schedule.sh [--short] [--seed N]
#
#   --short   one round: each of the eight fault kinds once, 60 workflows, 20 agents
#             (about three minutes here, plus the build)
#   (default) TINK_FAULT_ROUNDS rounds (default 3), 100 workflows, 25 agents
#   --seed N  replay a schedule (default: random, printed)
#
# Root only (network namespaces). Environment passed through: TINK_FAULT_ROUNDS,
# TINK_FAULT_WORKFLOWS, TINK_FAULT_AGENTS, TINK_FAULT_HISTORY, TINK_NATS_SERVER_2_10.
# Exits with the test's status.
set -euo pipefail
cd "$(dirname "$0")/.."

short=0
seed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --short) short=1 ;;
    --seed) seed="${2:?--seed needs a number}"; shift ;;
    --seed=*) seed="${1#--seed=}" ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$seed" ]; then
  seed=$(( $(od -An -N4 -tu4 /dev/urandom) % 1000000000 ))
fi
if ! [[ "$seed" =~ ^[0-9]+$ ]]; then
  echo "--seed wants a number, not $seed" >&2
  exit 2
fi
if [ "$short" = 1 ]; then
  : "${TINK_FAULT_ROUNDS:=1}" "${TINK_FAULT_WORKFLOWS:=60}" "${TINK_FAULT_AGENTS:=20}"
else
  : "${TINK_FAULT_ROUNDS:=3}" "${TINK_FAULT_WORKFLOWS:=100}" "${TINK_FAULT_AGENTS:=25}"
fi
: "${TINK_FAULT_HISTORY:=${TMPDIR:-/tmp}/tink-fault-schedule-$seed.jsonl}"
export TINK_FAULT_SEED="$seed" TINK_FAULT_ROUNDS TINK_FAULT_WORKFLOWS TINK_FAULT_AGENTS TINK_FAULT_HISTORY

log=$(mktemp "${TMPDIR:-/tmp}/tink-fault-schedule-$seed.XXXXXX.log")
echo "fault schedule: seed $seed, $TINK_FAULT_ROUNDS round(s), $TINK_FAULT_WORKFLOWS workflows, $TINK_FAULT_AGENTS agents; log $log"
start=$(date +%s)
status=0
CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}" cargo test -p tink-controller --test partitions -- \
  --exact services_across_hosts_survive_a_seeded_fault_schedule --nocapture --test-threads=1 \
  >"$log" 2>&1 || status=$?
echo "--- faults"
grep -E '^FAULT ' "$log" | grep -v '(schedule, seed' || true
echo "--- report"
# The checker's report (from "the history's verdict" to its blank line) and the summary.
sed -n '/the history.s verdict/,/^$/p' "$log"
grep -E '^partitions: (seed|all [0-9]+ agents|[0-9]+ agents on)' "$log" | grep -v 'verdict$' || true
if [ -s "$TINK_FAULT_HISTORY" ]; then
  echo "--- per fault (the workflows in flight during each kind)"
  CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}" cargo run -q -p tink-history -- faults "$TINK_FAULT_HISTORY" || true
fi
if [ "$status" != 0 ]; then
  echo "--- failure"
  grep -E -A4 "panicked at|^error" "$log" | grep -vE '^\s+[0-9]+: |^\s+at ' | head -40 || true
fi
echo "--- seed $seed, $(( $(date +%s) - start )) s, status $status; history $TINK_FAULT_HISTORY; full log $log"
exit "$status"
