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
# A second table says what a request cost each process, in µs of CPU (user + system time from
# /proc over each wrk run, the median of the rounds): the server under test (user and system
# apart) and Redis (every node REDIS_URL names that runs on this machine). The share moves
# with the machine (README, "Benchmarks"): these figures say where.
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
DPID=$!
pids+=("$DPID")
CPORT=$(free_port)
BIND=127.0.0.1:$CPORT WORKERS=$WORKERS "$T/examples/xadd_ceiling" &
CPID=$!
pids+=("$CPID")
DSH=http://127.0.0.1:$DPORT
CEIL=http://127.0.0.1:$CPORT
until curl -sf "$DSH/readyz" >/dev/null; do sleep 0.05; done
until curl -s -o /dev/null "$CEIL/"; do sleep 0.05; done

# The Redis processes behind REDIS_URL (one node or a cluster's), by their own INFO, for their
# CPU time; none when they are not on this machine.
RPIDS=()
for hp in $(python3 -c 'import re, sys; print(" ".join(re.findall(r"[\w.-]+:\d+", sys.argv[1].split("@")[-1])))' "$REDIS_URL"); do
  pid=$(redis-cli -h "${hp%:*}" -p "${hp#*:}" info server 2>/dev/null | awk -F: '/^process_id/ {print $2+0}')
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] && RPIDS+=("$pid")
done
ticks() { # pid... -> "user system" clock ticks, summed
  for p in "$@"; do cat "/proc/$p/stat"; done | sed 's/^.*) //' | awk '{u += $12; s += $13} END {print u + 0, s + 0}'
}

new_session() { curl -sf -XPOST -H 'content-type: application/json' "$DSH/v1/sessions" | python3 -c 'import sys,json; print(json.load(sys.stdin)["id"])'; }
rps() { # base sessions server-pid -> "req/s requests user system redis" (CPU in clock ticks)
  local before rbefore out after rafter
  before=$(ticks "$3")
  rbefore=$(ticks "${RPIDS[@]}")
  out=$(SESSIONS=$2 MODE=put wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -s k6/wrk/plan.lua "$1")
  after=$(ticks "$3")
  rafter=$(ticks "${RPIDS[@]}")
  echo "$out" | awk -v b="$before" -v a="$after" -v rb="$rbefore" -v ra="$rafter" '
    /Requests\/sec/ {n = int($2)} / requests in / {r = $1}
    END {split(b, x, " "); split(a, y, " "); split(rb, p, " "); split(ra, q, " ");
         print n + 0, r + 0, y[1] - x[1], y[2] - x[2], q[1] + q[2] - p[1] - p[2]}'
}

ONE=$(new_session)
MANY=$(for _ in $(seq "$SPREAD"); do new_session; done | paste -sd, -)
echo "| load ($CONNECTIONS connections, $ROUNDS × $DURATION each, PUT plan toggling) | dsh-plan req/s | bare actix + XADD req/s | share (median) | rounds' shares |"
echo "|---|---|---|---|---|"
costs=()
for what in one many; do
  if [ $what = one ]; then sessions=$ONE; label="one hot session"; else sessions=$MANY; label="$SPREAD sessions"; fi
  pairs=()
  for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then
      d=$(rps "$DSH" "$sessions" "$DPID")
      c=$(rps "$CEIL" "$sessions" "$CPID")
    else
      c=$(rps "$CEIL" "$sessions" "$CPID")
      d=$(rps "$DSH" "$sessions" "$DPID")
    fi
    pairs+=("${d%% *}:${c%% *}")
    costs+=("$label:${d// /,}:${c// /,}")
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
echo
echo "| load (µs of CPU a request, median of rounds) | dsh-plan (user + system) | its Redis | bare actix + XADD (user + system) | its Redis |"
echo "|---|---|---|---|---|"
python3 - "$(getconf CLK_TCK)" "${#RPIDS[@]}" "${costs[@]}" <<'PY'
import statistics, sys
hz, nodes, runs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
def per(fields):  # req/s, requests, user, system, redis (ticks) -> µs a request
    _, reqs, user, system, redis = map(int, fields.split(","))
    f = 1e6 / hz / reqs if reqs else 0.0
    return user * f, system * f, redis * f
for label in dict.fromkeys(r.split(":")[0] for r in runs):
    cols = []
    for side in (1, 2):
        costs = [per(r.split(":")[side]) for r in runs if r.split(":")[0] == label]
        u, s, r = (statistics.median(c[i] for c in costs) for i in range(3))
        cols += [f"{u + s:.1f} ({u:.1f} + {s:.1f})", f"{r:.1f}" if nodes else "n/a"]
    print(f"| {label} | {cols[0]} | {cols[1]} | {cols[2]} | {cols[3]} |")
PY
