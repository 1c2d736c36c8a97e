#!/usr/bin/env bash
# Group commit against the ceiling: `PUT …/plan` toggling from 64 connections on one hot
# session and spread over 256 sessions, measured side by side in the same run against dsh-plan
# and against examples/xadd_ceiling.rs (a bare actix + XADD server), and dsh-plan's share of
# the ceiling. Starts its own redis-server (or uses REDIS_URL, e.g. a cluster's
# `redis+cluster://…`) and both servers on free loopback ports; stops everything.
#
# Each load runs ROUNDS times on each server, alternating, which one goes first too (dsh-plan
# then the ceiling, the ceiling then dsh-plan, …), so a machine whose speed drifts over a minute
# (a shared VM) slows both alike; the share is the median of the rounds' shares, the req/s the
# medians of each server's rounds (so the share need not be their ratio; an even ROUNDS
# balances who goes first). A round whose wrk reports no rate counts as 0 req/s and a share of
# 0; a wrk that fails stops the benchmark.
#
#   bash k6/bench-ceiling.sh
#   DURATION=20s ROUNDS=5 CONNECTIONS=64 bash k6/bench-ceiling.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-3}
CONNECTIONS=${CONNECTIONS:-64}
SPREAD=${SPREAD:-256}
WORKERS=${WORKERS:-2}

. k6/common.sh
need wrk wrk
cargo build --release -q --bin dsh-plan --example xadd_ceiling
T=${CARGO_TARGET_DIR:-target}/release
if [ -z "${REDIS_URL:-}" ]; then
  start_redis
  export REDIS_URL=redis://127.0.0.1:$RPORT
fi

DPORT=$(free_port)
RUST_LOG=warn DSH_BIND=127.0.0.1:$DPORT DSH_WORKERS=$WORKERS "$T/dsh-plan" &
pids+=($!)
CPORT=$(free_port)
BIND=127.0.0.1:$CPORT WORKERS=$WORKERS "$T/examples/xadd_ceiling" &
pids+=($!)
DSH=http://127.0.0.1:$DPORT
CEIL=http://127.0.0.1:$CPORT
until curl -sf "$DSH/readyz" >/dev/null; do sleep 0.05; done
until curl -s -o /dev/null "$CEIL/"; do sleep 0.05; done

new_session() { curl -sf -XPOST -H 'content-type: application/json' "$DSH/v1/sessions" | python3 -c 'import sys,json; print(json.load(sys.stdin)["id"])'; }
rps() { # base sessions
  SESSIONS=$2 MODE=put wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -s k6/wrk/plan.lua "$1" \
    | awk '/Requests\/sec/ {n = int($2)} END {print n + 0}'
}

ONE=$(new_session)
MANY=$(for _ in $(seq "$SPREAD"); do new_session; done | paste -sd, -)
echo "| load ($CONNECTIONS connections, $ROUNDS × $DURATION each, PUT plan toggling) | dsh-plan req/s | bare actix + XADD req/s | share (median) | rounds' shares |"
echo "|---|---|---|---|---|"
for what in one many; do
  if [ $what = one ]; then sessions=$ONE; label="one hot session"; else sessions=$MANY; label="$SPREAD sessions"; fi
  pairs=()
  for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
      d=$(rps "$DSH" "$sessions")
      c=$(rps "$CEIL" "$sessions")
    else
      c=$(rps "$CEIL" "$sessions")
      d=$(rps "$DSH" "$sessions")
    fi
    pairs+=("$d:$c")
  done
  python3 - "$label" "${pairs[@]}" <<'PY'
import statistics, sys
label, pairs = sys.argv[1], [tuple(map(int, p.split(":"))) for p in sys.argv[2:]]
shares = [d / c if c else 0.0 for d, c in pairs]
d = statistics.median(p[0] for p in pairs)
c = statistics.median(p[1] for p in pairs)
print(f"| {label} | {d:.0f} | {c:.0f} | {statistics.median(shares):.2f} | {' '.join(f'{s:.2f}' for s in shares)} |")
PY
done
