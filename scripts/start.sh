#!/usr/bin/env bash
# Builds the base template (cached), then runs the Den API server in the foreground.
# With no DEN_API_KEY set and a fresh data dir, it creates an admin key and prints it once.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# As root it keeps only the capabilities Den uses (HOST_CAPABILITIES, packages/runtime/src/jail).
if [ "$(id -u)" = 0 ]; then
  caps=$(node --input-type=module -e 'import { boundingSetArg } from "@den/runtime"; console.log(boundingSetArg())')
  exec setpriv --inh-caps=-all --bounding-set="$caps" node packages/cli/dist/src/bin.js serve "$@"
fi
exec node packages/cli/dist/src/bin.js serve "$@"
