#!/usr/bin/env bash
# The test suite: the files that need no VM in parallel (seconds), then those against real QEMU
# microVMs one at a time (2 cores). `npm run test:fast` runs only the first (scripts/test-fast.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
# Tests get their own data dir, so they never touch the sandboxes of a running Den.
export DEN_DATA_DIR=${DEN_TEST_DATA_DIR:-/var/lib/den-test}
# What only the tests use: chromium (the dashboard's and the origins' tests drive it headless
# through playwright-core), Postgres for the suite's Postgres pass (scripts/with-postgres.sh
# runs a throwaway server; Den itself needs it only with DEN_DATABASE_URL), and Debian's
# distribution registry and skopeo (image templates are pulled from a registry on loopback
# that the tests fill). `npm start` installs none of them.
bash scripts/install-deps.sh chromium postgresql docker-registry skopeo python3-ipykernel python3-jupyter-client python3-matplotlib python3-pandas python3-numpy
bash scripts/setup.sh
# The house's walls before anything runs: packages import only those below them, no import
# circles, surfaces call services, no class past 400 lines or 30 methods, every package's
# README says what it may import (scripts/check-house.mjs; a violation fails the suite here).
node scripts/check-house.mjs
# The code interpreter's template (the E2B code-interpreter tests and the bench use it): built
# from Debian's packages as base is, cached by its recipe's hash.
node packages/cli/dist/src/bin.js template build code-interpreter-v1
# Sandboxes left by an interrupted earlier run would skew the leak checks.
node --input-type=module -e '
  import { Runtime } from "@den/runtime";
  const rt = await Runtime.open();
  await rt.destroyAll();
  for (const s of await rt.listSnapshots()) await rt.deleteSnapshot(s.id);
  rt.close();'
# Then the rest of what earlier runs left goes, all but the base template (setup.sh above
# rebuilt it if its recipe changed; the code interpreter's too), the instance's id and its compiled helpers: a database,
# a store, volumes or templates of an earlier run (by hand, or interrupted) would otherwise
# be judged as this run's (a store holding another database's snapshots failed the crash
# test's leak check). Every run starts as a fresh machine's does, less the base template's bake.
find "$DEN_DATA_DIR" -mindepth 1 -maxdepth 1 ! -name templates ! -name instance-id ! -name bin -exec rm -rf {} +
find "$DEN_DATA_DIR/templates" -mindepth 1 -maxdepth 1 ! -name base ! -name code-interpreter-v1 -exec rm -rf {} +
# The guest agent on its own, over a unix socket on the host (no VM): protocol edge cases.
agent_tmp=$(mktemp -d)
trap 'rm -rf "$agent_tmp"' EXIT
OUT="$agent_tmp/den-agent" packages/guest-agent/build.sh
node packages/guest-agent/test/run.mjs "$agent_tmp/den-agent"
# Every stage that runs VMs keeps only the capabilities Den keeps when it runs them
# (HOST_CAPABILITIES; scripts/start.sh and the host agent's unit do the same): a capability
# Den needs but does not list fails here.
den_caps=$(node --input-type=module -e 'import { boundingSetArg } from "@den/runtime"; console.log(boundingSetArg())')
# Each stage also says how long it took (the suite's time is watched as it grows).
bounded() {
  local t0=$SECONDS
  DEN_TEST_BOUNDED_CAPS=1 setpriv --inh-caps=-all --bounding-set="$den_caps" "$@"
  echo "test.sh: stage took $((SECONDS - t0)) s: $*" | cut -c1-160 >&2
}
# No test outside the network namespace below may touch this host's networking.
host_net() { nft list tables 2>/dev/null | grep den_ || true; ip netns list 2>/dev/null | grep '^den-' || true; }
host_net_before=$(host_net)
# Each test file's first line says what it needs (scripts/test-files.mjs): those that need no
# VM (unit tests, the in-memory host) run first, four at a time (much of their time is waiting
# on a clock or a child process); then the VM files, one at a time.
fast_files=$(node scripts/test-files.mjs fast)
vm_files=$(node scripts/test-files.mjs vm)
bounded node --test --test-concurrency=4 --test-reporter=spec $fast_files
bounded node --test --test-concurrency=1 --test-reporter=spec $vm_files
# Postgres (a throwaway server, scripts/with-postgres.sh). First the memory-host files
# again: every query of the control plane's logic is then Postgres' too (each of their
# servers makes a database of its own, so they run side by side). Then, with the host agent
# behind a real HTTP hop (its /host/v1 server on 127.0.0.1, HttpHostAgent + HttpGuest), the
# VM files whose paths cross it (the API and volumes; crash as a fleet: the control plane
# alone, two registered host agents, an s3rver bucket, every fault point), and the fleet:
# host agents that register and hold leases (test/fleet), as a deployment of many machines
# runs them. (Checkpoints, ports, the SDK, templates and bad requests ran here too once:
# the contract suite now runs the HTTP host over loopback, the fleet a port and a PTY
# through it, and their control-plane logic is in the memory-host files run here.)
bounded scripts/with-postgres.sh node --test --test-concurrency=3 --test-reporter=spec $(node scripts/test-files.mjs memory)
# A data dir of its own with only the base template: templates the tests above built belong
# to the SQLite database's owners, and a new database must not find them on its host.
pg_data="$agent_tmp/pg-data"
mkdir -p "$pg_data/templates"
cp -a "$DEN_DATA_DIR/templates/base" "$pg_data/templates/"
# (Three random crash rounds here: the memory host runs twelve, on SQLite.)
DEN_DATA_DIR="$pg_data" DEN_CRASH_ROUNDS=3 bounded scripts/with-postgres.sh env DEN_HOST_TRANSPORT=loopback node --test --test-concurrency=1 --test-reporter=spec \
  packages/server/dist/test/{api,volumes,crash}.test.js packages/server/dist/test/fleet/*.test.js
if [ "$(host_net)" != "$host_net_before" ]; then
  echo "a test outside the network test namespace changed this host's networking:" >&2
  diff <(echo "$host_net_before") <(host_net) >&2 || true
  exit 1
fi
# Sandbox networking, inside a namespace with no way off this machine (scripts/netns-test.sh).
DEN_NETNS_TEST=1 bounded scripts/netns-test.sh node --test --test-concurrency=1 --test-reporter=spec packages/runtime/dist/test/net/*.test.js packages/server/dist/test/net/*.test.js
# The E2B-compatible API with the real `e2b` client: its sandboxes have open egress by
# default (as E2B's do), so they run in the same namespace; envd and the seed loops run
# once more with every host call over the loopback hop.
DEN_NETNS_TEST=1 bounded scripts/netns-test.sh node --test --test-concurrency=1 --test-reporter=spec packages/server/dist/test/e2b/*.test.js
DEN_NETNS_TEST=1 DEN_HOST_TRANSPORT=loopback bounded scripts/netns-test.sh node --test --test-concurrency=1 --test-reporter=spec packages/server/dist/test/e2b/{envd,seeds}.test.js
if [ "${DEN_SKIP_BENCH:-}" != 1 ]; then
  bounded node packages/bench/dist/src/bench.js --quick
  # The agent loop four ways; it fails if a persistent way ever loses its state.
  bounded node packages/bench/dist/src/agent-loop.js --quick
  # The fleet's rows: create through a replica with three hosts vs single node, cold wake on its own vs another host.
  bounded scripts/with-postgres.sh node packages/bench/dist/src/fleet-bench.js --quick
fi
