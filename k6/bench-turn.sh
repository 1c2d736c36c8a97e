#!/usr/bin/env bash
# Engine overhead per step: one turn against an instant mock provider (hosted by
# examples/turn_bench.rs) steps until DSH_MAX_STEPS, on a 10-event session and on one of
# 100,000 events. Reports steps/s of wall time and the server's CPU time per step. Starts its own
# redis-server and server on free loopback ports, and stops everything when done.
#
#   bash k6/bench-turn.sh
#   STEPS=500 BIG=50000 ROUNDS=1 bash k6/bench-turn.sh
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-1000}
BIG=${BIG:-100000}
ROUNDS=${ROUNDS:-5}

. k6/common.sh
cargo build --release -q --bin dsh-plan --example turn_bench
start_redis

MPORT=$(free_port) # the mock provider's, bound by turn_bench
PREFIX=dsh
REDIS_URL=redis://127.0.0.1:$RPORT
start_server REDIS_URL="$REDIS_URL" DSH_KEY_PREFIX=$PREFIX DSH_MAX_STEPS="$STEPS" \
  DSH_PROVIDER=openai DSH_PROVIDER_URL="http://127.0.0.1:$MPORT/v1"

echo "== one turn of up to $STEPS steps, instant mock provider, $ROUNDS rounds (load: $(cut -d' ' -f1-3 /proc/loadavg))"
target/release/examples/turn_bench "http://127.0.0.1:$HPORT" "$SPID" "$MPORT" "$REDIS_URL" "$PREFIX" "$BIG" "$ROUNDS"
