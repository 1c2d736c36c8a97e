#!/usr/bin/env bash
# A throwaway local Redis Cluster on free loopback ports (no persistence), for tests.
#
#   scripts/redis-cluster.sh run CMD ARGS...   start a cluster, run CMD with REDIS_URL set to
#                                              redis+cluster://…, stop the cluster whatever
#                                              happens (exit status: CMD's)
#   scripts/redis-cluster.sh start DIR         start one in DIR (empty), print its REDIS_URL
#   scripts/redis-cluster.sh stop DIR          stop the one in DIR
#
# MASTERS (default 3) primaries, REPLICAS (default 0) replicas of each;
# REDIS_SERVER / REDIS_CLI name the binaries (default: on PATH).
set -euo pipefail

MASTERS=${MASTERS:-3}
REPLICAS=${REPLICAS:-0}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}

# A port with its cluster bus port (+10000) free too, both below the kernel's ephemeral range
# (32768+), where an outgoing connection may hold a port no listener shows.
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((10000 + RANDOM % 12000))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null &&
      ! (exec 3<>/dev/tcp/127.0.0.1/$((p + 10000))) 2>/dev/null &&
      ! grep -qx "$p" "$dir/ports" 2>/dev/null; then
      echo "$p"
      return
    fi
  done
  echo "no free port found" >&2
  return 1
}

start() {
  dir=$1
  mkdir -p "$dir"
  local n=$((MASTERS * (1 + REPLICAS))) nodes=() port
  for _ in $(seq "$n"); do
    # A port taken meanwhile makes the node exit: it is tried again on another one.
    for attempt in 1 2 3 4 5; do
      port=$(free_port)
      echo "$port" >>"$dir/ports"
      mkdir -p "$dir/$port"
      "$REDIS_SERVER" --port "$port" --bind 127.0.0.1 --cluster-enabled yes \
        --cluster-config-file "$dir/$port/nodes.conf" --cluster-node-timeout 2000 \
        --dir "$dir/$port" --save '' --appendonly no --daemonize yes \
        --pidfile "$dir/$port/redis.pid" --logfile "$dir/$port/redis.log"
      for _ in $(seq 100); do
        "$REDIS_CLI" -p "$port" ping >/dev/null 2>&1 && break 2
        sleep 0.05
      done
      echo "node on port $port did not start (attempt $attempt): $(tail -1 "$dir/$port/redis.log")" >&2
      [ "$attempt" -lt 5 ] || return 1
    done
    nodes+=("127.0.0.1:$port")
  done
  "$REDIS_CLI" --cluster create "${nodes[@]}" --cluster-replicas "$REPLICAS" --cluster-yes \
    >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; return 1; }
  for port in $(cat "$dir/ports"); do
    for _ in $(seq 600); do
      "$REDIS_CLI" -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && break
      sleep 0.05
    done
    "$REDIS_CLI" -p "$port" cluster info | grep -q '^cluster_state:ok' ||
      { echo "node $port never saw the cluster ok" >&2; return 1; }
  done
  local IFS=,
  echo "redis+cluster://${nodes[*]}"
}

stop() {
  dir=$1
  [ -f "$dir/ports" ] || return 0
  local pids=() pid
  for port in $(cat "$dir/ports"); do
    [ -f "$dir/$port/redis.pid" ] || continue
    pid=$(cat "$dir/$port/redis.pid")
    kill "$pid" 2>/dev/null && pids+=("$pid")
  done
  # A node still shutting down writes nodes.conf into its directory: removing the directory
  # under it fails ("Directory not empty"). Wait for every node to be gone first.
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -9 "$pid" 2>/dev/null || true
  done
  # A leftover file is not worth failing the run that used the cluster over.
  rm -rf "$dir" 2>/dev/null || { sleep 0.5; rm -rf "$dir" || true; }
}

case "${1:-}" in
  start) start "$2" ;;
  stop) stop "$2" ;;
  run)
    shift
    work=$(mktemp -d)
    trap 'stop "$work"' EXIT
    url=$(start "$work")
    echo "== Redis Cluster at $url ($MASTERS primaries, $REPLICAS replicas each)"
    status=0
    REDIS_URL=$url "$@" || status=$?
    exit "$status"
    ;;
  *)
    echo "usage: $0 run CMD... | start DIR | stop DIR" >&2
    exit 2
    ;;
esac
