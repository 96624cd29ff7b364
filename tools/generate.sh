#!/usr/bin/env bash
set -euo pipefail
echo "generate: nothing yet"
