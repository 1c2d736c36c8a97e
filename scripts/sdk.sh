#!/usr/bin/env bash
# The TypeScript SDK: regenerates clients/typescript/src/schema.d.ts from openapi/openapi.json
# and fails if the committed one drifted, type-checks and builds it, then runs the whole
# plan-review flow through it against a live server on both stores (needs target/debug/dsh-plan).
set -euo pipefail
cd "$(dirname "$0")/../clients/typescript"
npm ci --no-audit --no-fund --loglevel=error >/dev/null
committed=$(mktemp)
cp src/schema.d.ts "$committed"
npm run --silent generate >/dev/null
if ! cmp -s "$committed" src/schema.d.ts; then
  echo "clients/typescript/src/schema.d.ts is stale: run 'npm run generate' in clients/typescript and commit it" >&2
  diff -u "$committed" src/schema.d.ts | head -40 >&2 || true
  exit 1
fi
rm -f "$committed"
npm run --silent build
npm test
