#!/usr/bin/env bash
# Starts a throw-away PostgreSQL for the tests and prints `export DATABASE_URL=…` and
# `export IRIS_PG_DIR=…` lines for the caller to eval. Stop it with scripts/pg-stop.sh.
#
# PostgreSQL refuses to run as root, so as root the server runs as an unprivileged user
# (`postgres` if it exists, else a system user `iris-pg` created here). It listens on a free
# port on 127.0.0.1 only, keeps everything in a temp dir, and trusts local connections.
set -euo pipefail

find_bin() {
  local name=$1
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  local candidate
  for candidate in /usr/lib/postgresql/*/bin/"$name"; do
    [ -x "$candidate" ] && { echo "$candidate"; return 0; }
  done
  return 1
}

initdb=$(find_bin initdb) || { echo "pg-start: no initdb found" >&2; exit 3; }
pg_ctl=$(find_bin pg_ctl) || { echo "pg-start: no pg_ctl found" >&2; exit 3; }

dir=$(mktemp -d /tmp/iris-pg.XXXXXX)
chmod 755 "$dir"
run=()
if [ "$(id -u)" = 0 ]; then
  user=postgres
  if ! id -u "$user" >/dev/null 2>&1; then
    user=iris-pg
    id -u "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
  fi
  chown "$user" "$dir"
  run=(runuser -u "$user" --)
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"${run[@]}" "$initdb" -D "$dir/data" -U iris --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
  || { cat "$dir/initdb.log" >&2; exit 1; }
"${run[@]}" "$pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
  -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
  start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }

echo "export DATABASE_URL=postgres://iris@127.0.0.1:$port/postgres"
echo "export IRIS_PG_DIR=$dir"
