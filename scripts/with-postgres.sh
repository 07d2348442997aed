#!/usr/bin/env bash
# Runs a command with DEN_DATABASE_URL pointing at a throwaway Postgres (Debian's
# `postgresql`, installed by scripts/test.sh): a fresh cluster in a temp dir, owned by the
# unprivileged `postgres` user, on a free loopback port, stopped and deleted afterwards.
#   scripts/with-postgres.sh node --test ...
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$bin/initdb" ] || { echo "with-postgres: no Postgres server binaries (apt-get install postgresql)" >&2; exit 1; }
dir=$(mktemp -d /tmp/den-pg.XXXXXX)
chmod 755 "$dir"
chown postgres "$dir"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
stop() {
  as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT
port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
as_pg "$bin/initdb" -D "$dir/data" -A trust -U den >/dev/null
# fsync stays on: the crash tests rely on what Postgres says is committed.
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null
as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U den den
export DEN_DATABASE_URL="postgres://den@127.0.0.1:$port/den"
echo "with-postgres: $DEN_DATABASE_URL (Postgres $("$bin/postgres" --version | awk '{print $3}'))" >&2
set +e
"$@"
rc=$?
set -e
[ $rc = 0 ] || { echo "with-postgres: the command failed ($rc); the server's log:" >&2; tail -20 "$dir/log" >&2; }
exit $rc
