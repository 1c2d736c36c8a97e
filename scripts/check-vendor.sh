#!/usr/bin/env bash
# Checks the vendored, patched actix-http (vendor/README.md):
# - Cargo.lock builds it (a path dependency, no registry source: cargo only warns when a
#   [patch] goes unused);
# - the published crate (its .crate archive, fetched and checked against the checksum below)
#   with vendor/actix-http.patch applied without fuzz is exactly vendor/actix-http (its
#   Cargo.lock, which is for its own tests, aside);
# - actix-http's own unit tests pass on it.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=3.20.0
CHECKSUM=d20a22850ea7fecad12c5f8cd97d246c3af1f04ef400033977c2f13425c45816

lock=$(awk '/^\[\[package\]\]/{p=0} /^name = "actix-http"$/{p=1} p' Cargo.lock)
grep -qx "version = \"$VERSION\"" <<<"$lock" ||
  { echo "Cargo.lock does not build actix-http $VERSION" >&2; exit 1; }
if grep -q '^source = ' <<<"$lock"; then
  echo "Cargo.lock builds actix-http from a registry, not vendor/actix-http (the patch is unused)" >&2
  exit 1
fi

# The vendored crate's own lockfile names the published crate (a dependency of its tests'
# dependencies): fetching it brings the archive into cargo's cache.
cargo fetch -q --locked --manifest-path vendor/actix-http/Cargo.toml
archive=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/actix-http-$VERSION.crate | head -1)
echo "$CHECKSUM  $archive" | sha256sum -c --quiet - ||
  { echo "$archive is not the published actix-http $VERSION" >&2; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
tar -xzf "$archive" -C "$scratch"
published=$scratch/actix-http-$VERSION
rm -f "$published/.cargo_vcs_info.json"
patch -s --fuzz=0 -p1 -d "$published" <vendor/actix-http.patch
diff -r -x Cargo.lock "$published" vendor/actix-http >/dev/null ||
  { echo "vendor/actix-http is not the published $VERSION with vendor/actix-http.patch:" >&2
    diff -rq -x Cargo.lock "$published" vendor/actix-http >&2; exit 1; }
echo "== vendor: vendor/actix-http is the published $VERSION with vendor/actix-http.patch"

# Its own unit tests (the dispatcher's buffer tests among them), in a target dir of their own.
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}/vendor-actix-http \
  cargo test -q --locked --manifest-path vendor/actix-http/Cargo.toml --lib --features http2,ws
echo "== vendor: actix-http $VERSION built from vendor/, its unit tests pass"
