#!/usr/bin/env bash
# Plan GET/PUT throughput and latency on loopback, and GET plan and GET plan projection on a
# session whose log holds 100,000 events vs 10. Starts its own redis-server and server on free
# ports, runs wrk (64 connections, 2 threads) against 127.0.0.1 only, and stops everything when
# done.
#
#   bash k6/bench-plan.sh            # Redis store (the real stack)
#   STORE=memory bash k6/bench-plan.sh
#   DURATION=20s CONNECTIONS=64 bash k6/bench-plan.sh
#   PARTS=big bash k6/bench-plan.sh  # only the 10 vs 100,001-event sessions (PARTS="many big")
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-64}
STORE=${STORE:-redis}
SESSIONS_N=${SESSIONS_N:-256}
BIG=${BIG:-100000}
PARTS=${PARTS:-"many big"}

. k6/common.sh
need wrk wrk
cargo build --release -q
start_redis

HPORT=$(free_port)
BASE=http://127.0.0.1:$HPORT
if [ "$STORE" = redis ]; then export REDIS_URL=redis://127.0.0.1:$RPORT; else unset REDIS_URL; fi
RUST_LOG=warn DSH_BIND=127.0.0.1:$HPORT target/release/dsh-plan &
pids+=($!)
until curl -sf "$BASE/healthz" >/dev/null; do sleep 0.05; done

ROWS=()
run() { # name mode sessions
  echo "== $1 ($STORE store, $CONNECTIONS connections, $DURATION)"
  local out
  out=$(SESSIONS=$3 MODE=$2 wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency -s k6/wrk/plan.lua "$BASE" \
    | grep -E 'Requests/sec|non-2xx|Latency  |99%')
  echo "$out"
  # plan.lua's summary line: "non-2xx/3xx: N  p50 X ms  p99 Y ms".
  ROWS+=("$(awk -v what="$1" '/Requests\/sec/ {rps=$2} /non-2xx/ {e=$2; p50=$4; p99=$7}
    END {printf "| %s | %d | %s ms | %s ms | %s |", what, rps, p50, p99, e}' <<<"$out")")
}
table() {
  echo; echo "| what ($STORE store, $CONNECTIONS connections, $DURATION) | requests/s | p50 | p99 | non-2xx |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
}

if [[ " $PARTS " == *" many "* ]]; then
  SESSIONS=$(new_sessions "$BASE" "$SESSIONS_N")
  run "GET plan" get "$SESSIONS"
  run "PUT plan (toggling)" put "$SESSIONS"
  run "PUT plan (toggling, a new Idempotency-Key each)" put-keyed "$SESSIONS"
fi

if [ "$STORE" = redis ] && [[ " $PARTS " == *" big "* ]]; then
  # A session with $BIG events, written straight into its stream as toggling plan/mode events.
  BIGSID=$(new_sessions "$BASE")
  python3 - "$BIGSID" "$BIG" <<'PY' | redis-cli -p "$RPORT" --pipe >/dev/null
import sys
sid, n = sys.argv[1], int(sys.argv[2])
key = f"dsh:{{{sid}}}:log"
out = sys.stdout
def cmd(*args):
    out.write(f"*{len(args)}\r\n" + "".join(f"${len(a.encode())}\r\n{a}\r\n" for a in args))
for seq in range(2, n + 2):
    cmd("XADD", key, f"{seq}-0", "type", "plan/mode", "agent", "main",
        "data", '{"active":%s}' % ("true" if seq % 2 == 0 else "false"), "ts", "1", "v", "1")
PY
  SMALL=$(new_sessions "$BASE")
  for v in true false true false true false true false true; do
    curl -sf -XPUT -H 'content-type: application/json' -d "{\"active\":$v}" "$BASE/v1/sessions/$SMALL/agents/main/plan" >/dev/null
  done
  echo "== first (cold) read of the $BIG-event session:"
  curl -s -o /dev/null -w '   %{time_total}s\n' "$BASE/v1/sessions/$BIGSID/agents/main/plan"
  run "GET plan, one session of 10 events" get "$SMALL"
  run "GET plan, one session of $((BIG + 1)) events" get "$BIGSID"
  run "GET plan projection, one session of 10 events" projection "$SMALL"
  run "GET plan projection, one session of $((BIG + 1)) events" projection "$BIGSID"
  echo "== dsh-plan verify on the $((BIG + 1))-event session:"
  /usr/bin/time -f '   %es, %MKB max RSS' target/release/dsh-plan verify --session "$BIGSID" 2>&1 | grep -v INFO
fi

table
