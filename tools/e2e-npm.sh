#!/usr/bin/env bash
# Installs the pinned official clients used by test/e2e (openai, @openai/agents, ai with
# @ai-sdk/openai, @anthropic-ai/sdk; test/e2e/npm/package.json) into test/e2e/npm/node_modules
# (git-ignored). Idempotent: npm ci runs when a pinned package is missing or at another version.
# Needs npm and access to the npm registry on first run.
set -euo pipefail
cd "$(dirname "$0")/../test/e2e/npm"
if ! node -e '
  const fs = require("fs"), want = require("./package.json").dependencies;
  for (const [name, version] of Object.entries(want)) {
    const p = "node_modules/" + name + "/package.json";
    if (!fs.existsSync(p) || JSON.parse(fs.readFileSync(p)).version !== version) process.exit(1);
  }' 2>/dev/null; then
  echo "e2e-npm: npm ci in test/e2e/npm" >&2
  npm ci --silent --no-audit --no-fund >/dev/null
fi
