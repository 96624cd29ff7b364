#!/usr/bin/env bash
# Installs the pinned official `openai` npm client used by test/e2e into test/e2e/npm/node_modules
# (git-ignored). Idempotent; needs npm and access to the npm registry on first run.
set -euo pipefail
cd "$(dirname "$0")/../test/e2e/npm"
if [ ! -f node_modules/openai/package.json ]; then
  echo "e2e-npm: npm ci in test/e2e/npm" >&2
  npm ci --silent --no-audit --no-fund >/dev/null
fi
