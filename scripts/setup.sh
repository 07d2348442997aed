#!/usr/bin/env bash
# Everything `npm start` and `npm test` need: host packages, npm deps, a build, and the
# base template (built from Debian's packages, cached outside the repo by recipe hash).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
[ -d node_modules/typescript ] || npm ci --no-audit --no-fund
npm run build --silent
node packages/cli/dist/src/bin.js template build base
