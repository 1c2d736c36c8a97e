#!/usr/bin/env bash
# Checks the vendored, patched actix-http (vendor/README.md): Cargo.lock builds it (a path
# dependency, no registry source); the patch turns the published sources into exactly what
# vendor/actix-http holds (when the published crate is in cargo's registry cache; its
# Cargo.lock, which is for its own tests, aside); and actix-http's own unit tests pass on it.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=3.20.0

lock=$(awk '/^\[\[package\]\]/{p=0} /^name = "actix-http"$/{p=1} p' Cargo.lock)
echo "$lock" | grep -qx "version = \"$VERSION\"" ||
  { echo "Cargo.lock does not build actix-http $VERSION" >&2; exit 1; }
if echo "$lock" | grep -q '^source = '; then
  echo "Cargo.lock builds actix-http from a registry, not vendor/actix-http (the patch is unused)" >&2
  exit 1
fi

published=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/actix-http-$VERSION 2>/dev/null | head -1 || true)
if [ -z "$published" ]; then
  echo "== vendor: published actix-http $VERSION not in cargo's cache: the patch is not compared"
else
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  cp -r "$published" "$scratch/actix-http"
  rm -f "$scratch/actix-http/.cargo-ok" "$scratch/actix-http/.cargo_vcs_info.json"
  patch -s --fuzz=0 -p1 -d "$scratch/actix-http" <vendor/actix-http.patch
  diff -r -x Cargo.lock "$scratch/actix-http" vendor/actix-http >/dev/null ||
    { echo "vendor/actix-http is not the published $VERSION with vendor/actix-http.patch:" >&2
      diff -rq -x Cargo.lock "$scratch/actix-http" vendor/actix-http >&2; exit 1; }
  echo "== vendor: vendor/actix-http is the published $VERSION with vendor/actix-http.patch"
fi

# Its own unit tests (the dispatcher's buffer tests among them), in a target dir of their own.
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}/vendor-actix-http \
  cargo test -q --locked --manifest-path vendor/actix-http/Cargo.toml --lib --features http2,ws
echo "== vendor: actix-http $VERSION built from vendor/, its unit tests pass"
