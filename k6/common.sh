# Shared by the benchmark scripts: free ports, a private redis-server, cleanup on exit.
# Sourced, not run. Everything listens on 127.0.0.1 only.

need() { # command debian-package
  command -v "$1" >/dev/null || { apt-get update -qq && apt-get install -y -qq "$2" >/dev/null; }
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# Starts a throwaway redis-server; sets RPORT.
start_redis() {
  need redis-server redis-server
  RPORT=$(free_port)
  redis-server --port "$RPORT" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
  pids+=($!)
  until redis-cli -p "$RPORT" ping >/dev/null 2>&1; do sleep 0.05; done
}

# Starts target/release/dsh-plan on a free loopback port with the given extra environment
# (NAME=value ...) and waits until it is ready; sets HPORT and SPID.
start_server() {
  HPORT=$(free_port)
  env RUST_LOG=warn DSH_BIND=127.0.0.1:$HPORT "$@" target/release/dsh-plan &
  SPID=$!
  pids+=("$SPID")
  until curl -sf "http://127.0.0.1:$HPORT/readyz" >/dev/null; do
    kill -0 "$SPID" 2>/dev/null || { echo "the server exited during start-up" >&2; exit 1; }
    sleep 0.05
  done
}

# Creates N (default 1) sessions on the server at BASE; prints their ids, comma-separated.
new_sessions() { # base [n]
  for _ in $(seq "${2:-1}"); do
    curl -sf -XPOST -H 'content-type: application/json' "$1/v1/sessions" |
      python3 -c 'import sys,json; print(json.load(sys.stdin)["id"])'
  done | paste -sd, -
}
