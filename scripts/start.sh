#!/usr/bin/env bash
# Builds the base template (cached), then runs the Den API server in the foreground.
# With no DEN_API_KEY set and a fresh data dir, it creates an admin key and prints it once.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec node packages/cli/dist/src/bin.js serve "$@"
