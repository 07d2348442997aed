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
# npm ci links a workspace's bin only if its file exists, and tsc builds `den` after npm ci:
# link it now, so `npx den` works in a fresh clone. -x checks the link and that its target
# is executable; npm chmods the target only when it makes the link, hence the rm.
if [ ! -x node_modules/.bin/den ]; then
  rm -f node_modules/.bin/den
  npm rebuild @den/cli --ignore-scripts --no-audit --no-fund >/dev/null
fi
# (DEN_SETUP_NO_TEMPLATE=1: not the base template, for the tests that boot no VM.)
[ "${DEN_SETUP_NO_TEMPLATE:-}" = 1 ] || node packages/cli/dist/src/bin.js template build base
