#!/usr/bin/env bash
# Authenticated vs open GET plan throughput on loopback (Redis store). Runs the plan benchmark
# twice against fresh servers: once open (no keys), once with an API key (rate set high enough
# not to limit) sent as a bearer header — and once with a browser token. Starts its own
# redis-server and servers on free ports; stops everything when done.
#
#   bash k6/bench-auth.sh
#   DURATION=20s CONNECTIONS=64 bash k6/bench-auth.sh
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-64}
SESSIONS_N=${SESSIONS_N:-256}

. k6/common.sh
need wrk wrk
cargo build --release -q
start_redis
export REDIS_URL=redis://127.0.0.1:$RPORT

ROWS=()
serve() { # prefix → starts a server on a fresh key prefix, sets BASE
  HPORT=$(free_port)
  BASE=http://127.0.0.1:$HPORT
  RUST_LOG=warn DSH_KEY_PREFIX=$1 DSH_BIND=127.0.0.1:$HPORT target/release/dsh-plan &
  pids+=($!)
  until curl -sf "$BASE/healthz" >/dev/null; do sleep 0.05; done
}
sessions() { # credential
  for _ in $(seq "$SESSIONS_N"); do
    curl -sf -XPOST -H 'content-type: application/json' ${1:+-H "Authorization: Bearer $1"} -d '{}' "$BASE/v1/sessions" \
      | python3 -c 'import sys,json; print(json.load(sys.stdin)["id"])'
  done | paste -sd, -
}
run() { # name credential sessions
  echo "== $1 ($CONNECTIONS connections, $DURATION)"
  local out
  out=$(AUTH=$2 SESSIONS=$3 MODE=get wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency -s k6/wrk/plan.lua "$BASE" \
    | grep -E 'Requests/sec|non-2xx|Latency  |99%')
  echo "$out"
  ROWS+=("$(awk -v what="$1" '/Requests\/sec/ {rps=$2} /non-2xx/ {e=$2; p50=$4; p99=$7}
    END {printf "| %s | %d | %s ms | %s ms | %s |", what, rps, p50, p99, e}' <<<"$out")")
}

serve open
run "GET plan, open (no keys)" "" "$(sessions "")"

KEY=$(DSH_KEY_PREFIX=authed target/release/dsh-plan keys create --tenant bench --rate 10000000 | tail -1)
serve authed
SIDS=$(sessions "$KEY")
run "GET plan, API key" "$KEY" "$SIDS"
FIRST=${SIDS%%,*}
TOKEN=$(curl -sf -XPOST -H 'content-type: application/json' -H "Authorization: Bearer $KEY" \
  -d '{"scopes":["read"]}' "$BASE/v1/sessions/$FIRST/tokens" | python3 -c 'import sys,json; print(json.load(sys.stdin)["token"])')
run "GET plan, browser token (one session)" "$TOKEN" "$FIRST"
run "GET plan, API key (the same one session)" "$KEY" "$FIRST"

echo; echo "| what (Redis store, $CONNECTIONS connections, $DURATION) | requests/s | p50 | p99 | non-2xx |"
echo "|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
