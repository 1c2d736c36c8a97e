#!/usr/bin/env bash
# SSE delivery under a storm of plan flips: a 1,000-agent session with 20 subscribers receives
# every event of 2,000 committed flips, compared with a 1-agent session (examples/storm_bench.rs).
# Reports missing deliveries and delivery throughput. Starts its own redis-server and server on
# free loopback ports, and stops everything when done.
#
#   bash k6/bench-storm.sh
#   AGENTS=200 SUBSCRIBERS=5 FLIPS=500 WRITERS=2 ROUNDS=1 bash k6/bench-storm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTS=${AGENTS:-1000}
SUBSCRIBERS=${SUBSCRIBERS:-20}
FLIPS=${FLIPS:-2000}
WRITERS=${WRITERS:-4}
ROUNDS=${ROUNDS:-3}

. k6/common.sh
cargo build --release -q --bin dsh-plan --example storm_bench
start_redis

start_server REDIS_URL=redis://127.0.0.1:$RPORT DSH_MAX_AGENTS=$AGENTS

echo "== $FLIPS flips by $WRITERS writers, $SUBSCRIBERS subscribers, 1 vs $AGENTS agents, $ROUNDS rounds (load: $(cut -d' ' -f1-3 /proc/loadavg))"
target/release/examples/storm_bench "http://127.0.0.1:$HPORT" "$SPID" "$AGENTS" "$SUBSCRIBERS" "$FLIPS" "$WRITERS" "$ROUNDS"
