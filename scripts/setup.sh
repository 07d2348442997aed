#!/usr/bin/env bash
# Everything `npm start` and `npm test` need: host packages, npm deps, a build, and the
# base template (built from Debian's packages, cached outside the repo by recipe hash).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# npm ci again whenever the lockfile changed since the last install.
lock_sum=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ "$(cat node_modules/.den-lock-sum 2>/dev/null)" != "$lock_sum" ]; then
  npm ci --no-audit --no-fund
  echo "$lock_sum" > node_modules/.den-lock-sum
fi
npm run build --silent
node packages/cli/dist/src/bin.js template build base
