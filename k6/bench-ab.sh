#!/usr/bin/env bash
# A/B of builds (or settings) on bench-ceiling.sh's 256-session load: each arm is a dsh-plan
# and its own xadd_ceiling, all running at once on one Redis (or REDIS_URL), measured in
# rotating order, each arm's share of its own ceiling per round and the median.
#
#   bash k6/bench-ab.sh DIR[:NAME=value...] DIR[:NAME=value...] ...
#
# DIR holds `dsh-plan` and `examples/xadd_ceiling` (a copy of target/release after a build);
# what follows it is environment for that arm's dsh-plan (values without a `:`), e.g.
#   bash k6/bench-ab.sh /tmp/base /tmp/new /tmp/new:DSH_REDIS_WAIT_REPLICAS=0
# On a cluster: bash scripts/redis-cluster.sh run bash k6/bench-ab.sh ...
#
# Every arm writes its own sessions: a replica whose sessions another one wrote to meanwhile
# starts each run catching up (reading and folding what the other wrote), which slows the
# run that follows the other arm's and not the one that follows its own, by more than most
# changes are worth (README, "Benchmarks"). The ceilings write keys of their own too.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-6}
CONNECTIONS=${CONNECTIONS:-64}
SPREAD=${SPREAD:-256}
WORKERS=${WORKERS:-2}

. k6/common.sh
need wrk wrk
if [ -z "${REDIS_URL:-}" ]; then
  start_redis
  export REDIS_URL=redis://127.0.0.1:$RPORT
fi

arms=("$@")
dsh=()
ceil=()
for arm in "${arms[@]}"; do
  dir=${arm%%:*}
  settings=()
  if [ "$dir" != "$arm" ]; then IFS=: read -ra settings <<<"${arm#*:}"; fi
  for bin in "$dir/dsh-plan" "$dir/examples/xadd_ceiling"; do
    [ -x "$bin" ] || { echo "$bin: not an executable" >&2; exit 2; }
  done
  port=$(free_port)
  env ${settings[@]+"${settings[@]}"} RUST_LOG=warn DSH_BIND=127.0.0.1:$port \
    DSH_WORKERS=$WORKERS "$dir/dsh-plan" >/dev/null &
  pids+=($!)
  dsh+=("$port")
  port=$(free_port)
  BIND=127.0.0.1:$port WORKERS=$WORKERS "$dir/examples/xadd_ceiling" >/dev/null 2>&1 &
  pids+=($!)
  ceil+=("$port")
done
for i in "${!arms[@]}"; do
  until curl -sf "http://127.0.0.1:${dsh[$i]}/readyz" >/dev/null; do sleep 0.05; done
  until curl -s -o /dev/null "http://127.0.0.1:${ceil[$i]}/"; do sleep 0.05; done
done

declare -A sessions=()
for i in "${!arms[@]}"; do
  sessions[d$i]=$(for _ in $(seq "$SPREAD"); do
    curl -sf -XPOST -H 'content-type: application/json' "http://127.0.0.1:${dsh[$i]}/v1/sessions" |
      python3 -c 'import sys,json; print(json.load(sys.stdin)["id"])'
  done | paste -sd, -)
  sessions[c$i]=$(python3 -c "import uuid; print(','.join(str(uuid.uuid4()) for _ in range($SPREAD)))")
done
rps() { # port sessions -> req/s
  SESSIONS=$2 MODE=put wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -s k6/wrk/plan.lua \
    "http://127.0.0.1:$1" | awk '/Requests\/sec/ {n = int($2)} END {print n + 0}'
}

# Round r starts with arm r mod n (so no arm always goes first); odd rounds measure each
# dsh-plan before its ceiling, even ones after.
n=${#arms[@]}
results=()
for round in $(seq "$ROUNDS"); do
  declare -A got=()
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + round) % n))
    if [ $((round % 2)) = 1 ]; then
      got[d$i]=$(rps "${dsh[$i]}" "${sessions[d$i]}")
      got[c$i]=$(rps "${ceil[$i]}" "${sessions[c$i]}")
    else
      got[c$i]=$(rps "${ceil[$i]}" "${sessions[c$i]}")
      got[d$i]=$(rps "${dsh[$i]}" "${sessions[d$i]}")
    fi
  done
  for i in "${!arms[@]}"; do results+=("$i:${got[d$i]}:${got[c$i]}"); done
  unset got
done
python3 - "${arms[@]}" -- "${results[@]}" <<'PY'
import re, statistics, sys
cut = sys.argv.index("--")
arms, runs = sys.argv[1:cut], [r.split(":") for r in sys.argv[cut + 1:]]
# A setting that may be a credential is named, not shown (nor what follows it up to the next
# setting: a value with a `:` in it).
secret = re.compile(r"KEY|SECRET|PASSWORD|TOKEN|URL|AUTH", re.I)
def shown(arm):
    parts, hide = arm.split(":"), False
    out = parts[:1]
    for part in parts[1:]:
        name, is_setting, _ = part.partition("=")
        if is_setting and not re.search(r"[/@]", name):
            hide = bool(secret.search(name))
            out.append(name + "=…" if hide else part)
        elif not hide:
            out.append(part)
    return ":".join(out)
arms = [shown(arm) for arm in arms]
print("| arm | dsh-plan req/s | ceiling req/s | share (median) | rounds' shares |")
print("|---|---|---|---|---|")
for i, arm in enumerate(arms):
    mine = [(int(d), int(c)) for a, d, c in runs if int(a) == i]
    shares = [d / c if c else 0.0 for d, c in mine]
    print("| %s | %.0f | %.0f | %.2f | %s |" % (
        arm, statistics.median(d for d, _ in mine), statistics.median(c for _, c in mine),
        statistics.median(shares), " ".join("%.2f" % s for s in shares)))
PY
