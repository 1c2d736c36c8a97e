#!/usr/bin/env bash
# SSE fan-out: commit-to-delivery latency p50/p99 and server memory per idle subscriber, with
# 1,000 and 5,000 subscribers on one replica, the commits made on another replica or the same.
# Starts its own redis-server and two replicas on free loopback ports; stops everything.
#
#   bash k6/bench-sse.sh                 # 1000 and 5000 subscribers on one session,
#                                        # then 2000 on 2000 sessions (one each)
#   SUBSCRIBERS="1000" COMMITS=30 SPREAD="" bash k6/bench-sse.sh
#   SUBSCRIBERS= bash k6/bench-sse.sh    # only 2000 subscribers on 2000 sessions, fresh replica
set -euo pipefail
cd "$(dirname "$0")/.."
SUBSCRIBERS=${SUBSCRIBERS-"1000 5000"}  # empty: none (only the spread round)
COMMITS=${COMMITS:-40}
SPREAD=${SPREAD-2000}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
. k6/common.sh
cargo build --release -q --bin dsh-plan --example sse_bench
start_redis
export REDIS_URL=redis://127.0.0.1:$RPORT RUST_LOG=warn

start() { # id port -> pid
  DSH_BIND=127.0.0.1:$2 DSH_REPLICA_ID=$1 target/release/dsh-plan &
  pids+=($!)
  until curl -sf "http://127.0.0.1:$2/readyz" >/dev/null; do sleep 0.05; done
}
APORT=$(free_port); start a "$APORT"; APID=${pids[-1]}
BPORT=$(free_port); start b "$BPORT"
A=http://127.0.0.1:$APORT
B=http://127.0.0.1:$BPORT

# Each round starts once replica a has let go of the last round's streams (it notices a
# client that left when a write to it fails: a heartbeat or two later): until then they still
# count against the tenant's stream limit.
idle() {
  local deadline=$((SECONDS + 60))
  until curl -sf --max-time 5 "$A/metrics" | grep -qx 'dsh_sse_subscribers 0'; do
    [ $SECONDS -lt $deadline ] || { echo "replica a still holds streams after 60 s" >&2; return 1; }
    sleep 0.2
  done
}

for n in $SUBSCRIBERS; do
  echo "== $n subscribers on replica a, commits on replica b"
  idle; target/release/examples/sse_bench "$A" "$B" "$APID" "$n" "$COMMITS"
  echo "== $n subscribers on replica a, commits on replica a"
  idle; target/release/examples/sse_bench "$A" "$A" "$APID" "$n" "$COMMITS"
done

for n in $SPREAD; do
  echo "== $n subscribers on replica a, one per session, commits on replica b"
  idle; target/release/examples/sse_bench "$A" "$B" "$APID" "$n" "$n" spread
done
