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

# The Redis processes behind REDIS_URL (the node, or the cluster nodes it names), by their own
# INFO (`process_id`), for their CPU time: only those that are a redis-server on this machine
# listening on that port (by its process title), each once; a line on stderr for any other, and
# "n/a" in the table when none is here. The URL (and any password in it) reaches python and
# redis-cli through their environment (REDISCLI_AUTH), never their arguments or the output.
need "${REDIS_CLI:-redis-cli}" redis-tools
redis_pids() {
  URL=$REDIS_URL CLI=${REDIS_CLI:-redis-cli} python3 - <<'PY'
import os, re, subprocess, sys, urllib.parse
def note(what):
    print("%s: its CPU is not counted" % what, file=sys.stderr)
scheme, _, rest = os.environ["URL"].partition("://")
if "unix" in scheme:
    note("Redis on a unix socket")
    sys.exit(0)
netloc = rest.split("/", 1)[0].split("?", 1)[0]
auth, _, hosts = netloc.rpartition("@")
user, colon, password = auth.partition(":")
# Bytes throughout: a password or a path need not be ASCII (nor the locale UTF-8).
env = dict(os.environb)
if colon:
    env[b"REDISCLI_AUTH"] = urllib.parse.unquote_to_bytes(password)
seen = set()
for h in hosts.split(","):
    if h.startswith("["):
        host, _, port = h[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = h.partition(":")
    try:
        port = int(port or 6379)
    except ValueError:
        note("Redis at %s (no port number)" % host)
        continue
    args = [os.environb[b"CLI"], b"-h", host.encode(), b"-p", b"%d" % port, b"--no-auth-warning"]
    if scheme.startswith("rediss"):
        args.append(b"--tls")
    if user:
        args += [b"--user", urllib.parse.unquote_to_bytes(user)]
    try:
        info = subprocess.run(args + [b"info", b"server"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, timeout=5).stdout
    except OSError:
        note("Redis at %s:%d (no redis-cli to ask it)" % (host, port))
        continue
    except (ValueError, subprocess.SubprocessError):
        info = b""
    pid = re.search(rb"^process_id:(\d+)", info, re.M)
    pid = pid.group(1).decode() if pid else None
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as f:
            title = f.read().replace(b"\0", b" ")
    except (OSError, TypeError):
        title = b""
    # "redis-server 127.0.0.1:6379 [cluster]", "/usr/bin/redis-server *:6379", or without a
    # process title "redis-server --port 6379"; Valkey's too.
    here = re.match(rb"(\S*/)?(redis|valkey)-server\s+(\S*:0*%d|(.*\s)?--port\s+0*%d)(\s|$)"
                    % (port, port), title)
    if here and pid not in seen:
        seen.add(pid)
        print(pid)
    elif not here:
        note("Redis at %s:%d is not a redis-server on this machine (or did not answer)"
             % (host, port))
PY
}
mapfile -t RPIDS < <(redis_pids)
wait $! # python's status: set -e stops here if it failed
ticks() { # pid... -> "user system" clock ticks, summed
  for p in "$@"; do cat "/proc/$p/stat"; done | sed 's/^.*) //' | awk '{u += $12; s += $13} END {print u + 0, s + 0}'
}

rps() { # base sessions server-pid -> "req/s requests user system redis" (CPU in clock ticks)
  local before rbefore out after rafter
  before=$(ticks "$3")
  rbefore=$(ticks ${RPIDS[@]+"${RPIDS[@]}"})
  # Inside $(…) `set -e` does not hold: a wrk that fails stops the benchmark from here.
  out=$(SESSIONS=$2 MODE=put wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -s k6/wrk/plan.lua "$1") || return
  after=$(ticks "$3")
  rafter=$(ticks ${RPIDS[@]+"${RPIDS[@]}"})
  echo "$out" | awk -v b="$before" -v a="$after" -v rb="$rbefore" -v ra="$rafter" '
    /Requests\/sec/ {n = int($2)} / requests in / {r = $1}
    END {split(b, x, " "); split(a, y, " "); split(rb, p, " "); split(ra, q, " ");
         print n + 0, r + 0, y[1] - x[1], y[2] - x[2], q[1] + q[2] - p[1] - p[2]}'
}

ONE=$(new_sessions "$DSH")
MANY=$(new_sessions "$DSH" "$SPREAD")
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
# Each figure is its own median over the rounds (a total need not be the sum of the two beside it).
echo "| load (µs of CPU a request, medians of rounds) | dsh-plan: total (user + system) | its Redis | bare actix + XADD: total (user + system) | its Redis |"
echo "|---|---|---|---|---|"
python3 - "$(getconf CLK_TCK)" "${#RPIDS[@]}" "${costs[@]}" <<'PY'
import statistics, sys
hz, nodes, runs = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
def per(fields):  # req/s, requests, user, system, redis (ticks) -> µs a request; None: no requests
    _, reqs, user, system, redis = map(int, fields.split(","))
    return (user * 1e6 / hz / reqs, system * 1e6 / hz / reqs, redis * 1e6 / hz / reqs) if reqs else None
for label in dict.fromkeys(r.split(":")[0] for r in runs):
    cols = []
    for side in (1, 2):
        costs = [c for c in (per(r.split(":")[side]) for r in runs if r.split(":")[0] == label) if c]
        if not costs:
            cols += ["n/a", "n/a"]
            continue
        total, u, s, r = (statistics.median(x) for x in zip(*((c[0] + c[1], *c) for c in costs)))
        cols += [f"{total:.1f} ({u:.1f} + {s:.1f})", f"{r:.1f}" if nodes else "n/a"]
    print(f"| {label} | {cols[0]} | {cols[1]} | {cols[2]} | {cols[3]} |")
PY
