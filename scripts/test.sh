#!/usr/bin/env bash
# Runs the whole test suite. Installs what the tests need when it is missing:
# redis-server (the harness starts its own on a free port per test; set REDIS_URL to use
# an existing server instead, with per-test key prefixes).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v redis-server >/dev/null 2>&1; then
  echo "== installing redis-server"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq redis-server >/dev/null
fi

echo "== cargo test (unit, property and integration tests)"
cargo test --locked --all-targets "$@"
