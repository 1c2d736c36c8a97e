#!/usr/bin/env bash
# Runs the whole test suite. Installs what the tests need when it is missing:
# - nginx (Debian's package; the rolling-restart test starts its own in front of three
#   replicas, and a system nginx is never started);
# - redis-server (the Rust harness starts its own on a free port per test; set REDIS_URL to
#   use an existing server instead, with per-test key prefixes; a test that stops Redis still
#   starts its own); the integration tests then run a second time on a local 3-primary Redis
#   Cluster (scripts/redis-cluster.sh, REDIS_URL=redis+cluster://…);
# - Debian's chromium and npm's playwright-core, for the browser tests of the web client;
# - node and npm, for the OpenAPI linters (openapi/lint) and the TypeScript SDK
#   (clients/typescript), each pinned in its lockfile;
# - python3-venv, for the deploy checks (scripts/validate-deploy.sh: Kubernetes manifests,
#   compose, Dockerfile), pinned in scripts/deploy-requirements.txt;
# - patch, pkg-config and OpenSSL's headers, for the vendored crates' check and actix-http's
#   own tests (scripts/check-vendor.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
apt_updated=
apt_install() {
  [ -n "$apt_updated" ] || { as_root apt-get update -qq; apt_updated=1; }
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

command -v redis-server >/dev/null 2>&1 || { echo "== installing redis-server"; apt_install redis-server; }
# Debian's nginx postinst starts a system nginx on port 80; a policy-rc.d that answers 101
# ("action forbidden") keeps it from starting while it installs (removed after, if ours).
install_nginx() {
  local policy=/usr/sbin/policy-rc.d ours=
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    ours=1
  fi
  local rc=0
  apt_install nginx || rc=$?
  [ -z "$ours" ] || as_root rm -f "$policy"
  return "$rc"
}
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || { echo "== installing nginx"; install_nginx; }
command -v node >/dev/null 2>&1 || { echo "== installing nodejs"; apt_install nodejs npm; }

echo "== OpenAPI lint (Redocly, Spectral, swagger-parser; versions pinned in openapi/lint)"
bash scripts/lint-openapi.sh

echo "== deploy checks (Kubernetes manifests against pinned API schemas, compose, Dockerfile)"
bash scripts/validate-deploy.sh

echo "== vendored actix-http and redis (vendor/README.md: built from vendor/, the published crates + their patches, actix-http's tests)"
# actix-http's own tests build openssl-sys (its dev-dependencies' TLS tests): OpenSSL's headers
# and pkg-config; `patch` applies vendor/*.patch.
command -v patch >/dev/null 2>&1 || apt_install patch
{ command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openssl; } || apt_install pkg-config libssl-dev
bash scripts/check-vendor.sh

echo "== cargo test (unit, property and integration tests)"
cargo test --locked --all-targets

echo "== integration tests again on a Redis Cluster (3 primaries; scripts/redis-cluster.sh)"
# Every Redis test runs on the cluster under a key prefix of its own; tests that stop Redis,
# or need a single node, still start their own redis-server.
bash scripts/redis-cluster.sh run cargo test --locked --test api

echo "== browser tests (headless Chromium)"
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] || { echo "== installing chromium"; apt_install chromium; }
(cd tests/browser && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
cargo build --locked --bin dsh-plan
(cd tests/browser && npm test)

echo "== TypeScript SDK (regenerated from the spec, drift check, plan-review flow on both stores)"
bash scripts/sdk.sh
