#!/usr/bin/env bash
# Checks the vendored, patched crates (vendor/README.md), each:
# - Cargo.lock builds it (a path dependency, no registry source: cargo only warns when a
#   [patch] goes unused);
# - the published crate (its .crate archive, fetched and checked against the checksum below)
#   with vendor/<crate>.patch applied without fuzz is exactly vendor/<crate>: for actix-http,
#   all of it but its Cargo.lock (which is for its own tests); for redis, the files vendored
#   (its manifest, licence, readme and src/; not its tests, examples or benches).
# Then actix-http's own unit tests run on it. The redis patch is tested by dsh-plan's own unit
# tests (src/store/redis/codec_tests.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# locked_from_vendor CRATE VERSION
locked_from_vendor() {
  local lock
  lock=$(awk -v name="name = \"$1\"" '/^\[\[package\]\]/{p=0} $0 == name {p=1} p' Cargo.lock)
  grep -qx "version = \"$2\"" <<<"$lock" ||
    { echo "Cargo.lock does not build $1 $2" >&2; exit 1; }
  if grep -q '^source = ' <<<"$lock"; then
    echo "Cargo.lock builds $1 from a registry, not vendor/$1 (the patch is unused)" >&2
    exit 1
  fi
}

# unpack_published CRATE VERSION CHECKSUM: the archive cargo fetched, checked, into $scratch.
unpack_published() {
  local archive
  archive=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$1-$2.crate" | head -1)
  echo "$3  $archive" | sha256sum -c --quiet - ||
    { echo "$archive is not the published $1 $2" >&2; exit 1; }
  tar -xzf "$archive" -C "$scratch"
}

# patched_is_vendored CRATE VERSION [DIFF OPTIONS]
patched_is_vendored() {
  local published=$scratch/$1-$2
  patch -s --fuzz=0 -p1 -d "$published" <"vendor/$1.patch"
  diff -r "${@:3}" "$published" "vendor/$1" >/dev/null ||
    { echo "vendor/$1 is not the published $2 with vendor/$1.patch:" >&2
      diff -rq "${@:3}" "$published" "vendor/$1" >&2; exit 1; }
  echo "== vendor: vendor/$1 is the published $2 with vendor/$1.patch"
}

# actix-http. The vendored crate's own lockfile names the published crate (a dependency of its
# tests' dependencies): fetching it brings the archive into cargo's cache.
VERSION=3.20.0
CHECKSUM=d20a22850ea7fecad12c5f8cd97d246c3af1f04ef400033977c2f13425c45816
locked_from_vendor actix-http $VERSION
cargo fetch -q --locked --manifest-path vendor/actix-http/Cargo.toml
unpack_published actix-http $VERSION $CHECKSUM
rm -f "$scratch/actix-http-$VERSION/.cargo_vcs_info.json"
patched_is_vendored actix-http $VERSION -x Cargo.lock
# Its own unit tests (the dispatcher's buffer tests among them), in a target dir of their own.
CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target}/vendor-actix-http \
  cargo test -q --locked --manifest-path vendor/actix-http/Cargo.toml --lib --features http2,ws
echo "== vendor: actix-http $VERSION built from vendor/, its unit tests pass"

# redis. Its archive comes through a scratch project that depends on it.
VERSION=1.8.1
CHECKSUM=db7f3d75b5a3301746bff39a767bf4c5c42506b08513527308b3875bfb64a031
locked_from_vendor redis $VERSION
mkdir -p "$scratch/fetch/src"
touch "$scratch/fetch/src/lib.rs"
printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nredis = { version = "=%s", default-features = false }\n' \
  $VERSION >"$scratch/fetch/Cargo.toml"
cargo fetch -q --manifest-path "$scratch/fetch/Cargo.toml"
unpack_published redis $VERSION $CHECKSUM
find "$scratch/redis-$VERSION" -mindepth 1 -maxdepth 1 \
  ! -name Cargo.toml ! -name Cargo.toml.orig ! -name LICENSE ! -name README.md ! -name src \
  -exec rm -rf {} +
patched_is_vendored redis $VERSION
