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
# with the machine (README, "Benchmarks"): these figures say where. A third says where Redis's
# time went: its read events and the commands each server's request sent, with their cost
# (from every node's INFO, read before and after each run: any Redis REDIS_URL names).
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

# The Redis nodes behind REDIS_URL (the node, or the cluster nodes it names), asked with
# redis-cli. `redis_nodes pids`: their processes, by their own INFO (`process_id`), for their
# CPU time: only those that are a redis-server on this machine listening on that port (by its
# process title), each once; a line on stderr for any other, and "n/a" in the table when none
# is here. `redis_nodes stats`: what every node has run so far, summed (INFO's counters, read
# before and after each wrk run, so nothing is reset on a Redis the caller shares): one line of
# `COMMAND=calls,µs` and `reads=N` (read events: how many times a node woke to read its
# clients). The URL (and any password in it) reaches python and redis-cli through their
# environment (REDISCLI_AUTH), never their arguments or the output.
need "${REDIS_CLI:-redis-cli}" redis-tools
redis_nodes() { # pids | stats
  URL=$REDIS_URL CLI=${REDIS_CLI:-redis-cli} python3 - "$1" <<'PY'
import collections, os, re, subprocess, sys, urllib.parse
mode = sys.argv[1]
def note(what):
    if mode == "pids":
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
totals = collections.Counter()
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
        info = subprocess.run(args + [b"info", b"server" if mode == "pids" else b"all"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=5).stdout
    except OSError:
        note("Redis at %s:%d (no redis-cli to ask it)" % (host, port))
        continue
    except (ValueError, subprocess.SubprocessError):
        info = b""
    if mode == "stats":
        # Each node once, by its INFO's `run_id` (a URL may name one node twice).
        run = re.search(rb"^run_id:(\w+)", info, re.M)
        if not run or run.group(1) in seen:
            continue
        seen.add(run.group(1))
        for name, calls, usec in re.findall(
                rb"^cmdstat_(\S+):calls=(\d+),usec=(\d+)", info, re.M):
            totals[name.decode().upper() + ",calls"] += int(calls)
            totals[name.decode().upper() + ",usec"] += int(usec)
        reads = re.search(rb"^total_reads_processed:(\d+)", info, re.M)
        totals["reads"] += int(reads.group(1)) if reads else 0
        continue
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
if mode == "stats" and seen:  # (an empty line when no node answered: "n/a" in the table)
    cmds = sorted({k.split(",")[0] for k in totals if "," in k})
    print(" ".join(["%s=%d,%d" % (c, totals[c + ",calls"], totals[c + ",usec"]) for c in cmds]
                   + ["reads=%d" % totals["reads"]]))
PY
}
mapfile -t RPIDS < <(redis_nodes pids)
wait $! # python's status: set -e stops here if it failed
ticks() { # pid... -> "user system" clock ticks, summed
  for p in "$@"; do cat "/proc/$p/stat"; done | sed 's/^.*) //' | awk '{u += $12; s += $13} END {print u + 0, s + 0}'
}

# What Redis ran during each wrk run, a line per run in $STATS/<load>.<server>: the run's
# requests, then `redis_nodes stats` before and after it (read outside the CPU window), apart
# by tabs (a subcommand's name holds `|`: `SCRIPT|LOAD`).
STATS=$(mktemp -d)
trap 'cleanup; rm -rf "$STATS"' EXIT

rps() { # base sessions server-pid stats-file -> "req/s requests user system redis" (CPU in clock ticks)
  local before rbefore out after rafter sbefore
  sbefore=$(redis_nodes stats)
  before=$(ticks "$3")
  rbefore=$(ticks ${RPIDS[@]+"${RPIDS[@]}"})
  # Inside $(…) `set -e` does not hold: a wrk that fails stops the benchmark from here.
  out=$(SESSIONS=$2 MODE=put wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -s k6/wrk/plan.lua "$1") || return
  after=$(ticks "$3")
  rafter=$(ticks ${RPIDS[@]+"${RPIDS[@]}"})
  printf '%s\t%s\t%s\n' "$(echo "$out" | awk '/ requests in / {print $1}')" "$sbefore" \
    "$(redis_nodes stats)" >>"$4"
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
      d=$(rps "$DSH" "$sessions" "$DPID" "$STATS/$what.dsh")
      c=$(rps "$CEIL" "$sessions" "$CPID" "$STATS/$what.ceiling")
    else
      c=$(rps "$CEIL" "$sessions" "$CPID" "$STATS/$what.ceiling")
      d=$(rps "$DSH" "$sessions" "$DPID" "$STATS/$what.dsh")
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
echo
# Where Redis's time went: its read events a request (INFO's `total_reads_processed`: each a
# read of what one client sent, so the fewer, the more commands each carries), the time its
# commands ran a request, and the commands a request sent (calls a request × µs a call, the
# most costly first; a command under 0.01 a request left out; a script's own calls counted
# too). The times are INFO's `usec`: wall time, which counts the moments a node is preempted by
# the other processes on the machine, so under this load they exceed what the same command
# costs on a quiet node; the calls and reads are counts. Medians of the rounds.
echo "| load (Redis, medians of rounds) | server | read events a request | commands' µs a request (wall) | commands a request (calls × wall µs each) |"
echo "|---|---|---|---|---|"
python3 - "$STATS" "$SPREAD" <<'PY'
import os, statistics, sys
root, spread = sys.argv[1], sys.argv[2]
def parse(line):  # "COMMAND=calls,usec ... reads=N" -> {command: (calls, usec)}, reads
    cmds, reads = {}, 0
    for item in line.split():
        name, _, value = item.partition("=")
        if name == "reads":
            reads = int(value)
        else:
            calls, usec = value.split(",")
            cmds[name] = (int(calls), int(usec))
    return cmds, reads
for what, label in (("one", "one hot session"), ("many", "%s sessions" % spread)):
    for server, name in (("dsh", "dsh-plan"), ("ceiling", "bare actix + XADD")):
        path = os.path.join(root, "%s.%s" % (what, server))
        if not os.path.exists(path):
            continue
        rounds = []
        for line in open(path):
            reqs, before, after = line.rstrip("\n").split("\t")
            if not reqs or int(reqs) == 0 or not before or not after:
                continue
            (b, rb), (a, ra) = parse(before), parse(after)
            delta = {c: (a[c][0] - b.get(c, (0, 0))[0], a[c][1] - b.get(c, (0, 0))[1]) for c in a}
            rounds.append((int(reqs), delta, ra - rb))
        if not rounds:
            print("| %s | %s | n/a | n/a | n/a |" % (label, name))
            continue
        reads = statistics.median(r / n for n, _, r in rounds)
        busy = statistics.median(sum(u for _, u in d.values()) / n for n, d, _ in rounds)
        per = {}
        for c in {c for _, d, _ in rounds for c in d}:
            calls = statistics.median(d.get(c, (0, 0))[0] / n for n, d, _ in rounds)
            each = [d[c][1] / d[c][0] for _, d, _ in rounds if d.get(c, (0, 0))[0]]
            if calls >= 0.01 and each:
                per[c] = (calls, statistics.median(each))
        shown = sorted(per.items(), key=lambda kv: -kv[1][0] * kv[1][1])
        print("| %s | %s | %.2f | %.1f | %s |" % (label, name, reads, busy,
              ", ".join("%s %.2f × %.1f" % (c, k, u) for c, (k, u) in shown) or "none"))
PY
