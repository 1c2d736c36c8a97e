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
# time went: its read events and the commands it ran a request, with their cost (from the INFO
# of each primary REDIS_URL names, read before and after each run).
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
# is here; and a line on stderr when the URL names fewer of a cluster's primaries (those serving
# slots) than it has (the table of Redis's commands then counts only those). `redis_nodes
# stats`: what each primary the URL names has run so far (INFO's counters, read before and
# after each wrk run, so nothing is reset on a Redis the caller shares; a replica is left out,
# as it counts what it replicates):
# `RUNID:COMMAND=calls,µs` and `RUNID:reads=N` (N: reads of what one client sent, or `-` when
# the node does not count them). The URL's password reaches python and redis-cli through their
# environment (REDISCLI_AUTH), never their arguments or the output (a user name is an argument).
need "${REDIS_CLI:-redis-cli}" redis-tools
redis_nodes() { # pids | stats
  URL=$REDIS_URL CLI=${REDIS_CLI:-redis-cli} python3 - "$1" <<'PY'
import os, re, subprocess, sys, urllib.parse
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
out = []
primaries, cluster_size = set(), None
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
    def ask(*words):
        try:
            return subprocess.run(args + list(words), env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, timeout=5).stdout
        except OSError:
            note("Redis at %s:%d (no redis-cli to ask it)" % (host, port))
            return None
        except (ValueError, subprocess.SubprocessError):
            return b""
    info = ask(b"info", b"all")
    if info is None:
        continue
    # Each node once, by its INFO's `run_id` (a URL may name one node twice).
    run = re.search(rb"^run_id:(\w+)", info, re.M)
    run = run.group(1).decode() if run else None
    primary = re.search(rb"^role:master\s*$", info, re.M) is not None
    if mode == "stats":
        if not run or not primary or run in seen:
            continue
        seen.add(run)
        for name, calls, usec in re.findall(
                rb"^cmdstat_(\S+):calls=(\d+),usec=(\d+)", info, re.M):
            out.append("%s:%s=%s,%s" % (run, name.decode().upper(), calls.decode(),
                                        usec.decode()))
        reads = re.search(rb"^total_reads_processed:(\d+)", info, re.M)
        out.append("%s:reads=%s" % (run, reads.group(1).decode() if reads else "-"))
        continue
    if re.search(rb"^cluster_enabled:1\s*$", info, re.M):
        if cluster_size is None:
            # `cluster_size`: the primaries serving at least one slot.
            size = re.search(rb"^cluster_size:(\d+)", ask(b"cluster", b"info") or b"", re.M)
            cluster_size = int(size.group(1)) if size else None
        # A primary counts when it serves slots (its `myself` line lists them after 8 fields).
        me = re.search(rb"^.*myself.*$", ask(b"cluster", b"nodes") or b"", re.M)
        if run and primary and me and len(me.group(0).split()) > 8:
            primaries.add(run)
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
if mode == "stats":  # (an empty line when no primary answered: "n/a" in the table)
    print(" ".join(out))
elif cluster_size and len(primaries) < cluster_size:
    print("REDIS_URL names %d of the cluster's %d primaries: the table of Redis's commands counts"
          " only those" % (len(primaries), cluster_size), file=sys.stderr)
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
# Where Redis's time went: everything the primaries REDIS_URL names ran during each run (the
# idle server's background work and any other client of a shared Redis included), per request
# of the server under load. Its read events a request (INFO's `total_reads_processed`: each a
# read of what one client sent, so the fewer, the more commands each carries), the time its
# commands ran a request (a script's calls are counted as commands too, so the scripts'
# `EVALSHA`s are left out of this sum and their time, their calls included, shown beside it),
# and the commands (calls a request × µs a call, the most costly first; a command under 0.01 a
# request left out; `EVALSHA`'s µs a call include its calls). The times are INFO's `usec`: wall
# time, which counts the moments a node is preempted by the other processes on the machine, so
# under this load they exceed what the same command costs on a quiet node; the calls and reads
# are counts. Medians of the rounds; a round in which not the same nodes (by `run_id`) answered
# before and after, or a counter went back, is left out, and the row says how many were kept.
echo "| load (Redis, medians of rounds) | server | read events a request | commands' µs a request (wall) | commands a request (calls × wall µs each) |"
echo "|---|---|---|---|---|"
python3 - "$STATS" "$SPREAD" <<'PY'
import os, statistics, sys
root, spread = sys.argv[1], sys.argv[2]
SCRIPTS = {"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"}
def parse(line):
    """`RUNID:COMMAND=calls,usec … RUNID:reads=N` -> {run: ({command: (calls, usec)}, reads)}"""
    nodes = {}
    for item in line.split():
        run, _, rest = item.partition(":")
        name, _, value = rest.partition("=")
        cmds = nodes.setdefault(run, ({}, None))[0]
        if name == "reads":
            nodes[run] = (cmds, None if value == "-" else int(value))
        else:
            calls, usec = value.split(",")
            cmds[name] = (int(calls), int(usec))
    return nodes
def delta(before, after):
    """Summed over the nodes; None unless the same nodes (by `run_id`) answered both times and
    no counter went back (`CONFIG RESETSTAT` during the run)."""
    if not after or before.keys() != after.keys():
        return None
    cmds, reads = {}, 0
    for run, (a, ra) in after.items():
        b, rb = before[run]
        for c, (calls, usec) in a.items():
            k, u = cmds.get(c, (0, 0))
            cmds[c] = (k + calls - b.get(c, (0, 0))[0], u + usec - b.get(c, (0, 0))[1])
        reads = None if reads is None or ra is None or rb is None else reads + ra - rb
    if any(k < 0 or u < 0 for k, u in cmds.values()) or (reads is not None and reads < 0):
        return None
    return cmds, reads
for what, label in (("one", "one hot session"), ("many", "%s sessions" % spread)):
    for server, name in (("dsh", "dsh-plan"), ("ceiling", "bare actix + XADD")):
        path = os.path.join(root, "%s.%s" % (what, server))
        if not os.path.exists(path):
            continue
        rounds, runs = [], 0
        for line in open(path):
            runs += 1
            reqs, before, after = line.rstrip("\n").split("\t")
            d = delta(parse(before), parse(after))
            if reqs and int(reqs) > 0 and d:
                rounds.append((int(reqs), *d))
        if not rounds:
            print("| %s | %s | n/a | n/a | n/a |" % (label, name))
            continue
        counted = [r / n for n, _, r in rounds if r is not None]
        reads = "%.2f" % statistics.median(counted) if len(counted) == len(rounds) else "n/a"
        busy = "%.1f" % statistics.median(
            sum(u for c, (_, u) in d.items() if c not in SCRIPTS) / n for n, d, _ in rounds)
        scripts = statistics.median(
            sum(u for c, (_, u) in d.items() if c in SCRIPTS) / n for n, d, _ in rounds)
        if scripts >= 0.05:
            busy += " (scripts: %.1f, their calls included)" % scripts
        per = {}
        for c in {c for _, d, _ in rounds for c in d}:
            calls = statistics.median(d.get(c, (0, 0))[0] / n for n, d, _ in rounds)
            each = [d[c][1] / d[c][0] for _, d, _ in rounds if d.get(c, (0, 0))[0] > 0]
            if calls >= 0.01 and each:
                per[c] = (calls, statistics.median(each))
        shown = sorted(per.items(), key=lambda kv: -kv[1][0] * kv[1][1])
        listed = ", ".join("%s %.2f × %.1f" % (c, k, u) for c, (k, u) in shown) or "none"
        if len(rounds) < runs:  # rounds left out: the nodes changed, or no requests
            listed += " (%d of %d rounds)" % (len(rounds), runs)
        print("| %s | %s | %s | %s | %s |" % (label, name, reads, busy, listed))
PY
