#!/usr/bin/env bash
# Runs a command with DEN_DATABASE_URL pointing at a throwaway Postgres (Debian's
# `postgresql`, installed by scripts/test.sh): a fresh cluster in a temp dir, owned by the
# unprivileged `postgres` user, on a free loopback port, stopped and deleted afterwards.
#   scripts/with-postgres.sh node --test ...
# --tls: the server speaks TLS only (ssl=on, hostssl lines alone in pg_hba.conf) with a
# certificate for `localhost` (no IP address in it) signed by a throwaway CA made here, and
# DEN_DATABASE_URL asks for sslmode=verify-full against that CA; DEN_PG_TLS_DIR is where the
# CA's certificate and key are (a test signs more with them).
#   scripts/with-postgres.sh --tls node --test ...
set -euo pipefail
tls=
if [ "${1:-}" = --tls ]; then tls=1; shift; fi
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
opts="-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=200"
if [ -n "$tls" ]; then
  t="$dir/tls"
  mkdir "$t"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=den test Postgres CA" \
    -keyout "$t/ca.key" -out "$t/ca.crt" 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" -keyout "$t/server.key" -out "$t/server.csr" 2>/dev/null
  # The name only: a client that checks host names must refuse 127.0.0.1.
  printf 'subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$t/ext"
  openssl x509 -req -in "$t/server.csr" -CA "$t/ca.crt" -CAkey "$t/ca.key" -CAcreateserial -days 2 -extfile "$t/ext" -out "$t/server.crt" 2>/dev/null
  chmod 755 "$t"
  chown postgres "$t/server.key" "$t/server.crt" 2>/dev/null || true
  chmod 600 "$t/server.key"
  # TCP only over TLS: a client that does not ask for it is refused.
  sed -i -E 's/^host(\s)/hostssl\1/' "$dir/data/pg_hba.conf"
  opts="$opts -c ssl=on -c ssl_cert_file=$t/server.crt -c ssl_key_file=$t/server.key"
fi
# fsync stays on: the crash tests rely on what Postgres says is committed.
as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "$opts" start >/dev/null
if [ -n "$tls" ]; then
  PGSSLMODE=verify-full PGSSLROOTCERT="$t/ca.crt" as_pg "$bin/createdb" -h localhost -p "$port" -U den den
  export DEN_DATABASE_URL="postgres://den@localhost:$port/den?sslmode=verify-full&sslrootcert=$t/ca.crt" DEN_PG_TLS_DIR="$t"
else
  as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U den den
  export DEN_DATABASE_URL="postgres://den@127.0.0.1:$port/den"
fi
echo "with-postgres: $DEN_DATABASE_URL (Postgres $("$bin/postgres" --version | awk '{print $3}'))" >&2
set +e
"$@"
rc=$?
set -e
[ $rc = 0 ] || { echo "with-postgres: the command failed ($rc); the server's log:" >&2; tail -20 "$dir/log" >&2; }
exit $rc
