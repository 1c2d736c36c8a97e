#!/usr/bin/env bash
# A/B of builds (or settings) on bench-ceiling.sh's 256-session load: each arm is a dsh-plan
# and its own xadd_ceiling, all running at once on one Redis (or REDIS_URL), measured in
# rotating order, each arm's share of its own ceiling per round and the median.
#
#   bash k6/bench-ab.sh DIR[:NAME=value...] DIR[:NAME=value...] ...
#
# DIR holds `dsh-plan` and `examples/xadd_ceiling` (a copy of target/release after a build);
# what follows it is environment for that arm's dsh-plan: NAME=value (a value without `:`),
# or a bare NAME, passed on from this script's environment (for a credential: it then appears
# on no command line). The table shows a value only when it is a number or a word like
# `true`; any other as `…`. E.g.
#   bash k6/bench-ab.sh /tmp/base /tmp/new /tmp/new:DSH_REDIS_WAIT_REPLICAS=0
# On a cluster: bash scripts/redis-cluster.sh run bash k6/bench-ab.sh ...
#
# Every arm writes its own sessions: a replica whose sessions another one wrote to meanwhile
# starts each run catching up (reading and folding what the other wrote), which slows the
# run that follows the other arm's and not the one that follows its own, by more than most
# changes are worth (README, "Benchmarks"). The ceilings write keys of their own too.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
# The arms' directories as the caller named them, before moving to the repository.
arms=()
for arm in "$@"; do
  dir=${arm%%:*}
  [ -d "$dir" ] || { echo "$dir: not a directory" >&2; exit 2; }
  arms+=("$(cd "$dir" && pwd)${arm:${#dir}}")
done
cd "$(dirname "$0")/.."
DURATION=${DURATION:-5s}
ROUNDS=${ROUNDS:-6}
[ "$ROUNDS" -ge 1 ] || { echo "ROUNDS must be at least 1" >&2; exit 2; }
CONNECTIONS=${CONNECTIONS:-64}
SPREAD=${SPREAD:-256}
WORKERS=${WORKERS:-2}

. k6/common.sh
need wrk wrk
if [ -z "${REDIS_URL:-}" ]; then
  start_redis
  export REDIS_URL=redis://127.0.0.1:$RPORT
fi

dsh=()
ceil=()
labels=()
started=()
for arm in "${arms[@]}"; do
  dir=${arm%%:*}
  settings=()
  if [ "$dir" != "$arm" ]; then IFS=: read -ra settings <<<"${arm#*:}"; fi
  for bin in "$dir/dsh-plan" "$dir/examples/xadd_ceiling"; do
    [ -x "$bin" ] || { echo "$bin: not an executable" >&2; exit 2; }
  done
  # What the table calls the arm: its directory and settings, a value only when it is plainly
  # not a credential.
  label=$dir
  for setting in ${settings[@]+"${settings[@]}"}; do
    name=${setting%%=*}
    [[ $name =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || { echo "$dir: a setting is not NAME=value or NAME" >&2; exit 2; }
    value=${setting#*=}
    if [ "$setting" = "$name" ]; then
      label+=":$name"
    elif [[ $value =~ ^([0-9]+(\.[0-9]+)?|true|false|on|off|yes|no)$ ]]; then
      label+=":$name=$value"
    else
      label+=":$name=…"
    fi
  done
  labels+=("$label")
  port=$(free_port)
  # Exported in a subshell, not given to `env`: no value reaches a command line; the arm's
  # settings after the script's own, so they can override them. A bare NAME is passed on.
  (
    export RUST_LOG=warn DSH_BIND=127.0.0.1:$port DSH_WORKERS=$WORKERS
    for setting in ${settings[@]+"${settings[@]}"}; do
      # shellcheck disable=SC2163 # the variable named by (or assigned in) the setting
      export "$setting"
    done
    exec "$dir/dsh-plan" >/dev/null
  ) &
  pids+=($!)
  started+=($!)
  dsh+=("$port")
  port=$(free_port)
  BIND=127.0.0.1:$port WORKERS=$WORKERS "$dir/examples/xadd_ceiling" >/dev/null 2>&1 &
  pids+=($!)
  started+=($!)
  ceil+=("$port")
done
alive() { # pid...: all still running, else stop with the arm's name
  for p in "$@"; do kill -0 "$p" 2>/dev/null || { echo "a server of arm ${labels[$i]} exited during start-up" >&2; exit 1; }; done
}
for i in "${!arms[@]}"; do
  until curl -sf "http://127.0.0.1:${dsh[$i]}/readyz" >/dev/null; do alive "${started[$((2 * i))]}"; sleep 0.05; done
  until curl -s -o /dev/null "http://127.0.0.1:${ceil[$i]}/"; do alive "${started[$((2 * i + 1))]}"; sleep 0.05; done
done

declare -A sessions=()
for i in "${!arms[@]}"; do
  sessions[d$i]=$(new_sessions "http://127.0.0.1:${dsh[$i]}" "$SPREAD")
  sessions[c$i]=$(python3 -c "import uuid; print(','.join(str(uuid.uuid4()) for _ in range($SPREAD)))")
done
rps() { # port sessions -> req/s
  SESSIONS=$2 MODE=put wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -s k6/wrk/plan.lua \
    "http://127.0.0.1:$1" | awk '/Requests\/sec/ {n = int($2)} END {print n + 0}'
}

# Round r starts with arm r mod n, so each arm goes first once in n rounds; over the next n
# rounds each dsh-plan is measured after its ceiling instead of before (a multiple of 2n
# rounds balances both).
n=${#arms[@]}
results=()
for round in $(seq "$ROUNDS"); do
  declare -A got=()
  for k in $(seq 0 $((n - 1))); do
    i=$(((k + round) % n))
    if [ $(((round - 1) / n % 2)) = 0 ]; then
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
python3 - "${labels[@]}" -- "${results[@]}" <<'PY'
import statistics, sys
cut = sys.argv.index("--")
arms, runs = sys.argv[1:cut], [r.split(":") for r in sys.argv[cut + 1:]]
print("| arm | dsh-plan req/s | ceiling req/s | share (median) | rounds' shares |")
print("|---|---|---|---|---|")
for i, arm in enumerate(arms):
    mine = [(int(d), int(c)) for a, d, c in runs if int(a) == i]
    shares = [d / c if c else 0.0 for d, c in mine]
    print("| %s | %.0f | %.0f | %.2f | %s |" % (
        arm, statistics.median(d for d, _ in mine), statistics.median(c for _, c in mine),
        statistics.median(shares), " ".join("%.2f" % s for s in shares)))
PY
