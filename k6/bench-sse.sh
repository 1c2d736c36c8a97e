#!/usr/bin/env bash
# SSE fan-out: commit-to-delivery latency p50/p99 and server memory per idle subscriber, with
# 1,000 and 5,000 subscribers on one replica, the commits made on another replica or the same.
# Starts its own redis-server and two replicas on free loopback ports; stops everything.
#
#   bash k6/bench-sse.sh                 # 1000 and 5000 subscribers
#   SUBSCRIBERS="1000" COMMITS=30 bash k6/bench-sse.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SUBSCRIBERS=${SUBSCRIBERS:-"1000 5000"}
COMMITS=${COMMITS:-40}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }
cargo build --release -q --bin dsh-plan --example sse_bench

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
pids+=($!)
until redis-cli -p "$RPORT" ping >/dev/null 2>&1; do sleep 0.05; done
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

for n in $SUBSCRIBERS; do
  echo "== $n subscribers on replica a, commits on replica b"
  target/release/examples/sse_bench "$A" "$B" "$APID" "$n" "$COMMITS"
  echo "== $n subscribers on replica a, commits on replica a"
  target/release/examples/sse_bench "$A" "$A" "$APID" "$n" "$COMMITS"
done
