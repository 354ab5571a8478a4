#!/usr/bin/env bash
# Stops the PostgreSQL that scripts/pg-start.sh started in $1 (its IRIS_PG_DIR) and removes it.
set -uo pipefail
dir=${1:-${IRIS_PG_DIR:-}}
[ -n "$dir" ] && [ -d "$dir/data" ] || exit 0
pg_ctl=$(command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl 2>/dev/null | head -n 1)
run=()
[ "$(id -u)" = 0 ] && run=(runuser -u "$(stat -c %U "$dir")" --)
"${run[@]}" "$pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1
rm -rf "$dir"
