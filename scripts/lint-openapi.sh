#!/usr/bin/env bash
# Lints openapi/openapi.json with the linters third parties run on it, at the versions pinned
# in openapi/lint/package-lock.json: Redocly CLI (recommended rules), Spectral (spectral:oas)
# and swagger-parser's validation. Any error fails; warnings are printed.
set -euo pipefail
cd "$(dirname "$0")/../openapi/lint"
npm ci --no-audit --no-fund --loglevel=error >/dev/null
spec=../openapi.json

echo "== redocly lint"
npx --no-install redocly lint "$spec" --config redocly.yaml --format=stylish

echo "== spectral lint (spectral:oas)"
npx --no-install spectral lint "$spec" --ruleset .spectral.yaml --fail-severity=error

echo "== swagger-parser validate"
node validate.mjs "$spec"
