#!/usr/bin/env bash
# Until `den serve` exists: build the base template and run one sandbox through create, exec, destroy.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
node packages/cli/dist/src/bin.js demo
