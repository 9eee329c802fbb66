#!/usr/bin/env bash
# Runs every test of the workspace on a fresh machine: installs the test dependencies, then
# `cargo test --workspace`. Extra arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if ! docker info >/dev/null 2>&1 && [ "${TINK_SKIP_DOCKER_TESTS:-}" != 1 ]; then
  echo "error: no Docker engine answers; start it, or set TINK_SKIP_DOCKER_TESTS=1 to skip the Docker tests" >&2
  exit 1
fi
# The end-to-end tests (cli/tinkctl/tests/dev_stack.rs) start every service's binary from the
# target directory; `cargo test` alone builds only the binaries of the package under test.
cargo build --workspace --bins
cargo test --workspace "$@"
