#!/usr/bin/env bash
# The tests that boot no VM (unit tests and the in-memory host; their first lines say so:
# scripts/test-files.mjs), four at a time: two minutes, against the ~40 of `npm test`. Any
# argument is passed to node --test (e.g. --test-name-pattern=reaper).
set -euo pipefail
cd "$(dirname "$0")/.."
DEN_SETUP_NO_TEMPLATE=1 bash scripts/setup.sh
node scripts/check-house.mjs
# The image tests' registry and image tools (scripts/test.sh installs the same).
bash scripts/install-deps.sh docker-registry skopeo python3-ipykernel python3-jupyter-client python3-matplotlib python3-pandas python3-numpy
t0=$SECONDS
node --test --test-concurrency=4 --test-reporter=spec "$@" $(node scripts/test-files.mjs fast)
echo "test-fast.sh: took $((SECONDS - t0)) s" >&2
